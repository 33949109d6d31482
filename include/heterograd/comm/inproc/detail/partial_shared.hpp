#pragma once
// The state all ranks of an inproc partial allreduce share, and the firing of a round.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "heterograd/comm/partial.hpp"
#include "heterograd/comm/reduce.hpp"
#include "heterograd/comm/types.hpp"

namespace heterograd::comm::inproc {

namespace detail {

template <class T>
struct partial_shared {
  partial_shared(int n_, std::size_t count_, partial_policy p, partial_options o)
      : n(n_), count(count_), policy(p), opt(o),
        consumed(new std::atomic<std::int64_t>[static_cast<std::size_t>(n_)]),
        arrived_round(static_cast<std::size_t>(n_), -1),
        arrived_buf(static_cast<std::size_t>(n_), nullptr),
        pending(static_cast<std::size_t>(n_), std::vector<T>(count_)),
        pending_origin(static_cast<std::size_t>(n_), -1),
        results(static_cast<std::size_t>(o.staleness_bound), std::vector<T>(count_)),
        reports(static_cast<std::size_t>(o.staleness_bound)),
        delivered(static_cast<std::size_t>(n_)) {
    for (int i = 0; i < n; ++i) consumed[static_cast<std::size_t>(i)].store(-1);
  }

  const int n;
  const std::size_t count;
  const partial_policy policy;
  const partial_options opt;

  std::mutex m;
  std::int64_t next = 0;  // the next round to fire
  std::unique_ptr<std::atomic<std::int64_t>[]> consumed;  // last round whose result a rank has
  std::vector<std::int64_t> arrived_round;                // round a rank waits in, or -1
  std::vector<T*> arrived_buf;
  std::vector<std::vector<T>> pending;      // late contributions not yet folded in
  std::vector<std::int64_t> pending_origin;  // round of the oldest pending part, or -1
  std::vector<std::vector<T>> results;      // result of round t in slot t % B
  std::vector<round_report> reports;
  std::vector<round_report> delivered;  // the report of the round a fresh rank just got
  seconds first_arrival{0};
  std::int64_t flush_round = -1;  // a round every rank must join fresh (flush)
  std::atomic<std::int64_t> fired{0};

  std::int64_t consumed_of(int r) const {
    return consumed[static_cast<std::size_t>(r)].load(std::memory_order_acquire);
  }

  /// Fires round `next` if its policy allows (under m). Returns true if it fired.
  bool try_fire(seconds now) {
    const std::int64_t t = next;
    const auto B = static_cast<std::int64_t>(opt.staleness_bound);
    for (int j = 0; j < n; ++j)
      if (consumed_of(j) < t - B) return false;  // a slot still holds an unread result
    std::vector<bool> arrived(static_cast<std::size_t>(n), false);
    int arrivals = 0;
    for (int j = 0; j < n; ++j) {
      if (arrived_round[static_cast<std::size_t>(j)] == t) {
        arrived[static_cast<std::size_t>(j)] = true;
        ++arrivals;
      }
    }
    if (flush_round == t && arrivals < n) return false;
    if (!comm::detail::should_fire(policy, static_cast<std::uint64_t>(t), n, arrived, arrivals,
                                     first_arrival, now))
      return false;
    auto& res = results[static_cast<std::size_t>(t % B)];
    auto& rep = reports[static_cast<std::size_t>(t % B)];
    rep = round_report{};
    rep.round = static_cast<std::uint64_t>(t);
    rep.staleness.assign(static_cast<std::size_t>(n), -1);
    if (policy.what == partial_policy::kind::majority)
      rep.initiator = comm::detail::majority_initiator(policy.seed, rep.round, n);
    std::fill(res.begin(), res.end(), T{});
    // Fixed order (rank, then fresh before stale): the same bits whoever fires the round.
    for (int j = 0; j < n; ++j) {
      const auto ju = static_cast<std::size_t>(j);
      if (arrived[ju]) {
        comm::detail::combine(reduce_op::sum, res.data(), arrived_buf[ju], count);
        rep.fresh.push_back(j);
      }
      if (pending_origin[ju] >= 0) {
        comm::detail::combine(reduce_op::sum, res.data(), pending[ju].data(), count);
        const int s = static_cast<int>(t - pending_origin[ju]);
        rep.stale.push_back(j);
        rep.staleness[ju] = s;
        rep.max_staleness = std::max(rep.max_staleness, s);
        std::fill(pending[ju].begin(), pending[ju].end(), T{});
        pending_origin[ju] = -1;
      }
    }
    if (opt.op == reduce_op::avg) comm::detail::divide(res.data(), n, count);
    for (int j = 0; j < n; ++j) {
      const auto ju = static_cast<std::size_t>(j);
      if (!arrived[ju]) continue;
      std::memcpy(arrived_buf[ju], res.data(), count * sizeof(T));
      delivered[ju] = rep;
      arrived_round[ju] = -1;
      arrived_buf[ju] = nullptr;
      consumed[ju].store(t, std::memory_order_release);
    }
    next = t + 1;
    fired.store(next, std::memory_order_release);
    return true;
  }
};

}  // namespace detail

}  // namespace heterograd::comm::inproc
