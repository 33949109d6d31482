#pragma once
// The per-rank core of the threads runtime (round_threads.hpp: one thread per worker over the
// inproc transport) and the MPI runtime (round_mpi.hpp: one process per worker over comm::mpi):
//
//     runtime::run_worker(policy, transport, rounds[, options, count]);
//
// runs `rounds` rounds of worker transport.rank() of `policy` (the same object the sim
// runtimes drive: bsp, local_sgd, selsync; eager_sgd takes a partial allreduce instead of
// the transport) with the policy's own per-rank step (the one the simulator runs over its
// sequential exchange, algorithms/sync/exchange.hpp) over the transport: the policy's oracle
// computes the gradient at replica w, and the step synchronises replica w. Each call touches
// only its worker's replica, so one call per thread runs concurrently on one policy object;
// under MPI each process holds a policy and only its own rank's replica moves. `count` says
// whether this call advances the policy's shared counters (rounds(), SelSync's decisions(),
// eager's fired rounds): one worker per process should (rank 0 of the threads runtime; every
// MPI rank).
//
// A run continues from the policy's state. What the ranks share (local SGD's round index,
// anchor and outer state) each rank holds as its own copy, `policy.shared_state()`, taken
// before any worker starts (the threads runtime takes it once) and written back by the
// counting rank at the end.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>

#include "heterograd/algorithms/sync/eager.hpp"
#include "heterograd/algorithms/sync/exchange.hpp"
#include "heterograd/algorithms/sync/local_sgd.hpp"
#include "heterograd/algorithms/sync/workers.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::runtime {

namespace detail {
template <class Transport>
std::size_t worker_of(const Transport& t, std::size_t workers) {
  require(t.size() >= 0 && static_cast<std::size_t>(t.size()) == workers, "transport.size",
          t.size(), "must equal the policy's number of workers");
  return static_cast<std::size_t>(t.rank());
}
/// worker_options' pacing of worker w's next round: begin now, end at its first collective.
inline void begin_round(const algorithms::sync::worker_options& o, std::size_t w,
                        algorithms::sync::compute_end_hook& hook) {
  if (o.begin_round) o.begin_round(w);
  if (o.end_compute) hook.pending = [&o, w] { o.end_compute(w); };
}
}  // namespace detail

/// A round policy the threads and MPI runtimes run per rank (bsp, selsync, local_sgd).
template <class Policy>
concept per_rank_round_policy = requires(const Policy& p) {
  typename Policy::rank_state;
  { p.shared_state() } -> std::same_as<typename Policy::rank_state>;
};

// --- BSP and SelSync ------------------------------------------------------------------------
template <per_rank_round_policy Policy, class Transport>
void run_worker(Policy& p, const Transport& t, std::uint64_t rounds,
                const typename Policy::rank_state&, algorithms::sync::worker_options o = {},
                bool count = true) {
  const std::size_t w = detail::worker_of(t, p.workers());
  algorithms::sync::compute_end_hook hook;
  algorithms::sync::transport_exchange<Transport> ex(t, o, &hook);
  for (std::uint64_t r = 0; r < rounds; ++r) {
    detail::begin_round(o, w, hook);
    p.run_round(ex, w, count);
    hook.fire();
  }
}

// --- local SGD: this rank's copy of the round state, its group's transport ------------------
template <class T, class O, class G, class Ou, class Tr, class Transport>
void run_worker(algorithms::sync::local_sgd<T, O, G, Ou, Tr>& p, const Transport& t,
                std::uint64_t rounds,
                const typename algorithms::sync::local_sgd<T, O, G, Ou, Tr>::rank_state& start,
                algorithms::sync::worker_options o = {}, bool count = true) {
  const std::size_t w = detail::worker_of(t, p.workers());
  using exchange = algorithms::sync::transport_exchange<Transport>;
  algorithms::sync::compute_end_hook hook;
  exchange world(t, o, &hook);
  const auto& groups = p.schedule().config().groups;
  std::optional<Transport> sub;
  std::optional<exchange> group;
  if (!groups.empty()) {
    sub.emplace(t.split(static_cast<int>(groups[w]), static_cast<int>(w),
                        comm::split_options{o.timeout}));
    group.emplace(*sub, o, &hook);
  }
  auto s = start;
  for (std::uint64_t r = 0; r < rounds; ++r) {
    detail::begin_round(o, w, hook);
    p.run_round(world, group ? &*group : nullptr, w, s, count);
    hook.fire();
  }
  if (count) p.set_shared(std::move(s));
}

/// run_worker from the policy's current state (MPI: every process calls it with its rank).
template <per_rank_round_policy Policy, class Transport>
void run_worker(Policy& p, const Transport& t, std::uint64_t rounds,
                algorithms::sync::worker_options o = {}, bool count = true) {
  run_worker(p, t, rounds, p.shared_state(), o, count);
}

// --- eager-SGD --------------------------------------------------------------------------------
/// Runs worker partial.rank() until the policy's configured rounds are over (eager.rounds; the
/// last round is a flush) or, with o.stop, until the ranks' votes end it (eager_sgd::run_rank).
/// `partial` is a partial allreduce over the workers built with p.config().partial_policy()
/// and partial_options(), over eager_elements(p, o) elements (round_threads.hpp and
/// round_mpi.hpp build it).
template <class T, class O, class G, class Partial>
void run_worker(algorithms::sync::eager_sgd<T, O, G>& p, Partial partial, bool count = true,
                const algorithms::sync::worker_options& o = {}) {
  const std::size_t w = detail::worker_of(partial, p.workers());
  p.run_rank(partial, w, count, o);
}

/// What eager-SGD's partial allreduce reduces: the parameters, and the ranks' stop votes when
/// they vote (worker_options.stop).
template <class T, class O, class G>
std::size_t eager_elements(const algorithms::sync::eager_sgd<T, O, G>& p,
                           const algorithms::sync::worker_options& o) {
  return p.params(0).size() + (o.stop ? 1 : 0);
}

}  // namespace heterograd::runtime
