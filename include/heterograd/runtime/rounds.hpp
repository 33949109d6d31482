#pragma once
// Driving a simulated policy's replica with the per-worker helpers over a real transport: the
// common core of the threads runtime (round_threads.hpp: one thread per worker over the
// inproc transport) and the MPI runtime (round_mpi.hpp: one process per worker over comm::mpi).
//
//     runtime::run_worker(policy, transport, rounds[, options, count]);
//
// runs `rounds` rounds of worker transport.rank() of `policy` (the same object the sim
// runtimes drive: bsp, local_sgd, selsync; eager_sgd takes a partial allreduce instead of
// the transport) on that worker's replica: the policy's oracle computes the gradient at the
// replica's parameters, and the matching helper of algorithms/sync/workers.hpp (configured
// from the policy: optimizer, batches, configuration, transform, outer optimizer) steps and
// synchronises over the transport. Each call touches only its worker's replica, so one call
// per thread runs concurrently on one policy object (round_threads.hpp); under MPI each
// process holds a policy and only its own rank's replica moves. `count` says whether this
// call advances the policy's shared counters (rounds(), SelSync's decisions(), eager's fired
// rounds): one worker per process should (rank 0 of the threads runtime; every MPI rank).
//
// A run continues from the policy's state (replicas, optimizer states, round index, anchor
// and outer state, SelSync triggers); the shared start values come from a snapshot taken
// before any worker starts (start_of(policy)), which the threads runtime takes once.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "heterograd/algorithms/sync/bsp.hpp"
#include "heterograd/algorithms/sync/common.hpp"
#include "heterograd/algorithms/sync/eager.hpp"
#include "heterograd/algorithms/sync/local_sgd.hpp"
#include "heterograd/algorithms/sync/selsync.hpp"
#include "heterograd/algorithms/sync/workers.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::runtime {

namespace detail {
template <class Transport>
std::size_t worker_of(const Transport& t, std::size_t workers) {
  require(t.size() >= 0 && static_cast<std::size_t>(t.size()) == workers, "transport.size",
          t.size(), "must equal the policy's number of workers");
  return static_cast<std::size_t>(t.rank());
}
}  // namespace detail

/// What a policy's shared state is when a run starts (taken before any worker starts).
struct no_start {};
template <class T, class OuterState>
struct local_sgd_start {
  std::uint64_t round = 0;
  std::vector<T> anchor;
  OuterState outer;
};

template <class T, class O, class G, class Tr>
no_start start_of(const algorithms::sync::bsp<T, O, G, Tr>&) {
  return {};
}
template <class T, class O, class G, class Tr>
no_start start_of(const algorithms::sync::selsync<T, O, G, Tr>&) {
  return {};
}
template <class T, class O, class G>
no_start start_of(const algorithms::sync::eager_sgd<T, O, G>&) {
  return {};
}
template <class T, class O, class G, class Ou, class Tr>
auto start_of(const algorithms::sync::local_sgd<T, O, G, Ou, Tr>& p) {
  using os = typename algorithms::sync::local_sgd<T, O, G, Ou, Tr>::outer_state;
  return local_sgd_start<T, os>{p.rounds(), p.anchor(), p.outer_optimizer_state()};
}

// --- BSP ------------------------------------------------------------------------------------
template <class T, class O, class G, class Tr, class Transport>
void run_worker(algorithms::sync::bsp<T, O, G, Tr>& p, Transport t, std::uint64_t rounds,
                const no_start&, algorithms::sync::worker_options o = {}, bool count = true) {
  const std::size_t w = detail::worker_of(t, p.workers());
  algorithms::sync::bsp_worker<T, O, Transport, Tr> h(t, p.optimizer(), p.replica_params(w),
                                                      p.batches(), p.config(), p.transform(), o);
  h.optimizer_state() = p.replica_state(w);
  for (std::uint64_t r = 0; r < rounds; ++r) {
    const algorithms::sync::round_stats s{1, p.compute_gradient(w)};
    h.step(p.replica_params(w), p.replica_gradient(w));
    p.note_round(w, s, count);
  }
  p.replica_state(w) = h.optimizer_state();
}

