#pragma once
// Blends of buffers: axpby, scale, weighted sum of K buffers (model averaging with weights),
// the running-mean update of gradient tables, linear weight prediction, copy, fill, and the
// copy with non-finite elements zeroed.
//
// Bytes per element = read + written:
//   axpby               x, y -> y                3*sizeof(T)
//   scale               x -> x                   2*sizeof(T)
//   weighted_sum (K)    x_1..x_K -> out          (K+1)*sizeof(T)  (K <= 8; beyond, each
//                                                further group of 8 re-reads out: +2)
//   running_mean_update m, new, old -> m         4*sizeof(T)
//   linear_prediction   w, v -> out              3*sizeof(T)
//   copy                x -> y                   2*sizeof(T)
//   fill                -> x                     1*sizeof(T)
//   finite_or_zero      x -> y                   2*sizeof(T)

#include <cstddef>
#include <span>
#include <type_traits>

#include "heterograd/core/config.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/launch.hpp"

namespace heterograd::kernels {

namespace detail {

template <class T>
struct axpby_body {
  const T* x;
  T* y;
  T a, b;
  HG_HOST_DEVICE void operator()(std::size_t i) const { y[i] = a * x[i] + b * y[i]; }
};

template <class T>
struct scale_body {
  T* x;
  T a;
  HG_HOST_DEVICE void operator()(std::size_t i) const { x[i] *= a; }
};

inline constexpr std::size_t max_blend_inputs = 8;

// out = (Accumulate ? out : 0) + sum_k w_k x_k, k in order.
template <class T, int K, bool Accumulate>
struct weighted_sum_body {
  T* out;
  const T* x[max_blend_inputs];
  T w[max_blend_inputs];
  HG_HOST_DEVICE void operator()(std::size_t i) const {
    T s = Accumulate ? out[i] : T(0);
    for (int k = 0; k < K; ++k) s += w[k] * x[k][i];
    out[i] = s;
  }
};

template <class T>
struct running_mean_body {
  T* m;
  const T* fresh;
  const T* old;
  T inv_n;
  HG_HOST_DEVICE void operator()(std::size_t i) const { m[i] += (fresh[i] - old[i]) * inv_n; }
};

template <class T>
struct prediction_body {
  T* out;
  const T* w;
  const T* v;
  T c;
  HG_HOST_DEVICE void operator()(std::size_t i) const { out[i] = w[i] - c * v[i]; }
};

template <class T>
struct copy_body {
  const T* x;
  T* y;
  HG_HOST_DEVICE void operator()(std::size_t i) const { y[i] = x[i]; }
};

template <class T>
struct fill_body {
  T* x;
  T a;
  HG_HOST_DEVICE void operator()(std::size_t i) const { x[i] = a; }
};

template <class T>
struct finite_or_zero_body {
  const T* x;
  T* y;
  // x - x is 0 for finite x and NaN for infinities and NaNs (no <cmath> call on the device).
  HG_HOST_DEVICE void operator()(std::size_t i) const {
    const T v = x[i];
    y[i] = v - v == T(0) ? v : T(0);
  }
};

template <class Policy, class T, int K, bool Acc>
void weighted_group(const Policy& policy, T* out, std::size_t n, const T* const* xs, const T* ws) {
  weighted_sum_body<T, K, Acc> b{out, {}, {}};
  for (int k = 0; k < K; ++k) {
    b.x[k] = xs[k];
    b.w[k] = ws[k];
  }
  launch(policy, n, b, out);
}

template <class Policy, class T, bool Acc>
void weighted_dispatch(const Policy& policy, T* out, std::size_t n, const T* const* xs, const T* ws,
                       std::size_t k) {
  switch (k) {
    case 1:
      return weighted_group<Policy, T, 1, Acc>(policy, out, n, xs, ws);
    case 2:
      return weighted_group<Policy, T, 2, Acc>(policy, out, n, xs, ws);
    case 3:
      return weighted_group<Policy, T, 3, Acc>(policy, out, n, xs, ws);
    case 4:
      return weighted_group<Policy, T, 4, Acc>(policy, out, n, xs, ws);
    case 5:
      return weighted_group<Policy, T, 5, Acc>(policy, out, n, xs, ws);
    case 6:
      return weighted_group<Policy, T, 6, Acc>(policy, out, n, xs, ws);
    case 7:
      return weighted_group<Policy, T, 7, Acc>(policy, out, n, xs, ws);
    default:
      return weighted_group<Policy, T, 8, Acc>(policy, out, n, xs, ws);
  }
}

}  // namespace detail

/// y <- a x + b y.
template <class Policy, class T, class Space>
void axpby(const Policy& policy, std::type_identity_t<T> a,
           std::type_identity_t<span<const T, Space>> x, std::type_identity_t<T> b,
           span<T, Space> y) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  require_same_size("axpby.x", x.size(), "axpby.y", y.size());
  kernels::launch(policy, y.size(), detail::axpby_body<T>{x.data(), y.data(), a, b}, y.data());
}

