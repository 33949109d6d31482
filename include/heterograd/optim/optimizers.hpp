#pragma once
// The named optimizers: each update is one fused kernel from heterograd/kernels/updates.hpp
// (LAMB: its two passes). Hyper-parameters are the kernels' structs
// (heterograd/kernels/hyperparameters.hpp) with a schedule for the learning rate; their
// defaults and rules are described there once. Constructing the optimizer validates them
// (validate_fields) and throws std::invalid_argument naming the field, the value and the rule. `as_chain()` gives the same optimizer built from the
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

#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/capturable.hpp"
#include "heterograd/kernels/cast.hpp"
#include "heterograd/kernels/hyperparameters.hpp"
#include "heterograd/kernels/mixed.hpp"
#include "heterograd/kernels/updates.hpp"
#include "heterograd/optim/combinators.hpp"
#include "heterograd/optim/detail/base.hpp"
#include "heterograd/optim/schedule.hpp"
#include "heterograd/optim/state.hpp"
#include "heterograd/optim/transforms.hpp"

namespace heterograd::optim {

/// The hyper-parameters of optim's optimizers: the kernels' structs (one per optimizer; each
/// field's default, rule and meaning are described there once) with a schedule as the
/// learning rate. Names of those structs, not new ones.
using sgd_config = kernels::sgd_config<schedule>;
using momentum_config = kernels::momentum_config<schedule>;
using adam_config = kernels::adam_config<schedule>;
using adagrad_config = kernels::adagrad_config<schedule>;
using lamb_config = kernels::lamb_config<schedule>;

namespace detail {

/// The optimizers whose update is one pass over the elements (all but LAMB): besides their
/// fused full-precision kernel, they run
///   mixed precision  bf16/fp16 params, grads of that type or float, a float state whose
///                    slots are the optimizer's then the fp32 master weights (kernels/mixed.hpp);
///   capturable       the step count and coefficients in a device buffer (capturable.hpp).
/// D provides with_maker<W>(f): f called with its coefficients' maker (kernels/capturable.hpp).
template <class D>
class single_pass_base : public fused_base<D> {
 public:
  using mixed_precision = void;

  /// The optimizer's fresh state plus the master weights: the parameters converted to float.
  template <class Policy, class P, class S>
  state<float, S> init_mixed(const Policy& policy, span<const P, S> p) const {
    state<float, S> st = this->self().template init_state<float, S>(p.size());
    st.slots.push_back(state<float, S>::zeros(p.size()));
    kernels::cast(policy, p, slot_span<float, S>(st.slots.back()));
    return st;
  }
  template <class S>
  void check_mixed_state(const state<float, S>& st, std::size_t n, std::string_view where) const {
    require(st.slots.size() == D::state_slots + 1, join(where, "state.slots (count)"),
            st.slots.size(),
            "must be " + std::to_string(D::state_slots + 1) +
                " for bf16/fp16 parameters (the optimizer's slots, then the fp32 master weights; "
                "a state made by init() from float parameters has no master)");
    check_plain_state(st, n, where, D::name(), D::state_slots + 1);
  }
  /// One mixed-precision step; coefficients from the host (st.count + 1).
  template <class Policy, class P, class G, class S>
  void apply_mixed_impl(const Policy& policy, span<const G, S> g, state<float, S>& st,
                        span<P, S> p, float grad_scale) const {
    this->self().template with_maker<float>([&](const auto& make) {
      using M = kernels::detail::made_t<std::remove_cvref_t<decltype(make)>, float>;
      kernels::detail::launch_update(policy, kernels::detail::coeffs_value<M>{make(st.count + 1)},
                                     p, g, slot_span<float, S>(st.slots[D::state_slots]),
                                     slot<0>(st), slot<1>(st), grad_scale);
    });
    ++st.count;
  }
  /// One capturable step (full precision: P = G = W; mixed: W = float). The count is the
  /// device's (words[0]); st.count is left alone.
  template <class Policy, class P, class G, class W, class S>
  void apply_capturable_impl(const Policy& policy, span<const G, S> g, state<W, S>& st,
                             span<P, S> p, span<W, S> words, W grad_scale) const {
    this->self().template with_maker<W>([&](const auto& make) {
      span<W, S> w;
      if constexpr (std::is_same_v<P, W>)
        w = p;
      else
        w = slot_span<W, S>(st.slots[D::state_slots]);
      kernels::detail::run_capturable(policy, D::name().data(), make, words, p, g, w,
                                      slot<0>(st), slot<1>(st), grad_scale);
    });
  }

