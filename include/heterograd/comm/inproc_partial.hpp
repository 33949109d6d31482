#pragma once
// Partial allreduce over the inproc transport (semantics: heterograd/comm/partial.hpp).
//
// Shared memory makes it direct: a round's state lives in one object under a mutex. The rank
// that sees the round's policy satisfied fires it: it sums the fresh buffers of the ranks
// that arrived and every pending (late) contribution, in rank order, into the round's result
// slot, and copies the result into each fresh rank's buffer: (fresh + stale) * S read,
// (fresh + 1) * S written. A rank arriving after its round fired adds its buffer to its
// pending contribution (S read, S written) and takes the stored result (S). Nobody waits for
// a late rank, and results stay available for B rounds (the staleness bound).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "heterograd/comm/inproc.hpp"
#include "heterograd/comm/partial.hpp"
#include "heterograd/comm/reduce.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/span.hpp"

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

/// One rank's handle on a partial allreduce of `count` elements of T. Construction is
/// collective over the communicator (every rank, same count, policy and options).
template <element T>
class partial_allreduce {
 public:
  partial_allreduce(const communicator& c, std::size_t count, partial_policy policy,
                    partial_options opt = {})
      : l_(std::make_shared<local>()) {
    l_->c = c;
    require(c.valid(), "partial_allreduce.communicator", "empty", "must be a valid communicator");
    comm::detail::validate(opt, c.size(), policy);
    require(std::is_arithmetic_v<T>, "partial_allreduce.T", "non-arithmetic", "must be arithmetic");
    l_->s = std::static_pointer_cast<detail::partial_shared<T>>(c.detail_shared([&] {
      return std::static_pointer_cast<void>(
          std::make_shared<detail::partial_shared<T>>(c.size(), count, policy, opt));
    }));
    // Every rank must have asked for the same thing: compare through min/max allreduces.
    const std::int64_t mine[5] = {static_cast<std::int64_t>(count), static_cast<std::int64_t>(policy.what),
                                  policy.k, static_cast<std::int64_t>(policy.seed),
                                  opt.staleness_bound};
    std::int64_t lo[5], hi[5];
    std::copy(mine, mine + 5, lo);
    std::copy(mine, mine + 5, hi);
    allreduce_options mn, mx;
    mn.op = reduce_op::min;
    mx.op = reduce_op::max;
    mn.timeout = mx.timeout = opt.timeout;
    c.allreduce(span<std::int64_t>(lo, 5), mn).wait();
    c.allreduce(span<std::int64_t>(hi, 5), mx).wait();
    for (int i = 0; i < 5; ++i)
      if (lo[i] != hi[i])
        throw mismatch_error("heterograd: comm: partial_allreduce built with different sizes, "
                             "policies or options on different ranks");
  }

  int rank() const { return l_->c.rank(); }
  int size() const { return l_->c.size(); }
  std::size_t count() const { return l_->s->count; }
  /// This rank's next round.
  std::uint64_t round() const { return l_->round; }
  /// Rounds fired so far (any rank's view; grows monotonically).
  std::uint64_t fired_rounds() const {
    return static_cast<std::uint64_t>(l_->s->fired.load(std::memory_order_acquire));
  }
  /// Ranks waiting in the round that fires next.
  int arrivals() const {
    auto& s = *l_->s;
    std::lock_guard<std::mutex> l(s.m);
    int a = 0;
    for (int j = 0; j < s.n; ++j) a += s.arrived_round[static_cast<std::size_t>(j)] == s.next;
    return a;
  }
  /// The report of this rank's last completed round (the same on every rank for that round).
  const round_report& last_report() const { return l_->report; }

  /// Contributes `data` to this rank's next round; on completion `data` holds the round's
  /// result. The request completes at once if the round already fired.
  request allreduce(span<T> data) { return post(data, false); }

  /// A round that waits for every rank (all contributions fresh) and folds in everything
  /// pending: call it on every rank as the same round, e.g. at the end of training, so that
  /// no late contribution is left behind.
  request flush(span<T> data) { return post(data, true); }

 private:
  request post(span<T> data, bool flush) {
    require_same_size("partial_allreduce.data", data.size(), "count", l_->s->count);
    const auto& w = l_->c.detail_world();
    if (w->is_aborted()) return request::failed(std::make_exception_ptr(w->error()));
    auto st = std::make_shared<state>(l_, data, static_cast<std::int64_t>(l_->round), flush);
    st->set_deadline(w->clock, l_->s->opt.timeout, w->policy);
    ++l_->round;
    if (st->arrive()) return request(st);  // finished at once (late or fired by this call)
    return request(std::move(st));
  }

