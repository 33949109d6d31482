#pragma once
// capturable(opt): the single-pass optimizers (sgd, momentum, nesterov, adam, adamw, adagrad)
// with their step count and per-step coefficients (learning rate from its schedule, bias
// corrections) in the parameters' memory space, so that update() reads nothing back and
// allocates nothing: under a policy that does not wait (thrust::cuda::par_nosync.on(stream))
// a whole step can be captured in a CUDA graph and replayed (PyTorch's `capturable=True`).
// The arithmetic is kernels/capturable.hpp's: on the host backends bitwise the optimizer's
// own update; with bf16/fp16 parameters, its mixed-precision update.
//
// State: kind "capturable", one slot of kernels::capturable_words<T> elements (words[0] =
// steps applied, as T: exact up to 2^24 for float; then the last step's coefficients), one
// child: the optimizer's state (with the master weights for bf16/fp16 parameters). The
// child's host `count` stays 0: the count is the device's, read by steps(st) (one element).
// A count that is not a whole number below 2^24 (float; 2^53 double) is refused by name:
// at every update when the state is in host memory, by steps() when it is on a device (a
// capturable step reads nothing back).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/capturable.hpp"
#include "heterograd/optim/combinators.hpp"
#include "heterograd/optim/detail/base.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/optim/state.hpp"

namespace heterograd::optim {

template <class Inner>
class capturable_t : public detail::wrapper_base<capturable_t<Inner>, Inner, fused_base> {
  static_assert(std::is_base_of_v<detail::single_pass_base<Inner>, Inner>,
                "capturable() takes a single-pass optimizer: sgd, momentum, nesterov, adam, "
                "adamw or adagrad");

 public:
  explicit capturable_t(Inner inner) : inner_(std::move(inner)) {}
  static constexpr std::string_view name() { return "capturable"; }
  const Inner& inner() const { return inner_; }

  template <class Policy, class T, class S>
  void apply_impl(const Policy& policy, span<const T, S> g, state<T, S>& st, span<T, S> p) const {
    inner_.apply_capturable_impl(policy, g, st.children[0], p, slot_span<T, S>(st.slots[0]), T(1));
  }
  template <class Policy, class P, class G, class S>
  void apply_mixed_impl(const Policy& policy, span<const G, S> g, state<float, S>& st,
                        span<P, S> p, float grad_scale) const {
    inner_.apply_capturable_impl(policy, g, st.children[0], p, slot_span<float, S>(st.slots[0]),
                                 grad_scale);
  }

  /// Steps applied: the device's count (one element read back; checked as check_state does).
  template <class T, class S>
  static std::int64_t steps(const state<T, S>& st) {
    require(st.kind == "capturable" && st.slots.size() == 1 && !st.slots[0].empty(),
            "capturable.state", st.kind, "must be a capturable optimizer's state");
    const T c = state<T, S>::host_copy(st.slots[0])[0];
    check_count(c, name(), true);
    return static_cast<std::int64_t>(c);
  }
  /// The largest count a W word holds exactly: 2^24 for float, 2^53 for double.
  template <class T>
  static constexpr double max_count = std::is_same_v<T, float> ? 16777216.0 : 9007199254740992.0;

  // For wrapper_base: the state around the inner's, and the check of this level.
  template <class T, class S>
  static state<T, S> wrap(state<T, S> inner) {
    state<T, S> st;
    st.kind = std::string(name());
    st.slots.push_back(state<T, S>::zeros(kernels::capturable_words<T>));
    st.children.push_back(std::move(inner));
    return st;
  }
  template <class T, class S>
  static void check_own(const state<T, S>& st, std::string_view where) {
    detail::check_children(st, where, name(), 1);
    require(st.slots.size() == 1, detail::join(where, "state.slots (count)"), st.slots.size(),
            "must be 1 (the device step count and coefficients)");
    require_same_size(detail::join(where, "state.slots[0] (size)"), st.slots[0].size(),
                      "kernels::capturable_words", kernels::capturable_words<T>);
    // The count is read where that costs nothing (host memory); a device state is not read
    // back at each step (that is the point), only by steps().
    if constexpr (std::is_same_v<S, host_space>) check_count(st.slots[0][0], where, false);
  }

 private:
  // A whole number of steps; before a step, one the step can still count exactly (the
  // prologue adds 1), so below max_count; as a result (steps()), up to it.
  template <class T>
  static void check_count(T c, std::string_view where, bool result) {
    const T top = static_cast<T>(max_count<T>);
    require(c >= T(0) && (result ? c <= top : c < top) && c == std::floor(c),
            detail::join(where, "state.slots[0][0] (step count)"), c,
            "must be a whole number in [0, " +
                std::to_string(static_cast<std::int64_t>(max_count<T>)) + (result ? "]" : ")") +
                " (the steps a " + (sizeof(T) == 4 ? "float" : "double") +
                " count holds exactly)");
  }
  Inner inner_;
};

/// The optimizer with its step count and coefficients on the device (see above).
template <class Inner>
capturable_t<Inner> capturable(Inner inner) {
  return capturable_t<Inner>(std::move(inner));
}

}  // namespace heterograd::optim
