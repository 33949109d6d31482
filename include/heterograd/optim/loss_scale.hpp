#pragma once
// Dynamic loss scaling (Micikevicius et al., "Mixed Precision Training", ICLR 2018), as an
// optimizer transformation: dynamic_loss_scale(opt, config). The caller multiplies the loss
// by scale(state) before the backward pass, so 16-bit gradients keep their small values;
// update() then
//   - checks the (scaled) gradients: one read, one integer back to the host;
//   - non-finite: skips the step (parameters and the inner state stay bitwise as they were),
//     multiplies the scale by backoff_factor and restarts the growth count;
//   - finite: steps the inner optimizer on the gradients times 1/scale (for bf16/fp16
//     parameters inside the mixed-precision kernel's one pass; for float or double
//     parameters through one scaling pass into scratch), and after growth_interval
//     finite steps in a row multiplies the scale by growth_factor.
// PyTorch's GradScaler rule and defaults. Deterministic: the scale is a function of the
// sequence of finite and non-finite steps. With a power-of-two scale and factors the
// unscaled gradients are exact, so training equals the unscaled run bitwise as long as
// no gradient overflows or falls out of the normal range.
//
// State: kind "dynamic_loss_scale", counters [skips in all, finite steps since the scale
// last changed, the scale's bits (a double)], one child: the inner optimizer's state.
// The scale never grows past the largest float; a backoff that would take it below the
// smallest normal float throws std::runtime_error (every gradient is non-finite at any scale)
// and changes nothing.

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/launch.hpp"
#include "heterograd/kernels/reduce.hpp"
#include "heterograd/kernels/scratch.hpp"
#include "heterograd/optim/combinators.hpp"
#include "heterograd/optim/detail/base.hpp"
#include "heterograd/optim/state.hpp"

namespace heterograd::optim {

/// The loss scaler's settings (PyTorch's GradScaler defaults).
struct loss_scale_config {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;

