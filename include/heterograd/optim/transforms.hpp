#pragma once
// Elementary transformations, the pieces `chain` composes (Optax's vocabulary). Each turns
// `updates` (the gradient on entry) into the step that will be added to the parameters.
// Bytes per element of each transform_impl: read + written, sizeof(T) each.
//
//   scale_by_learning_rate{lr, decay}   u <- -lr(t) / (1 + decay t) u                 2
//   scale{factor}                       u <- factor u                                 2
//   add_decayed_weights{wd}             u <- u + wd p                                 3
//   trace{momentum, dampening, nesterov} v <- mu v + (1-damp) u;
//                                       u <- nesterov ? u + mu v : v                  4
//   scale_by_adam{b1, b2, eps, bc}      m, v as Adam; u <- (m/c1) / (sqrt(v)/sqrt(c2) + eps)
//                                                                                     6
//   scale_by_rss{eps}                   s <- s + u^2; u <- u / (sqrt(s) + eps)        4
//   scale_by_trust_ratio{sizes}         per tensor: u <- (||p|| / ||u||) u           4

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "heterograd/core/config.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/launch.hpp"
#include "heterograd/kernels/reduce.hpp"
#include "heterograd/optim/detail/base.hpp"
#include "heterograd/optim/schedule.hpp"
#include "heterograd/optim/state.hpp"

namespace heterograd::optim {

namespace detail {

template <class T>
struct add_scaled_body {  // u += a p
  T* u;
  const T* p;
  T a;
  HG_HOST_DEVICE void operator()(std::size_t i) const { u[i] += a * p[i]; }
};

template <class T, bool Nesterov>
struct trace_body {
  T* u;
  T* v;
  T mu, damp1;
  HG_HOST_DEVICE void operator()(std::size_t i) const {
    const T vi = mu * v[i] + damp1 * u[i];
    v[i] = vi;
    u[i] = Nesterov ? u[i] + mu * vi : vi;
  }
};

template <class T>
struct scale_by_adam_body {
  T* u;
  T* m;
  T* v;
  T b1, omb1, b2, omb2, ic1, isc2, eps;
  HG_HOST_DEVICE void operator()(std::size_t i) const {
    const T g = u[i];
    const T mi = b1 * m[i] + omb1 * g;
    const T vi = b2 * v[i] + omb2 * g * g;
    m[i] = mi;
    v[i] = vi;
    u[i] = (mi * ic1) / (std::sqrt(vi) * isc2 + eps);
  }
};

template <class T>
struct scale_by_rss_body {
  T* u;
  T* s;
  T eps;
  HG_HOST_DEVICE void operator()(std::size_t i) const {
    const T g = u[i];
    const T si = s[i] + g * g;
    s[i] = si;
    u[i] = g / (std::sqrt(si) + eps);
  }
};

inline void require_finite_nonneg(std::string_view field, double v) {
  require(std::isfinite(v) && v >= 0.0, field, v, "must be finite and >= 0");
}
inline void require_beta(std::string_view field, double v) {
  require(v >= 0.0 && v < 1.0, field, v, "must be in [0, 1)");
}
inline void require_eps(std::string_view field, double v) {
  require(std::isfinite(v) && v > 0.0, field, v, "must be finite and > 0");
}

}  // namespace detail

/// u <- -lr(t) / (1 + decay t) u, t = steps applied so far.
class scale_by_learning_rate : public transformation_base<scale_by_learning_rate> {
 public:
  explicit scale_by_learning_rate(schedule lr, double decay = 0.0) : lr_(lr), decay_(decay) {
    lr_.validate("scale_by_learning_rate.lr");
    detail::require_finite_nonneg("scale_by_learning_rate.decay", decay);
  }
  static constexpr std::string_view name() { return "scale_by_learning_rate"; }
  static constexpr std::size_t state_slots = 0;
  template <class Policy, class T, class S>
  void transform_impl(const Policy& policy, span<T, S> u, state<T, S>& st, span<const T, S>) const {
    const double lr = lr_(st.count) / (1.0 + decay_ * static_cast<double>(st.count));
    kernels::launch(policy, u.size(), detail::scale_body<T>{u.data(), static_cast<T>(-lr)});
    ++st.count;
  }

