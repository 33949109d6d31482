#pragma once
// Spin-free blocking for the ranks of one inproc world.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "heterograd/comm/request.hpp"

namespace heterograd::comm::inproc {

namespace detail {

using comm::detail::real_clock;

/// Spin-free blocking for a whole world: an event count over one condition variable. A
/// notifier pays a fence and a load when nobody sleeps.
class notifier {
 public:
  void notify() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    notify_fenced();
  }
  /// notify() for a caller that issued a seq_cst fence after its last store.
  void notify_fenced() {
    if (sleepers_.load(std::memory_order_relaxed) > 0) {
      {
        std::lock_guard<std::mutex> l(m_);
        epoch_.fetch_add(1, std::memory_order_relaxed);
      }
      cv_.notify_all();
    }
  }
  /// Blocks until `ready()` may have become true, or `until`.
  template <class Ready>
  void block(Ready&& ready, real_clock::time_point until) {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const std::uint64_t key = epoch_.load(std::memory_order_acquire);
    if (!ready()) {
      std::unique_lock<std::mutex> l(m_);
      while (epoch_.load(std::memory_order_relaxed) == key) {
        if (cv_.wait_until(l, until) == std::cv_status::timeout) break;
      }
    }
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  std::atomic<int> sleepers_{0};
  std::atomic<std::uint64_t> epoch_{0};
  std::mutex m_;
  std::condition_variable cv_;
};

}  // namespace detail

}  // namespace heterograd::comm::inproc
