#pragma once
// The named optimizers: each update is one fused kernel from heterograd/kernels/updates.hpp
// (LAMB: its two passes). Hyper-parameters are aggregate structs with the usual defaults;
// constructing the optimizer validates them and throws std::invalid_argument naming the
// field, the value and the rule. `as_chain()` gives the same optimizer built from the
// elementary transformations (tests hold the fused one to it within 1e-6 relative).
//
// Learning rates are schedules (a number is a constant); the value used at a step is
// lr(count), count = steps applied before it.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/updates.hpp"
#include "heterograd/optim/combinators.hpp"
#include "heterograd/optim/detail/base.hpp"
#include "heterograd/optim/schedule.hpp"
#include "heterograd/optim/state.hpp"
#include "heterograd/optim/transforms.hpp"

namespace heterograd::optim {

struct sgd_params {
  schedule lr = 0.01;
  double weight_decay = 0.0;
};

/// SGD with (L2) weight decay: p <- p - lr (g + wd p). 12 B/element (float).
class sgd : public fused_base<sgd> {
 public:
  explicit sgd(sgd_params p = {}) : p_(p) {
    p_.lr.validate("sgd.lr");
    detail::require_finite_nonneg("sgd.weight_decay", p_.weight_decay);
  }
  static constexpr std::string_view name() { return "sgd"; }
  const sgd_params& params() const { return p_; }
  template <class T, class S>
  state<T, S> init_state(std::size_t) const {
    return detail::plain_state<T, S>(name(), 0, 0);
  }
  template <class T, class S>
  void check_state(const state<T, S>& st, std::size_t n, std::string_view where) const {
    detail::check_plain_state(st, n, where, name(), 0);
  }
  template <class Policy, class T, class S>
  void apply_impl(const Policy& policy, span<const T, S> g, state<T, S>& st, span<T, S> p) const {
    kernels::sgd(policy, p, g, kernels::sgd_args{p_.lr(st.count), p_.weight_decay});
    ++st.count;
  }
  auto as_chain() const {
    return chain(add_decayed_weights(p_.weight_decay), scale_by_learning_rate(p_.lr));
  }

 private:
  sgd_params p_;
};

struct momentum_params {
  schedule lr = 0.01;
  double momentum = 0.9;
  double dampening = 0.0;
  double weight_decay = 0.0;
};

namespace detail {
inline void validate_momentum(const momentum_params& p, std::string_view who) {
  p.lr.validate(join(who, "lr"));
  require_beta(join(who, "momentum"), p.momentum);
  require(p.dampening >= 0.0 && p.dampening <= 1.0, join(who, "dampening"), p.dampening,
          "must be in [0, 1]");
  require_finite_nonneg(join(who, "weight_decay"), p.weight_decay);
}

template <bool Nesterov, class D>
class momentum_impl : public fused_base<D> {
 public:
  explicit momentum_impl(momentum_params p) : p_(p) { validate_momentum(p_, D::name()); }
  const momentum_params& params() const { return p_; }
  template <class T, class S>
  state<T, S> init_state(std::size_t n) const {
    return plain_state<T, S>(D::name(), 1, n);
  }
  template <class T, class S>
  void check_state(const state<T, S>& st, std::size_t n, std::string_view where) const {
    check_plain_state(st, n, where, D::name(), 1);
  }
  template <class Policy, class T, class S>
  void apply_impl(const Policy& policy, span<const T, S> g, state<T, S>& st, span<T, S> p) const {
    kernels::momentum(policy, p, g, slot_span<T, S>(st.slots[0]),
                      kernels::momentum_args{p_.lr(st.count), p_.momentum, p_.dampening,
                                             p_.weight_decay, Nesterov});
    ++st.count;
  }
  auto as_chain() const {
    return chain(add_decayed_weights(p_.weight_decay), trace(p_.momentum, p_.dampening, Nesterov),
                 scale_by_learning_rate(p_.lr));
  }

