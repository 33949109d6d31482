#pragma once
// The contracts between the runtimes (runtime/sim.hpp, runtime/server.hpp + async_threads.hpp
// over any transport) and the policies they drive, written down as concepts (stdexec style,
// like comm/concepts.hpp: members only, no base class). Positive and negative archetypes live
// in heterograd/testing/runtime_archetypes.hpp.
//
//   arrival                       the finished job an asynchronous policy is handed
//   async_control<C>              the handle an asynchronous policy steers workers with
//   async_policy<P, Result, C>    what runtime::async_runtime calls: version(), on_arrival
//   server_policy<P, T, C>        what the remote server (threads, MPI) calls on top: workers(),
//                                 dim(), params()
//   round_control<C>              the handle a round policy reports outcomes through
//   round_policy<P, Result, C>    what runtime::round_runtime calls: on_round, and batch(w) /
//                                 communication_time(round) when present
//   round_method<P, Result, C>    what sync's run_rounds calls on top: compute, limit_rounds
//   rank_round_method<P, Ex>      what the threads and MPI runtimes call per rank
//                                 (run_worker): run_round(rank_round<Ex>&, rank_state&), the
//                                 one round contract of algorithms/sync/exchange.hpp
//
// A policy's members are templates over the control handle (so that it never names a runtime
// type); a concept is therefore checked against one handle type, the runtime's own in the
// drivers and an archetype in the tests. Optional members (on_start(ctl) of an asynchronous
// policy; ready(t) -> bool of a server policy in virtual-time order) are used when present;
// where a runtime reads an optional member's value, the concept checks its type when present.
// The archetypes of rank_round_method and of its exchanges are in
// heterograd/testing/exchange_archetypes.hpp.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "heterograd/algorithms/sync/exchange.hpp"
#include "heterograd/comm/partial.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/sim/engine.hpp"

