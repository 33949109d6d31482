#pragma once
// The rounds of a partial allreduce (semantics: heterograd/comm/partial.hpp) as one
// single-threaded state machine over n ranks: who waits in which round, the late
// contributions carried to the next round that fires, the last B results and the firing.
// It is the state inproc's partial allreduce shares between its ranks (under a mutex:
// comm/inproc/partial.hpp) and the simulated eager-SGD's in-memory partial allreduce
// (algorithms/sync/exchange.hpp), so a simulated round fires and sums exactly as inproc's
// does with the same arrivals.
//
// Firing round t (when every rank has taken the result of round t - B and the policy agrees,
// comm::detail::should_fire): the result is the sum, in rank order and for each rank fresh
// before stale, of the buffers of the ranks waiting in t and of every pending late
// contribution; with avg it is then divided by n. Each waiting rank's buffer receives the
// result. A rank that arrives after its round fired adds its buffer to its pending
// contribution and takes the stored result at once.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "heterograd/comm/partial.hpp"
#include "heterograd/comm/reduce.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/clock.hpp"

namespace heterograd::comm {

template <class T>
struct partial_rounds {
  partial_rounds(int n_, std::size_t count_, partial_policy p, partial_options o)
      : n(n_), count(count_), policy(p), opt(o), consumed(static_cast<std::size_t>(n_), -1),
        arrived_round(static_cast<std::size_t>(n_), -1),
        arrived_buf(static_cast<std::size_t>(n_), nullptr),
        pending(static_cast<std::size_t>(n_), std::vector<T>(count_)),
        pending_origin(static_cast<std::size_t>(n_), -1),
        results(static_cast<std::size_t>(o.staleness_bound), std::vector<T>(count_)),
        reports(static_cast<std::size_t>(o.staleness_bound)),
        delivered(static_cast<std::size_t>(n_)) {}

  int n;
  std::size_t count;
  partial_policy policy;
  partial_options opt;

  std::int64_t next = 0;                     // the next round to fire
  std::vector<std::int64_t> consumed;        // last round whose result a rank has, or -1
  std::vector<std::int64_t> arrived_round;   // round a rank waits in, or -1
  std::vector<T*> arrived_buf;               // its buffer, which receives the result
  std::vector<std::vector<T>> pending;       // late contributions not yet folded in
  std::vector<std::int64_t> pending_origin;  // round of the oldest pending part, or -1
  std::vector<std::vector<T>> results;       // result of round t in slot t % B
  std::vector<round_report> reports;         // report of round t in slot t % B
  std::vector<round_report> delivered;       // the report of the round a rank last got
  seconds first_arrival{0};                  // of the round next (deadline policy)
  std::int64_t flush_round = -1;             // a round every rank must join fresh (flush)
  /// When not empty (count elements): every fired round's sum before the division by n is
  /// added to it, in double (an audit of conservation: the simulated eager-SGD's).
  std::vector<double> fired_sum;

  /// Ranks waiting in round `next`.
  int arrivals() const {
    int a = 0;
    for (auto r : arrived_round) a += r == next ? 1 : 0;
    return a;
  }
  /// Whether rank r's contribution to `round` is complete (it holds the round's result).
  bool complete(int r, std::int64_t round) const {
    return consumed[static_cast<std::size_t>(r)] >= round;
  }
  /// Whether rank r waits in `round`, its buffer registered.
  bool waiting(int r, std::int64_t round) const {
    return arrived_round[static_cast<std::size_t>(r)] == round;
  }