 private:
  momentum_params p_;
};
}  // namespace detail

/// Heavy-ball momentum (Polyak 1964; PyTorch's form): v <- mu v + (1-damp)(g + wd p);
/// p <- p - lr v. 20 B/element (float).
class momentum : public detail::momentum_impl<false, momentum> {
 public:
  explicit momentum(momentum_params p = {}) : momentum_impl(p) {}
  static constexpr std::string_view name() { return "momentum"; }
};

/// Nesterov momentum (Sutskever et al. 2013): as momentum, then p <- p - lr (d + mu v).
class nesterov : public detail::momentum_impl<true, nesterov> {
 public:
  explicit nesterov(momentum_params p = {}) : momentum_impl(p) {}
  static constexpr std::string_view name() { return "nesterov"; }
};

struct adam_params {
  schedule lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool bias_correction = true;
};

namespace detail {
inline void validate_adam(const adam_params& p, std::string_view who) {
  p.lr.validate(join(who, "lr"));
  require_beta(join(who, "beta1"), p.beta1);
  require_beta(join(who, "beta2"), p.beta2);
  require_eps(join(who, "eps"), p.eps);
  require_finite_nonneg(join(who, "weight_decay"), p.weight_decay);
}

template <bool Decoupled, class D>
class adam_impl : public fused_base<D> {
 public:
  explicit adam_impl(adam_params p) : p_(p) { validate_adam(p_, D::name()); }
  const adam_params& params() const { return p_; }
  template <class T, class S>
  state<T, S> init_state(std::size_t n) const {
    return plain_state<T, S>(D::name(), 2, n);
  }
  template <class T, class S>
  void check_state(const state<T, S>& st, std::size_t n, std::string_view where) const {
    check_plain_state(st, n, where, D::name(), 2);
  }
  template <class Policy, class T, class S>
  void apply_impl(const Policy& policy, span<const T, S> g, state<T, S>& st, span<T, S> p) const {
    kernels::adam_args a;
    a.lr = p_.lr(st.count);
    a.beta1 = p_.beta1;
    a.beta2 = p_.beta2;
    a.eps = p_.eps;
    a.weight_decay = p_.weight_decay;
    a.decoupled_weight_decay = Decoupled;
    a.bias_correction = p_.bias_correction;
    a.step = st.count + 1;
    kernels::adam(policy, p, g, slot_span<T, S>(st.slots[0]), slot_span<T, S>(st.slots[1]), a);
    ++st.count;
  }
  auto as_chain() const {
    const scale_by_adam core(p_.beta1, p_.beta2, p_.eps, p_.bias_correction);
    if constexpr (Decoupled) {
      return chain(core, add_decayed_weights(p_.weight_decay), scale_by_learning_rate(p_.lr));
    } else {
      return chain(add_decayed_weights(p_.weight_decay), core, scale_by_learning_rate(p_.lr));
    }
  }