 private:
  schedule lr_;
  double decay_;
};

/// u <- factor u.
class scale : public transformation_base<scale> {
 public:
  explicit scale(double factor) : factor_(factor) {
    require(std::isfinite(factor), "scale.factor", factor, "must be finite");
  }
  static constexpr std::string_view name() { return "scale"; }
  static constexpr std::size_t state_slots = 0;
  template <class Policy, class T, class S>
  void transform_impl(const Policy& policy, span<T, S> u, state<T, S>& st, span<const T, S>) const {
    kernels::launch(policy, u.size(), detail::scale_body<T>{u.data(), static_cast<T>(factor_)});
    ++st.count;
  }

 private:
  double factor_;
};

/// u <- u + wd p (L2 / decoupled weight decay depending on where it sits in a chain).
class add_decayed_weights : public transformation_base<add_decayed_weights> {
 public:
  explicit add_decayed_weights(double weight_decay) : wd_(weight_decay) {
    detail::require_finite_nonneg("add_decayed_weights.weight_decay", weight_decay);
  }
  static constexpr std::string_view name() { return "add_decayed_weights"; }
  static constexpr std::size_t state_slots = 0;
  template <class Policy, class T, class S>
  void transform_impl(const Policy& policy, span<T, S> u, state<T, S>& st,
                      span<const T, S> p) const {
    if (wd_ != 0.0)
      kernels::launch(policy, u.size(),
                      detail::add_scaled_body<T>{u.data(), p.data(), static_cast<T>(wd_)});
    ++st.count;
  }

 private:
  double wd_;
};

/// Momentum trace: v <- mu v + (1 - dampening) u; u <- v (heavy ball) or u + mu v (Nesterov).
class trace : public transformation_base<trace> {
 public:
  explicit trace(double momentum, double dampening = 0.0, bool nesterov = false)
      : mu_(momentum), damp_(dampening), nesterov_(nesterov) {
    detail::require_beta("trace.momentum", momentum);
    require(dampening >= 0.0 && dampening <= 1.0, "trace.dampening", dampening,
            "must be in [0, 1]");
  }
  static constexpr std::string_view name() { return "trace"; }
  static constexpr std::size_t state_slots = 1;
  template <class Policy, class T, class S>
  void transform_impl(const Policy& policy, span<T, S> u, state<T, S>& st, span<const T, S>) const {
    T* v = slot_span<T, S>(st.slots[0]).data();
    const T mu = static_cast<T>(mu_), d1 = static_cast<T>(1.0 - damp_);
    if (nesterov_)
      kernels::launch(policy, u.size(), detail::trace_body<T, true>{u.data(), v, mu, d1});
    else
      kernels::launch(policy, u.size(), detail::trace_body<T, false>{u.data(), v, mu, d1});
    ++st.count;
  }

 private:
  double mu_, damp_;
  bool nesterov_;
};

/// Adam's preconditioning (Kingma & Ba 2015): u <- m_hat / (sqrt(v_hat) + eps).
class scale_by_adam : public transformation_base<scale_by_adam> {
 public:
  explicit scale_by_adam(double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
                         bool bias_correction = true)
      : b1_(beta1), b2_(beta2), eps_(eps), bc_(bias_correction) {
    detail::require_beta("scale_by_adam.beta1", beta1);
    detail::require_beta("scale_by_adam.beta2", beta2);
    detail::require_eps("scale_by_adam.eps", eps);
  }
  static constexpr std::string_view name() { return "scale_by_adam"; }
  static constexpr std::size_t state_slots = 2;
  template <class Policy, class T, class S>
  void transform_impl(const Policy& policy, span<T, S> u, state<T, S>& st, span<const T, S>) const {
    const double t = static_cast<double>(st.count + 1);
    const double c1 = bc_ ? 1.0 - std::pow(b1_, t) : 1.0, c2 = bc_ ? 1.0 - std::pow(b2_, t) : 1.0;
    kernels::launch(
        policy, u.size(),
        detail::scale_by_adam_body<T>{u.data(), slot_span<T, S>(st.slots[0]).data(),
                                      slot_span<T, S>(st.slots[1]).data(), static_cast<T>(b1_),
                                      static_cast<T>(1.0 - b1_), static_cast<T>(b2_),
                                      static_cast<T>(1.0 - b2_), static_cast<T>(1.0 / c1),
                                      static_cast<T>(1.0 / std::sqrt(c2)), static_cast<T>(eps_)});
    ++st.count;
  }

