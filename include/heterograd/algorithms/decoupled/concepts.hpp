#pragma once
// What decoupled training needs from an optimizer: a stateful stepper over one flat slice.
// optim's transformations become steppers through optim::stepper (state held by value).

#include <concepts>
#include <optional>
#include <type_traits>

#include <thrust/system/cpp/execution_policy.h>

#include "heterograd/core/span.hpp"
#include "heterograd/optim/concepts.hpp"
#include "heterograd/optim/state.hpp"

namespace heterograd::algorithms::decoupled {

/// `o.step(params, grads)` updates `params` in place from `grads` and the stepper's own state.
template <class O>
concept module_optimizer = std::copyable<O> && requires(O& o, span<float> p, span<const float> g) {
  o.step(p, g);
};

/// Any optim:: optimizer as a stepper: the state is created on the first step (it needs the
/// slice's size) and kept by value. Runs on the sequential policy by default: module updates
/// are small and already run concurrently, one thread per module.
template <optim::optimizer Opt, class Policy = std::remove_cvref_t<decltype(thrust::cpp::par)>>
class optim_stepper {
 public:
  explicit optim_stepper(Opt opt, Policy policy = {}) : opt_(std::move(opt)), policy_(policy) {}
  void step(span<float> p, span<const float> g) {
    if (!state_) state_ = opt_.init(policy_, p);
    opt_.update(policy_, g, *state_, p);
  }
  const std::optional<optim::state<float>>& state() const { return state_; }
  /// Checkpointing: the optimizer state (none before the first step); `ar(...)` writes or
  /// reads it. The optimizer itself is configuration, rebuilt by the caller.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(state_);
  }

 private:
  Opt opt_;
  Policy policy_;
  std::optional<optim::state<float>> state_;
};

}  // namespace heterograd::algorithms::decoupled