 private:
  // Slot k of the optimizer's own (an empty span past its slots).
  template <std::size_t K, class W, class S>
  static span<W, S> slot(state<W, S>& st) {
    if constexpr (K < D::state_slots)
      return slot_span<W, S>(st.slots[K]);
    else
      return span<W, S>();
  }
};

}  // namespace detail

/// SGD with (L2) weight decay: p <- p - lr (g + wd p). 12 B/element (float).
class sgd : public detail::single_pass_base<sgd> {
 public:
  explicit sgd(sgd_config p = {}) : p_(p) { validate_fields(p_, name()); }
  static constexpr std::string_view name() { return "sgd"; }
  static constexpr std::size_t state_slots = 0;
  const sgd_config& params() const { return p_; }
  template <class Policy, class T, class S>
  void apply_impl(const Policy& policy, span<const T, S> g, state<T, S>& st, span<T, S> p) const {
    kernels::sgd(policy, p, g, p_, {.step = st.count + 1});
    ++st.count;
  }
  template <class W, class F>
  void with_maker(F&& f) const {
    kernels::detail::with_sgd_maker<W>(p_, f);
  }
  auto as_chain() const {
    return chain(add_decayed_weights(p_.weight_decay), scale_by_learning_rate(p_.lr));
  }

 private:
  sgd_config p_;
};

namespace detail {

template <bool Nesterov, class D>
class momentum_impl : public single_pass_base<D> {
 public:
  explicit momentum_impl(momentum_config p) : p_(p) {
    validate_fields(p_, D::name());
  }
  static constexpr std::size_t state_slots = 1;  // v
  const momentum_config& params() const { return p_; }
  template <class Policy, class T, class S>
  void apply_impl(const Policy& policy, span<const T, S> g, state<T, S>& st, span<T, S> p) const {
    kernels::momentum(policy, p, g, slot_span<T, S>(st.slots[0]), p_,
                      {.step = st.count + 1, .nesterov = Nesterov});
    ++st.count;
  }
  template <class W, class F>
  void with_maker(F&& f) const {
    kernels::detail::with_momentum_maker<W>(p_, Nesterov, f);
  }
  auto as_chain() const {
    return chain(add_decayed_weights(p_.weight_decay), trace(p_.momentum, p_.dampening, Nesterov),
                 scale_by_learning_rate(p_.lr));
  }

