#pragma once
// Fused optimizer updates: each reads and writes every buffer once per step. Scalars that do
// not depend on the element (bias corrections, decayed learning rates) are computed once per
// call on the host, in double, and passed to the body in the element type.
//
// Bytes per element (float: sizeof(T) = 4) = read + written:
//   sgd        p, g -> p                       3*sizeof(T)   (12 B)
//   momentum   p, g, v -> p, v                 5*sizeof(T)   (20 B)
//   adam(w)    p, g, m, v -> p, m, v           7*sizeof(T)   (28 B)
//   adagrad    p, g, s -> p, s                 5*sizeof(T)   (20 B)
//   lamb       pass 1 p, g, m, v -> m, v       6*sizeof(T)
//              pass 2 p, m, v -> p             4*sizeof(T)   (40 B in all)

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/core/config.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/detail/multi_launch.hpp"
#include "heterograd/kernels/detail/reduce_impl.hpp"
#include "heterograd/kernels/hyperparameters.hpp"
#include "heterograd/kernels/launch.hpp"

namespace heterograd::kernels {

/// What a fused update needs besides the hyper-parameters, known only at the call.
struct sgd_options {
  std::int64_t step = 1;  ///< 1-based index of this step (a learning-rate schedule's argument)
};
struct momentum_options {
  std::int64_t step = 1;
  bool nesterov = false;
};
struct adam_options {
  std::int64_t step = 1;  ///< also the bias correction's t
  bool decoupled_weight_decay = false;  ///< true: AdamW
};
struct adagrad_options {
  std::int64_t step = 1;  ///< also the learning-rate decay's
};
struct lamb_options {
  std::int64_t step = 1;  ///< also the bias correction's t
};

namespace detail {

// Exactly rounded arithmetic for bodies that must agree bitwise across kernels. nvcc contracts
// a*b + c into an FMA where it sees fit, and it saw fit differently in the single-tensor and
// the multi-tensor Adam kernels (the parameters differed in the last bit on an H200). On the
// host these are the plain operators.
template <class T>
HG_HOST_DEVICE inline T mul_rn(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>)
    return __fmul_rn(a, b);
  else
    return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
template <class T>
HG_HOST_DEVICE inline T add_rn(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>)
    return __fadd_rn(a, b);
  else
    return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
template <class T>
HG_HOST_DEVICE inline T div_rn(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>)
    return __fdiv_rn(a, b);
  else
    return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

/// The learning rate of 1-based step `step`: a number is a constant; anything else is
/// called with the number of steps applied before this one (optim's schedules).
template <class Lr>
HG_HOST_DEVICE double lr_at(const Lr& lr, std::int64_t step) {
  if constexpr (std::convertible_to<const Lr&, double>)
    return static_cast<double>(lr);
  else
    return lr(step - 1);
}

// The arithmetic of one element of each update, as a small value (its coefficients) with
// `T operator()(T p, T g, T&... slots) const` returning the new p and updating the slots in
// place. The bodies below apply it to element i of their buffers; the mixed-precision bodies
// (kernels/mixed.hpp) to fp32 master weights, and the capturable ones (kernels/capturable.hpp)
// read it from device memory. One source of arithmetic, written with the exactly rounded
// operations above (so that nvcc cannot contract it differently in different kernels), so
// the paths agree bitwise on every backend. On the host these are the plain operators:
// a - b and a + (-b) are the same IEEE operation.
//
// Without weight decay (Decay false) the update is p - lr g, as PyTorch's: g + 0 p is g for
// every finite p (a zero g gives a zero of either sign, and p - lr (+-0) is p), so the numbers
// are the same; only an infinite p differs (0 * inf is NaN, so it used to become NaN). The
// multiply-add saved is what held SGD, the update with the fewest bytes per operation, at
// 0.85-0.90 of the plain update loop's bandwidth (BM_sgd, bench/kernels_bench.cpp).
template <class T, bool Decay = true>
struct sgd_math {
  static constexpr int slots = 0;
  static constexpr bool decay = Decay;
  T lr, wd;
  HG_HOST_DEVICE T operator()(T p, T g) const {
    if constexpr (Decay) {
      const T d = add_rn(g, mul_rn(wd, p));
      return add_rn(p, -mul_rn(lr, d));
    } else {
      return add_rn(p, -mul_rn(lr, g));
    }
  }
};

template <class T, bool Nesterov>
struct momentum_math {
  static constexpr int slots = 1;
  static constexpr bool nesterov = Nesterov;
  T lr, mu, damp1, wd;
  HG_HOST_DEVICE T operator()(T p, T g, T& v) const {
    const T d = add_rn(g, mul_rn(wd, p));
    const T vi = add_rn(mul_rn(mu, v), mul_rn(damp1, d));
    v = vi;
    return add_rn(p, -mul_rn(lr, Nesterov ? add_rn(d, mul_rn(mu, vi)) : vi));
  }
};

template <class T>
struct adam_coeffs {
  static constexpr int slots = 2;
  T b1, omb1, b2, omb2, step_size, inv_sqrt_c2, eps, l2, decay;
  HG_HOST_DEVICE T operator()(T p, T g, T& m, T& v) const {
    const T gi = add_rn(g, mul_rn(l2, p));
    const T mi = add_rn(mul_rn(b1, m), mul_rn(omb1, gi));
    const T vi = add_rn(mul_rn(b2, v), mul_rn(mul_rn(omb2, gi), gi));
    m = mi;
    v = vi;
    const T denom = add_rn(mul_rn(std::sqrt(vi), inv_sqrt_c2), eps);
    return add_rn(mul_rn(p, decay), -div_rn(mul_rn(step_size, mi), denom));
  }
};

template <class T>
struct adagrad_math {
  static constexpr int slots = 1;
  T lr, eps, wd;
  HG_HOST_DEVICE T operator()(T p, T g, T& s) const {
    const T gi = add_rn(g, mul_rn(wd, p));
    const T si = add_rn(s, mul_rn(gi, gi));
    s = si;
    return add_rn(p, -div_rn(mul_rn(lr, gi), add_rn(std::sqrt(si), eps)));
  }
};

// The coefficients of 1-based step `step`, computed once per call (on the host, or on the
// device by a capturable step's prologue), in double, then rounded to T.
template <class T, bool Decay, class Lr>
HG_HOST_DEVICE sgd_math<T, Decay> make_sgd_math(const sgd_config<Lr>& a, std::int64_t step) {
  return {static_cast<T>(lr_at(a.lr, step)), static_cast<T>(a.weight_decay)};
}

template <class T, bool Nesterov, class Lr>
HG_HOST_DEVICE momentum_math<T, Nesterov> make_momentum_math(const momentum_config<Lr>& a,
                                                             std::int64_t step) {
  return {static_cast<T>(lr_at(a.lr, step)), static_cast<T>(a.momentum),
          static_cast<T>(1.0 - a.dampening), static_cast<T>(a.weight_decay)};
}

template <class T, class Lr>
HG_HOST_DEVICE adam_coeffs<T> make_adam_coeffs(const adam_config<Lr>& a, const adam_options& o) {
  const double lr = lr_at(a.lr, o.step);
  const double t = static_cast<double>(o.step);
  const double c1 = a.bias_correction ? 1.0 - std::pow(a.beta1, t) : 1.0;
  const double c2 = a.bias_correction ? 1.0 - std::pow(a.beta2, t) : 1.0;
  return {static_cast<T>(a.beta1),
          static_cast<T>(1.0 - a.beta1),
          static_cast<T>(a.beta2),
          static_cast<T>(1.0 - a.beta2),
          static_cast<T>(lr / c1),
          static_cast<T>(1.0 / std::sqrt(c2)),
          static_cast<T>(a.eps),
          static_cast<T>(o.decoupled_weight_decay ? 0.0 : a.weight_decay),
          static_cast<T>(o.decoupled_weight_decay ? 1.0 - lr * a.weight_decay : 1.0)};
}

template <class T, class Lr>
HG_HOST_DEVICE adagrad_math<T> make_adagrad_math(const adagrad_config<Lr>& a, std::int64_t step) {
  const double clr = lr_at(a.lr, step) / (1.0 + static_cast<double>(step - 1) * a.lr_decay);
  return {static_cast<T>(clr), static_cast<T>(a.eps), static_cast<T>(a.weight_decay)};
}

// The coefficients of each optimizer as a function of the 1-based step, as a value (the
// configuration is copied in): called on the host for a step's coefficients, and held by a
// capturable step's device prologue (capturable.hpp), which evaluates the learning-rate
// schedule there. with_sgd_maker / with_momentum_maker pick the variant the configuration
// asks for (SGD without decay when it is 0; Nesterov or not) for every kernel.
template <class W, bool Decay, class Lr>
struct sgd_maker {
  sgd_config<Lr> a;
  HG_HOST_DEVICE sgd_math<W, Decay> operator()(std::int64_t step) const {
    return make_sgd_math<W, Decay>(a, step);
  }
};
template <class W, bool Nesterov, class Lr>
struct momentum_maker {
  momentum_config<Lr> a;
  HG_HOST_DEVICE momentum_math<W, Nesterov> operator()(std::int64_t step) const {
    return make_momentum_math<W, Nesterov>(a, step);
  }
};
template <class W, class Lr>
struct adam_maker {
  adam_config<Lr> a;
  bool decoupled;
  HG_HOST_DEVICE adam_coeffs<W> operator()(std::int64_t step) const {
    return make_adam_coeffs<W>(a, adam_options{.step = step, .decoupled_weight_decay = decoupled});
  }
};
template <class W, class Lr>
struct adagrad_maker {
  adagrad_config<Lr> a;
  HG_HOST_DEVICE adagrad_math<W> operator()(std::int64_t step) const {
    return make_adagrad_math<W>(a, step);
  }
};

template <class Maker, class W>
using made_t = std::remove_cvref_t<decltype(std::declval<const Maker&>()(std::int64_t{1}))>;

/// Calls f with the SGD maker whose decay the configuration asks for.
template <class W, class Lr, class F>
void with_sgd_maker(const sgd_config<Lr>& a, F&& f) {
  if (a.weight_decay == 0.0)
    f(sgd_maker<W, false, Lr>{a});
  else
    f(sgd_maker<W, true, Lr>{a});
}
template <class W, class Lr, class F>
void with_momentum_maker(const momentum_config<Lr>& a, bool nesterov, F&& f) {
  if (nesterov)
    f(momentum_maker<W, true, Lr>{a});
  else
    f(momentum_maker<W, false, Lr>{a});
}

// The full-precision bodies: element i of params, grads and the slots.
template <class T, bool Decay = true>
struct sgd_body {
  T* p;
  const T* g;
  sgd_math<T, Decay> f;
  HG_HOST_DEVICE void operator()(std::size_t i) const { p[i] = f(p[i], g[i]); }
};

template <class T, bool Nesterov>
struct momentum_body {
  T* p;
  const T* g;
  T* v;
  momentum_math<T, Nesterov> f;
  HG_HOST_DEVICE void operator()(std::size_t i) const {
    T vi = v[i];
    p[i] = f(p[i], g[i], vi);
    v[i] = vi;
  }
};

template <class T>
struct adam_body {
  T* p;
  const T* g;
  T* m;
  T* v;
  adam_coeffs<T> c;
  HG_HOST_DEVICE void operator()(std::size_t i) const {
    T mi = m[i], vi = v[i];
    p[i] = c(p[i], g[i], mi, vi);
    m[i] = mi;
    v[i] = vi;
  }
};

template <class T>
struct adagrad_body {
  T* p;
  const T* g;
  T* s;
  adagrad_math<T> f;
  HG_HOST_DEVICE void operator()(std::size_t i) const {
    T si = s[i];
    p[i] = f(p[i], g[i], si);
    s[i] = si;
  }
};

template <class T>
struct lamb_coeffs {
  T b1, omb1, b2, omb2, ic1, ic2, eps, wd;
};

template <class T>
HG_HOST_DEVICE inline T lamb_direction(const lamb_coeffs<T>& c, T p, T m, T v) {
  return (m * c.ic1) / (std::sqrt(v * c.ic2) + c.eps) + c.wd * p;
}

struct norm_pair {
  double p2, r2;
};

// LAMB pass 1: moments in place, and the squared norms of p and of the direction r.
template <class T>
struct lamb_moments_r {
  using acc_type = norm_pair;
  T* p;
  const T* g;
  T* m;
  T* v;
  lamb_coeffs<T> c;
  HG_HOST_DEVICE norm_pair identity() const { return {0.0, 0.0}; }
  HG_HOST_DEVICE norm_pair map(std::size_t i) const {
    const T gi = g[i];
    const T mi = c.b1 * m[i] + c.omb1 * gi;
    const T vi = c.b2 * v[i] + c.omb2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const double r = static_cast<double>(lamb_direction(c, p[i], mi, vi));
    const double pd = static_cast<double>(p[i]);
    return {pd * pd, r * r};
  }
  HG_HOST_DEVICE static norm_pair combine(norm_pair a, norm_pair b) {
    return {a.p2 + b.p2, a.r2 + b.r2};
  }
};

// LAMB pass 2: p <- p - (lr * trust ratio) r, r recomputed from the new moments.
template <class T>
struct lamb_apply_body {
  T* p;
  const T* m;
  const T* v;
  lamb_coeffs<T> c;
  T scale;
  HG_HOST_DEVICE void operator()(std::size_t i) const {
    const T pi = p[i];
    p[i] = pi - scale * lamb_direction(c, pi, m[i], v[i]);
  }
};

template <class Policy, class Space>
constexpr void check_policy_space() {
  static_assert(exec::accessible_v<Policy, Space>,
                "the execution policy cannot access this span's memory space");
}

}  // namespace detail

/// SGD with weight decay. 3*sizeof(T) bytes per element.
template <class Policy, class T, class Space, class Lr = double>
void sgd(const Policy& policy, span<T, Space> params,
         std::type_identity_t<span<const T, Space>> grads, const sgd_config<Lr>& a,
         const sgd_options& o = {}) {
  detail::check_policy_space<Policy, Space>();
  require_same_size("sgd.grads", grads.size(), "sgd.params", params.size());
  detail::with_sgd_maker<T>(a, [&](const auto& make) {
    const auto f = make(o.step);
    kernels::launch(policy, params.size(),
                    detail::sgd_body<T, decltype(f)::decay>{params.data(), grads.data(), f},
                    params.data());
  });
}

/// Heavy-ball or Nesterov momentum. 5*sizeof(T) bytes per element.
template <class Policy, class T, class Space, class Lr = double>
void momentum(const Policy& policy, span<T, Space> params,
              std::type_identity_t<span<const T, Space>> grads, span<T, Space> velocity,
              const momentum_config<Lr>& a, const momentum_options& o = {}) {
  detail::check_policy_space<Policy, Space>();
  require_same_size("momentum.grads", grads.size(), "momentum.params", params.size());
  require_same_size("momentum.velocity", velocity.size(), "momentum.params", params.size());
  detail::with_momentum_maker<T>(a, o.nesterov, [&](const auto& make) {
    const auto f = make(o.step);
    kernels::launch(policy, params.size(),
                    detail::momentum_body<T, decltype(f)::nesterov>{params.data(), grads.data(),
                                                                    velocity.data(), f},
                    params.data());
  });
}

/// Adam / AdamW, bias correction computed once per call. 7*sizeof(T) bytes per element.
template <class Policy, class T, class Space, class Lr = double>
void adam(const Policy& policy, span<T, Space> params,
          std::type_identity_t<span<const T, Space>> grads, span<T, Space> m, span<T, Space> v,
          const adam_config<Lr>& a, const adam_options& o = {}) {
  detail::check_policy_space<Policy, Space>();
  require_same_size("adam.grads", grads.size(), "adam.params", params.size());
  require_same_size("adam.m", m.size(), "adam.params", params.size());
  require_same_size("adam.v", v.size(), "adam.params", params.size());
  require(o.step >= 1, "adam.step", o.step, "must be >= 1");
  kernels::launch(policy, params.size(),
                  detail::adam_body<T>{params.data(), grads.data(), m.data(), v.data(),
                                       detail::make_adam_coeffs<T>(a, o)},
                  params.data());
}

/// Adagrad. 5*sizeof(T) bytes per element.
template <class Policy, class T, class Space, class Lr = double>
void adagrad(const Policy& policy, span<T, Space> params,
             std::type_identity_t<span<const T, Space>> grads, span<T, Space> sum_sq,
             const adagrad_config<Lr>& a, const adagrad_options& o = {}) {
  detail::check_policy_space<Policy, Space>();
  require_same_size("adagrad.grads", grads.size(), "adagrad.params", params.size());
  require_same_size("adagrad.sum_sq", sum_sq.size(), "adagrad.params", params.size());
  require(o.step >= 1, "adagrad.step", o.step, "must be >= 1");
  kernels::launch(policy, params.size(),
                  detail::adagrad_body<T>{params.data(), grads.data(), sum_sq.data(),
                                          detail::make_adagrad_math<T>(a, o.step)},
                  params.data());
}

namespace detail {

/// LAMB's per-call coefficients (in T) and learning rate of 1-based step `step`.
template <class T, class Lr>
std::pair<lamb_coeffs<T>, double> make_lamb_coeffs(const lamb_config<Lr>& a, std::int64_t step) {
  const double t = static_cast<double>(step);
  const double c1 = a.bias_correction ? 1.0 - std::pow(a.beta1, t) : 1.0;
  const double c2 = a.bias_correction ? 1.0 - std::pow(a.beta2, t) : 1.0;
  return {lamb_coeffs<T>{static_cast<T>(a.beta1),  static_cast<T>(1.0 - a.beta1),
                         static_cast<T>(a.beta2),  static_cast<T>(1.0 - a.beta2),
                         static_cast<T>(1.0 / c1), static_cast<T>(1.0 / c2),
                         static_cast<T>(a.eps),    static_cast<T>(a.weight_decay)},
          lr_at(a.lr, step)};
}

}  // namespace detail

/// The squared norms of a tensor's parameters (p2) and of its LAMB direction (r2).
using lamb_norms = detail::norm_pair;

/// LAMB's trust ratio ||p|| / ||r|| (1 when either norm is 0).
inline double lamb_trust_ratio(const lamb_norms& n) {
  const double pn = std::sqrt(n.p2), rn = std::sqrt(n.r2);
  return (pn > 0.0 && rn > 0.0) ? pn / rn : 1.0;
}

/// LAMB over a packed buffer of tensors of sizes `a.tensor_sizes` (empty: one tensor), each
/// with its own trust ratio. Two passes (the ratio needs the norm of the whole direction
/// first): 10*sizeof(T) bytes per element in all. Norms use the deterministic reduction.
/// Returns nothing; the trust ratios are written to `ratios_out` when it is not empty.
template <class Policy, class T, class Space, class Lr = double>
void lamb(const Policy& policy, span<T, Space> params,
          std::type_identity_t<span<const T, Space>> grads, span<T, Space> m, span<T, Space> v,
          const lamb_config<Lr>& a, const lamb_options& o = {},
          std::span<double> ratios_out = {}) {
  detail::check_policy_space<Policy, Space>();
  require_same_size("lamb.grads", grads.size(), "lamb.params", params.size());
  require_same_size("lamb.m", m.size(), "lamb.params", params.size());
  require_same_size("lamb.v", v.size(), "lamb.params", params.size());
  require(o.step >= 1, "lamb.step", o.step, "must be >= 1");
  std::vector<std::size_t> sizes(a.tensor_sizes.begin(), a.tensor_sizes.end());
  if (sizes.empty()) sizes.push_back(params.size());
  std::size_t total = 0;
  for (std::size_t s : sizes) total += s;
  require_same_size("lamb.tensor_sizes (sum)", total, "lamb.params", params.size());
  if (!ratios_out.empty())
    require_same_size("lamb.ratios_out", ratios_out.size(), "lamb.tensor_sizes", sizes.size());
  const auto [c, lr] = detail::make_lamb_coeffs<T>(a, o.step);
  std::vector<detail::tensor_task<detail::lamb_apply_body<T>>> tasks;
  tasks.reserve(sizes.size());
  std::size_t off = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const std::size_t n = sizes[k];
    T* p = params.data() + off;
    T* mk = m.data() + off;
    T* vk = v.data() + off;
    const auto norms = detail::reduce_fixed_tree(
        policy, n, detail::lamb_moments_r<T>{p, grads.data() + off, mk, vk, c});
    const double ratio = lamb_trust_ratio(norms);
    if (!ratios_out.empty()) ratios_out[k] = ratio;
    tasks.push_back({{p, mk, vk, c, static_cast<T>(lr * ratio)}, n, detail::line_offset_of(p)});
    off += n;
  }
  detail::launch_multi(policy, std::span<const detail::tensor_task<detail::lamb_apply_body<T>>>(
                                   tasks.data(), tasks.size()));
}

