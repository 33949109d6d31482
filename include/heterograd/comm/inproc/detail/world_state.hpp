#pragma once
// What all groups of one inproc world share.

#include <algorithm>
#include <atomic>
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
  // Every group of this world (the world's own and the splits'), for spawn's cleanup.
  std::mutex groups_m;
  std::vector<std::weak_ptr<struct group_state>> groups;

  /// The first abort wins; later ones are ignored.
  void abort(int rank, std::string what) {
    {
      std::lock_guard<std::mutex> l(abort_m);
      if (!aborted.load(std::memory_order_relaxed)) {
        abort_rank = rank;
        abort_what = std::move(what);
        aborted.store(true, std::memory_order_seq_cst);
      }
    }
    note.notify();
  }
  bool is_aborted() const { return aborted.load(std::memory_order_seq_cst); }
  aborted_error error() const {
    std::lock_guard<std::mutex> l(abort_m);
    return aborted_error(abort_rank, abort_what);
  }
};

}  // namespace detail

}  // namespace heterograd::comm::inproc