 private:
  double b1_, b2_, eps_;
  bool bc_;
};

/// Adagrad's preconditioning (Duchi et al. 2011): s <- s + u^2; u <- u / (sqrt(s) + eps).
class scale_by_rss : public transformation_base<scale_by_rss> {
 public:
  explicit scale_by_rss(double eps = 1e-10, double initial_accumulator = 0.0)
      : eps_(eps), init_(initial_accumulator) {
    detail::require_eps("scale_by_rss.eps", eps);
    detail::require_finite_nonneg("scale_by_rss.initial_accumulator", initial_accumulator);
  }
  static constexpr std::string_view name() { return "scale_by_rss"; }
  static constexpr std::size_t state_slots = 1;
  template <class T, class S>  // the sum of squares starts at initial_accumulator, not 0
  state<T, S> init_state(std::size_t n) const {
    state<T, S> st = detail::plain_state<T, S>(name(), 0, 0);
    st.slots.push_back(buffer<T, S>(n, static_cast<T>(init_)));
    return st;
  }
  template <class Policy, class T, class S>
  void transform_impl(const Policy& policy, span<T, S> u, state<T, S>& st, span<const T, S>) const {
    kernels::launch(policy, u.size(),
                    detail::scale_by_rss_body<T>{u.data(), slot_span<T, S>(st.slots[0]).data(),
                                                 static_cast<T>(eps_)});
    ++st.count;
  }

 private:
  double eps_, init_;
};

/// LAMB's layer-wise adaptation (You et al. 2020): per tensor, u <- (||p|| / ||u||) u
/// (factor 1 when either norm is 0). `tensor_sizes` empty: the whole buffer is one tensor.
class scale_by_trust_ratio : public transformation_base<scale_by_trust_ratio> {
 public:
  explicit scale_by_trust_ratio(std::vector<std::size_t> tensor_sizes = {})
      : sizes_(std::move(tensor_sizes)) {}
  static constexpr std::string_view name() { return "scale_by_trust_ratio"; }
  static constexpr std::size_t state_slots = 0;
  template <class T, class S>
  void check_state(const state<T, S>& st, std::size_t n, std::string_view where) const {
    detail::check_plain_state(st, n, where, name(), state_slots);
    detail::check_tensor_sizes(sizes_, n, where);
  }
  template <class Policy, class T, class S>
  void transform_impl(const Policy& policy, span<T, S> u, state<T, S>& st,
                      span<const T, S> p) const {
    std::vector<std::size_t> sizes = sizes_;
    if (sizes.empty()) sizes.push_back(u.size());
    std::size_t off = 0;
    for (std::size_t n : sizes) {
      const double pn = kernels::l2_norm(policy, p.subspan(off, n));
      const double un = kernels::l2_norm(policy, span<const T, S>(u.data() + off, n));
      const double r = (pn > 0.0 && un > 0.0) ? pn / un : 1.0;
      kernels::launch(policy, n, detail::scale_body<T>{u.data() + off, static_cast<T>(r)});
      off += n;
    }
    ++st.count;
  }

 private:
  std::vector<std::size_t> sizes_;
};

}  // namespace heterograd::optim
