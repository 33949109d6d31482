#pragma once
// Partial collectives (eager-SGD, Li, Ben-Nun, Di Girolamo, Alistarh, Hoefler, PPoPP'20, #21):
// an allreduce that a subset of the ranks can trigger and complete, while every rank still
// receives the same result, so model replicas stay identical.
//
// Rounds. Each rank calls allreduce once per round (its round counter counts its calls). A
// round fires when its policy says so:
//   solo         the first rank to arrive fires it;
//   majority     the round's initiator fires it; the initiator of round t is drawn uniformly
//                from the ranks by a counter RNG on a seed shared by all ranks (same on all),
//                so in expectation at least half of the contributions are fresh;
//   quorum(k)    the k-th arrival fires it;
//   deadline(d)  it fires d seconds (on the group's clock) after its first arrival;
// and in every policy, as soon as all ranks arrived. Ranks that arrived before the round
// fired contribute fresh; a rank that arrives after its round fired gets that round's result
// at once, and its contribution is kept and added to the next round that fires (stale).
// Nothing is dropped: over all rounds, the sum of the results equals the sum of all
// contributions once a final round collects what is pending (flush with quorum(n)).
//
// Staleness bound B (partial_options::staleness_bound): round t fires only when every rank
// has received the result of round t - B, so a contribution is at most B rounds stale and a
// fast rank runs at most B rounds ahead of the slowest one. Result: sum, or avg = sum / n as
// in eager-SGD (divided by all ranks, fresh or not).

#include <cstdint>
#include <string>
#include <vector>

#include "heterograd/comm/types.hpp"
#include "heterograd/core/clock.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/rng.hpp"

namespace heterograd::comm {

/// When a round of a partial collective fires.
struct partial_policy {
  enum class kind { solo, majority, quorum, deadline };
  kind what = kind::majority;
  int k = 1;                   ///< quorum: arrivals that fire a round
  seconds wait{0.0};           ///< deadline: seconds after the first arrival
  std::uint64_t seed = 0;      ///< majority: seed of the initiator draws (same on all ranks)

  static partial_policy solo() { return {kind::solo, 1, seconds{0}, 0}; }
  static partial_policy majority(std::uint64_t seed) { return {kind::majority, 1, seconds{0}, seed}; }
  static partial_policy quorum(int k) {
    require_positive("partial_policy.quorum.k", k);
    return {kind::quorum, k, seconds{0}, 0};
  }
  static partial_policy deadline(seconds t) {
    require_non_negative("partial_policy.deadline", t.count());
    return {kind::deadline, 1, t, 0};
  }
  /// Waits for every rank: a full allreduce (what a final flush round uses).
  static partial_policy all(int n) { return quorum(n); }
};

constexpr const char* partial_policy_name(partial_policy::kind k) {
  switch (k) {
    case partial_policy::kind::solo: return "solo";
    case partial_policy::kind::majority: return "majority";
    case partial_policy::kind::quorum: return "quorum";
    case partial_policy::kind::deadline: return "deadline";
  }
  return "unknown";
}

struct partial_options {
  reduce_op op = reduce_op::sum;  ///< sum or avg (sum / number of ranks)
  int staleness_bound = 4;        ///< B: rounds a contribution may lag; also result slots kept
  seconds timeout = default_timeout;
};

/// What one round gathered. Identical on every rank.
struct round_report {
  std::uint64_t round = 0;
  std::vector<int> fresh;      ///< ranks whose contribution of this round made it in time
  std::vector<int> stale;      ///< ranks whose earlier, late contribution was folded in
  std::vector<int> staleness;  ///< per rank: -1 no stale part, else rounds of lag of its oldest
  int max_staleness = 0;
  int initiator = -1;          ///< majority: the round's initiator
  friend bool operator==(const round_report&, const round_report&) = default;
};

namespace detail {

inline void validate(const partial_options& o, int n, const partial_policy& p) {
  require(o.op == reduce_op::sum || o.op == reduce_op::avg, "partial_options.op",
          reduce_op_name(o.op), "must be sum or avg");
  require_positive("partial_options.staleness_bound", o.staleness_bound);
  validate_timeout("partial_options.timeout", o.timeout);
  if (p.what == partial_policy::kind::quorum)
    require(p.k >= 1 && p.k <= n, "partial_policy.k", p.k, "must be in [1, number of ranks]");
}

/// The initiator of `round` under majority: uniform over the n ranks, the same on every rank.
inline int majority_initiator(std::uint64_t seed, std::uint64_t round, int n) {
  return static_cast<int>(counter_rng(seed, 0x6d616a6f72ULL).below(round, static_cast<std::uint64_t>(n)));
}

/// Whether a round fires now, given who arrived and when the first one did.
inline bool should_fire(const partial_policy& p, std::uint64_t round, int n,
                        const std::vector<bool>& arrived, int arrivals, seconds first_arrival,
                        seconds now) {
  if (arrivals == 0) return false;
  if (arrivals == n) return true;
  switch (p.what) {
    case partial_policy::kind::solo: return true;
    case partial_policy::kind::majority:
      return arrived[static_cast<std::size_t>(majority_initiator(p.seed, round, n))];
    case partial_policy::kind::quorum: return arrivals >= p.k;
    case partial_policy::kind::deadline: return now >= first_arrival + p.wait;
  }
  return false;
}

}  // namespace detail

}  // namespace heterograd::comm
