#pragma once
// How a stage updates its slice (issue 47): the synchronous step at the end of a step, or the
// asynchronous rules after each backward, shared by simulate_pipeline and run_pipeline_over so
// that both run the same floating point operations.
//
// asynchronous (PipeDream: Narayanan et al., PipeDream: Generalized Pipeline Parallelism for DNN
// Training, SOSP 2019): after the backward of micro-batch m, stage s steps its slice with m's
// gradient alone (the loss of m weighted by 1 / rows_m: the micro-batch's mean). The stage
// runs v_s(m) other backwards between F(m) and B(m) (versions_until_backward), so B(m) meets
// weights v_s(m) updates newer than F(m) did: under 1F1B min(m, K - 1), K = min(S - s, N) for
// a stream of N micro-batches, i.e. S - s - 1 in the steady state (PipeDream's staleness).
//   stash_weights: F(m) keeps a copy of the slice it used and B(m) uses it (PipeDream's weight
//   stashing): the gradient is that of the weights the activations came from. One copy per
//   micro-batch in flight: at most min(S - s, N) under 1F1B (peak_stashes, tested).
//   spectrain (Chen, Yang, Cheng, arXiv 1809.02839): F(m) uses the prediction
//   W_hat = W + v_s(m) d of the weights B(m) will meet, d = gamma d + (1 - gamma) (W_after -
//   W_before) the smoothed weight change of the stage's updates, and B(m) the current weights.
//   For plain SGD, W_after - W_before = -lr g, so d = -lr v with v the paper's smoothed gradient
//   and W_hat = W - s lr v, the paper's formula (equal in exact arithmetic); for momentum or Adam
//   the smoothed change is the step actually taken. This is decoupled::pipelined_backprop's rule
//   (equal bitwise, tested).
//   measure_staleness: each backward adds ||W_F - W_B||^2 (the weights F(m) found against
//   those B(m) meets, before its update) and, with SpecTrain, ||W_hat - W_B||^2 to the stage's
//   staleness_report, as pipelined_backprop does (one more slice copy per micro-batch).

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/algorithms/decoupled/pipelined_backprop.hpp"
#include "heterograd/algorithms/decoupled/schedule.hpp"
#include "heterograd/algorithms/pipeline/config.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::algorithms::pipeline::detail {

/// For each micro-batch m of a stage's op list: the backwards the stage runs between F(m) and
/// B(m), i.e. the updates its slice receives before B(m) under asynchronous updates.
inline std::vector<std::size_t> versions_until_backward(
    const std::vector<decoupled::pipeline_op>& ops, std::size_t micro_batches) {
  std::vector<std::size_t> at_forward(micro_batches, 0), out(micro_batches, 0);
  std::size_t backwards = 0;
  for (const auto& op : ops) {
    require(op.micro_batch < micro_batches, "pipeline.schedule.micro_batch", op.micro_batch,
            "must be < micro_batches (" + std::to_string(micro_batches) + ")");
    if (op.kind == decoupled::pass::forward) {
      at_forward[op.micro_batch] = backwards;
    } else {
      out[op.micro_batch] = backwards - at_forward[op.micro_batch];
      ++backwards;
    }
  }
  return out;
}

/// The loss of a micro-batch as the step reports it: synchronous losses are already weighted
/// by 1 / B; an asynchronous micro-batch's mean loss is weighted by rows / B.
inline float step_loss_term(bool async, float loss, std::size_t rows, std::size_t batch_rows) {
  return async ? loss * static_cast<float>(rows) / static_cast<float>(batch_rows) : loss;
}
/// The weight of each row's loss in a micro-batch's gradient: 1 / B or, asynchronous, 1 / rows.
inline float loss_scale(bool async, std::size_t rows, std::size_t batch_rows) {
  return 1.0f / static_cast<float>(async ? rows : batch_rows);
}

/// Stage s's optimizer, stash and SpecTrain state over the slice [first, end) of the flat
/// buffer; `slots` = the model's slots of the stage (one stash per slot).
template <class Opt>
class stage_updater {
 public:
  stage_updater(Opt opt, const pipeline_config& cfg, std::size_t first, std::size_t end,
                std::size_t num_params, std::size_t slots)
      : opt_(std::move(opt)),
        async_(cfg.update == pipeline_update::asynchronous),
        stash_(cfg.stash_weights),
        spectrain_(cfg.spectrain),
        measure_(cfg.measure_staleness),
        gamma_(cfg.spectrain_gamma),
        first_(first),
        end_(end) {
    if (stash_ || spectrain_) view_.assign(num_params, 0.0f);
    if (stash_) stashes_.assign(slots, {});
    if (spectrain_) velocity_.assign(end - first, 0.0f);
  }