/// x <- a x.
template <class Policy, class T, class Space>
void scale(const Policy& policy, std::type_identity_t<T> a, span<T, Space> x) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  kernels::launch(policy, x.size(), detail::scale_body<T>{x.data(), a}, x.data());
}

/// out <- sum_k weights[k] inputs[k], summed in list order (model averaging with weights).
/// `inputs` is any sized range of spans; `weights` holds one host value per input.
/// out may be one of the inputs only if it is the first.
template <class Policy, class T, class Space, class Inputs>
void weighted_sum(const Policy& policy, span<T, Space> out, const Inputs& inputs,
                  std::type_identity_t<std::span<const T>> weights) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  const std::size_t k = std::size(inputs);
  require(k >= 1, "weighted_sum.inputs (count)", k, "must be >= 1");
  require_same_size("weighted_sum.weights", weights.size(), "weighted_sum.inputs", k);
  const T* xs[detail::max_blend_inputs];
  for (const auto& s : inputs)
    require_same_size("weighted_sum.inputs[k]", s.size(), "weighted_sum.out", out.size());
  auto it = std::begin(inputs);
  for (std::size_t g = 0; g < k; g += detail::max_blend_inputs) {
    const std::size_t len = k - g < detail::max_blend_inputs ? k - g : detail::max_blend_inputs;
    for (std::size_t q = 0; q < len; ++q, ++it) xs[q] = (*it).data();
    if (g == 0) {
      detail::weighted_dispatch<Policy, T, false>(policy, out.data(), out.size(), xs,
                                                  weights.data() + g, len);
    } else {
      detail::weighted_dispatch<Policy, T, true>(policy, out.data(), out.size(), xs,
                                                 weights.data() + g, len);
    }
  }
}

/// m <- m + (fresh - old) / n: replaces one entry of an n-entry running mean (gradient
/// tables of IA^2SGD / Malenia).
template <class Policy, class T, class Space>
void running_mean_update(const Policy& policy, span<T, Space> mean,
                         std::type_identity_t<span<const T, Space>> fresh,
                         std::type_identity_t<span<const T, Space>> old, std::size_t n) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  require(n >= 1, "running_mean_update.n", n, "must be >= 1");
  require_same_size("running_mean_update.fresh", fresh.size(), "running_mean_update.mean",
                    mean.size());
  require_same_size("running_mean_update.old", old.size(), "running_mean_update.mean", mean.size());
  kernels::launch(policy, mean.size(),
                  detail::running_mean_body<T>{mean.data(), fresh.data(), old.data(),
                                               static_cast<T>(1.0 / static_cast<double>(n))},
                  mean.data());
}

/// y <- x.
template <class Policy, class T, class Space>
void copy(const Policy& policy, std::type_identity_t<span<const T, Space>> x, span<T, Space> y) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  require_same_size("copy.x", x.size(), "copy.y", y.size());
  kernels::launch(policy, y.size(), detail::copy_body<T>{x.data(), y.data()}, y.data());
}

/// x <- a (every element).
template <class Policy, class T, class Space>
void fill(const Policy& policy, span<T, Space> x, std::type_identity_t<T> a) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  kernels::launch(policy, x.size(), detail::fill_body<T>{x.data(), a}, x.data());
}

/// y <- x with every infinite or NaN element replaced by 0 (the `zero` non-finite policy).
template <class Policy, class T, class Space>
void finite_or_zero(const Policy& policy, std::type_identity_t<span<const T, Space>> x,
                    span<T, Space> y) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  require_same_size("finite_or_zero.x", x.size(), "finite_or_zero.y", y.size());
  kernels::launch(policy, y.size(), detail::finite_or_zero_body<T>{x.data(), y.data()}, y.data());
}

/// out <- w - s lr v: weight prediction (SpecTrain, Chen et al. 2018: W_hat = W - s eta v).
template <class Policy, class T, class Space>
void linear_prediction(const Policy& policy, span<T, Space> out,
                       std::type_identity_t<span<const T, Space>> w,
                       std::type_identity_t<span<const T, Space>> v, double s, double lr) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  require_same_size("linear_prediction.w", w.size(), "linear_prediction.out", out.size());
  require_same_size("linear_prediction.v", v.size(), "linear_prediction.out", out.size());
  kernels::launch(
      policy, out.size(),
      detail::prediction_body<T>{out.data(), w.data(), v.data(), static_cast<T>(s * lr)},
      out.data());
}

}  // namespace heterograd::kernels