// LAMB with a tensor split across ranks (algorithms/sharded/): each rank runs the two passes
// on its piece, the ranks exchange the per-chunk norms of pass 1, and every rank combines a
// tensor's chunks with the fixed tree. When every piece starts at a multiple of `lamb_chunk`
// elements from its tensor's start, the chunks are those of kernels::lamb over the whole
// tensor, so norms, ratio and parameters equal it bitwise.

/// The reduction chunk of LAMB's norms (kernels/detail/reduce_impl.hpp).
inline constexpr std::size_t lamb_chunk = detail::reduce_chunk;

/// LAMB pass 1 over a piece of one tensor (6*sizeof(T) bytes per element): the moments in
/// place, and the squared norms of p and r of each chunk of lamb_chunk elements from the
/// piece's start, appended to `chunks` in order. `params` is only read.
template <class Policy, class T, class Space, class Lr = double>
void lamb_moments(const Policy& policy, span<T, Space> params,
                  std::type_identity_t<span<const T, Space>> grads, span<T, Space> m,
                  span<T, Space> v, const lamb_config<Lr>& a, const lamb_options& o,
                  std::vector<lamb_norms>& chunks) {
  detail::check_policy_space<Policy, Space>();
  require_same_size("lamb_moments.grads", grads.size(), "lamb_moments.params", params.size());
  require_same_size("lamb_moments.m", m.size(), "lamb_moments.params", params.size());
  require_same_size("lamb_moments.v", v.size(), "lamb_moments.params", params.size());
  require(o.step >= 1, "lamb_moments.step", o.step, "must be >= 1");
  const auto c = detail::make_lamb_coeffs<T>(a, o.step).first;
  const auto part = detail::reduce_partials(
      policy, params.size(), detail::lamb_moments_r<T>{params.data(), grads.data(), m.data(), v.data(), c});
  chunks.insert(chunks.end(), part.begin(), part.end());
}

