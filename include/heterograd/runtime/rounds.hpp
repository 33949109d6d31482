#pragma once
// The per-rank core of the threads runtime (round_threads.hpp: one thread per worker over the
// inproc transport) and the MPI runtime (round_mpi.hpp: one process per worker over comm::mpi):
//
//     runtime::run_worker(method, transport, rounds[, options, count]);   // bsp, selsync, local_sgd
//     runtime::run_worker(method, transport[, options, count]);           // eager_sgd: ends itself
//
// runs worker transport.rank() of `method` (the same object the sim runtimes drive) through
// the one round contract of algorithms/sync/exchange.hpp: each round is
// method.run_round(rank_round<Ex>&, rank_state&), over the transport as an exchange
// (transport_exchange) or, for a partial method (exchange_kind partial_exchange_tag), over
// the transport's partial allreduce (made by make_partial_allreduce<T>, found by
// argument-dependent lookup, as method.partial_setup(votes) says). The method's oracle
// computes the gradient at replica w, and the round synchronises replica w. Each call touches
// only its worker's replica, so one call per thread runs concurrently on one method object;
// under MPI each process holds a method and only its own rank's replica moves. `count` says
// whether this call advances the method's shared counters (rounds(), SelSync's decisions(),
// eager's fired rounds): one worker per process should (rank 0 of the threads runtime; every
// MPI rank). Nothing here names an algorithm: a method's optional members (groups(),
// set_shared(rank_state)) are used when present (runtime::rank_round_method, concepts.hpp).
//
// A run continues from the method's state. What the ranks share (local SGD's round index,
// anchor and outer state) each rank holds as its own copy, `method.shared_state()`, taken
// before any worker starts (the threads runtime takes it once) and written back by the
// counting rank at the end (set_shared).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <utility>

#include "heterograd/algorithms/sync/exchange.hpp"
#include "heterograd/algorithms/sync/workers.hpp"
// Nothing here names them any more; kept for one release for code that got eager_sgd and
// local_sgd through this header (the named overloads' parameter types).
#include "heterograd/algorithms/sync/eager.hpp"
#include "heterograd/algorithms/sync/local_sgd.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/runtime/concepts.hpp"

