#pragma once
// What runtime::run reports (runtime/run.hpp).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "heterograd/comm/partial.hpp"
#include "heterograd/runtime/evaluation.hpp"
#include "heterograd/runtime/options.hpp"
#include "heterograd/runtime/server.hpp"
#include "heterograd/sim/recorder.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace heterograd::runtime {

/// One evaluation: where on the grid, and the hook's values.
struct evaluation_record {
  std::uint64_t index = 0;
  double time = 0;
  double wall_seconds = 0;
  std::uint64_t updates = 0;
  double epochs = 0;
  std::vector<double> values;
};

/// What a round method's between_rounds sees at a round boundary (runtime/run.hpp's
/// rounds_of): the round that ended and each worker's measured busy time so far (compute and
/// paced sleep, model units; under a process group every rank's, shared by the agreement).
struct round_measurements {
  std::uint64_t round = 0;
  std::vector<double> busy;
};

/// A partial round method's run on the real clock (eager-SGD; detail/real_partial.hpp): every
/// fired round's report as rank 0 took it (who was fresh, whose late part was folded in and
/// with which lag; the same on every rank), each worker's contributions that came after their
/// round fired, whether every rank's replica is bitwise the same at the end, and the
/// conservation error: max_i |sum of the rounds' results - sum of the computed gradients|_i
/// (the results times n when averaging) over max_i |sum of the computed gradients|_i.
struct partial_rounds_report {
  std::vector<comm::round_report> rounds;
  std::vector<std::uint64_t> late_per_worker;
  bool replicas_agree = true;
  double conservation_error = 0;
};

struct run_report {
  bool evaluating = true;  ///< false on an MPI worker rank (it holds its own seconds only)
  std::vector<evaluation_record> evaluations;
  /// The server's update records: outcomes and staleness histograms, per worker too (a resumed
  /// run's include those before its cut).
  sim::recorder updates{1};
  /// Per worker: measured wall seconds (pull, compute, paced sleep, push), violations of the
  /// worker-time model; results handed over, jobs sent, seconds held (model units), mean
  /// staleness of its results.
  std::vector<worker_report> workers;
  std::vector<std::uint64_t> results, jobs_sent;
  /// Round methods: gradients computed per worker (a round of local steps has several), the
  /// rounds published (the updates), and the round each rank of a resumed process group went
  /// on from.
  std::vector<std::uint64_t> gradients;
  std::uint64_t rounds = 0;
  std::vector<std::uint64_t> resumed_rounds_per_rank;
  std::vector<double> held, mean_staleness;
  /// Every result handed over: its job's start and duration (model units; a trace).
  std::vector<sim::trace_row> jobs;
  std::uint64_t arrivals = 0, updates_done = 0;
  double epochs = 0, end_time = 0, wall_seconds = 0, evaluation_seconds = 0;
  std::uint64_t dropped = 0, abandoned = 0, refused = 0;
  std::vector<std::string> evicted;
  /// Membership (run_options::membership; remote_summary's): results of workers that had
  /// left or were declared gone, refused (never applied); jobs in flight forgotten at a leave;
  /// the server's changes in its order; why each refused membership message was refused.
  /// On where::threads, each joiner's report (its joined hash, its jobs) in the order they
  /// ended; `workers` holds each slot's first thread's.
  std::uint64_t refused_late = 0, lost = 0;
  std::vector<membership_event> membership;
  std::vector<std::string> membership_refusals;
  std::vector<worker_report> joiners;
  std::vector<cut_record> cuts;
  std::optional<cut_record> resumed_from;
  target_times target;  ///< when run_options::target is set
  partial_rounds_report partial;  ///< eager-SGD on the real clock
  std::vector<float> params;      ///< the final model
};

}  // namespace heterograd::runtime
