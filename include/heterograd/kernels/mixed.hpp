#pragma once
// Mixed-precision fused updates: parameters stored in bf16 or fp16 (what the model computes
// with), fp32 master weights and fp32 optimizer state. One pass per element: read the
// gradient (16-bit or fp32) and multiply it by `grad_scale` (a loss scaler's 1/scale; 1 is
// exact), update the master weight and the slots with the full-precision update's own
// arithmetic (updates.hpp's *_math), write the master and its 16-bit rounding (to nearest
// even, cast.hpp). So the master weights are bitwise what the fp32 update gives on the same
// gradients, and the 16-bit parameters are always their rounding.
//
// Bytes per element (16-bit params and grads; fp32 grads read 2 B more):
//   sgd        g 2, master 4 + 4, p 2                 12 B
//   momentum   + v 4 + 4                              20 B
//   adam(w)    + m, v 16                              28 B
//   adagrad    + s 4 + 4                              20 B
// the same as the fp32 update with fp32 params, which reads and writes p (8 B) where this
// reads and writes the master (8 B) and writes p (2 B) but reads a 16-bit gradient (2 B less).

#include <cstddef>
#include <string>
#include <type_traits>

#include "heterograd/core/config.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/cast.hpp"
#include "heterograd/kernels/hyperparameters.hpp"
#include "heterograd/kernels/launch.hpp"
#include "heterograd/kernels/updates.hpp"

