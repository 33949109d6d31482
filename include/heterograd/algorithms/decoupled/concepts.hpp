#pragma once
// What decoupled training needs from an optimizer: a stateful stepper over one flat slice.
// optim's transformations become steppers through optim::stepper (state held by value).

#include <concepts>

#include "heterograd/core/span.hpp"

namespace heterograd::algorithms::decoupled {

/// `o.step(params, grads)` updates `params` in place from `grads` and the stepper's own state.
template <class O>
concept module_optimizer = std::copyable<O> && requires(O& o, span<float> p, span<const float> g) {
  o.step(p, g);
};

}  // namespace heterograd::algorithms::decoupled
