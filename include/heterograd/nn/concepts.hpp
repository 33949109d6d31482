#pragma once
// The Model concept: a differentiable function of one flat parameter buffer. Algorithms and
// runtimes need nothing else from a model. Archetypes: heterograd/testing/nn_archetypes.hpp.

#include <concepts>
#include <cstddef>

#include "heterograd/core/span.hpp"
#include "heterograd/nn/mlp.hpp"

namespace heterograd::nn {

template <class M>
concept model = requires(M& m, const M& cm, span<const typename M::value_type> p,
                         const batch<typename M::value_type>& b,
                         span<typename M::value_type> g) {
  typename M::value_type;
  { cm.num_params() } -> std::convertible_to<std::size_t>;
  { m.loss_and_gradient(p, b, g) } -> std::convertible_to<double>;
  { m.evaluate(p, b) } -> std::convertible_to<eval_result>;
};

static_assert(model<mlp<float>> && model<mlp<double>>);

}  // namespace heterograd::nn
