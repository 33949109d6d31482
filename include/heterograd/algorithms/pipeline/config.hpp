#pragma once
// The pipeline's configuration (a described struct: errors, the schema and the docs' table
// come from description()), the batches it consumes, and what a run reports.
//
// A step takes one batch of B rows from the batch source and splits it into M micro-batches
// of consecutive rows, the first B mod M of them one row longer (GPipe's micro-batching, #3):
// B = 7, M = 3 gives rows 3, 2, 2.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "heterograd/algorithms/decoupled/pipelined_backprop.hpp"
#include "heterograd/algorithms/decoupled/schedule.hpp"
#include "heterograd/balance/pipeline_schedule.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::algorithms::pipeline {

/// GPipe: all M forwards, then all M backwards (M activations per stage). 1F1B: DAPPLE's early
/// backward (min(S - s, M) warm-up forwards, then one forward one backward). One enumeration
/// and one table of names with the planner (balance/pipeline_schedule.hpp).
using balance::pipeline_schedule_kind;
using balance::pipeline_schedule_kinds;

using decoupled::pipeline_update;
inline constexpr choice<pipeline_update> pipeline_updates[] = {
    {"synchronous", pipeline_update::synchronous}, {"asynchronous", pipeline_update::asynchronous}};

struct pipeline_config {
  pipeline_schedule_kind schedule = pipeline_schedule_kind::one_f_one_b;
  std::size_t micro_batches = 4;
  pipeline_update update = pipeline_update::synchronous;
  bool stash_weights = false;
  bool spectrain = false;
  float spectrain_gamma = 0.9f;
  std::size_t drain_every = 0;
  bool measure_staleness = false;

  static constexpr auto description() {
    return describe(
        "pipeline",
        describe_field("schedule", &pipeline_config::schedule,
                       "order of each stage's forwards and backwards: gpipe or 1f1b",
                       pipeline_schedule_kinds),
        describe_field("micro_batches", &pipeline_config::micro_batches,
                       "micro-batches M a step's batch is split into (each batch needs >= M rows)",
                       with_note(at_least(1), "(M = 0 would split a batch into nothing)")),
        describe_field("update", &pipeline_config::update,
                       "synchronous: the M micro-batches' gradients summed, one optimizer step "
                       "per stage per step; asynchronous (PipeDream): each stage steps its slice "
                       "after every backward with that micro-batch's mean gradient",
                       pipeline_updates),
        describe_field("stash_weights", &pipeline_config::stash_weights,
                       "asynchronous only: a backward uses the weights its forward used "
                       "(PipeDream's weight stashing; one slice copy per micro-batch in flight)"),
        describe_field("spectrain", &pipeline_config::spectrain,
                       "asynchronous only, not with stash_weights: a forward uses SpecTrain's "
                       "prediction of the weights its backward will meet"),
        describe_field("spectrain_gamma", &pipeline_config::spectrain_gamma,
                       "SpecTrain's smoothing of each stage's weight change", closed_open(0, 1)),
        describe_field("drain_every", &pipeline_config::drain_every,
                       "asynchronous: steps whose micro-batches form one continuous 1F1B stream "
                       "before the pipeline drains (0: the whole run; synchronous steps always "
                       "drain)"),
        describe_field("measure_staleness", &pipeline_config::measure_staleness,
                       "asynchronous only: each stage sums the squared distance of its forward's "
                       "weights (and SpecTrain's prediction) to its backward's into the report"));
  }
  void validate() const {
    validate_fields(*this);
    const bool async = update == pipeline_update::asynchronous;
    require(async || !stash_weights, "pipeline.stash_weights", stash_weights,
            "needs pipeline.update = asynchronous (a synchronous step has no stale weights)");
    require(async || !spectrain, "pipeline.spectrain", spectrain,
            "needs pipeline.update = asynchronous (a synchronous step has no stale weights)");
    require(async || !measure_staleness, "pipeline.measure_staleness", measure_staleness,
            "needs pipeline.update = asynchronous (a synchronous step has no stale weights)");
    require(!(spectrain && stash_weights), "pipeline.spectrain", spectrain,
            "excludes pipeline.stash_weights (SpecTrain's backward uses the weights it "
            "predicted, the current ones: there is nothing to stash)");
  }
};

/// The op list of every stage for S stages and n micro-batches under the configuration's
/// schedule (n = 0: cfg.micro_batches).
inline decoupled::pipeline_schedule schedule_for(const pipeline_config& cfg, std::size_t stages,
                                                 std::size_t n = 0) {
  if (n == 0) n = cfg.micro_batches;
  return cfg.schedule == pipeline_schedule_kind::gpipe ? decoupled::schedule_gpipe(stages, n)
                                                       : decoupled::schedule_1f1b(stages, n);
}

/// The steps [first, first + count) that run as one stream of count x M micro-batches before
/// the pipeline drains: one step when synchronous, drain_every (0: all) when asynchronous.
struct segment {
  std::size_t first, count;
};
inline std::vector<segment> segments_of(const pipeline_config& cfg, std::size_t steps) {
  const std::size_t per = cfg.update == pipeline_update::synchronous ? 1
                          : cfg.drain_every == 0 ? std::max<std::size_t>(steps, 1)
                                                 : cfg.drain_every;
  std::vector<segment> out;
  for (std::size_t t = 0; t < steps; t += per) out.push_back({t, std::min(per, steps - t)});
  return out;
}

/// A batch (or micro-batch) on the host: rows = y.size() inputs of the first stage's width.
struct batch_data {
  std::vector<float> x;
  std::vector<std::int32_t> y;
  std::size_t rows() const { return y.size(); }
};
/// The batch of step t.
using batch_source = std::function<batch_data(std::size_t step)>;

