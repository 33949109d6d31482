#pragma once
// One entry point for running a method, in the spirit of Thrust's dispatch on an execution
// policy: the method says what runs, `where` says on what, the options say how.
//
//     auto report = runtime::run(runtime::served{policy, compute}, runtime::where::threads{}, options);
//     auto report = runtime::run(bsp, runtime::where::threads{}, options, time_model);
//
//   method   served{policy, compute}: an asynchronous server policy (runtime/concepts.hpp's
//            server_policy) and the gradient its workers compute, compute(worker, version,
//            job, batch, span<const float> params, std::vector<float>& grads);
//            a round method (per_rank_round_policy: bsp, selsync, local_sgd) itself, or
//            rounds_of{method, params[, between_rounds, save, load]} (the model evaluated,
//            and what acts between rounds: OmniLearn's controller, biased local SGD's redraws);
//            a partial round method (partial_round_method: eager-SGD) itself
//   where    where::threads{placement}: one thread per worker in this process (inproc
//            transport; worker w pinned to placement[w] when given), and the server's;
//            where::mpi{communicator}: a server's rank 0 serves and rank k runs worker k - 1;
//            a round method's rank k is worker k
//   options  run_options: the clock (real, paced to a worker-time model with real_scale),
//            the horizon, the evaluation hook and its interval, checkpoints, the timeout
//
// On the real clock the method runs on threads of its own and the evaluation loop (the calling
// thread, rank 0 under MPI) evaluates a copy of the model at each grid time while the workers
// go on (runtime/live.hpp, detail/real_loop.hpp). A server takes results as they arrive;
// checkpoints hold it between two arrivals, with every worker's stream position. A round
// method runs its rounds back to back, the ranks agreeing before each on whether to go on, and
// publishes its model after each round; checkpoints cut at a round boundary, with every rank's
// part of the state (detail/real_rounds.hpp). A resumed run goes on from its cut. The report
// carries the evaluations, the update records, each worker's measured seconds, the jobs and
// the cuts. Eager-SGD's workers run their rounds independently over a partial allreduce,
// ending by rank 0's vote with a flush round (detail/real_partial.hpp): the report adds each
// round's fresh and late contributions and an audit (replicas agree, every gradient applied);
// its checkpoints on the real clock are not built yet (refused by name). Local learning on
// this entry point comes next (docs/architecture.md).

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/comm/inproc.hpp"
#include "heterograd/core/archive.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/runtime/concepts.hpp"
#include "heterograd/runtime/detail/real_partial.hpp"
#include "heterograd/runtime/detail/real_rounds.hpp"
#include "heterograd/runtime/detail/real_server.hpp"
#include "heterograd/runtime/evaluation.hpp"
#include "heterograd/runtime/live.hpp"
#include "heterograd/runtime/options.hpp"
#include "heterograd/runtime/report.hpp"
#include "heterograd/runtime/placement.hpp"
#include "heterograd/runtime/server.hpp"
#include "heterograd/sim/recorder.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace heterograd::runtime {

/// Where a method runs.
namespace where {
/// The server and one thread per worker in this process (inproc transport). placement, when
/// not empty, pins worker w to placement.workers[w] (runtime/placement.hpp); errors name
/// `placement_key`[w].
/// A server run with run_options::membership.elastic: `joins` restarts slots on new threads.
struct threads {
  placement_config placement{};
  std::string placement_key = "where::threads.placement";
  /// Slot `worker` takes part again by a join on a new thread (worker_client's joining
  /// constructor over inproc's world::rejoin) once the model has `after_updates` updates and
  /// the slot is free: absent from the start (membership.absent) or its worker left (its
  /// compute threw leave_run). A join due when the run ends is not made.
  /// With `at_time` > 0, also not before model time at_time (wall seconds / real_scale; wall
  /// seconds when not paced), the simulator's time of a churn join (sim/churn.hpp).
  struct join_at {
    std::uint32_t worker = 0;
    std::uint64_t after_updates = 0;
    double at_time = 0;
  };
  std::vector<join_at> joins{};
  /// Slot `worker` leaves: runtime::leave_run is thrown in place of its compute for the first
  /// job whose index is at least `after_jobs` (a slot's jobs are numbered from 0 over the run,
  /// across its memberships) or that starts at model time `at_time` or later (the units of
  /// join_at::at_time). That job is lost, as the job in flight at a simulated leave is. A
  /// slot's leaves apply in their order, each once; one for an absent slot waits for its join.
  struct leave_at {
    std::uint32_t worker = 0;
    std::uint64_t after_jobs = std::numeric_limits<std::uint64_t>::max();
    double at_time = std::numeric_limits<double>::infinity();
  };
  std::vector<leave_at> leaves{};
};
/// One process per rank over `communicator` (any transport with tagged messages, allreduce
/// and broadcast: comm::mpi). A server: rank 0 serves, rank k is worker k - 1, pinned to
/// placement.workers[k - 1] when given. A round method: rank k is worker k (placement.workers[k]).
template <class Transport>
struct mpi {
  const Transport& communicator;
  placement_config placement{};
  std::string placement_key = "where::mpi.placement";
};
template <class Transport>
mpi(const Transport&) -> mpi<Transport>;
template <class Transport>
mpi(const Transport&, placement_config) -> mpi<Transport>;
template <class Transport, class Key>
mpi(const Transport&, placement_config, Key) -> mpi<Transport>;
}  // namespace where

