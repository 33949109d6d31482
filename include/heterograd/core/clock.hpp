#pragma once
// Clocks are injected, never read globally: timeouts, deadlines and worker-time models take a
// clock, so tests advance a manual_clock instead of sleeping. Time is double seconds.

#include <atomic>
#include <chrono>
#include <memory>

#include "heterograd/core/error.hpp"

namespace heterograd {

using seconds = std::chrono::duration<double>;

/// Real monotonic time since the clock's creation.
class steady_clock {
 public:
  steady_clock() : origin_(std::chrono::steady_clock::now()) {}
  seconds now() const { return std::chrono::steady_clock::now() - origin_; }
  /// The real time this clock counts from.
  std::chrono::steady_clock::time_point origin() const { return origin_; }
  static constexpr bool is_manual = false;

 private:
  std::chrono::steady_clock::time_point origin_;
};

/// Time that moves only when told to. Copies share one time line (a cheap handle), so a test
/// can hand a copy to a component and advance it from outside, from any thread.
class manual_clock {
 public:
  explicit manual_clock(seconds start = seconds{0})
      : now_(std::make_shared<std::atomic<double>>(start.count())) {
    require_non_negative("manual_clock.start", start.count());
  }
  seconds now() const { return seconds{now_->load(std::memory_order_acquire)}; }
  /// Moves time forward by `d` (d >= 0).
  void advance(seconds d) {
    require_non_negative("manual_clock.advance", d.count());
    double cur = now_->load(std::memory_order_relaxed);
    while (!now_->compare_exchange_weak(cur, cur + d.count(), std::memory_order_acq_rel)) {
    }
  }
  /// Sets the time to `t`, which may not be in the past.
  void set(seconds t) {
    double cur = now_->load(std::memory_order_relaxed);
    require(t.count() >= cur, "manual_clock.set", t.count(), "must not move time backwards");
    now_->store(t.count(), std::memory_order_release);
  }
  static constexpr bool is_manual = true;

 private:
  std::shared_ptr<std::atomic<double>> now_;
};

}  // namespace heterograd
