#pragma once
// Pipeline schedules for pipelined backpropagation over S stages and M micro-batches:
//   gpipe   all M forwards, then all M backwards (peak M activations per stage);
//   1f1b    DAPPLE's early-backward schedule (#3): stage s (0-based) runs min(S - s, M) warm-up
//           forwards, then alternates one backward and one forward, then drains the backwards,
//           so stage s holds at most min(S - s, M) activations instead of M.
// A schedule is a list of operations per stage; execute_schedule() checks it against the
// dependencies (F(m, s) after F(m, s-1); B(m, s) after F(m, s) and B(m, s+1)) and measures the
// makespan and the activation peak under given per-stage times.

#include <algorithm>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "heterograd/core/error.hpp"

namespace heterograd::algorithms::decoupled {

enum class pass { forward, backward };

struct pipeline_op {
  pass kind;
  std::size_t micro_batch;
  friend bool operator==(const pipeline_op&, const pipeline_op&) = default;
};

/// schedule[s] = the operations of stage s, in order.
using pipeline_schedule = std::vector<std::vector<pipeline_op>>;

inline void validate_pipeline_shape(std::size_t stages, std::size_t micro_batches) {
  require_positive("pipeline.stages", stages);
  require_positive("pipeline.micro_batches", micro_batches);
}

inline pipeline_schedule schedule_gpipe(std::size_t stages, std::size_t micro_batches) {
  validate_pipeline_shape(stages, micro_batches);
  pipeline_schedule sch(stages);
  for (auto& ops : sch) {
    for (std::size_t m = 0; m < micro_batches; ++m) ops.push_back({pass::forward, m});
    for (std::size_t m = 0; m < micro_batches; ++m) ops.push_back({pass::backward, m});
  }
  return sch;
}

inline pipeline_schedule schedule_1f1b(std::size_t stages, std::size_t micro_batches) {
  validate_pipeline_shape(stages, micro_batches);
  pipeline_schedule sch(stages);
  for (std::size_t s = 0; s < stages; ++s) {
    auto& ops = sch[s];
    const std::size_t warmup = std::min(stages - s, micro_batches);
    std::size_t f = 0, b = 0;
    for (; f < warmup; ++f) ops.push_back({pass::forward, f});
    while (b < micro_batches) {
      ops.push_back({pass::backward, b++});
      if (f < micro_batches) ops.push_back({pass::forward, f++});
    }
  }
  return sch;
}

struct schedule_stats {
  double makespan = 0;
  std::vector<std::size_t> peak_activations;  // per stage: most forwards awaiting backward
  /// per stage and micro-batch: backwards the stage ran between F(m) and B(m), i.e. how many
  /// weight updates an asynchronous pipeline applies in between (SpecTrain's s).
  std::vector<std::vector<std::size_t>> updates_between;
  /// Every op with its stage, in order of start time (ties: lower stage first): the order in
  /// which a real pipeline with these times would run them.
  struct timed_op {
    double start;
    std::size_t stage;
    pipeline_op op;
  };
  std::vector<timed_op> order;
};

/// Runs the schedule with forward/backward times per stage (list scheduling: each stage runs
/// its ops in order, each op as soon as its dependencies are done). Throws std::invalid_argument
/// if the schedule misses or repeats an op, or deadlocks.
inline schedule_stats execute_schedule(const pipeline_schedule& sch,
                                       const std::vector<double>& forward_time,
                                       const std::vector<double>& backward_time,
                                       std::size_t micro_batches) {
  const std::size_t S = sch.size();
  validate_pipeline_shape(S, micro_batches);
  require_same_size("execute_schedule.forward_time", forward_time.size(), "stages", S);
  require_same_size("execute_schedule.backward_time", backward_time.size(), "stages", S);
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> fdone(S, std::vector<double>(micro_batches, inf)),
      bdone = fdone;
  for (std::size_t s = 0; s < S; ++s) {
    require_same_size("schedule[" + std::to_string(s) + "].size", sch[s].size(),
                      "2 * micro_batches", 2 * micro_batches);
    for (const auto& op : sch[s])
      require(op.micro_batch < micro_batches, "schedule.micro_batch", op.micro_batch,
              "must be < micro_batches");
  }
  std::vector<std::size_t> next(S, 0);
  std::vector<double> stage_free(S, 0.0);
  schedule_stats st;
  st.peak_activations.assign(S, 0);
  st.updates_between.assign(S, std::vector<std::size_t>(micro_batches, 0));
  std::vector<std::size_t> live(S, 0), backwards_done(S, 0);
  std::vector<std::vector<std::size_t>> backwards_at_forward(S,
                                                             std::vector<std::size_t>(micro_batches));
  std::size_t remaining = 2 * S * micro_batches;
  while (remaining > 0) {
    bool progressed = false;
    for (std::size_t s = 0; s < S; ++s) {
      while (next[s] < sch[s].size()) {
        const auto op = sch[s][next[s]];
        const std::size_t m = op.micro_batch;
        double ready = stage_free[s];
        if (op.kind == pass::forward) {
          if (fdone[s][m] != inf) throw std::invalid_argument("heterograd: schedule repeats a forward");
          if (s > 0) {
            if (fdone[s - 1][m] == inf) break;
            ready = std::max(ready, fdone[s - 1][m]);
          }
          st.order.push_back({ready, s, op});
          fdone[s][m] = stage_free[s] = ready + forward_time[s];
          backwards_at_forward[s][m] = backwards_done[s];
          st.peak_activations[s] = std::max(st.peak_activations[s], ++live[s]);
        } else {
          if (bdone[s][m] != inf) throw std::invalid_argument("heterograd: schedule repeats a backward");
          if (fdone[s][m] == inf) break;
          ready = std::max(ready, fdone[s][m]);
          if (s + 1 < S) {
            if (bdone[s + 1][m] == inf) break;
            ready = std::max(ready, bdone[s + 1][m]);
          }
          st.order.push_back({ready, s, op});
          bdone[s][m] = stage_free[s] = ready + backward_time[s];
          st.updates_between[s][m] = backwards_done[s] - backwards_at_forward[s][m];
          ++backwards_done[s];
          --live[s];
        }
        ++next[s];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) throw std::invalid_argument("heterograd: pipeline schedule deadlocks");
  }
  for (double t : stage_free) st.makespan = std::max(st.makespan, t);
  std::stable_sort(st.order.begin(), st.order.end(), [](const auto& a, const auto& b) {
    return a.start < b.start || (a.start == b.start && a.stage < b.stage);
  });
  return st;
}

}  // namespace heterograd::algorithms::decoupled
