#pragma once
// What all groups of one inproc world share.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "heterograd/comm/inproc/detail/notifier.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/types.hpp"

namespace heterograd::comm::inproc {

namespace detail {

using comm::detail::time_source;
using comm::detail::wait_policy;

/// What all groups of one world share: the clock, the waiting policy, the abort flag.
struct world_state {
  world_state(int n, time_source c) : size(n), clock(std::move(c)) {
    policy = wait_policy::for_threads(static_cast<unsigned>(n));
    oversubscribed = static_cast<unsigned>(n) > std::max(1u, std::thread::hardware_concurrency());
  }
  int size;
  bool oversubscribed = false;  // ranks outnumber cores
  time_source clock;
  wait_policy policy;
  notifier note;
  std::atomic<bool> aborted{false};
  mutable std::mutex abort_m;
  int abort_rank = -1;
  std::string abort_what;
  bool provisional = false;            // aborted while unwinding: the cause may follow
  std::thread::id abort_thread;        // the thread of the first abort
  mutable std::condition_variable cause_found;
  // Every group of this world (the world's own and the splits'), for spawn's cleanup.
  std::mutex groups_m;
  std::vector<std::weak_ptr<struct group_state>> groups;

  /// How long a peer waits for the cause of an abort made while its rank unwound (below).
  static constexpr std::chrono::milliseconds cause_grace{2000};

  /// The first abort wins; later ones are ignored, with one exception. An abort made while
  /// the aborting thread unwinds from an exception (`unwinding`: a pending operation dropped
  /// by the unwinding, issue 46) cannot name the exception, which is not reachable before a
  /// handler catches it; it is provisional until the same rank aborts again from its handler
  /// (spawn's, or the caller's own) with the exception's message, which then leads the
  /// reason: "<message> (<what was abandoned>)".
  void abort(int rank, std::string what, bool unwinding = false) {
    {
      std::lock_guard<std::mutex> l(abort_m);
      if (!aborted.load(std::memory_order_relaxed)) {
        abort_rank = rank;
        abort_what = std::move(what);
        provisional = unwinding;
        abort_thread = std::this_thread::get_id();
        aborted.store(true, std::memory_order_seq_cst);
      } else if (provisional && rank == abort_rank && !unwinding) {
        abort_what = std::move(what) + " (" + abort_what + ")";
        provisional = false;
        cause_found.notify_all();
      }
    }
    note.notify();
  }
  bool is_aborted() const { return aborted.load(std::memory_order_seq_cst); }
  /// The abort as an error. A peer of a rank whose abort is still provisional waits for its
  /// cause, at most cause_grace (the handler runs as soon as the unwinding reaches it; a
  /// thread that never aborts again leaves the provisional reason); the aborting thread
  /// itself never waits.
  aborted_error error() const {
    std::unique_lock<std::mutex> l(abort_m);
    if (provisional && std::this_thread::get_id() != abort_thread)
      cause_found.wait_for(l, cause_grace, [&] { return !provisional; });
    return aborted_error(abort_rank, abort_what);
  }
};

}  // namespace detail

}  // namespace heterograd::comm::inproc