  struct local {
    communicator c;
    std::shared_ptr<detail::partial_shared<T>> s;
    std::uint64_t round = 0;
    round_report report{};
  };

  class state final : public comm::detail::request_state {
   public:
    state(std::shared_ptr<local> owner, span<T> data, std::int64_t round, bool flush)
        : o_(std::move(owner)), data_(data), round_(round), flush_(flush) {}

    /// Registers the arrival; true if the request is already complete.
    bool arrive() {
      auto& s = *o_->s;
      const int r = o_->c.rank();
      const auto ru = static_cast<std::size_t>(r);
      const auto& w = o_->c.detail_world();
      {
        std::lock_guard<std::mutex> l(s.m);
        if (round_ < s.next) {
          // Late: keep the contribution for the next round that fires, take the result.
          auto& p = s.pending[ru];
          comm::detail::combine(reduce_op::sum, p.data(), data_.data(), s.count);
          if (s.pending_origin[ru] < 0) s.pending_origin[ru] = round_;
          const auto slot = static_cast<std::size_t>(round_ % s.opt.staleness_bound);
          std::memcpy(data_.data(), s.results[slot].data(), s.count * sizeof(T));
          o_->report = s.reports[slot];
          s.consumed[ru].store(round_, std::memory_order_release);
          ok_ = true;
        } else {
          if (flush_) s.flush_round = round_;
          s.arrived_round[ru] = round_;
          s.arrived_buf[ru] = data_.data();
          int arrivals = 0;
          for (int j = 0; j < s.n; ++j) arrivals += s.arrived_round[static_cast<std::size_t>(j)] == round_;
          if (arrivals == 1) s.first_arrival = w->clock.now();
          s.try_fire(w->clock.now());
          ok_ = collect();
        }
      }
      w->note.notify();
      return ok_;
    }

    /// Dropped while waiting for its round: withdraw the buffer (a round fires under s.m, so
    /// none writes it afterwards) and abort the world, as a timeout does: flushes and bounded
    /// rounds would otherwise wait for this rank.
    void abandon_pending() noexcept override {
      try {
        withdraw();
        o_->c.detail_world()->abort(o_->c.rank(), "heterograd: comm: " + describe() +
                                                       " was abandoned while pending");
      } catch (...) {
      }
    }

   protected:
    std::string describe() const override {
      return "partial allreduce round " + std::to_string(round_) + " on rank " +
             std::to_string(o_->c.rank());
    }
    bool progress() override {
      if (ok_) return true;
      const auto& w = o_->c.detail_world();
      if (w->is_aborted()) {
        withdraw();
        throw w->error();
      }
      auto& s = *o_->s;
      bool fired = false;
      {
        std::lock_guard<std::mutex> l(s.m);
        if (!collect()) fired = s.try_fire(w->clock.now());
        ok_ = collect();
      }
      if (fired) w->note.notify();
      return ok_;
    }
    void idle(comm::detail::real_clock::time_point until) override {
      auto& s = *o_->s;
      const auto& w = o_->c.detail_world();
      const int r = o_->c.rank();
      // A deadline policy fires on time alone: re-check the clock every 100 us.
      if (s.policy.what == partial_policy::kind::deadline)
        until = std::min(until, comm::detail::real_clock::now() + std::chrono::microseconds(100));
      w->note.block([&] { return s.consumed_of(r) >= round_ || w->is_aborted(); }, until);
    }
    void on_timeout(const std::string& what) override {
      withdraw();
      o_->c.detail_world()->abort(o_->c.rank(), what);
      fail(std::make_exception_ptr(timeout_error(what)));
    }

   private:
    // Under s.m: has the round fired with this rank fresh?
    bool collect() {
      auto& s = *o_->s;
      if (s.consumed_of(o_->c.rank()) < round_) return false;
      o_->report = s.delivered[static_cast<std::size_t>(o_->c.rank())];
      return true;
    }
    void withdraw() {
      auto& s = *o_->s;
      std::lock_guard<std::mutex> l(s.m);
      const auto ru = static_cast<std::size_t>(o_->c.rank());
      if (s.arrived_round[ru] == round_) {
        s.arrived_round[ru] = -1;
        s.arrived_buf[ru] = nullptr;
      }
    }

    std::shared_ptr<local> o_;
    span<T> data_;
    std::int64_t round_;
    bool flush_;
    bool ok_ = false;
  };

  std::shared_ptr<local> l_;
};

}  // namespace heterograd::comm::inproc
