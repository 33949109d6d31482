#pragma once
// The inproc partial allreduce (see heterograd/comm/inproc_partial.hpp).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <exception>
#include <string>
#include <vector>

#include "heterograd/comm/detail/frontend.hpp"
#include "heterograd/comm/inproc/communicator.hpp"
#include "heterograd/comm/inproc/detail/partial_shared.hpp"
#include "heterograd/comm/partial.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::comm::inproc {

/// One rank's handle on a partial allreduce of `count` elements of T. Construction is
/// collective over the communicator (every rank, same count, policy and options).
template <element T>
class partial_allreduce {
 public:
  partial_allreduce(const communicator& c, std::size_t count, partial_policy policy,
                    partial_options opt = {})
      : l_(std::make_shared<local>()) {
    l_->c = c;
    comm::detail::check_partial(c, policy, opt);
    l_->s = std::static_pointer_cast<detail::partial_shared<T>>(c.detail_shared([&] {
      return std::static_pointer_cast<void>(
          std::make_shared<detail::partial_shared<T>>(c.size(), count, policy, opt));
    }));
    comm::detail::check_partial_agreement(c, count, policy, opt, algorithm::automatic);
  }

  int rank() const { return l_->c.rank(); }
  int size() const { return l_->c.size(); }
  std::size_t count() const { return l_->s->rounds.count; }
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
    return s.rounds.arrivals();
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
    require_same_size("partial_allreduce.data", data.size(), "count", l_->s->rounds.count);
    const auto& w = l_->c.detail_world();
    if (w->is_aborted()) return request::failed(std::make_exception_ptr(w->error()));
    auto st = std::make_shared<state>(l_, data, static_cast<std::int64_t>(l_->round), flush);
    st->set_deadline(w->clock, l_->s->rounds.opt.timeout, w->policy);
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
      const auto& w = o_->c.detail_world();
      {
        std::lock_guard<std::mutex> l(s.m);
        ok_ = s.rounds.arrive(o_->c.rank(), round_, data_.data(), flush_, w->clock.now());
        s.fired.store(s.rounds.next, std::memory_order_release);
        if (ok_) o_->report = s.rounds.delivered[static_cast<std::size_t>(o_->c.rank())];
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
        o_->c.detail_world()->abort(o_->c.rank(),
                                    "heterograd: comm: " + describe() + " was abandoned while pending",
                                    std::uncaught_exceptions() > 0);  // provisional (issue 46)
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
      // A deadline policy fires on time alone: re-check the clock every 100 us.
      if (s.rounds.policy.what == partial_policy::kind::deadline)
        until = std::min(until, comm::detail::real_clock::now() + std::chrono::microseconds(100));
      // Round round_ fired (this rank waits in it, so it was fresh there).
      w->note.block(
          [&] { return s.fired.load(std::memory_order_acquire) > round_ || w->is_aborted(); },
          until);
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
      if (!s.rounds.complete(o_->c.rank(), round_)) return false;
      o_->report = s.rounds.delivered[static_cast<std::size_t>(o_->c.rank())];
      return true;
    }
    void withdraw() {
      auto& s = *o_->s;
      std::lock_guard<std::mutex> l(s.m);
      s.rounds.withdraw(o_->c.rank(), round_);
    }

    std::shared_ptr<local> o_;
    span<T> data_;
    std::int64_t round_;
    bool flush_;
    bool ok_ = false;
  };

  std::shared_ptr<local> l_;
};

/// The communicator's partial allreduce of `count` elements of T, found by argument-dependent
/// lookup (make_partial_allreduce<T>(c, ...)): how a transport-generic runtime builds one
/// (runtime::run_worker of a partial round method). Collective.
template <element T>
partial_allreduce<T> make_partial_allreduce(const communicator& c, std::size_t count,
                                            partial_policy policy, partial_options opt = {}) {
  return partial_allreduce<T>(c, count, policy, opt);
}

}  // namespace heterograd::comm::inproc