  /// Rank r contributes `data` (count elements) to its round `round` at time `now`. Late
  /// (the round fired): the contribution is kept for the next round that fires and `data`
  /// receives the round's result. Otherwise `data` is registered (it must stay valid until
  /// the round fires, when it receives the result; `flush`: the round waits for every rank)
  /// and the round fires if its policy allows. Returns complete(r, round).
  bool arrive(int r, std::int64_t round, T* data, bool flush, seconds now) {
    const auto ru = static_cast<std::size_t>(r);
    if (round < next) {
      auto& p = pending[ru];
      detail::combine(reduce_op::sum, p.data(), data, count);
      if (pending_origin[ru] < 0) pending_origin[ru] = round;
      const auto slot = static_cast<std::size_t>(round % opt.staleness_bound);
      std::memcpy(data, results[slot].data(), count * sizeof(T));
      delivered[ru] = reports[slot];
      consumed[ru] = round;
      return true;
    }
    if (flush) flush_round = round;
    arrived_round[ru] = round;
    arrived_buf[ru] = data;
    if (arrivals() == 1) first_arrival = now;
    try_fire(now);
    return complete(r, round);
  }

  /// Rank r no longer waits in `round` (its buffer is not written afterwards).
  void withdraw(int r, std::int64_t round) {
    const auto ru = static_cast<std::size_t>(r);
    if (arrived_round[ru] != round) return;
    arrived_round[ru] = -1;
    arrived_buf[ru] = nullptr;
  }

  /// Fires round `next` if the staleness bound and its policy allow. Returns true if it fired.
  bool try_fire(seconds now) {
    const std::int64_t t = next;
    const auto B = static_cast<std::int64_t>(opt.staleness_bound);
    for (int j = 0; j < n; ++j)
      if (consumed[static_cast<std::size_t>(j)] < t - B) return false;  // a slot is unread
    std::vector<bool> arrived(static_cast<std::size_t>(n), false);
    int arrivals = 0;
    for (int j = 0; j < n; ++j) {
      if (arrived_round[static_cast<std::size_t>(j)] == t) {
        arrived[static_cast<std::size_t>(j)] = true;
        ++arrivals;
      }
    }
    if (flush_round == t && arrivals < n) return false;
    if (!detail::should_fire(policy, static_cast<std::uint64_t>(t), n, arrived, arrivals,
                             first_arrival, now))
      return false;
    auto& res = results[static_cast<std::size_t>(t % B)];
    auto& rep = reports[static_cast<std::size_t>(t % B)];
    rep = round_report{};
    rep.round = static_cast<std::uint64_t>(t);
    rep.staleness.assign(static_cast<std::size_t>(n), -1);
    if (policy.what == partial_policy::kind::majority)
      rep.initiator = detail::majority_initiator(policy.seed, rep.round, n);
    std::fill(res.begin(), res.end(), T{});
    // Fixed order (rank, then fresh before stale): the same bits whoever fires the round.
    for (int j = 0; j < n; ++j) {
      const auto ju = static_cast<std::size_t>(j);
      if (arrived[ju]) {
        detail::combine(reduce_op::sum, res.data(), arrived_buf[ju], count);
        rep.fresh.push_back(j);
      }
      if (pending_origin[ju] >= 0) {
        detail::combine(reduce_op::sum, res.data(), pending[ju].data(), count);
        const int s = static_cast<int>(t - pending_origin[ju]);
        rep.stale.push_back(j);
        rep.staleness[ju] = s;
        rep.max_staleness = std::max(rep.max_staleness, s);
        std::fill(pending[ju].begin(), pending[ju].end(), T{});
        pending_origin[ju] = -1;
      }
    }
    if (!fired_sum.empty())
      for (std::size_t i = 0; i < count; ++i) fired_sum[i] += static_cast<double>(res[i]);
    if (opt.op == reduce_op::avg) detail::divide(res.data(), n, count);
    for (int j = 0; j < n; ++j) {
      const auto ju = static_cast<std::size_t>(j);
      if (!arrived[ju]) continue;
      std::memcpy(arrived_buf[ju], res.data(), count * sizeof(T));
      delivered[ju] = rep;
      arrived_round[ju] = -1;
      arrived_buf[ju] = nullptr;
      consumed[ju] = t;
    }
    next = t + 1;
    return true;
  }
};

}  // namespace heterograd::comm