namespace detail {
/// where::threads' joins and leaves: each names a slot of the run, asks for membership.elastic,
/// and gives times that are numbers >= 0 (a join's finite; a leave needs a job count or a time).
inline void check_membership_changes(const where::threads& w, const run_options& o, std::size_t workers) {
  auto slot = [&](const std::string& key, std::uint32_t worker) {
    require(o.membership.elastic, key, worker, "needs run_options.membership.elastic = true");
    require(worker < workers, key, worker, "must be < the policy's workers (" + std::to_string(workers) + ")");
  };
  for (std::size_t i = 0; i < w.joins.size(); ++i) {
    const std::string key = "where::threads.joins[" + std::to_string(i) + "]";
    slot(key + ".worker", w.joins[i].worker);
    require(std::isfinite(w.joins[i].at_time) && w.joins[i].at_time >= 0, key + ".at_time", w.joins[i].at_time,
            "must be finite and >= 0");
  }
  for (std::size_t i = 0; i < w.leaves.size(); ++i) {
    const std::string key = "where::threads.leaves[" + std::to_string(i) + "]";
    const auto& l = w.leaves[i];
    slot(key + ".worker", l.worker);
    require(!std::isnan(l.at_time) && l.at_time >= 0, key + ".at_time", l.at_time, "must be >= 0");
    require(std::isfinite(l.at_time) || l.after_jobs != std::numeric_limits<std::uint64_t>::max(), key, "{}",
            "needs after_jobs or at_time (else it never applies)");
  }
}

/// Round methods and eager-SGD have no membership: joins and leaves are refused by key.
inline void refuse_membership_changes(const where::threads& w, const char* what) {
  const std::string rule = std::string("must be empty for ") + what +
                           " (joins and leaves change a server's workers; docs/elastic.md)";
  require(w.joins.empty(), "where::threads.joins", w.joins.size(), rule);
  require(w.leaves.empty(), "where::threads.leaves", w.leaves.size(), rule);
}
}  // namespace detail

/// An asynchronous server policy and its workers' gradient.
template <class Policy, class Compute>
struct served {
  Policy& policy;
  Compute compute;
};
template <class Policy, class Compute>
served(Policy&, Compute) -> served<Policy, Compute>;

/// Runs a server policy on real workers on the real clock (see the top of this file). Returns
/// the report on the evaluating rank (rank 0; every rank on threads); a worker rank's report
/// holds its own worker's seconds.
template <class Policy, class Compute, optional_time_model Model = no_time_model>
run_report run(served<Policy, Compute> m, const where::threads& w, const run_options& o, const Model& model = {}) {
  o.validate();
  detail::real_server<Policy, Compute, Model> r(m.policy, m.compute, o, model, w.placement, w.placement_key);
  detail::check_membership_changes(w, o, m.policy.workers());
  return r.run_threads(w.joins, w.leaves);
}