namespace heterograd::runtime {

using sim::worker_id;

/// A finished job as an asynchronous policy sees it (every runtime hands over this record).
struct arrival {
  worker_id worker = 0;
  std::uint64_t version = 0;    ///< model version the result was computed at
  std::uint64_t job_index = 0;  ///< the worker's k-th job
  double start = 0;             ///< when the computation started (virtual, or real seconds)
  double time = 0;              ///< when it arrives
};

/// The control handle of the asynchronous runtimes: observe (now, workers, busy, waiting,
/// version_of), steer (restart an idle worker, hold it, release a held one, interrupt a busy
/// one) and report each update's outcome with its staleness (applied, buffered, discarded).
template <class C>
concept async_control = requires(C& c, const C& cc, worker_id w, std::uint64_t staleness) {
  { cc.now() } -> std::convertible_to<double>;
  { cc.workers() } -> std::convertible_to<std::size_t>;
  { cc.busy(w) } -> std::convertible_to<bool>;
  { cc.waiting(w) } -> std::convertible_to<bool>;
  { cc.version_of(w) } -> std::convertible_to<std::uint64_t>;
  c.restart(w);
  c.hold(w);
  c.release(w);
  c.interrupt(w);
  c.applied(w, staleness);
  c.buffered(w, staleness);
  c.discarded(w, staleness);
};

/// A parameter-server policy as runtime::async_runtime drives it: the model version (jobs
/// start at it) and the reaction to an arriving result. Result is what one job produces.
template <class P, class Result, class Ctl>
concept async_policy = async_control<Ctl> &&
                       requires(P& p, const P& cp, Ctl& ctl, const arrival& a, Result& r) {
                         { cp.version() } -> std::convertible_to<std::uint64_t>;
                         p.on_arrival(ctl, a, r);
                       };

/// An asynchronous policy the remote server (threads, MPI) can run: its results are gradients
/// (std::vector<T>), and it says how many workers it has, its model's size and the model a
/// starting job carries. A ready(t) member, when present, answers a bool.
template <class P, class T, class Ctl>
concept server_policy =
    async_policy<P, std::vector<T>, Ctl> &&
    requires(const P& cp) {
      { cp.workers() } -> std::convertible_to<std::size_t>;
      { cp.dim() } -> std::convertible_to<std::size_t>;
      { cp.params() } -> std::convertible_to<span<const T>>;
    } &&
    (!requires(P& p, double t) { p.ready(t); } ||
     requires(P& p, double t) { { p.ready(t) } -> std::convertible_to<bool>; });

/// Membership hooks (docs/elastic.md): a policy that has on_leave(ctl, w) / on_join(ctl, w)
/// is told when worker w leaves (its job in flight is lost: never handed over) or joins (it
/// starts at the current model once the hook returns, unless the hook held or started it).
/// Optional: a runtime calls them only where present, so a policy without them compiles and
/// runs unchanged (on a run without churn nothing is called).
template <class P, class Ctl>
concept has_on_leave = requires(P& p, Ctl& c, worker_id w) { p.on_leave(c, w); };
template <class P, class Ctl>
concept has_on_join = requires(P& p, Ctl& c, worker_id w) { p.on_join(c, w); };

/// The control handle of the round runtime: observe (now, workers, round) and report
/// outcomes.
template <class C>
concept round_control = requires(C& c, const C& cc, worker_id w, std::uint64_t staleness) {
  { cc.now() } -> std::convertible_to<double>;
  { cc.workers() } -> std::convertible_to<std::size_t>;
  { cc.round() } -> std::convertible_to<std::uint64_t>;
  c.applied(w, staleness);
  c.buffered(w, staleness);
  c.discarded(w, staleness);
};

/// A synchronous policy as runtime::round_runtime drives it: on_round at every round's end
/// with every worker's contribution. batch(w) (per-worker batch, which times the jobs) and
/// communication_time(round) (virtual seconds added at the barrier), when present, answer
/// numbers.
template <class P, class Result, class Ctl>
concept round_policy =
    round_control<Ctl> &&
    requires(P& p, Ctl& ctl, std::uint64_t round, std::vector<Result>& contributions) {
      p.on_round(ctl, round, contributions);
    } &&
    (!requires(P& p, worker_id w) { p.batch(w); } ||
     requires(P& p, worker_id w) { { p.batch(w) } -> std::convertible_to<std::size_t>; }) &&
    (!requires(P& p, std::uint64_t r) { p.communication_time(r); } ||
     requires(P& p, std::uint64_t r) {
       { p.communication_time(r) } -> std::convertible_to<double>;
     });

/// A round policy that computes its own contributions and stops itself after a number of
/// rounds: what algorithms/sync's run_rounds drives.
template <class P, class Result, class Ctl>
concept round_method =
    round_policy<P, Result, Ctl> &&
    requires(P& p, worker_id w, std::uint64_t round, std::uint64_t job, Result& out) {
      p.compute(w, round, job, out);
      p.limit_rounds(round);
    };

/// A round method as the threads and MPI runtimes run one rank of it (run_worker over
/// exchange Ex: a transport_exchange, or a transport_partial for a partial method): the
/// exchange it takes (exchange_kind, and Ex models that exchange for its value_type), its
/// workers, the round state a rank starts from (shared_state(): the same on every rank) and
/// one rank's round, run_round(rank_round<Ex>&, rank_state&) -> round_outcome. A partial
/// method also says how its partial allreduce is built (partial_setup(votes)). Optional
/// members, used when present and typed here when present: set_shared(rank_state) (the
/// counting rank's state written back after a run), groups() (each worker's group id: the
/// runtime splits the transport and hands each rank its group's exchange), computed_sum()
/// and applied_sum() (a partial method's audit: every computed gradient applied once).
template <class P, class Ex>
concept rank_round_method =
    requires(P& p, const P& cp, algorithms::sync::rank_round<Ex>& r,
             typename P::rank_state& s) {
      typename P::value_type;
      typename P::exchange_kind;
      { cp.workers() } -> std::convertible_to<std::size_t>;
      { cp.shared_state() } -> std::same_as<typename P::rank_state>;
      { p.run_round(r, s) } -> std::same_as<algorithms::sync::round_outcome>;
    } &&
    ((std::same_as<typename P::exchange_kind, algorithms::sync::collective_exchange_tag> &&
      algorithms::sync::exchange<Ex, typename P::value_type>) ||
     (std::same_as<typename P::exchange_kind, algorithms::sync::partial_exchange_tag> &&
      algorithms::sync::partial_exchange<Ex, typename P::value_type> &&
      requires(const P& cp, bool votes) {
        { cp.partial_setup(votes) } -> std::same_as<algorithms::sync::partial_allreduce_setup>;
      })) &&
    (!requires { &P::set_shared; } ||
     requires(P& p, typename P::rank_state s) { p.set_shared(std::move(s)); }) &&
    (!requires { &P::groups; } ||
     requires(const P& cp) {
       { cp.groups() } -> std::convertible_to<const std::vector<std::size_t>&>;
     }) &&
    (!requires { &P::computed_sum; } ||
     requires(const P& cp) {
       { cp.computed_sum() } -> std::convertible_to<std::vector<double>>;
       { cp.applied_sum() } -> std::convertible_to<std::vector<double>>;
     });

}  // namespace heterograd::runtime
