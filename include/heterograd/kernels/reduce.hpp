#pragma once
// Reductions: dot, sum of squares, L2 norm, max-abs, all-finite, and the global norm over a
// list of buffers.
//
// Determinism. On the cpp and omp backends every reduction uses the fixed chunking and fixed
// tree of detail/reduce_impl.hpp: the result is bitwise independent of the thread count.
// On the cuda backend the default (`determinism::run_to_run`) is the CUB fast path
// (cub::DeviceReduce::TransformReduce, kernels/detail/reduce_cub.cuh): CUB's reduction uses
// no atomics and a grid fixed by the device and the problem size, so it is bitwise the same
// from run to run on the same GPU model, but its tree differs from the CPU one.
// `determinism::fixed_tree` asks for the CPU's chunking and tree on the GPU as well (one
// thread per chunk; slower), whose results match the CPU's up to fused multiply-adds.
//
// Bytes moved per element: dot 2*sizeof(T); sum of squares, norm, max-abs, all-finite
// sizeof(T). Accumulation is in double. all_finite also takes bf16 and fp16 buffers
// (kernels/cast.hpp).

#include <cmath>
#include <cstddef>
#include <ranges>
#include <type_traits>

#include "heterograd/core/config.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/cast.hpp"
#include "heterograd/kernels/detail/reduce_impl.hpp"

#if defined(__CUDACC__)
#include "heterograd/kernels/detail/reduce_cub.cuh"
#endif

namespace heterograd::kernels {

enum class determinism {
  run_to_run,  ///< bitwise repeatable on the same machine (CPU: fixed tree; GPU: CUB)
  fixed_tree   ///< the fixed chunking and tree of the CPU backends on every backend
};

namespace detail {

template <class T>
HG_HOST_DEVICE inline bool is_finite_value(T x) {
  // x - x is 0 for finite x and NaN for inf and NaN; no <cmath> call needed on the device.
  return (x - x) == (x - x);
}
// 16-bit storage (cast.hpp): finite unless the exponent bits are all ones.
HG_HOST_DEVICE inline bool is_finite_value(bf16 x) {
  return (x.bits & 0x7f80u) != 0x7f80u;
}
HG_HOST_DEVICE inline bool is_finite_value(fp16 x) {
  return (x.bits & 0x7c00u) != 0x7c00u;
}

template <class T>
struct sum_squares_r {
  using acc_type = double;
  const T* x;
  HG_HOST_DEVICE double identity() const { return 0.0; }
  HG_HOST_DEVICE double map(std::size_t i) const { return map_value(x[i]); }
  HG_HOST_DEVICE static double map_value(T e) {
    const double v = static_cast<double>(e);
    return v * v;
  }
  HG_HOST_DEVICE static double combine(double a, double b) { return a + b; }
};

template <class T>
struct dot_r {
  using acc_type = double;
  const T* x;
  const T* y;
  HG_HOST_DEVICE double identity() const { return 0.0; }
  HG_HOST_DEVICE double map(std::size_t i) const {
    return static_cast<double>(x[i]) * static_cast<double>(y[i]);
  }
  HG_HOST_DEVICE static double combine(double a, double b) { return a + b; }
};

template <class T>
struct max_abs_r {
  using acc_type = double;
  const T* x;
  HG_HOST_DEVICE double identity() const { return 0.0; }
  HG_HOST_DEVICE double map(std::size_t i) const { return map_value(x[i]); }
  HG_HOST_DEVICE static double map_value(T e) {
    const double v = static_cast<double>(e);
    return v < 0 ? -v : v;  // NaN stays NaN
  }
  // NaN wins, so a NaN anywhere gives NaN whatever the order.
  HG_HOST_DEVICE static double combine(double a, double b) {
    if (a != a) return a;
    if (b != b) return b;
    return a < b ? b : a;
  }
};

template <class T>
struct all_finite_r {
  using acc_type = int;
  const T* x;
  HG_HOST_DEVICE int identity() const { return 1; }
  HG_HOST_DEVICE int map(std::size_t i) const { return map_value(x[i]); }
  HG_HOST_DEVICE static int map_value(T e) { return is_finite_value(e) ? 1 : 0; }
  HG_HOST_DEVICE static int combine(int a, int b) { return a & b; }
};

template <class Policy, class R>
typename R::acc_type run_reduce(const Policy& policy, std::size_t n, const R& r, determinism d) {
  if constexpr (exec::backend_of_v<Policy> == exec::backend::cuda) {
#if defined(__CUDACC__)
    if (d == determinism::run_to_run) return cub_reduce(policy, n, r);
#endif
  }
  (void)d;
  return reduce_fixed_tree(policy, n, r);
}

template <class Policy, class Space>
constexpr void check_space() {
  static_assert(exec::accessible_v<Policy, Space>,
                "the execution policy cannot access this span's memory space");
}

}  // namespace detail

/// Sum of x[i]*y[i].
template <class Policy, class T, class U, class Space>
double dot(const Policy& policy, span<T, Space> x, span<U, Space> y,
           determinism d = determinism::run_to_run) {
  static_assert(std::is_same_v<std::remove_const_t<T>, std::remove_const_t<U>>);
  detail::check_space<Policy, Space>();
  require_same_size("dot.y", y.size(), "dot.x", x.size());
  using V = std::remove_const_t<T>;
  return detail::run_reduce(policy, x.size(), detail::dot_r<V>{x.data(), y.data()}, d);
}

/// Sum of x[i]^2.
template <class Policy, class T, class Space>
double sum_squares(const Policy& policy, span<T, Space> x,
                   determinism d = determinism::run_to_run) {
  detail::check_space<Policy, Space>();
  using V = std::remove_const_t<T>;
  return detail::run_reduce(policy, x.size(), detail::sum_squares_r<V>{x.data()}, d);
}

/// Euclidean norm of x.
template <class Policy, class T, class Space>
double l2_norm(const Policy& policy, span<T, Space> x, determinism d = determinism::run_to_run) {
  return std::sqrt(sum_squares(policy, x, d));
}

/// max |x[i]| (0 for an empty buffer; NaN if any element is NaN).
template <class Policy, class T, class Space>
double max_abs(const Policy& policy, span<T, Space> x, determinism d = determinism::run_to_run) {
  detail::check_space<Policy, Space>();
  using V = std::remove_const_t<T>;
  return detail::run_reduce(policy, x.size(), detail::max_abs_r<V>{x.data()}, d);
}

/// True when no element is infinite or NaN.
template <class Policy, class T, class Space>
bool all_finite(const Policy& policy, span<T, Space> x, determinism d = determinism::run_to_run) {
  detail::check_space<Policy, Space>();
  using V = std::remove_const_t<T>;
  return detail::run_reduce(policy, x.size(), detail::all_finite_r<V>{x.data()}, d) != 0;
}

/// sqrt of the sum over buffers (in list order) of each buffer's sum of squares.
/// `list` is any range of spans (std::vector<span<float>>, std::array, ...).
template <class Policy, std::ranges::input_range List>
double global_norm(const Policy& policy, const List& list,
                   determinism d = determinism::run_to_run) {
  double total = 0.0;
  for (const auto& s : list) total += sum_squares(policy, s, d);
  return std::sqrt(total);
}

}  // namespace heterograd::kernels