/// The norms of a tensor from its chunks' (in order): the fixed tree of kernels::lamb.
inline lamb_norms lamb_tree(std::span<const lamb_norms> chunks) {
  if (chunks.empty()) return {0.0, 0.0};
  return detail::tree<detail::lamb_moments_r<float>>(chunks.data(), chunks.size());
}

/// LAMB pass 2 over a piece (4*sizeof(T) bytes per element): p <- p - lr(step) ratio r.
template <class Policy, class T, class Space, class Lr = double>
void lamb_apply(const Policy& policy, span<T, Space> params,
                std::type_identity_t<span<const T, Space>> m,
                std::type_identity_t<span<const T, Space>> v, const lamb_config<Lr>& a,
                const lamb_options& o, double ratio) {
  detail::check_policy_space<Policy, Space>();
  require_same_size("lamb_apply.m", m.size(), "lamb_apply.params", params.size());
  require_same_size("lamb_apply.v", v.size(), "lamb_apply.params", params.size());
  require(o.step >= 1, "lamb_apply.step", o.step, "must be >= 1");
  const auto [c, lr] = detail::make_lamb_coeffs<T>(a, o.step);
  kernels::launch(policy, params.size(),
                  detail::lamb_apply_body<T>{params.data(), m.data(), v.data(), c,
                                             static_cast<T>(lr * ratio)},
                  params.data());
}

}  // namespace heterograd::kernels
