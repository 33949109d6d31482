#pragma once
// nn::mlp<float> split at layer bounds into pipeline stages (a stage_model): stage s holds
// layers [bounds[s], bounds[s + 1]) and its slice of the flat buffer is exactly those layers'
// parameters (nn::mlp lays layers out in order). Forward and backward are nn::mlp's own range
// passes (mlp::forward / mlp::backward over [first, last)), so a stage does the same floating
// point operations as the unsplit network does for those layers: with one micro-batch the
// split network's gradient is the unsplit one's, bitwise (tested).
//
// Each (stage, slot) has its own nn::mlp workspace (the activations of its layers) and its own
// copy of the forward's input, which the first layer's weight gradient reads at backward time.
// The model is not thread-safe across calls on the same stage; different stages may run on
// different threads (each touches only its own workspaces), as the threads runtime does.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "heterograd/algorithms/decoupled/chain.hpp"
#include "heterograd/algorithms/pipeline/concepts.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/nn/loss.hpp"
#include "heterograd/nn/mlp.hpp"

namespace heterograd::algorithms::pipeline {

class mlp_stages {
 public:
  /// `bounds` empty: decoupled::even_split(layers, stages). `slots`: micro-batches a stage may
  /// hold at once (1F1B needs min(S - s, M), GPipe M).
  mlp_stages(const nn::mlp<float>& net, decoupled::module_bounds bounds, std::size_t stages,
             std::size_t slots)
      : net_(net), bounds_(std::move(bounds)) {
    if (bounds_.empty()) bounds_ = decoupled::even_split(net.num_layers(), stages);
    decoupled::validate_bounds(bounds_, net.num_layers());
    require_positive("mlp_stages.slots", slots);
    slots_.assign(this->stages(),
                  std::vector<slot_state>(slots, slot_state{net, {}, {}, 0, false}));
    scratch_.assign(net.num_params(), 0.0f);
  }

  std::size_t stages() const { return bounds_.size() - 1; }
  std::size_t slots() const { return slots_.front().size(); }
  std::size_t num_params() const { return net_.num_params(); }
  const nn::mlp<float>& net() const { return net_; }
  const decoupled::module_bounds& bounds() const { return bounds_; }
  std::size_t stage_offset(std::size_t s) const { return net_.layer_offset(bounds_.at(s)); }
  std::size_t input_width(std::size_t s) const { return net_.sizes().at(bounds_.at(s)); }
  /// The slot's input copy and every layer output of the stage, in bytes.
  double activation_bytes(std::size_t s, std::size_t rows) const {
    std::size_t floats = input_width(s);
    for (std::size_t l = bounds_.at(s); l < bounds_.at(s + 1); ++l) floats += net_.sizes()[l + 1];
    return static_cast<double>(rows * floats * sizeof(float));
  }

  span<const float> forward(std::size_t s, std::size_t slot, span<const float> p, const float* x,
                            std::size_t rows) {
    slot_state& st = at(s, slot, "mlp_stages.forward.slot");
    require(!st.busy, "mlp_stages.forward.slot", slot,
            "holds a forward not yet backpropagated or released");
    require_positive("mlp_stages.forward.rows", rows);
    st.input.assign(x, x + rows * input_width(s));
    st.output = st.ws.forward(p, st.input.data(), rows, bounds_[s], bounds_[s + 1]);
    st.rows = rows;
    st.busy = true;
    return st.output;
  }

  void backward(std::size_t s, std::size_t slot, span<const float> p, span<const float> dy,
                span<float> g, span<float> dx) {
    slot_state& st = busy_slot(s, slot, "mlp_stages.backward.slot");
    require_same_size("mlp_stages.backward.dy", dy.size(), "rows x output width",
                      st.rows * input_width(s + 1));
    backward_into(s, st, p, dy.data(), g, dx);
  }

  float loss_backward(std::size_t slot, span<const float> p, span<const std::int32_t> y,
                      float scale, span<float> g, span<float> dx) {
    const std::size_t s = stages() - 1, K = net_.classes();
    slot_state& st = busy_slot(s, slot, "mlp_stages.loss_backward.slot");
    require_same_size("mlp_stages.loss_backward.labels", y.size(), "the forward's rows", st.rows);
    dlogits_.resize(st.rows * K);
    const auto eps = static_cast<float>(net_.config().label_smoothing);
    float total = 0;
    for (std::size_t r = 0; r < st.rows; ++r) {
      require(y[r] >= 0 && static_cast<std::size_t>(y[r]) < K, "mlp_stages.loss_backward.labels",
              y[r], "must be in [0, classes)");
      std::size_t am = 0;
      total += nn::softmax_cross_entropy_row(st.output.data() + r * K, K, y[r], eps, scale,
                                             dlogits_.data() + r * K, am);
    }
    backward_into(s, st, p, dlogits_.data(), g, dx);
    return total * scale;
  }

  void release(std::size_t s, std::size_t slot) {
    at(s, slot, "mlp_stages.release.slot").busy = false;
  }

 private:
  struct slot_state {
    nn::mlp<float> ws;
    std::vector<float> input;
    span<const float> output;
    std::size_t rows;
    bool busy;
  };
  slot_state& at(std::size_t s, std::size_t slot, const char* key) {
    require(s < stages(), "mlp_stages.stage", s,
            "must be < stages (" + std::to_string(stages()) + ")");
    require(slot < slots(), key, slot, "must be < slots (" + std::to_string(slots()) + ")");
    return slots_[s][slot];
  }
  slot_state& busy_slot(std::size_t s, std::size_t slot, const char* key) {
    slot_state& st = at(s, slot, key);
    require(st.busy, key, slot, "holds no forward of stage " + std::to_string(s));
    return st;
  }
  // mlp::backward writes the range's gradient into scratch_; it is added to g (the pipeline
  // accumulates micro-batches), and the slot is freed.
  void backward_into(std::size_t s, slot_state& st, span<const float> p, const float* dy,
                     span<float> g, span<float> dx) {
    require_same_size("mlp_stages.grads", g.size(), "num_params", num_params());
    require(
        dx.empty() || dx.size() == st.rows * input_width(s), "mlp_stages.backward.dx", dx.size(),
        "must be empty or rows x input width (" + std::to_string(st.rows * input_width(s)) + ")");
    st.ws.backward(p, dy, bounds_[s], bounds_[s + 1], scratch_, dx.empty() ? nullptr : dx.data());
    for (std::size_t j = stage_offset(s); j < stage_offset(s + 1); ++j) g[j] += scratch_[j];
    st.busy = false;
  }

  nn::mlp<float> net_;
  decoupled::module_bounds bounds_;
  std::vector<std::vector<slot_state>> slots_;  // [stage][slot]
  std::vector<float> scratch_, dlogits_;
};

static_assert(stage_model<mlp_stages>);

}  // namespace heterograd::algorithms::pipeline
