#pragma once
// An inproc world of N ranks, and spawn, which runs a function on each of them.

#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "heterograd/comm/inproc/communicator.hpp"
#include "heterograd/comm/inproc/detail/group_state.hpp"
#include "heterograd/comm/inproc/detail/point_to_point.hpp"
#include "heterograd/comm/inproc/detail/world_state.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/core/clock.hpp"
#include "heterograd/core/concepts.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::comm::inproc {

/// N ranks sharing one clock and one abort flag. Hand rank(r) to the thread that runs rank r.
class world {
 public:
  explicit world(int n) : world(n, steady_clock{}) {}
  template <heterograd::clock Clock>
  world(int n, Clock clock) {
    require(n >= 1, "world.size", n, "must be >= 1");
    w_ = std::make_shared<detail::world_state>(n, comm::detail::time_source(clock));
    g_ = std::make_shared<detail::group_state>(w_, n);
    w_->groups.push_back(g_);
  }
  int size() const { return w_->size; }
  communicator rank(int r) const {
    require_in_range_co("world.rank", r, 0, size());
    return communicator(g_, r);
  }
  /// A new thread takes rank r (its thread left or died, and the slot restarts: elastic
  /// membership, docs/elastic.md). The messages still waiting for r's earlier thread are
  /// dropped, a rendezvous sender's send failing with a comm_error that names the restart,
  /// and the earlier thread's posted receives fail the same way: the new thread starts with
  /// an empty mailbox, as a new process on a real transport does. The world's own group only
  /// (not the groups split from it). Returns rank r's handle.
  communicator rejoin(int r) const {
    require_in_range_co("world.rank", r, 0, size());
    const std::string why = "heterograd: comm: rank " + std::to_string(r) +
                            " was restarted (world::rejoin) before this message was taken";
    for (int ctx = 0; ctx < 2; ++ctx) {
      detail::mailbox& mb = g_->box(ctx, r);
      std::lock_guard<std::mutex> l(mb.m);
      for (auto& m : mb.unexpected)
        if (m.sender) fail(*m.sender, why);
      mb.unexpected.clear();
      for (auto& p : mb.posted) fail(*p, why);
      mb.posted.clear();
    }
    w_->note.notify();
    return communicator(g_, r);
  }
  void abort(int by_rank, std::string what) const { w_->abort(by_rank, std::move(what)); }
  bool aborted() const { return w_->is_aborted(); }

  /// Internal (spawn, once every rank's thread has ended): fails the collectives and drops the
  /// messages the ranks left pending, in every group of the world. A pending operation's state
  /// holds its group while the group's queues hold the state; nothing would free either.
  void detail_end() const {
    std::vector<std::shared_ptr<detail::group_state>> gs;
    {
      std::lock_guard<std::mutex> l(w_->groups_m);
      for (auto& wg : w_->groups)
        if (auto g = wg.lock()) gs.push_back(std::move(g));
    }
    for (auto& g : gs) {
      for (auto& loc : g->locals) {
        for (auto& st : loc.fifo) st->abandon();
        loc.fifo.clear();
      }
      for (int b = 0; b < 2 * g->size; ++b) {
        detail::mailbox& mb = g->boxes[static_cast<std::size_t>(b)];
        std::lock_guard<std::mutex> l(mb.m);
        mb.posted.clear();
        mb.unexpected.clear();
      }
    }
  }

 private:
  static void fail(detail::p2p_state& p, const std::string& why) {
    p.err = std::make_exception_ptr(comm_error(why));
    p.outcome.store(2, std::memory_order_release);
  }
  std::shared_ptr<detail::world_state> w_;
  std::shared_ptr<detail::group_state> g_;
};

/// Runs fn(communicator) on n ranks (rank 0 on the calling thread), joins them all, and
/// rethrows the first error. A rank that throws aborts the world first, so the others'
/// pending operations fail ("aborted by rank r") instead of waiting for it. If a rank's
/// thread cannot be created, spawn aborts the world, joins the ranks already started and
/// throws std::system_error ("could not start the thread of rank r of n: reason").
template <class Fn, heterograd::clock Clock>
void spawn(int n, Fn&& fn, Clock clock) {
  require(n >= 1, "spawn.n", n, "must be >= 1");
  world w(n, clock);
  std::mutex m;
  std::exception_ptr first{};
  auto body = [&](int r) {
    try {
      fn(w.rank(r));
    } catch (...) {
      auto e = std::current_exception();
      std::string what = "unknown exception";
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        what = x.what();
      } catch (...) {
      }
      {
        std::lock_guard<std::mutex> l(m);
        if (!first) first = e;
      }
      w.abort(r, what);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n - 1));
  for (int r = 1; r < n; ++r) {
    try {
      threads.emplace_back(body, r);
    } catch (...) {
      // No thread for rank r (no memory for its stack, a thread limit): the ranks already
      // running would wait for it in their first collective, and a joinable std::thread left
      // behind is std::terminate. Abort the world so they return, join them, then throw.
      const std::string why = "heterograd: comm: spawn could not start the thread of rank " +
                              std::to_string(r) + " of " + std::to_string(n);
      w.abort(r, why);
      for (auto& t : threads) t.join();
      w.detail_end();
      try {
        throw;
      } catch (const std::system_error& e) {
        throw std::system_error(e.code(), why);  // what(): why + ": " + the system's reason
      }
    }
  }
  body(0);
  for (auto& t : threads) t.join();
  w.detail_end();
  if (first) std::rethrow_exception(first);
}

template <class Fn>
void spawn(int n, Fn&& fn) {
  spawn(n, std::forward<Fn>(fn), steady_clock{});
}

}  // namespace heterograd::comm::inproc
