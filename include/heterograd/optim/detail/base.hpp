#pragma once
// What every transformation shares: turning arguments into spans, checking memory spaces,
// sizes and state ownership before anything is written, and the default update paths.
//
// A transformation D provides
//   std::string_view name() const;
//   state<T, S> init_state<T, S>(std::size_t n) const;
//   void check_state(const state<T, S>&, std::size_t n, std::string_view where) const;
//        (or `static constexpr std::size_t state_slots`: the base's plain state of that many
//        zero-filled slots and no children, and its check)
//   void transform_impl(policy, span<T, S> updates, state<T, S>&, span<const T, S> params)
//        const;   // updates <- the step to add to params (unchecked)
// and optionally a fused `apply_impl(policy, span<const T, S> grads, state&, span<T, S>
// params)`; the default applies transform_impl to a scratch copy of grads, then adds it.
//
// Mixed precision (bf16/fp16 params with a float state: the optimizer's slots, then the fp32
// master weights) is for a D with the tag type `mixed_precision` and
//   state<float, S> init_mixed(policy, span<const P, S> params) const;
//   void check_mixed_state(const state<float, S>&, std::size_t n, std::string_view) const;
//   void apply_mixed_impl(policy, span<const G, S> grads, state<float, S>&, span<P, S> params,
//                         float grad_scale) const;   // grads of type P or float
// (optimizers.hpp's single-pass optimizers; capturable.hpp and loss_scale.hpp forward them).

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/cast.hpp"
#include "heterograd/kernels/launch.hpp"
#include "heterograd/kernels/scratch.hpp"
#include "heterograd/optim/state.hpp"

namespace heterograd::optim {

namespace detail {

template <class X>
struct is_hg_span : std::false_type {};
template <class T, class S>
struct is_hg_span<span<T, S>> : std::true_type {};

/// A span over x: x itself if it is a span, else make_span(x) (vectors, thrust vectors).
template <class X>
auto as_span(X&& x) {
  if constexpr (is_hg_span<std::remove_cvref_t<X>>::value)
    return std::remove_cvref_t<X>(x);
  else
    return make_span(x);
}

template <class T>
struct copy_body {
  const T* src;
  T* dst;
  HG_HOST_DEVICE void operator()(std::size_t i) const { dst[i] = src[i]; }
};

template <class T>
struct add_body {  // p += u
  T* p;
  const T* u;
  HG_HOST_DEVICE void operator()(std::size_t i) const { p[i] += u[i]; }
};

template <class T>
struct diff_body {  // out = a - b
  T* out;
  const T* a;
  const T* b;
  HG_HOST_DEVICE void operator()(std::size_t i) const { out[i] = a[i] - b[i]; }
};

template <class T>
struct fill_body {
  T* p;
  T v;
  HG_HOST_DEVICE void operator()(std::size_t i) const { p[i] = v; }
};

template <class T>
struct scale_body {
  T* p;
  T a;
  HG_HOST_DEVICE void operator()(std::size_t i) const { p[i] *= a; }
};

inline std::string join(std::string_view a, std::string_view b) {
  std::string s(a);
  s += '.';
  s += b;
  return s;
}

/// Default state check: kind, slot count and sizes, no children.
template <class T, class S>
void check_plain_state(const state<T, S>& st, std::size_t n, std::string_view where,
                       std::string_view kind, std::size_t slots) {
  require(st.kind == kind, join(where, "state.kind"), st.kind,
          "must be '" + std::string(kind) + "' (the state belongs to another optimizer)");
  require(st.slots.size() == slots, join(where, "state.slots (count)"), st.slots.size(),
          "must be " + std::to_string(slots));
  for (const auto& b : st.slots)
    require_same_size(join(where, "state.slots[i] (size)"), b.size(), join(where, "params"), n);
  require(st.children.empty(), join(where, "state.children (count)"), st.children.size(),
          "must be 0");
}

template <class T, class S>
state<T, S> plain_state(std::string_view kind, std::size_t slots, std::size_t n) {
  state<T, S> st;
  st.kind = std::string(kind);
  for (std::size_t i = 0; i < slots; ++i) st.slots.push_back(state<T, S>::zeros(n));
  return st;
}

/// LAMB's tensors must tile the parameters (an empty list is one tensor).
inline void check_tensor_sizes(const std::vector<std::size_t>& sizes, std::size_t n,
                               std::string_view where) {
  if (sizes.empty()) return;
  std::size_t total = 0;
  for (auto s : sizes) total += s;
  require_same_size(join(where, "tensor_sizes (sum)"), total, join(where, "params"), n);
}

/// A transformation that updates bf16/fp16 parameters through fp32 master weights
/// (optimizers.hpp's single-pass optimizers and the wrappers that forward to them).
template <class D>
concept mixed_capable = requires { typename D::mixed_precision; };

/// Gives a wrapper the tag when its inner transformation has it.
template <class Inner, bool = mixed_capable<Inner>>
struct forwards_mixed {};
template <class Inner>
struct forwards_mixed<Inner, true> {
  using mixed_precision = void;
};

}  // namespace detail

/// CRTP base giving every transformation the public init / update / transform entry points.
template <class D>
class transformation_base {
 public:
  /// A fresh state for parameters like `params` (any span or container; only its size,
  /// element type and memory space matter).
  template <class Policy, class P>
  auto init(const Policy& policy, P&& params) const {
    (void)policy;
    auto p = detail::as_span(params);
    using T = std::remove_const_t<typename decltype(p)::element_type>;
    using S = typename decltype(p)::memory_space;
    if constexpr (!exec::accessible_v<Policy, S>) {
      throw std::invalid_argument(
          invalid_argument_message(detail::join(self().name(), "params (memory space)"), S::name,
                                   "must be accessible from the execution policy"));
      return state<T, S>{};
    } else if constexpr (kernels::detail::is_half_v<T>) {
      static_assert(detail::mixed_capable<D>,
                    "bf16/fp16 parameters (mixed precision) need a single-pass optimizer (sgd, "
                    "momentum, nesterov, adam, adamw, adagrad), optionally inside "
                    "capturable() or dynamic_loss_scale()");
      return self().init_mixed(policy, span<const T, S>(p.data(), p.size()));
    } else {
      return self().template init_state<T, S>(p.size());
    }
  }

