#pragma once
// The state all ranks of an inproc partial allreduce share: the rounds (comm/partial_rounds.hpp)
// under a mutex, and the count of fired rounds, which a waiting rank reads without it.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "heterograd/comm/partial.hpp"
#include "heterograd/comm/partial_rounds.hpp"

namespace heterograd::comm::inproc::detail {

template <class T>
struct partial_shared {
  partial_shared(int n, std::size_t count, partial_policy p, partial_options o)
      : rounds(n, count, p, o) {}

  partial_rounds<T> rounds;  // under m
  std::mutex m;
  std::atomic<std::int64_t> fired{0};  // rounds.next, published after each change

  /// Fires round rounds.next if its policy allows (under m). Returns true if it fired.
  bool try_fire(seconds now) {
    if (!rounds.try_fire(now)) return false;
    fired.store(rounds.next, std::memory_order_release);
    return true;
  }
};

}  // namespace heterograd::comm::inproc::detail