  bool asynchronous() const { return async_; }

  /// The buffer F(m) reads, m in `slot`, its backward `versions` updates ahead. Stashing: the
  /// live slice is copied to the slot's stash. SpecTrain: the prediction, in a private buffer.
  span<const float> forward_weights(span<const float> params, std::size_t slot,
                                    std::size_t versions) {
    if (measure_) keep(at_forward_, slot, params);
    if (stash_) {
      if (slot >= stashes_.size()) stashes_.resize(slot + 1);  // GPipe streams: N in flight
      stashes_[slot].assign(params.begin() + first_, params.begin() + end_);
      peak_ = std::max(peak_, ++live_);
    }
    if (!spectrain_) return params;
    const float k = static_cast<float>(versions);
    for (std::size_t j = first_; j < end_; ++j) view_[j] = params[j] + k * velocity_[j - first_];
    if (measure_) keep(predicted_, slot, span<const float>(view_.data(), view_.size()));
    return span<const float>(view_.data(), view_.size());
  }

  /// The buffer B(m) reads: the slot's stash when stashing, else the live weights.
  span<const float> backward_weights(span<const float> params, std::size_t slot) {
    if (measure_) record_staleness(params, slot);
    if (!stash_) return params;
    std::vector<float>& w = stashes_.at(slot);
    std::copy(w.begin(), w.end(), view_.begin() + first_);
    std::vector<float>().swap(w);
    --live_;
    return span<const float>(view_.data(), view_.size());
  }

  /// Asynchronous: steps the slice with g's slice (one backward's gradient), smooths the
  /// change for SpecTrain and zeroes g's slice. Synchronous: nothing (the sum goes on).
  void after_backward(span<float> params, span<float> g) {
    if (async_) apply(params, g);
  }
  /// Synchronous: one step with the step's summed gradient, g's slice zeroed. Async: nothing.
  void end_step(span<float> params, span<float> g) {
    if (!async_) apply(params, g);
  }
  /// Most stashed slice copies held at once (0 without stashing).
  std::size_t peak_stashes() const { return peak_; }
  /// measure_staleness: sums over this stage's backwards (pipelined_backprop's measure).
  const decoupled::staleness_report& staleness() const { return staleness_; }

 private:
  void keep(std::vector<std::vector<float>>& to, std::size_t slot, span<const float> w) {
    if (slot >= to.size()) to.resize(slot + 1);
    to[slot].assign(w.begin() + first_, w.begin() + end_);
  }
  // ||W_F - W_B||^2 and, with SpecTrain, ||W_hat - W_B||^2, W_B = the live slice at B(m).
  void record_staleness(span<const float> params, std::size_t slot) {
    auto dist = [&](const std::vector<float>& w) {
      double e = 0;
      for (std::size_t j = 0; j < w.size(); ++j) {
        const double d = static_cast<double>(w[j]) - params[first_ + j];
        e += d * d;
      }
      return e;
    };
    staleness_.stale_error += dist(at_forward_.at(slot));
    if (spectrain_) staleness_.predicted_error += dist(predicted_.at(slot));
    ++staleness_.samples;
  }

  void apply(span<float> params, span<float> g) {
    const span<float> w = params.subspan(first_, end_ - first_);
    const span<float> gs = g.subspan(first_, end_ - first_);
    if (spectrain_) before_.assign(w.begin(), w.end());
    opt_.step(w, span<const float>(gs.data(), gs.size()));
    if (spectrain_)
      for (std::size_t j = 0; j < w.size(); ++j)
        velocity_[j] = gamma_ * velocity_[j] + (1.0f - gamma_) * (w[j] - before_[j]);
    std::fill(gs.begin(), gs.end(), 0.0f);
  }

  Opt opt_;
  bool async_, stash_, spectrain_, measure_;
  float gamma_;
  std::size_t first_, end_;
  std::vector<float> view_, velocity_, before_;
  std::vector<std::vector<float>> stashes_;                 // [slot]: the slice F used
  std::vector<std::vector<float>> at_forward_, predicted_;  // [slot]: measure_staleness
  decoupled::staleness_report staleness_;
  std::size_t live_ = 0, peak_ = 0;
};

}  // namespace heterograd::algorithms::pipeline::detail