  // The plain state of D::state_slots zero-filled slots (a D with other state defines both).
  template <class T, class S>
  state<T, S> init_state(std::size_t n) const {
    return detail::plain_state<T, S>(self().name(), D::state_slots, n);
  }
  template <class T, class S>
  void check_state(const state<T, S>& st, std::size_t n, std::string_view where) const {
    detail::check_plain_state(st, n, where, self().name(), D::state_slots);
  }

  /// Applies one step to `params` from `grads`. Checks everything first: nothing is written
  /// when it throws.
  template <class Policy, class G, class T, class S, class P>
  void update(const Policy& policy, const G& grads, state<T, S>& st, P&& params) const {
    auto g = detail::as_span(grads);
    auto p = detail::as_span(params);
    using GS = typename decltype(g)::memory_space;
    using PS = typename decltype(p)::memory_space;
    using GT = std::remove_const_t<typename decltype(g)::element_type>;
    using PT = typename decltype(p)::element_type;
    constexpr bool mixed = kernels::detail::is_half_v<std::remove_const_t<PT>>;
    if constexpr (mixed) {
      static_assert(detail::mixed_capable<D>,
                    "bf16/fp16 parameters (mixed precision) need a single-pass optimizer (sgd, "
                    "momentum, nesterov, adam, adamw, adagrad), optionally inside "
                    "capturable() or dynamic_loss_scale()");
      static_assert(std::is_same_v<T, float> &&
                        (std::is_same_v<GT, PT> || std::is_same_v<GT, float>),
                    "mixed precision: bf16/fp16 params (non-const), grads of their type or float, "
                    "and a float state (the master weights and the optimizer's slots)");
    } else {
      static_assert(std::is_same_v<GT, T> && std::is_same_v<PT, T>,
                    "grads, params and state must have the same (non-const params) element type");
    }
    if constexpr (!(std::is_same_v<GS, S> && std::is_same_v<PS, S> &&
                    exec::accessible_v<Policy, S>)) {
      std::string got = std::string("grads ") + GS::name + ", state " + S::name + ", params " +
                        PS::name + ", policy " +
                        (exec::accessible_v<Policy, host_space> ? "host" : "device");
      throw std::invalid_argument(invalid_argument_message(
          detail::join(self().name(), "memory spaces"), got,
          "grads, state and params must share one memory space the policy can access"));
    } else {
      require_same_size(detail::join(self().name(), "grads"), g.size(),
                        detail::join(self().name(), "params"), p.size());
      if constexpr (mixed) {
        self().check_mixed_state(st, p.size(), self().name());
        self().apply_mixed_impl(policy, span<const GT, S>(g.data(), g.size()), st,
                                span<PT, S>(p.data(), p.size()), 1.0f);
      } else {
        self().check_state(st, p.size(), self().name());
        self().apply_impl(policy, span<const T, S>(g.data(), g.size()), st,
                          span<T, S>(p.data(), p.size()));
      }
    }
  }

  /// Turns `updates` (gradients on entry) into the step to add to params, Optax-style.
  template <class Policy, class T, class S>
  void transform(const Policy& policy, span<T, S> updates, state<T, S>& st,
                 std::type_identity_t<span<const T, S>> params) const {
    static_assert(exec::accessible_v<Policy, S>, "policy cannot access the spans' memory");
    require_same_size(detail::join(self().name(), "updates"), updates.size(),
                      detail::join(self().name(), "params"), params.size());
    self().check_state(st, params.size(), self().name());
    self().transform_impl(policy, updates, st, params);
  }

  // Default unfused update: u = grads; transform; params += u.
  template <class Policy, class T, class S>
  void apply_impl(const Policy& policy, span<const T, S> g, state<T, S>& st, span<T, S> p) const {
    kernels::scratch<T, Policy> u(policy, g.size());
    kernels::launch(policy, g.size(), detail::copy_body<T>{g.data(), u.data()});
    self().transform_impl(policy, span<T, S>(u.data(), g.size()), st,
                          span<const T, S>(p.data(), p.size()));
    kernels::launch(policy, g.size(), detail::add_body<T>{p.data(), u.data()});
  }

 protected:
  const D& self() const { return static_cast<const D&>(*this); }
};

/// Base of the fused optimizers: their transform runs the fused update on a copy of params
/// and returns the difference, so one source of arithmetic serves both paths.
template <class D>
class fused_base : public transformation_base<D> {
 public:
  template <class Policy, class T, class S>
  void transform_impl(const Policy& policy, span<T, S> u, state<T, S>& st,
                      span<const T, S> p) const {
    const std::size_t n = p.size();
    kernels::scratch<T, Policy> q(policy, n);
    kernels::launch(policy, n, detail::copy_body<T>{p.data(), q.data()});
    this->self().apply_impl(policy, span<const T, S>(u.data(), n), st, span<T, S>(q.data(), n));
    kernels::launch(policy, n, detail::diff_body<T>{u.data(), q.data(), p.data()});
  }
};

}  // namespace heterograd::optim