namespace heterograd::runtime {

namespace detail {
template <class Transport>
std::size_t worker_of(const Transport& t, std::size_t workers) {
  require(t.size() >= 0 && static_cast<std::size_t>(t.size()) == workers, "transport.size",
          t.size(), "must equal the policy's number of workers");
  return static_cast<std::size_t>(t.rank());
}

/// Rank w's group exchange, when the method has groups (groups(): each worker's group id):
/// the transport split by group id (a collective over the transport), as an exchange whose
/// first collective fires the same compute_end_hook as the world's.
template <class Method, class Transport, class Exchange>
void split_groups(const Method& p, const Transport& t, std::size_t w,
                  const algorithms::sync::worker_options& o, algorithms::sync::compute_end_hook& hook,
                  std::optional<Transport>& sub, std::optional<Exchange>& group) {
  if constexpr (requires { p.groups(); }) {
    const auto& groups = p.groups();
    if (groups.empty()) return;
    if constexpr (algorithms::sync::has_split_v<Transport>) {
      sub.emplace(t.split(static_cast<int>(groups[w]), static_cast<int>(w),
                          comm::split_options{o.timeout}));
      group.emplace(*sub, o, &hook);
    } else {
      throw std::invalid_argument(
          "run_worker: the method's groups (hierarchical rounds) need a transport with split; "
          "this transport has none");
    }
  }
}
}  // namespace detail

/// A round method the runtimes run for a given number of rounds: its rounds take a collective
/// exchange (bsp, selsync, local_sgd).
template <class Policy>
concept per_rank_round_policy = requires(const Policy& p) {
  typename Policy::rank_state;
  { p.shared_state() } -> std::same_as<typename Policy::rank_state>;
} && std::same_as<typename Policy::exchange_kind, algorithms::sync::collective_exchange_tag>;

/// A round method that ends itself, over a partial allreduce (eager_sgd: after its configured
/// rounds or by the ranks' vote, with a flush round).
template <class Policy>
concept partial_round_method = requires(const Policy& p, bool votes) {
  typename Policy::rank_state;
  p.partial_setup(votes);
} && std::same_as<typename Policy::exchange_kind, algorithms::sync::partial_exchange_tag>;

// --- methods over a collective exchange: `rounds` rounds ---------------------------------------
template <per_rank_round_policy Policy, class Transport>
  requires rank_round_method<Policy, algorithms::sync::transport_exchange<Transport>>
void run_worker(Policy& p, const Transport& t, std::uint64_t rounds,
                const typename Policy::rank_state& start, algorithms::sync::worker_options o = {},
                bool count = true) {
  namespace hs = algorithms::sync;
  using exchange_type = hs::transport_exchange<Transport>;
  const std::size_t w = detail::worker_of(t, p.workers());
  hs::compute_end_hook hook;
  exchange_type world(t, o, &hook);
  std::optional<Transport> sub;
  std::optional<exchange_type> group;
  detail::split_groups(p, t, w, o, hook, sub, group);
  hs::rank_round<exchange_type> r{.world = world, .group = group ? &*group : nullptr,
                                  .worker = w, .count = count};
  auto s = start;
  hs::run_rank_rounds(p, r, s, rounds, o, hook);
  if constexpr (requires { p.set_shared(std::move(s)); }) {
    if (count) p.set_shared(std::move(s));
  }
}

/// run_worker from the policy's current state (MPI: every process calls it with its rank).
template <per_rank_round_policy Policy, class Transport>
void run_worker(Policy& p, const Transport& t, std::uint64_t rounds,
                algorithms::sync::worker_options o = {}, bool count = true) {
  run_worker(p, t, rounds, p.shared_state(), o, count);
}

// --- methods over a partial allreduce: until the method ends ----------------------------------
/// Runs worker partial.rank() of `p` over `partial`, a partial allreduce over the workers
/// built as p.partial_setup(o.stop set) says, until a round's outcome is the last (eager: the
/// configured rounds, the last a flush, or the flush after the ranks' vote, o.stop).
/// o.round_end(w, report) follows each round.
template <partial_round_method Policy, class Partial>
void run_partial_worker(Policy& p, Partial& partial, const algorithms::sync::worker_options& o = {},
                        bool count = true) {
  namespace hs = algorithms::sync;
  using exchange_type = hs::transport_partial<Partial>;
  static_assert(rank_round_method<Policy, exchange_type>,
                "the method's run_round does not take this partial allreduce");
  const std::size_t w = detail::worker_of(partial, p.workers());
  hs::compute_end_hook hook;
  exchange_type ex(partial, &hook);
  hs::rank_round<exchange_type> r{.world = ex, .worker = w, .count = count,
                                  .votes = static_cast<bool>(o.stop)};
  (void)p.partial_setup(r.votes);  // refuses a run that could not end
  auto s = p.shared_state();
  hs::run_rank_rounds(p, r, s, std::numeric_limits<std::uint64_t>::max(), o, hook);
}

/// Runs worker t.rank() of `p` over the transport's partial allreduce (collective over t: its
/// construction), built as p.partial_setup(o.stop set) says with o.timeout, until `p` ends.
template <partial_round_method Policy, class Transport>
void run_worker(Policy& p, const Transport& t, algorithms::sync::worker_options o = {},
                bool count = true) {
  o.validate();
  auto setup = p.partial_setup(static_cast<bool>(o.stop));
  setup.options.timeout = o.timeout;
  auto partial = make_partial_allreduce<typename Policy::value_type>(t, setup.elements,
                                                                     setup.policy, setup.options);
  run_partial_worker(p, partial, o, count);
}

// --- deprecated: the named overloads of eager-SGD (one release) --------------------------------
template <partial_round_method Policy, class Partial>
  requires requires(Partial& q, span<typename Policy::value_type> x) { q.flush(x); }
[[deprecated("use run_partial_worker(policy, partial, options, count), or "
             "run_worker(policy, transport, options, count)")]]
void run_worker(Policy& p, Partial partial, bool count = true,
                const algorithms::sync::worker_options& o = {}) {
  run_partial_worker(p, partial, o, count);
}

template <partial_round_method Policy>
[[deprecated("use policy.partial_setup(static_cast<bool>(options.stop)).elements")]]
std::size_t eager_elements(const Policy& p, const algorithms::sync::worker_options& o) {
  return p.partial_setup(static_cast<bool>(o.stop)).elements;
}

}  // namespace heterograd::runtime