 private:
  adam_params p_;
};
}  // namespace detail

/// Adam (Kingma & Ba 2015) with L2 weight decay added to the gradient. 28 B/element (float).
class adam : public detail::adam_impl<false, adam> {
 public:
  explicit adam(adam_params p = {}) : adam_impl(p) {}
  static constexpr std::string_view name() { return "adam"; }
};

/// AdamW (Loshchilov & Hutter 2019): decoupled weight decay p <- p (1 - lr wd).
/// Default weight_decay 0.01 (PyTorch's). 28 B/element (float).
class adamw : public detail::adam_impl<true, adamw> {
 public:
  explicit adamw(adam_params p = {.lr = 1e-3, .weight_decay = 0.01}) : adam_impl(p) {}
  static constexpr std::string_view name() { return "adamw"; }
};

struct lamb_params {
  schedule lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-6;
  double weight_decay = 0.01;
  std::vector<std::size_t> tensor_sizes = {};  ///< empty: the buffer is one tensor
};

/// LAMB (You et al. 2020): Adam direction plus weight decay, scaled per tensor by the trust
/// ratio ||p|| / ||r||. Two passes, 40 B/element (float).
class lamb : public fused_base<lamb> {
 public:
  explicit lamb(lamb_params p = {}) : p_(std::move(p)) {
    p_.lr.validate("lamb.lr");
    detail::require_beta("lamb.beta1", p_.beta1);
    detail::require_beta("lamb.beta2", p_.beta2);
    detail::require_eps("lamb.eps", p_.eps);
    detail::require_finite_nonneg("lamb.weight_decay", p_.weight_decay);
  }
  static constexpr std::string_view name() { return "lamb"; }
  const lamb_params& params() const { return p_; }
  template <class T, class S>
  state<T, S> init_state(std::size_t n) const {
    return detail::plain_state<T, S>(name(), 2, n);
  }
  template <class T, class S>
  void check_state(const state<T, S>& st, std::size_t n, std::string_view where) const {
    detail::check_plain_state(st, n, where, name(), 2);
    if (!p_.tensor_sizes.empty()) {
      std::size_t total = 0;
      for (auto s : p_.tensor_sizes) total += s;
      require_same_size(detail::join(where, "tensor_sizes (sum)"), total,
                        detail::join(where, "params"), n);
    }
  }
  template <class Policy, class T, class S>
  void apply_impl(const Policy& policy, span<const T, S> g, state<T, S>& st, span<T, S> p) const {
    kernels::lamb_args a;
    a.lr = p_.lr(st.count);
    a.beta1 = p_.beta1;
    a.beta2 = p_.beta2;
    a.eps = p_.eps;
    a.weight_decay = p_.weight_decay;
    a.step = st.count + 1;
    kernels::lamb(policy, p, g, slot_span<T, S>(st.slots[0]), slot_span<T, S>(st.slots[1]),
                  std::span<const std::size_t>(p_.tensor_sizes), a);
    ++st.count;
  }
  auto as_chain() const {
    return chain(scale_by_adam(p_.beta1, p_.beta2, p_.eps), add_decayed_weights(p_.weight_decay),
                 scale_by_trust_ratio(p_.tensor_sizes), scale_by_learning_rate(p_.lr));
  }

 private:
  lamb_params p_;
};

struct adagrad_params {
  schedule lr = 0.01;
  double eps = 1e-10;
  double weight_decay = 0.0;
  double lr_decay = 0.0;
  double initial_accumulator = 0.0;
};

/// Adagrad (Duchi et al. 2011; PyTorch's form). 20 B/element (float).
class adagrad : public fused_base<adagrad> {
 public:
  explicit adagrad(adagrad_params p = {}) : p_(p) {
    p_.lr.validate("adagrad.lr");
    detail::require_eps("adagrad.eps", p_.eps);
    detail::require_finite_nonneg("adagrad.weight_decay", p_.weight_decay);
    detail::require_finite_nonneg("adagrad.lr_decay", p_.lr_decay);
    detail::require_finite_nonneg("adagrad.initial_accumulator", p_.initial_accumulator);
  }
  static constexpr std::string_view name() { return "adagrad"; }
  const adagrad_params& params() const { return p_; }
  template <class T, class S>
  state<T, S> init_state(std::size_t n) const {
    state<T, S> st = detail::plain_state<T, S>(name(), 0, 0);
    st.slots.push_back(buffer<T, S>(n, static_cast<T>(p_.initial_accumulator)));
    return st;
  }
  template <class T, class S>
  void check_state(const state<T, S>& st, std::size_t n, std::string_view where) const {
    detail::check_plain_state(st, n, where, name(), 1);
  }
  template <class Policy, class T, class S>
  void apply_impl(const Policy& policy, span<const T, S> g, state<T, S>& st, span<T, S> p) const {
    kernels::adagrad(
        policy, p, g, slot_span<T, S>(st.slots[0]),
        kernels::adagrad_args{p_.lr(st.count), p_.eps, p_.weight_decay, p_.lr_decay, st.count + 1});
    ++st.count;
  }
  auto as_chain() const {
    return chain(add_decayed_weights(p_.weight_decay), scale_by_rss(p_.eps, p_.initial_accumulator),
                 scale_by_learning_rate(p_.lr, p_.lr_decay));
  }

 private:
  adagrad_params p_;
};

}  // namespace heterograd::optim
