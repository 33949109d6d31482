#pragma once
// Minimal archetypes for the one round contract (algorithms/sync/exchange.hpp: exchange,
// partial_exchange, rank_round, round_outcome; runtime/concepts.hpp: rank_round_method): copy
// rank_round_method_archetype to start a round method that the threads and MPI runtimes run
// per rank, and exchange_archetype / partial_exchange_archetype to run a method's round alone
// (one rank: the collectives return the rank's own contribution). The negative ones each miss
// or mistype exactly one requirement, and the concept must reject them.

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "heterograd/algorithms/sync/exchange.hpp"
#include "heterograd/comm/partial.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/runtime/concepts.hpp"

namespace heterograd::testing {

// ---- exchanges ----------------------------------------------------------------------------

/// The least collective exchange: one rank. out <- w in (the weighted sum over one rank), and
/// the sum of one rank's votes is its own; nothing suspends.
template <class T = float>
struct exchange_archetype {
  std::size_t rank() const { return 0; }
  std::size_t size() const { return 1; }
  std::suspend_never allreduce(span<const T> in, span<T> out, double w) const {
    for (std::size_t i = 0; i < in.size(); ++i) out[i] = static_cast<T>(w * in[i]);
    return {};
  }
  std::suspend_never allreduce_sum(span<std::int64_t>) const { return {}; }
};

/// Not an exchange: no allreduce_sum (SelSync's vote could not be summed). The archetype with
/// allreduce_sum deleted, so that only it is missing.
template <class T = float>
struct not_an_exchange_no_allreduce_sum : exchange_archetype<T> {
  std::suspend_never allreduce_sum(span<std::int64_t>) const = delete;
};

/// Not an exchange: its allreduce returns nothing to co_await.
template <class T = float>
struct not_an_exchange_allreduce_is_void : exchange_archetype<T> {
  void allreduce(span<const T>, span<T>, double) const {}
};

/// The least partial allreduce: one rank, always fresh, every round fired by its own arrival
/// (the result of a sum or an average over one rank is its contribution).
template <class T = float>
struct partial_exchange_archetype {
  comm::round_report report{.round = 0, .fresh = {0}, .stale = {}, .staleness = {-1}};

  std::suspend_never allreduce(span<T>) const { return {}; }
  std::suspend_never flush(span<T>) const { return {}; }
  const comm::round_report& last_report() const { return report; }
};

/// Not a partial exchange: no flush (a run could not end with every late part folded in).
template <class T = float>
struct not_a_partial_exchange_no_flush : partial_exchange_archetype<T> {
  std::suspend_never flush(span<T>) const = delete;
};

// ---- round methods ------------------------------------------------------------------------

/// The least round method over a collective exchange: each rank contributes its worker index
/// + 1 in every round and adds the round's sum, n (n + 1) / 2, to its own total; the rank's
/// state counts its rounds, and the counting rank writes it back (set_shared).
struct rank_round_method_archetype {
  using value_type = double;
  using exchange_kind = algorithms::sync::collective_exchange_tag;
  struct rank_state {
    std::uint64_t round = 0;
  };

  std::size_t n = 1;
  std::vector<double> totals = std::vector<double>(n, 0.0);  // one per worker
  std::uint64_t rounds = 0;

  std::size_t workers() const { return n; }
  rank_state shared_state() const { return {rounds}; }
  void set_shared(rank_state s) { rounds = s.round; }
  template <algorithms::sync::exchange<double> Ex>
  algorithms::sync::round_outcome run_round(algorithms::sync::rank_round<Ex>& r, rank_state& s) {
    const double mine = static_cast<double>(r.worker) + 1.0;
    double sum = 0;
    algorithms::sync::step_task<bool> step = [](const Ex& ex, const double* in,
                                                double* out) -> algorithms::sync::step_task<bool> {
      co_await ex.allreduce(span<const double>(in, 1), span<double>(out, 1), 1.0);
      co_return true;
    }(r.world, &mine, &sum);
    step.run();
    totals.at(r.worker) += sum;
    ++s.round;
    return {.steps = 1, .loss = 0.0};
  }
};

/// Not a rank round method: its round reports nothing (the runtime could not tell the last
/// round, nor what the round did).
struct not_a_rank_round_method_outcome_is_void : rank_round_method_archetype {
  template <algorithms::sync::exchange<double> Ex>
  void run_round(algorithms::sync::rank_round<Ex>&, rank_state&) {}
};

/// Not a rank round method: its exchange_kind names no exchange (the runtime could not tell
/// which one to build).
struct not_a_rank_round_method_exchange_kind_is_void : rank_round_method_archetype {
  using exchange_kind = void;
};

/// Not a rank round method: its optional set_shared takes text, not the rank's state.
struct not_a_rank_round_method_set_shared_is_text : rank_round_method_archetype {
  void set_shared(std::string) {}
};

static_assert(algorithms::sync::exchange<exchange_archetype<float>, float>);
static_assert(!algorithms::sync::exchange<not_an_exchange_no_allreduce_sum<float>, float>);
static_assert(!algorithms::sync::exchange<not_an_exchange_allreduce_is_void<float>, float>);
static_assert(algorithms::sync::partial_exchange<partial_exchange_archetype<float>, float>);
static_assert(!algorithms::sync::partial_exchange<not_a_partial_exchange_no_flush<float>, float>);
static_assert(runtime::rank_round_method<rank_round_method_archetype, exchange_archetype<double>>);
static_assert(!runtime::rank_round_method<rank_round_method_archetype,
                                          not_an_exchange_no_allreduce_sum<double>>);
static_assert(!runtime::rank_round_method<not_a_rank_round_method_outcome_is_void, exchange_archetype<double>>);
static_assert(!runtime::rank_round_method<not_a_rank_round_method_exchange_kind_is_void, exchange_archetype<double>>);
static_assert(!runtime::rank_round_method<not_a_rank_round_method_set_shared_is_text, exchange_archetype<double>>);

}  // namespace heterograd::testing
