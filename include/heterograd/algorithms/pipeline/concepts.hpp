#pragma once
// What a model must offer to be pipelined (issue 47): S stages over one flat parameter buffer,
// stage s owning the contiguous slice [stage_offset(s), stage_offset(s + 1)). Every call takes
// the whole buffer (params and grads, num_params() floats each) and touches only its stage's
// slice, so a rank that runs one stage holds the same flat buffer as the sequential
// reference and parameter alignment cannot differ between them.
//
//   forward(s, slot, p, x, rows)        runs stage s on `rows` inputs x (rows x input_width(s)),
//                                       keeping in `slot` what backward needs (x may be freed
//                                       once forward returns); returns the stage's output,
//                                       rows x input_width(s + 1), valid until the slot's
//                                       next forward or release
//   backward(s, slot, p, dy, g, dx)     dy = d(loss)/d(output of stage s); g += the slice's
//                                       gradient; dx (rows x input_width(s)) receives
//                                       d(loss)/d(input) unless it is empty (stage 0); the
//                                       slot is then free for the next forward
//   loss_backward(slot, p, y, scale, g, dx)
//                                       last stage only, after its forward in `slot`: the loss
//                                       scale * sum over rows of loss(row) (so scale = 1 / B
//                                       weighs a micro-batch of a B-row batch), its gradient
//                                       added to g, dx as backward's; returns that loss
//   release(s, slot)                    forgets the slot (a forward that is never backpropagated)
//   activation_bytes(s, rows)           bytes a slot of stage s keeps for `rows` rows
//
// Positive and negative archetypes: heterograd/testing/algorithms_pipeline_archetypes.hpp.

#include <concepts>
#include <cstddef>
#include <cstdint>

#include "heterograd/core/span.hpp"

namespace heterograd::algorithms::pipeline {

template <class M>
concept stage_model = requires(M& m, const M& cm, std::size_t s, std::size_t slot,
                               span<const float> p, span<float> g, const float* x, std::size_t rows,
                               span<const std::int32_t> y, float scale, span<const float> dy,
                               span<float> dx) {
  { cm.stages() } -> std::convertible_to<std::size_t>;
  { cm.num_params() } -> std::convertible_to<std::size_t>;
  { cm.stage_offset(s) } -> std::convertible_to<std::size_t>;  // s in [0, stages()]
  { cm.input_width(s) } -> std::convertible_to<std::size_t>;   // s = stages(): the output width
  { cm.activation_bytes(s, rows) } -> std::convertible_to<double>;
  { m.forward(s, slot, p, x, rows) } -> std::same_as<span<const float>>;
  m.backward(s, slot, p, dy, g, dx);
  { m.loss_backward(slot, p, y, scale, g, dx) } -> std::convertible_to<float>;
  m.release(s, slot);
};

}  // namespace heterograd::algorithms::pipeline