// --- local SGD ------------------------------------------------------------------------------
template <class T, class O, class G, class Ou, class Tr, class Transport, class Start>
void run_worker(algorithms::sync::local_sgd<T, O, G, Ou, Tr>& p, Transport t, std::uint64_t rounds,
                const Start& start, algorithms::sync::worker_options o = {}, bool count = true) {
  const std::size_t w = detail::worker_of(t, p.workers());
  algorithms::sync::local_sgd_worker<T, O, Transport, Ou, Tr> h(
      t, p.optimizer(), p.replica_params(w), p.batches(), p.schedule().config(),
      p.outer_optimizer(), p.transform(), o);
  h.optimizer_state() = p.replica_state(w);
  h.resume(start.round, start.anchor, start.outer);
  for (std::uint64_t r = 0; r < rounds; ++r) {
    const std::size_t steps = h.steps_this_round();
    double loss = 0;
    if (steps == 0) h.skip_round(p.replica_params(w));
    for (std::size_t s = 0; s < steps; ++s) {
      loss += p.compute_gradient(w);
      h.step(p.replica_params(w), span<const T>(p.replica_gradient(w)));
    }
    p.note_round(w, {steps, steps ? loss / static_cast<double>(steps) : 0.0}, count);
  }
  p.replica_state(w) = h.optimizer_state();
  if (count) p.set_shared(h.anchor(), h.outer_optimizer_state());
}

// --- SelSync --------------------------------------------------------------------------------
template <class T, class O, class G, class Tr, class Transport>
void run_worker(algorithms::sync::selsync<T, O, G, Tr>& p, Transport t, std::uint64_t steps,
                const no_start&, algorithms::sync::worker_options o = {}, bool count = true) {
  const std::size_t w = detail::worker_of(t, p.workers());
  algorithms::sync::selsync_worker<T, O, Transport, Tr> h(
      t, p.optimizer(), p.replica_params(w), p.batches(), p.config(), p.transform(), o);
  h.optimizer_state() = p.replica_state(w);
  h.resume(p.replica_trigger(w));
  for (std::uint64_t k = 0; k < steps; ++k) {
    const algorithms::sync::round_stats s{1, p.compute_gradient(w)};
    const bool synced = h.step(p.replica_params(w), p.replica_gradient(w));
    p.note_step(w, s, synced, count);
  }
  p.replica_state(w) = h.optimizer_state();
  p.replica_trigger(w) = h.trigger();
}

// --- eager-SGD --------------------------------------------------------------------------------
/// Runs worker partial.rank() until the policy's configured rounds are over (eager.rounds,
/// which must be > 0; the last round is a flush). `partial` is a partial allreduce over the
/// workers with count = the parameter size, built with p.config().partial_policy() and
/// partial_options() (round_threads.hpp and round_mpi.hpp build it).
template <class T, class O, class G, class Partial>
void run_worker(algorithms::sync::eager_sgd<T, O, G>& p, Partial partial, const no_start&,
                bool count = true) {
  require(p.config().rounds > 0, "eager.rounds", p.config().rounds,
          "must be > 0 on threads and MPI (the run ends with a flush round)");
  const std::size_t w = detail::worker_of(partial, p.workers());
  algorithms::sync::eager_worker<T, O, Partial> h(std::move(partial), p.optimizer(),
                                                  p.replica_params(w), p.config());
  h.optimizer_state() = p.replica_state(w);
  while (!h.finished()) {
    p.compute_gradient(w);
    const std::uint64_t round = h.round();
    h.step(p.replica_params(w), p.replica_gradient(w));
    const auto& rep = h.last_report();
    const bool fresh = std::find(rep.fresh.begin(), rep.fresh.end(), static_cast<int>(w)) !=
                       rep.fresh.end();
    p.note_round(w, round, span<const T>(p.replica_gradient(w)), fresh, rep.fresh.size(), count);
  }
  p.replica_state(w) = h.optimizer_state();
}

/// run_worker from the policy's current state (MPI: every process calls it with its rank).
template <class Policy, class Transport>
void run_worker(Policy& p, Transport t, std::uint64_t rounds,
                algorithms::sync::worker_options o = {}, bool count = true) {
  const auto start = start_of(p);
  run_worker(p, std::move(t), rounds, start, o, count);
}

}  // namespace heterograd::runtime
