#pragma once
// Minimal archetypes for nn::model: copy model_archetype to start a custom model.

#include <cstddef>

#include "heterograd/nn/concepts.hpp"

namespace heterograd::testing {

/// The least a model must provide: f(p) = 1/2 ||p||^2 regardless of the batch.
struct model_archetype {
  using value_type = float;
  std::size_t num_params() const { return 1; }
  double loss_and_gradient(span<const float> p, const nn::batch<float>&, span<float> g) {
    g[0] = p[0];
    return 0.5 * p[0] * p[0];
  }
  nn::eval_result evaluate(span<const float>, const nn::batch<float>&) { return {}; }
};

/// Not a model: no gradient.
struct not_a_model {
  using value_type = float;
  std::size_t num_params() const { return 1; }
};

static_assert(nn::model<model_archetype>);
static_assert(!nn::model<not_a_model>);

}  // namespace heterograd::testing