namespace heterograd::kernels {

/// What a mixed-precision update needs besides the optimizer's own options.
struct mixed_options {
  /// Every gradient is multiplied by this before use (a dynamic loss scaler passes 1/scale).
  float grad_scale = 1.0f;
};

namespace detail {

/// Coefficients held by value (computed on the host for this call).
template <class M>
struct coeffs_value {
  M m;
  HG_HOST_DEVICE const M& get() const { return m; }
};
/// Coefficients read from memory the policy reaches (a capturable step's, written on the
/// device by its prologue, kernels/capturable.hpp).
template <class M>
struct coeffs_ref {
  const M* m;
  HG_HOST_DEVICE const M& get() const { return *m; }
};

template <class X>
HG_HOST_DEVICE inline float load_float(X x) {
  if constexpr (is_half_v<X>)
    return to_float(x);
  else
    return static_cast<float>(x);
}

/// Element i of an update of weights W* w from gradients g (times grad_scale), the
/// optimizer's slots in place; when P differs from W, p[i] receives the 16-bit rounding of the
/// new weight (w is the master copy); else p is w (full precision) and only w is written.
template <class Src, class P, class G, class W>
struct update_body {
  P* p;
  const G* g;
  W* w;
  W* s0;
  W* s1;
  Src src;
  W grad_scale;
  HG_HOST_DEVICE void operator()(std::size_t i) const {
    // A reference: a copy of the coefficients per element (an aggregate copy) keeps g++
    // from vectorising the loop; their fields are loaded as the arithmetic needs them.
    const auto& f = src.get();
    using M = std::remove_cvref_t<decltype(f)>;
    W gi;
    if constexpr (std::is_same_v<G, W>)
      gi = g[i] * grad_scale;
    else
      gi = static_cast<W>(load_float(g[i])) * grad_scale;
    W x = w[i];
    if constexpr (M::slots == 0) {
      x = f(x, gi);
    } else if constexpr (M::slots == 1) {
      W a = s0[i];
      x = f(x, gi, a);
      s0[i] = a;
    } else {
      W a = s0[i], b = s1[i];
      x = f(x, gi, a, b);
      s0[i] = a;
      s1[i] = b;
    }
    w[i] = x;
    if constexpr (!std::is_same_v<P, W>) p[i] = convert_value<float, P>(x);
  }
};

template <class P, class G>
constexpr void check_mixed_types() {
  static_assert(is_half_v<P>, "mixed-precision updates take bf16 or fp16 parameters");
  static_assert(std::is_same_v<G, P> || std::is_same_v<G, float>,
                "mixed-precision gradients are of the parameters' type or float");
}

/// Checks the sizes of an update's buffers (named after `kernel`) before anything runs.
/// `w` are the weights (mixed: the fp32 master; full precision: params itself), `s0`, `s1`
/// the optimizer's state buffers (as many as M::slots; the others empty).
template <class M, class P, class G, class W, class Space>
void check_update(const char* kernel, span<P, Space> params, span<const G, Space> grads,
                  span<W, Space> w, span<W, Space> s0, span<W, Space> s1) {
  if constexpr (!std::is_same_v<P, W>) check_mixed_types<P, G>();
  const std::string k(kernel);
  require_same_size(k + ".grads", grads.size(), k + ".params", params.size());
  if constexpr (!std::is_same_v<P, W>)
    require_same_size(k + ".master", w.size(), k + ".params", params.size());
  if constexpr (M::slots >= 1)
    require_same_size(k + ".state[0]", s0.size(), k + ".params", params.size());
  if constexpr (M::slots >= 2)
    require_same_size(k + ".state[1]", s1.size(), k + ".params", params.size());
}

/// The update body over the parameters (sizes checked by check_update).
template <class Policy, class Src, class P, class G, class W, class Space>
void launch_update(const Policy& policy, const Src& src, span<P, Space> params,
                   span<const G, Space> grads, span<W, Space> w, span<W, Space> s0,
                   span<W, Space> s1, W grad_scale) {
  static_assert(exec::accessible_v<Policy, Space>,
                "the execution policy cannot access this span's memory space");
  launch(policy, params.size(),
         update_body<Src, P, G, W>{params.data(), grads.data(), w.data(), s0.data(), s1.data(),
                                   src, grad_scale},
         w.data());
}

template <class Policy, class Src, class P, class G, class Space>
void run_mixed(const Policy& policy, const char* kernel, const Src& src, span<P, Space> params,
               span<const G, Space> grads, span<float, Space> master, span<float, Space> s0,
               span<float, Space> s1, const mixed_options& mo) {
  check_mixed_types<P, G>();
  check_update<std::remove_cvref_t<decltype(src.get())>>(kernel, params, grads, master, s0, s1);
  launch_update(policy, src, params, grads, master, s0, s1, mo.grad_scale);
}

}  // namespace detail

/// SGD on 16-bit parameters with fp32 master weights: master <- sgd(master, g * grad_scale);
/// params <- round(master). 12 B/element.
template <class Policy, class P, class G, class Space, class Lr = double>
void sgd_mixed(const Policy& policy, span<P, Space> params, span<const G, Space> grads,
               span<float, Space> master, const sgd_config<Lr>& a, const sgd_options& o = {},
               const mixed_options& mo = {}) {
  detail::with_sgd_maker<float>(a, [&](const auto& make) {
    detail::run_mixed(policy, "sgd_mixed", detail::coeffs_value{make(o.step)}, params, grads,
                      master, {}, {}, mo);
  });
}

/// Heavy-ball or Nesterov momentum on 16-bit parameters (fp32 master and velocity). 20 B/element.
template <class Policy, class P, class G, class Space, class Lr = double>
void momentum_mixed(const Policy& policy, span<P, Space> params, span<const G, Space> grads,
                    span<float, Space> master, span<float, Space> velocity,
                    const momentum_config<Lr>& a, const momentum_options& o = {},
                    const mixed_options& mo = {}) {
  detail::with_momentum_maker<float>(a, o.nesterov, [&](const auto& make) {
    detail::run_mixed(policy, "momentum_mixed", detail::coeffs_value{make(o.step)}, params,
                      grads, master, velocity, {}, mo);
  });
}

/// Adam / AdamW on 16-bit parameters (fp32 master, m and v). 28 B/element.
template <class Policy, class P, class G, class Space, class Lr = double>
void adam_mixed(const Policy& policy, span<P, Space> params, span<const G, Space> grads,
                span<float, Space> master, span<float, Space> m, span<float, Space> v,
                const adam_config<Lr>& a, const adam_options& o = {},
                const mixed_options& mo = {}) {
  require(o.step >= 1, "adam_mixed.step", o.step, "must be >= 1");
  detail::run_mixed(policy, "adam_mixed",
                    detail::coeffs_value<detail::adam_coeffs<float>>{
                        detail::make_adam_coeffs<float>(a, o)},
                    params, grads, master, m, v, mo);
}

/// Adagrad on 16-bit parameters (fp32 master and sum of squares). 20 B/element.
template <class Policy, class P, class G, class Space, class Lr = double>
void adagrad_mixed(const Policy& policy, span<P, Space> params, span<const G, Space> grads,
                   span<float, Space> master, span<float, Space> sum_sq,
                   const adagrad_config<Lr>& a, const adagrad_options& o = {},
                   const mixed_options& mo = {}) {
  require(o.step >= 1, "adagrad_mixed.step", o.step, "must be >= 1");
  detail::run_mixed(policy, "adagrad_mixed",
                    detail::coeffs_value<detail::adagrad_math<float>>{
                        detail::make_adagrad_math<float>(a, o.step)},
                    params, grads, master, sum_sq, {}, mo);
}

}  // namespace heterograd::kernels
