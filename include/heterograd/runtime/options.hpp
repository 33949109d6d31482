#pragma once
// The options of a run (one struct for every runtime) and what a run reports.
//
// The first three members are the simulator's (runtime/sim.hpp's run): a virtual-time horizon,
// an event budget and an evaluation interval. The rest are read by the entry point of
// runtime/run.hpp: the other stopping rules, the real clock's pacing, the evaluation hook,
// checkpoints and the timeout.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "heterograd/core/archive.hpp"
#include "heterograd/core/clock.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/hash.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/runtime/evaluation.hpp"
#include "heterograd/runtime/live.hpp"
#include "heterograd/runtime/membership.hpp"
#include "heterograd/sim/engine.hpp"

namespace heterograd::runtime {

/// Where a run is when the evaluation hook sees it: a copy of the model (taken under the
/// model's lock; the workers go on while the hook runs) and the run's counters.
struct snapshot {
  std::uint64_t index = 0;   ///< the evaluation's number (0 at the start)
  double time = 0;           ///< model time (virtual seconds, or wall seconds / real_scale)
  double wall_seconds = 0;   ///< since the run's start on the wall clock (0 in the simulator)
  std::uint64_t updates = 0;  ///< server updates (rounds for round methods)
  std::uint64_t events = 0;   ///< results handed to the policy
  double epochs = 0;          ///< passes over the training set
  span<const float> params;
};

/// A checkpoint's cut (or the cut a resumed run went on from): the model's version, a hash of
/// its parameters (FNV-1a of their bytes) and its model time.
struct cut_record {
  std::uint64_t version = 0;
  std::uint64_t params_hash = 0;
  double time = 0;
};

/// FNV-1a 64 of a buffer's bytes (a cut's identity: the same model hashes the same;
/// core/hash.hpp).
using heterograd::fnv1a;

/// Checkpoints at consistent cuts. After every `every`-th evaluation (not the last) the run is
/// held at its next cut, its state is written into an archive after the client's (`save`: its
/// identity first, so that `load` can refuse another run's checkpoint before anything is read), and
/// `write` gets the payload (seal it with core/archive.hpp's seal_checkpoint and store it). A
/// run given `resume` (an opened checkpoint's payload) loads it (`load` reads the client's
/// part) and goes on from that cut (write also gets the cut: the model's version, its hash
/// and time); `seek(w, jobs, drawn)` moves worker w's sample stream to
/// where it was at the cut (jobs sent, and the sum of their batches).
struct checkpoint_options {
  std::uint64_t every = 0;
  std::function<void(const std::vector<std::byte>& payload, const cut_record& cut)> write;
  std::optional<std::vector<std::byte>> resume;
  std::function<void(archive_writer&)> save;
  std::function<void(archive_reader&)> load;
  std::function<void(std::size_t worker, std::uint64_t jobs, std::uint64_t drawn)> seek;
  /// Round methods under a process group (where::mpi): this rank's own part of the client's
  /// state (its worker's sample stream), saved on every rank at the cut, gathered with the
  /// rank's part of the method and handed back to it at a resume. Rank 0's is in `save`.
  std::function<void(archive_writer&)> save_rank;
  std::function<void(archive_reader&)> load_rank;
};

/// A run that stopped at run_options::halt_after (a test hook: as if killed after that
/// evaluation, its checkpoint written).
struct halted {};

struct run_options {
  /// Stop when the next event lies beyond this model time (the simulator's clock then reads it).
  double horizon = sim::never;
  /// Stop after this many delivered events (the simulator).
  std::uint64_t max_events = std::numeric_limits<std::uint64_t>::max();
  /// Evaluate at start, start + interval, ... (0 = never in the simulator; at the start and the
  /// end in runtime::run). An evaluation at time T sees every event with time <= T and none after.
  double eval_interval = 0.0;

  // ---- runtime::run (runtime/run.hpp) ----
  /// Stop after this many model updates, or this many passes over the training set.
  std::uint64_t max_updates = std::numeric_limits<std::uint64_t>::max();
  double max_epochs = std::numeric_limits<double>::infinity();
  /// Wall seconds a model time unit lasts; > 0 paces every job to the worker-time model's
  /// duration (runtime/pacing.hpp), 0: jobs take their real time and a model unit is a second.
  double real_scale = 0.0;
  /// Every job's batch (a policy's set_batch changes a worker's).
  std::size_t batch = 1;
  /// Samples of the training set (the epochs rule and column), and the samples a gradient of
  /// batch b draws (none: b).
  std::uint64_t train_samples = 0;
  std::function<std::size_t(std::size_t batch)> samples_per_gradient;
  /// Called on a snapshot at every evaluation (rank 0 under MPI); its values are the report's.
  std::function<std::vector<double>(const snapshot&)> evaluate;
  /// A value one of evaluate's metrics should reach: the report's times to it (first, and
  /// sustained for target.window model units).
  std::optional<target_rule> target;
  checkpoint_options checkpoint;
  /// Test hook: stop as if killed right after this evaluation (0: never).
  std::uint64_t halt_after = 0;
  /// Every receive and hold of the real clock.
  seconds timeout{real_clock_timeout_s};
  /// Called first on every thread the runtime starts (the server's and each worker's): a
  /// framework's per-thread setup (one OpenMP thread each, say).
  std::function<void()> thread_init;
  /// A server run's membership on the real clock (runtime/membership.hpp; docs/elastic.md):
  /// workers that leave (their compute throws runtime::leave_run) and join (where::threads'
  /// joins) while the run goes on, and the learned deadlines. Copied into the server's
  /// remote_options; its rules (absent slots against the workers, the real_time order) are
  /// checked where the run knows them. Off by default.
  membership_options membership{};

  void validate() const {
    require(!std::isnan(horizon) && horizon >= 0, "run_options.horizon", horizon,
            "must be >= 0 (a negative time)");
    require(std::isfinite(eval_interval) && eval_interval >= 0, "run_options.eval_interval",
            eval_interval, "must be finite and >= 0 (a negative time)");
    require(max_updates > 0, "run_options.max_updates", max_updates, "must be > 0");
    require(!std::isnan(max_epochs) && max_epochs > 0, "run_options.max_epochs", max_epochs, "must be > 0");
    require(std::isfinite(real_scale) && real_scale >= 0, "run_options.real_scale", real_scale,
            "must be finite and >= 0");
    require(batch > 0, "run_options.batch", batch, "must be > 0");
    require(timeout.count() > 0, "run_options.timeout", timeout.count(), "must be > 0");
    if (target) target->validate();
    membership.deadline.validate();
    require(std::isinf(max_epochs) || train_samples > 0, "run_options.train_samples", train_samples,
            "must be > 0 with an epochs rule (run_options.max_epochs)");
  }
  /// The stopping rules as the evaluation grid reads them.
  horizon_rule rule() const { return {horizon, max_updates, max_epochs}; }
  /// Wall seconds of one model time unit.
  double unit() const { return real_scale > 0 ? real_scale : 1.0; }
  std::size_t samples_of(std::size_t b) const { return samples_per_gradient ? samples_per_gradient(b) : b; }
};

}  // namespace heterograd::runtime
