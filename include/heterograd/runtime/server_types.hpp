#pragma once
// The public types of the remote server and its workers (runtime/server.hpp): the arrival
// order, the options every rank of a run shares, what a worker reports and what the server
// returns.

#include <atomic>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "heterograd/core/clock.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/runtime/membership.hpp"
#include "heterograd/sim/recorder.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace heterograd::runtime {

enum class arrival_order : std::uint8_t { real_time, virtual_time };

/// No worker-time model: jobs take their real time (and virtual_time ordering is unavailable).
struct no_time_model {};

/// What the remote runtimes accept as a model: the simulator's worker-time models, or none.
/// A worker's side of a real run, measured on its own clock (wall seconds): the jobs it
/// computed and pushed, the time spent waiting for and receiving each job (pull), computing,
/// sleeping to its job's model time (paced: o.time_scale > 0) and sending the result (push);
/// with pacing, the jobs whose compute alone took longer than the model's time (the model
/// was violated) and by how much in all.
struct worker_report {
  std::uint64_t jobs = 0;
  double pull_seconds = 0;
  double compute_seconds = 0;
  double paced_seconds = 0;
  double push_seconds = 0;
  std::uint64_t violations = 0;
  double overrun_seconds = 0;
  /// Membership (remote_options::membership): the worker left the run (its compute threw
  /// leave_run); a joiner's check, the FNV-1a of the model it was welcomed with (equal to the
  /// server's, or the join failed) and that model's version. No hash: it did not join, or the
  /// run was over when it did.
  bool left = false;
  std::optional<std::uint64_t> joined_hash;
  std::uint64_t joined_version = 0;
};

template <class M>
concept optional_time_model = std::same_as<M, no_time_model> || sim::worker_time_model<M>;

struct remote_options {
  int server_rank = 0;  ///< the server's rank; workers are the others, in rank order
  int tag_base = 30000;  ///< four tags from here
  seconds timeout{120.0};  ///< every receive's deadline
  arrival_order order = arrival_order::real_time;
  /// Wall seconds a job lasts per unit of its model duration (0: not paced; pacing.hpp).
  double time_scale = 0.0;
  // Stopping rules of the server (whichever comes first).
  std::uint64_t max_updates = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t max_arrivals = std::numeric_limits<std::uint64_t>::max();
  double horizon = std::numeric_limits<double>::infinity();  ///< virtual (or real) seconds
  /// Every job's batch until the policy's set_batch changes a worker's (the simulator's
  /// async_runtime batch argument, default 1 there too): sent with the job, and the batch the
  /// worker-time model is asked at.
  std::size_t batch = 1;
  /// Optional: set by another thread to end a real_time run at its next arrival (that result
  /// is not handed over), as a stopping rule would.
  const std::atomic<bool>* stop = nullptr;
  /// real_time order: the clock's reading when the run starts (a resumed run goes on with
  /// its time, so that the horizon and the policies' clocks continue).
  double start_time = 0;
  /// How long shutdown waits, in all, for the goodbyes of workers still computing when the
  /// run ends (a computation cannot be cut short; the run's results stand either way).
  seconds shutdown_grace{600.0};
  /// Workers that leave and join while the run goes on, and the learned deadlines
  /// (runtime/membership.hpp; docs/elastic.md). Off by default.
  membership_options membership{};
  /// Every job's model copied on the server before it goes out (8 B/param a job), never sent
  /// straight from the parameters. Off: after an arrival the worker takes the model from the
  /// parameters themselves, and the server waits for it to before it applies the next result,
  /// which ties the server's pace to how soon that worker runs; with workers sharing a core
  /// (placement) that is the sharers' queue for the core, and every worker ends at the pace of
  /// the slowest-scheduled (docs/experiments.md, E10). runtime::run sets it with a placement.
  bool copy_jobs = false;

  void validate() const {
    require(tag_base >= 0 && tag_base <= 32767 - 4, "remote_options.tag_base", tag_base,
            "must be in [0, 32763]");
    require(timeout.count() > 0, "remote_options.timeout", timeout.count(), "must be > 0");
    require(std::isfinite(time_scale) && time_scale >= 0, "remote_options.time_scale",
            time_scale, "must be finite and >= 0");
    require(!std::isnan(horizon) && horizon >= 0, "remote_options.horizon", horizon, "must be >= 0");
    require(max_updates > 0, "remote_options.max_updates", max_updates, "must be > 0");
    require(batch > 0, "remote_options.batch", batch, "must be > 0");
    require(std::isfinite(start_time) && start_time >= 0, "remote_options.start_time", start_time,
            "must be finite and >= 0");
    require(shutdown_grace.count() >= 0 && shutdown_grace.count() < 1e300,
            "remote_options.shutdown_grace", shutdown_grace.count(), "must be finite and >= 0");
    membership.deadline.validate();
    membership.require_real_time(order == arrival_order::real_time, "remote_options.membership.elastic");
  }
};

struct remote_summary {
  std::uint64_t arrivals = 0;  ///< results handed to the policy
  std::uint64_t dropped = 0;   ///< results of stopped jobs, never handed over
  double end_time = 0;         ///< virtual (virtual_time) or real seconds
  /// Workers whose goodbye did not come within shutdown_grace (still computing at the end).
  std::uint64_t abandoned = 0;
  /// Messages refused: of another size or element type than the protocol's (nothing of them
  /// was written or handed over), a header of an unknown kind, a worker's refusal of its job.
  std::uint64_t refused = 0;
  /// Per worker: why it was evicted ("" when it was not). A worker whose message is refused
  /// is sent no job again (real_time order; virtual_time order fails the run instead).
  std::vector<std::string> evicted;
  /// Membership (remote_options::membership): results of workers that had left or were
  /// declared gone, refused (never handed over, never applied); jobs in flight forgotten at a
  /// leave; the changes in the server's order; why each refused membership message was
  /// refused (also counted in `refused`).
  std::uint64_t refused_late = 0;
  std::uint64_t lost = 0;
  std::vector<membership_event> membership;
  std::vector<std::string> membership_refusals;
  std::vector<std::uint64_t> jobs_finished;  ///< results handed over, per worker
  /// Per worker: the time it was held (hold() to release(), or to the run's end) and the
  /// jobs it was sent, in the server's clock's units.
  std::vector<double> held;
  std::vector<std::uint64_t> jobs_sent;
  /// The server's update records: outcome counts and staleness histograms, also per worker
  /// (only these tables: the engine's accounting is the simulator's). A summary that is not
  /// the server's (a worker rank's, or one not yet filled) holds one worker and no update.
  sim::recorder log{1};
  /// Each worker's own report (runtime::run_threads fills it, in worker order; under MPI a
  /// worker rank's run_remote returns its report here, alone).
  std::vector<worker_report> workers;
};

}  // namespace heterograd::runtime