 private:
  momentum_config p_;
};
}  // namespace detail

/// Heavy-ball momentum (Polyak 1964; PyTorch's form): v <- mu v + (1-damp)(g + wd p);
/// p <- p - lr v. 20 B/element (float).
class momentum : public detail::momentum_impl<false, momentum> {
 public:
  explicit momentum(momentum_config p = {}) : momentum_impl(p) {}
  static constexpr std::string_view name() { return "momentum"; }
};

/// Nesterov momentum (Sutskever et al. 2013): as momentum, then p <- p - lr (d + mu v).
class nesterov : public detail::momentum_impl<true, nesterov> {
 public:
  explicit nesterov(momentum_config p = {}) : momentum_impl(p) {}
  static constexpr std::string_view name() { return "nesterov"; }
};

namespace detail {

template <bool Decoupled, class D>
class adam_impl : public single_pass_base<D> {
 public:
  explicit adam_impl(adam_config p) : p_(p) { validate_fields(p_, D::name()); }
  static constexpr std::size_t state_slots = 2;  // m, v
  const adam_config& params() const { return p_; }
  template <class Policy, class T, class S>
  void apply_impl(const Policy& policy, span<const T, S> g, state<T, S>& st, span<T, S> p) const {
    kernels::adam(policy, p, g, slot_span<T, S>(st.slots[0]), slot_span<T, S>(st.slots[1]), p_,
                  {.step = st.count + 1, .decoupled_weight_decay = Decoupled});
    ++st.count;
  }
  template <class W, class F>
  void with_maker(F&& f) const {
    f(kernels::detail::adam_maker<W, schedule>{p_, Decoupled});
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
  adam_config p_;
};
}  // namespace detail

/// Adam (Kingma & Ba 2015) with L2 weight decay added to the gradient. 28 B/element (float).
class adam : public detail::adam_impl<false, adam> {
 public:
  explicit adam(adam_config p = {}) : adam_impl(p) {}
  static constexpr std::string_view name() { return "adam"; }
};

/// AdamW (Loshchilov & Hutter 2019): decoupled weight decay p <- p (1 - lr wd).
/// Default weight_decay 0.01 (PyTorch's). 28 B/element (float).
class adamw : public detail::adam_impl<true, adamw> {
 public:
  explicit adamw(adam_config p = {.lr = 1e-3, .weight_decay = 0.01})
      : adam_impl(p) {}
  static constexpr std::string_view name() { return "adamw"; }
};

/// LAMB (You et al. 2020): Adam direction plus weight decay, scaled per tensor by the trust
/// ratio ||p|| / ||r||. Two passes, 40 B/element (float).
class lamb : public fused_base<lamb> {
 public:
  explicit lamb(lamb_config p = {}) : p_(std::move(p)) {
    validate_fields(p_, name());
  }
  static constexpr std::string_view name() { return "lamb"; }
  static constexpr std::size_t state_slots = 2;  // m, v
  const lamb_config& params() const { return p_; }
  template <class T, class S>
  void check_state(const state<T, S>& st, std::size_t n, std::string_view where) const {
    detail::check_plain_state(st, n, where, name(), state_slots);
    detail::check_tensor_sizes(p_.tensor_sizes, n, where);
  }
  template <class Policy, class T, class S>
  void apply_impl(const Policy& policy, span<const T, S> g, state<T, S>& st, span<T, S> p) const {
    kernels::lamb(policy, p, g, slot_span<T, S>(st.slots[0]), slot_span<T, S>(st.slots[1]), p_,
                  {.step = st.count + 1});
    ++st.count;
  }
  auto as_chain() const {
    return chain(scale_by_adam(p_.beta1, p_.beta2, p_.eps, p_.bias_correction),
                 add_decayed_weights(p_.weight_decay),
                 scale_by_trust_ratio(p_.tensor_sizes), scale_by_learning_rate(p_.lr));
  }

 private:
  lamb_config p_;
};

/// Adagrad (Duchi et al. 2011; PyTorch's form). 20 B/element (float).
class adagrad : public detail::single_pass_base<adagrad> {
 public:
  explicit adagrad(adagrad_config p = {}) : p_(p) {
    validate_fields(p_, name());
  }
  static constexpr std::string_view name() { return "adagrad"; }
  static constexpr std::size_t state_slots = 1;  // the sum of squares
  const adagrad_config& params() const { return p_; }
  template <class T, class S>  // the sum of squares starts at initial_accumulator, not 0
  state<T, S> init_state(std::size_t n) const {
    state<T, S> st = detail::plain_state<T, S>(name(), 0, 0);
    st.slots.push_back(buffer<T, S>(n, static_cast<T>(p_.initial_accumulator)));
    return st;
  }
  template <class Policy, class T, class S>
  void apply_impl(const Policy& policy, span<const T, S> g, state<T, S>& st, span<T, S> p) const {
    kernels::adagrad(policy, p, g, slot_span<T, S>(st.slots[0]), p_, {.step = st.count + 1});
    ++st.count;
  }
  template <class W, class F>
  void with_maker(F&& f) const {
    f(kernels::detail::adagrad_maker<W, schedule>{p_});
  }
  auto as_chain() const {
    return chain(add_decayed_weights(p_.weight_decay), scale_by_rss(p_.eps, p_.initial_accumulator),
                 scale_by_learning_rate(p_.lr, p_.lr_decay));
  }

 private:
  adagrad_config p_;
};

}  // namespace heterograd::optim