  static constexpr auto description() {
    return describe(
        "dynamic_loss_scale",
        describe_field("init_scale", &loss_scale_config::init_scale,
                       "the first scale (the loss is multiplied by it)",
                       bounds{.lo = 0, .hi = 3.4028234663852886e38, .lo_open = true}),
        describe_field("growth_factor", &loss_scale_config::growth_factor,
                       "the scale's factor after growth_interval finite steps in a row",
                       finite_above(1)),
        describe_field("backoff_factor", &loss_scale_config::backoff_factor,
                       "the scale's factor after a non-finite gradient",
                       bounds{.lo = 0, .hi = 1, .lo_open = true, .hi_open = true}),
        describe_field("growth_interval", &loss_scale_config::growth_interval,
                       "finite steps in a row before the scale grows", at_least(1)));
  }
};

namespace detail {
template <class T>
struct scaled_copy_body {  // out = a x
  const T* x;
  T* out;
  T a;
  HG_HOST_DEVICE void operator()(std::size_t i) const { out[i] = x[i] * a; }
};
}  // namespace detail

template <class Inner>
class dynamic_loss_scale_t
    : public detail::wrapper_base<dynamic_loss_scale_t<Inner>, Inner, transformation_base> {
 public:
  explicit dynamic_loss_scale_t(Inner inner, loss_scale_config c = {})
      : inner_(std::move(inner)), c_(c) {
    validate_fields(c_);
  }
  static constexpr std::string_view name() { return "dynamic_loss_scale"; }
  const loss_scale_config& config() const { return c_; }
  const Inner& inner() const { return inner_; }

  /// The scale to multiply the loss by before the next backward pass.
  template <class T, class S>
  static double scale(const state<T, S>& st) {
    return std::bit_cast<double>(st.counters.at(2));
  }
  /// Steps skipped so far (non-finite gradients).
  template <class T, class S>
  static std::int64_t skips(const state<T, S>& st) {
    return st.counters.at(0);
  }

  template <class Policy, class T, class S>
  void apply_impl(const Policy& policy, span<const T, S> g, state<T, S>& st, span<T, S> p) const {
    if (!admit(policy, g, st)) return;
    const double s = scale(st);
    if (s == 1.0) {
      inner_.apply_impl(policy, g, st.children[0], p);
    } else {
      kernels::scratch<T, Policy> u(policy, g.size());
      kernels::launch(policy, g.size(),
                      detail::scaled_copy_body<T>{g.data(), u.data(), static_cast<T>(1.0 / s)},
                      u.data());
      inner_.apply_impl(policy, span<const T, S>(u.data(), g.size()), st.children[0], p);
    }
    finish(st);
  }
  template <class Policy, class P, class G, class S>
  void apply_mixed_impl(const Policy& policy, span<const G, S> g, state<float, S>& st,
                        span<P, S> p, float grad_scale) const {
    if (!admit(policy, g, st)) return;
    inner_.apply_mixed_impl(policy, g, st.children[0], p,
                            grad_scale * static_cast<float>(1.0 / scale(st)));
    finish(st);
  }
  template <class Policy, class T, class S>
  void transform_impl(const Policy& policy, span<T, S> u, state<T, S>& st,
                      span<const T, S> p) const {
    if (!admit(policy, span<const T, S>(u.data(), u.size()), st)) {
      kernels::launch(policy, u.size(), detail::fill_body<T>{u.data(), T(0)});
      return;
    }
    const double s = scale(st);
    if (s != 1.0)
      kernels::launch(policy, u.size(), detail::scale_body<T>{u.data(), static_cast<T>(1.0 / s)});
    inner_.transform_impl(policy, u, st.children[0], p);
    finish(st);
  }

  // For wrapper_base: the state around the inner's, and the check of this level.
  template <class T, class S>
  state<T, S> wrap(state<T, S> inner) const {
    state<T, S> st;
    st.kind = std::string(name());
    st.counters = {0, 0, std::bit_cast<std::int64_t>(c_.init_scale)};
    st.children.push_back(std::move(inner));
    return st;
  }
  template <class T, class S>
  static void check_own(const state<T, S>& st, std::string_view where) {
    detail::check_children(st, where, name(), 1);
    require(st.slots.empty(), detail::join(where, "state.slots (count)"), st.slots.size(),
            "must be 0");
    require(st.counters.size() == 3, detail::join(where, "state.counters (count)"),
            st.counters.size(), "must be 3");
    const double s = std::bit_cast<double>(st.counters[2]);
    require(std::isfinite(s) && s >= static_cast<double>(std::numeric_limits<float>::min()) &&
                s <= static_cast<double>(std::numeric_limits<float>::max()),
            detail::join(where, "state.counters[2] (scale)"), s,
            "must be a finite float of the normal range");
    require(st.counters[0] >= 0 && st.counters[1] >= 0,
            detail::join(where, "state.counters (skips, growth count)"), st.counters[0],
            "must be >= 0");
  }

 private:
  // The finiteness check; on a non-finite gradient the backoff (or the underflow error,
  // before anything changes). True when the step goes ahead.
  template <class Policy, class G, class T, class S>
  bool admit(const Policy& policy, span<const G, S> g, state<T, S>& st) const {
    if (kernels::all_finite(policy, g)) return true;
    const double next = scale(st) * c_.backoff_factor;
    if (next < static_cast<double>(std::numeric_limits<float>::min()))
      throw std::runtime_error(
          "heterograd: dynamic_loss_scale: the scale would fall to " + std::to_string(next) +
          " (below the smallest normal float) after " + std::to_string(st.counters[0] + 1) +
          " skipped steps: the gradients are not finite at any scale");
    ++st.counters[0];
    st.counters[1] = 0;
    st.counters[2] = std::bit_cast<std::int64_t>(next);
    return false;
  }
  template <class T, class S>
  void finish(state<T, S>& st) const {
    ++st.count;
    if (++st.counters[1] < c_.growth_interval) return;
    st.counters[1] = 0;
    const double next = scale(st) * c_.growth_factor;
    if (next <= static_cast<double>(std::numeric_limits<float>::max()))
      st.counters[2] = std::bit_cast<std::int64_t>(next);
  }

  Inner inner_;
  loss_scale_config c_;
};

/// `inner` behind a dynamic loss scale (see above).
template <class Inner>
dynamic_loss_scale_t<Inner> dynamic_loss_scale(Inner inner, loss_scale_config c = {}) {
  return dynamic_loss_scale_t<Inner>(std::move(inner), c);
}

}  // namespace heterograd::optim
