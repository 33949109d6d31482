#pragma once
// Minimal archetypes for algorithms/pipeline/concepts.hpp's stage_model: copy
// stage_model_archetype to start a model that the pipeline references and runtimes run. The
// negative ones each miss or mistype exactly one requirement, and the concept must reject them.
// (Named algorithms_pipeline_... because cmake/check_layers.py places a testing header by its
// layer prefix.)

#include <cstddef>
#include <cstdint>

#include "heterograd/algorithms/pipeline/concepts.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::testing {

/// The least stage model: one stage, no parameters, width-1 inputs passed through; the loss is
/// zero (and so is every gradient).
struct stage_model_archetype {
  std::size_t stages() const { return 1; }
  std::size_t num_params() const { return 0; }
  std::size_t stage_offset(std::size_t) const { return 0; }
  std::size_t input_width(std::size_t) const { return 1; }
  double activation_bytes(std::size_t, std::size_t rows) const {
    return static_cast<double>(rows * sizeof(float));
  }
  span<const float> forward(std::size_t, std::size_t, span<const float>, const float* x,
                            std::size_t rows) {
    return span<const float>(x, rows);
  }
  void backward(std::size_t, std::size_t, span<const float>, span<const float>, span<float>,
                span<float>) {}
  float loss_backward(std::size_t, span<const float>, span<const std::int32_t>, float, span<float>,
                      span<float>) {
    return 0.0f;
  }
  void release(std::size_t, std::size_t) {}
};

/// No stages(): the runtime could not tell how many ranks it needs.
struct not_a_stage_model_no_stages : stage_model_archetype {
  std::size_t stages() const = delete;
};
/// No num_params().
struct not_a_stage_model_no_num_params : stage_model_archetype {
  std::size_t num_params() const = delete;
};
/// No stage_offset(s): no stage would know its slice.
struct not_a_stage_model_no_stage_offset : stage_model_archetype {
  std::size_t stage_offset(std::size_t) const = delete;
};
/// No input_width(s): no receiver could check a header's width.
struct not_a_stage_model_no_input_width : stage_model_archetype {
  std::size_t input_width(std::size_t) const = delete;
};
/// No activation_bytes(s, rows).
struct not_a_stage_model_no_activation_bytes : stage_model_archetype {
  double activation_bytes(std::size_t, std::size_t) const = delete;
};
/// forward returns a mutable span, not span<const float>.
struct not_a_stage_model_forward_returns_mutable : stage_model_archetype {
  span<float> forward(std::size_t, std::size_t, span<const float>, const float*, std::size_t) {
    return {};
  }
};
/// No backward.
struct not_a_stage_model_no_backward : stage_model_archetype {
  void backward(std::size_t, std::size_t, span<const float>, span<const float>, span<float>,
                span<float>) = delete;
};
/// loss_backward returns nothing (the loss could not be reported).
struct not_a_stage_model_loss_backward_is_void : stage_model_archetype {
  void loss_backward(std::size_t, span<const float>, span<const std::int32_t>, float, span<float>,
                     span<float>) {}
};
/// No release.
struct not_a_stage_model_no_release : stage_model_archetype {
  void release(std::size_t, std::size_t) = delete;
};

static_assert(algorithms::pipeline::stage_model<stage_model_archetype>);
static_assert(!algorithms::pipeline::stage_model<not_a_stage_model_no_stages>);
static_assert(!algorithms::pipeline::stage_model<not_a_stage_model_no_num_params>);
static_assert(!algorithms::pipeline::stage_model<not_a_stage_model_no_stage_offset>);
static_assert(!algorithms::pipeline::stage_model<not_a_stage_model_no_input_width>);
static_assert(!algorithms::pipeline::stage_model<not_a_stage_model_no_activation_bytes>);
static_assert(!algorithms::pipeline::stage_model<not_a_stage_model_forward_returns_mutable>);
static_assert(!algorithms::pipeline::stage_model<not_a_stage_model_no_backward>);
static_assert(!algorithms::pipeline::stage_model<not_a_stage_model_loss_backward_is_void>);
static_assert(!algorithms::pipeline::stage_model<not_a_stage_model_no_release>);

}  // namespace heterograd::testing