/// Splits a batch of `width`-wide rows into m micro-batches as above.
inline std::vector<batch_data> split_micro_batches(const batch_data& b, std::size_t width,
                                                   std::size_t m) {
  const std::size_t B = b.rows();
  require_positive("pipeline.micro_batches", m);
  require(B >= m, "pipeline.batch.rows", B,
          "must be >= pipeline.micro_batches (" + std::to_string(m) + ")");
  require_same_size("pipeline.batch.x", b.x.size(), "rows x input width", B * width);
  std::vector<batch_data> out(m);
  std::size_t r0 = 0;
  for (std::size_t k = 0; k < m; ++k) {
    const std::size_t rows = B / m + (k < B % m ? 1 : 0);
    out[k].x.assign(b.x.begin() + static_cast<std::ptrdiff_t>(r0 * width),
                    b.x.begin() + static_cast<std::ptrdiff_t>((r0 + rows) * width));
    out[k].y.assign(b.y.begin() + static_cast<std::ptrdiff_t>(r0),
                    b.y.begin() + static_cast<std::ptrdiff_t>(r0 + rows));
    r0 += rows;
  }
  return out;
}

/// Bytes of one message header on the wire (four int64: step, micro-batch, rows, width or B).
inline constexpr std::uint64_t header_bytes = 4 * sizeof(std::int64_t);

/// One stage's telemetry. run_pipeline_over measures the times on the real clock (seconds of
/// the stage's rank); simulate_pipeline leaves them 0 (one thread has no stage time) and fills
/// the exact counts, which a run over a transport equals.
struct stage_telemetry {
  double busy_s = 0;       // in the model's forward, backward and loss, and the slice's updates
  double idle_s = 0;       // waiting on receives (headers, payloads, labels)
  double send_wait_s = 0;  // waiting on posted sends to complete (their buffers' reuse, drains)
  double wall_s = 0;       // the stage's whole run (>= the three above together)
  std::uint64_t bytes_sent = 0;     // headers (4 x 8 bytes) and payloads this stage sent
  std::uint64_t micro_batches = 0;  // backwards run (= forwards: every run drains)
};

/// The schedule's bubble with equal stages: in a segment of N micro-batches every stage idles
/// S - 1 of the N + S - 1 slots of one forward and one backward (GPipe and 1F1B alike), so over
/// the segments it is sum (S - 1) / sum (N + S - 1); synchronous: (S - 1) / (M + S - 1).
inline double theoretical_bubble(const pipeline_config& cfg, std::size_t stages,
                                 std::size_t steps) {
  double idle = 0, all = 0;
  for (const auto seg : segments_of(cfg, steps)) {
    idle += static_cast<double>(stages - 1);
    all += static_cast<double>(seg.count * cfg.micro_batches + stages - 1);
  }
  return all > 0 ? idle / all : 0.0;
}
/// The measured bubble of the pipeline: sum idle / sum (busy + idle) over the stages (0 when
/// nothing ran; exactly 0 with one stage, which receives nothing).
inline double measured_bubble(const std::vector<stage_telemetry>& stages) {
  double idle = 0, all = 0;
  for (const auto& t : stages) {
    idle += t.idle_s;
    all += t.busy_s + t.idle_s;
  }
  return all > 0 ? idle / all : 0.0;
}

/// What a run reports. Over a transport each rank fills its own stage's entry of peak_in_flight
/// and peak_stashes, and only the last stage's rank has the losses; every rank has every
/// stage's telemetry (gathered at the end of the run).
struct pipeline_report {
  std::vector<float> losses;                // per step: mean loss over the step's batch
  std::vector<std::size_t> peak_in_flight;  // per stage: most forwards awaiting their backward
  std::vector<std::size_t> peak_stashes;    // per stage: most stashed slice copies (stash_weights)
  std::vector<decoupled::staleness_report> staleness;  // per stage: measure_staleness's sums
  std::vector<std::size_t> peak_pending_sends;  // per stage (transport runs): most messages whose
                                                // buffers were kept for an unfinished send
  std::vector<stage_telemetry> stages;  // per stage: times, bytes and micro-batches
  double theoretical_bubble = 0;  // the schedule's, equal stages (theoretical_bubble above)
  double measured_bubble = 0;     // transport: measured_bubble(stages); simulated: the idle
                                  // fraction of the simulated schedule (forward 1, backward 2)
};

namespace detail {
/// The model slots of one stage: a forward takes the lowest free one, its backward gives it
/// back; `peak` is the most taken at once. O(slots) per call, whatever the stream's length.
class slot_pool {
 public:
  explicit slot_pool(std::size_t micro_batches) : of_(micro_batches, none) {}
  std::size_t take(std::size_t m) {
    const std::size_t s = static_cast<std::size_t>(
        std::find(used_.begin(), used_.end(), false) - used_.begin());
    if (s == used_.size()) used_.push_back(false);
    used_[s] = true;
    of_.at(m) = s;
    peak_ = std::max(peak_, ++live_);
    return s;
  }
  std::size_t give(std::size_t m) {
    const std::size_t s = of_.at(m);
    of_[m] = none;
    used_.at(s) = false;
    --live_;
    return s;
  }
  std::size_t peak() const { return peak_; }

 private:
  static constexpr std::size_t none = ~std::size_t{0};
  std::vector<std::size_t> of_;  // micro-batch -> slot
  std::vector<bool> used_;       // slot -> taken
  std::size_t live_ = 0, peak_ = 0;
};
}  // namespace detail

}  // namespace heterograd::algorithms::pipeline