template <class Policy, class Compute, class Transport, optional_time_model Model = no_time_model>
run_report run(served<Policy, Compute> m, const where::mpi<Transport>& w, const run_options& o, const Model& model = {}) {
  o.validate();
  require(w.communicator.size() >= 2 && static_cast<std::size_t>(w.communicator.size()) == m.policy.workers() + 1,
          "where::mpi.communicator.size", w.communicator.size(),
          "must be the policy's workers + 1 (rank 0 serves, rank k runs worker k - 1)");
  require(!o.membership.elastic, "run_options.membership.elastic", "true",
          "needs where::threads: processes that leave and join need a transport that survives them "
          "(docs/elastic.md; MPI without ULFM ends the job)");
  detail::real_server<Policy, Compute, Model> r(m.policy, m.compute, o, model, w.placement, w.placement_key);
  return r.run_ranks(w.communicator);
}

/// Runs a round method on real workers on the real clock (see the top of this file): `model`
/// paces the rounds when run_options::real_scale > 0. Returns the report on the evaluating rank
/// (every rank on threads); a worker rank's report holds the workers' seconds.
template <class Method, class Params, optional_time_model Model = no_time_model>
run_report run(const rounds_of<Method, Params>& m, const where::threads& w, const run_options& o,
               const Model& model = {}) {
  o.validate();
  detail::refuse_membership_changes(w, "a round method");
  detail::real_rounds<Method, Params, Model> r(m, o, model, w.placement, w.placement_key);
  return r.run_threads();
}

template <class Method, class Params, class Transport, optional_time_model Model = no_time_model>
run_report run(const rounds_of<Method, Params>& m, const where::mpi<Transport>& w, const run_options& o,
               const Model& model = {}) {
  o.validate();
  require(w.communicator.size() >= 1 && static_cast<std::size_t>(w.communicator.size()) == m.method.workers(),
          "where::mpi.communicator.size", w.communicator.size(),
          "must be the method's workers (rank k runs worker k)");
  detail::real_rounds<Method, Params, Model> r(m, o, model, w.placement, w.placement_key);
  return r.run_ranks(w.communicator);
}

/// Runs a partial round method (eager-SGD: runtime::partial_round_method) on real workers on
/// the real clock (detail/real_partial.hpp): each worker's rounds over the transport's partial
/// allreduce, ended by rank 0's vote at the horizon with a flush round; evaluations see worker
/// 0's replica after its last round. `model` paces the rounds when run_options::real_scale > 0.
/// The report's `partial` holds every round's fresh and late contributions, each worker's late
/// ones, whether the replicas agree and the conservation error. Checkpoints are refused.
template <partial_round_method Method, optional_time_model Model = no_time_model>
run_report run(Method& method, const where::threads& w, const run_options& o, const Model& model = {}) {
  o.validate();
  detail::refuse_membership_changes(w, "eager-SGD");
  detail::real_partial<Method, Model> r(method, o, model, w.placement, w.placement_key);
  return r.run_threads();
}

/// The same over a process group: rank k runs worker k over the communicator's partial
/// allreduce (make_partial_allreduce, found by argument-dependent lookup: include
/// comm/mpi_partial.hpp for comm::mpi, which needs MPI_THREAD_MULTIPLE). Returns the report on
/// rank 0; a worker rank's report holds the workers' seconds.
template <partial_round_method Method, class Transport, optional_time_model Model = no_time_model>
run_report run(Method& method, const where::mpi<Transport>& w, const run_options& o, const Model& model = {}) {
  o.validate();
  require(w.communicator.size() >= 1 && static_cast<std::size_t>(w.communicator.size()) == method.workers(),
          "where::mpi.communicator.size", w.communicator.size(), "must be the method's workers (rank k runs worker k)");
  detail::real_partial<Method, Model> r(method, o, model, w.placement, w.placement_key);
  return r.run_ranks(w.communicator);
}

namespace detail {
/// The model a round method's evaluations see: local SGD's anchor, else worker 0's replica.
template <class Method>
auto evaluated_model(const Method& m) {
  if constexpr (requires { m.anchor(); })
    return [&m] { return span<const typename std::decay_t<decltype(m.anchor())>::value_type>(m.anchor()); };
  else
    return [&m] { return m.params(0); };
}
}  // namespace detail

/// A round method as it is: its evaluated model (detail::evaluated_model), nothing between rounds.
template <per_rank_round_policy Method, class Where, optional_time_model Model = no_time_model>
run_report run(Method& method, const Where& w, const run_options& o, const Model& model = {}) {
  return run(rounds_of{method, detail::evaluated_model(method)}, w, o, model);
}

}  // namespace heterograd::runtime
