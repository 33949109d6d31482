#pragma once
// A request is the future of one posted operation (Gloo / c10d's Work): test() advances it
// without blocking, wait(timeout) drives it to completion or to its deadline, and an error
// that happened in flight is stored and rethrown by wait(). Requests are cheap copyable
// handles; copies share the operation.
//
// A request is [[nodiscard]]: a posted operation lends its buffers until it completes, so a
// dropped request is a bug the compiler reports (-Wunused-result). Dropping the last handle of
// an operation that has not finished (the rank unwinds from an exception, or the caller simply
// let it go) abandons it: the transport withdraws it or aborts its group, and waits until no
// peer can touch its buffers any more before the handle's destructor returns.
//
// Waiting spins first, then yields, then blocks (each transport says how: a condition
// variable for inproc, a backoff sleep between MPI_Test polls for mpi). Spinning alone
// collapses when ranks outnumber cores: a spinning rank burns the time slice the rank it
// waits for needs, so the spin budget is cut to almost nothing when oversubscribed.

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "heterograd/comm/types.hpp"
#include "heterograd/core/clock.hpp"

// x86's pause instruction through the compiler's builtin where there is one: <immintrin.h>
// alone costs every includer about a second of compile time.
#if (defined(__x86_64__) || defined(__i386__)) && !defined(__GNUC__)
#include <immintrin.h>
#endif

namespace heterograd::comm {

class request;

namespace detail {

inline void cpu_relax() {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  __builtin_ia32_pause();
#elif defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

using real_clock = std::chrono::steady_clock;

/// The clock a group measures deadlines with: real time (steady_clock) or any injected
/// clock (a manual_clock in tests). Type-erased, except real time, which is read directly
/// (every collective reads it once, to set its deadline).
class time_source {
 public:
  time_source() = default;
  template <class Clock>
  explicit time_source(Clock c) : real_(std::is_same_v<Clock, heterograd::steady_clock>) {
    if constexpr (std::is_same_v<Clock, heterograd::steady_clock>)
      origin_ = c.origin();
    else
      now_ = [c]() { return seconds{c.now()}; };
  }
  seconds now() const { return real_ ? seconds{real_clock::now() - origin_} : now_(); }
  /// True when the clock follows real time, so a blocking wait can sleep until the deadline.
  bool real() const { return real_; }

 private:
  std::function<seconds()> now_{};
  real_clock::time_point origin_{};
  bool real_ = true;
};

/// How long a waiter spins before it blocks. A poll with a pause costs ~40 ns, so the default
/// spins ~3 us: enough for a peer that is running to arrive, short enough that a peer that
/// was descheduled (ranks outnumber cores, or other processes load the machine) costs one
/// blocking wake-up (~10 us) instead of a time slice of spinning (~100 us or more).
///
/// With a thread per core, the yields then go on for `yield_window` (sched_yield hands the
/// core to anything runnable, so this costs a loaded machine little) before the waiter blocks.
/// Blocking is an absorbing state otherwise: once two ranks each sleep until the other wakes
/// them, every call pays a wake-up (30-45 us on the development VM) and no spin, however long
/// in polls, outlasts it; one run in 12-36 of a 2-rank benchmark collapsed that way. A window
/// longer than a wake-up lets the waiter see the woken peer and the pair leaves that state.
struct wait_policy {
  int spin_polls = 64;
  int yield_polls = 4;
  double yield_window_us = 0;  ///< keep yielding until this long after the spin (0: off)
  static wait_policy for_threads(unsigned threads_in_use) {
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    if (threads_in_use > hw) return {8, 2};
    return {64, 4, 100.0};
  }
};

/// The state of one operation. Transports derive from it; only this header's request class
/// and the transports touch it.
class request_state {
 public:
  request_state() = default;
  request_state(const request_state&) = delete;
  request_state& operator=(const request_state&) = delete;
  virtual ~request_state() = default;

  bool finished() const { return done_; }

  /// Called when the last request handle of an unfinished operation goes (see request).
  /// Transports make the operation stop touching the caller's buffers, on this rank and on
  /// every peer, before it returns: a withdrawn receive, an aborted collective that waited
  /// until no peer works on it. Must not throw (it runs in a destructor).
  virtual void abandon_pending() noexcept {}
  const std::exception_ptr& error() const { return error_; }
  const comm::status& status() const { return status_; }

  /// Non-blocking progress; true once the operation finished (successfully or not).
  bool test() {
    if (step()) return true;
    if (anchor(clock_.now()) >= deadline_) expire("its deadline passed");
    return done_;
  }

  /// Blocks until `until` or until the operation may have progressed (for composite waits).
  void block(real_clock::time_point until) { idle(until); }
  /// Withdraws an unfinished operation if the transport can (a posted receive, an unmatched
  /// send), so that no buffer stays registered after its request failed.
  virtual void cancel() {}

  /// Drives the operation until it finishes or `timeout` (or its own deadline) passes.
  void wait(seconds timeout) {
    if (step()) return;  // often done already: no clock read
    const bool unlimited = timeout == seconds::max();
    const seconds start = anchor(clock_.now());
    const bool by_wait = !unlimited && start + timeout < deadline_;
    const seconds until = by_wait ? start + timeout : deadline_;
    // Adaptive spinning (a transport may keep a budget per rank): a spin that saw the
    // operation complete doubles the next budget, one that ran out halves it, within
    // [spin_polls / 16, 4 * spin_polls]. When the peers run on other cores spinning keeps
    // succeeding and stays; when the scheduler put a peer on this core (it does after
    // blocking wake-ups) every spin only delays it, and the budget falls to a few polls.
    int* budget = policy_.spin_polls >= 16 ? adaptive_spin() : nullptr;
    const int spins = budget ? *budget : policy_.spin_polls;
    for (int i = 0; i < spins; ++i) {
      cpu_relax();
      if (step()) {
        if (budget) *budget = std::min(4 * policy_.spin_polls, 2 * *budget);
        return;
      }
    }
    if (budget) *budget = std::max(policy_.spin_polls / 16, *budget / 2);
    const auto yield_end =
        policy_.yield_window_us > 0
            ? real_clock::now() +
                  std::chrono::duration_cast<real_clock::duration>(
                      std::chrono::duration<double, std::micro>(policy_.yield_window_us))
            : real_clock::time_point{};
    for (int i = 0;
         i < policy_.yield_polls || (policy_.yield_window_us > 0 && real_clock::now() < yield_end);
         ++i) {
      std::this_thread::yield();
      if (step()) return;
    }
    for (;;) {
      const seconds now = clock_.now();
      if (now >= until) {
        expire(by_wait ? "wait(timeout) passed" : "its deadline passed");
        return;
      }
      // Block until something may have changed; with a manual clock, in short real slices
      // so that a test advancing the clock is seen promptly.
      const auto slice = std::chrono::duration_cast<real_clock::duration>(
          clock_.real() ? (until - now) : seconds{0.0005});
      idle(real_clock::now() + slice);
      if (step()) return;
    }
  }

  /// The operation's deadline: `timeout` after its post. On a manual clock it is read at the
  /// post. In real time it is read when first needed, by the first test() or wait() that
  /// finds the operation unfinished (at or after the post): a deadline may be late by the
  /// time between the post and that call, never early, and an operation that completes at
  /// once costs no clock read (about 25 ns of a 0.35 us allreduce here).
  void set_deadline(const time_source& clock, seconds timeout, wait_policy policy) {
    clock_ = clock;
    timeout_ = timeout;
    anchored_ = !clock_.real();
    if (anchored_) deadline_ = clock_.now() + timeout;
    policy_ = policy;
  }
  seconds deadline() {
    if (!anchored_) anchor(clock_.now());
    return deadline_;
  }

 protected:
  /// Advances the operation; returns true when it completed. May throw (stored as error).
  virtual bool progress() = 0;
  /// Blocks until `until` (real time) or until the operation may have progressed.
  virtual void idle(real_clock::time_point until) {
    std::this_thread::sleep_until(
        std::min(until, real_clock::now() + std::chrono::microseconds(50)));
  }
  /// Called once when the deadline passes first: the default fails with timeout_error.
  /// Transports override it to withdraw the operation (p2p) or abort the group (collectives).
  virtual void on_timeout(const std::string& what) {
    fail(std::make_exception_ptr(timeout_error(what)));
  }
  /// The spin budget (polls) this operation's rank adapts across waits, or null for the
  /// policy's fixed budget.
  virtual int* adaptive_spin() { return nullptr; }
  /// What the operation is, for error messages ("allreduce of 1024 f32 on rank 2").
  virtual std::string describe() const { return "operation"; }

  bool finish() {
    done_ = true;
    return true;
  }
  /// Makes a finished state pending again, for a transport that reuses its states (the caller
  /// then sets a new deadline).
  void rearm() {
    done_ = false;
    error_ = nullptr;
    status_ = {};
  }
  void fail(std::exception_ptr e) {
    if (!done_) {
      error_ = std::move(e);
      done_ = true;
    }
  }
  comm::status status_{};

 private:
  // One attempt to progress: true once finished, with or without an error (the deadline is
  // the caller's to check).
  bool step() {
    if (done_) return true;
    try {
      if (progress()) return finish();
    } catch (...) {
      fail(std::current_exception());
      return true;
    }
    return false;
  }
  void expire(const char* why) {
    on_timeout("heterograd: comm: " + describe() + " timed out: " + why);
    if (!done_)
      fail(
          std::make_exception_ptr(timeout_error("heterograd: comm: " + describe() + " timed out")));
  }

  /// Sets a real-time deadline from `now` (a reading at or after the post) if not yet set;
  /// returns `now`.
  seconds anchor(seconds now) {
    if (!anchored_) {
      deadline_ = timeout_ == seconds::max() ? seconds::max() : now + timeout_;
      anchored_ = true;
    }
    return now;
  }

  friend class comm::request;
  int handles_ = 0;  // request handles sharing this state (one thread drives a rank's requests)
  bool done_ = false;
  bool anchored_ = true;
  std::exception_ptr error_{};
  time_source clock_{};
  seconds timeout_{seconds::max()};
  seconds deadline_{seconds::max()};
  wait_policy policy_{};
};

/// An operation that is already over (completed at post, or failed before it was posted).
class ready_state final : public request_state {
 public:
  ready_state() { finish(); }
  explicit ready_state(std::exception_ptr e) { fail(std::move(e)); }
  explicit ready_state(const comm::status& s) {
    status_ = s;
    finish();
  }

 protected:
  bool progress() override { return true; }
};

/// Internal access to a request's state (composite operations block on their parts).
struct request_access {
  static request_state* state(const request& r);
};

}  // namespace detail

/// Infinite wait for request::wait(): the operation's own deadline still applies.
inline constexpr seconds no_wait_limit = seconds::max();

/// The handle of a posted operation. [[nodiscard]]: an operation's buffers stay lent to the
/// transport until it completes, so a caller that drops the request without waiting gets a
/// compiler warning; at run time, dropping the last handle of an unfinished operation
/// abandons it (request_state::abandon_pending: withdrawn or aborted, and no peer touches
/// its buffers once the destructor returned).
class [[nodiscard]] request {
 public:
  /// An empty request counts as completed.
  request() = default;
  explicit request(std::shared_ptr<detail::request_state> s) : s_(std::move(s)) {
    if (s_) ++s_->handles_;
  }
  request(const request& o) : s_(o.s_) {
    if (s_) ++s_->handles_;
  }
  request(request&& o) noexcept = default;
  request& operator=(const request& o) {
    if (this != &o) {
      request copy(o);
      *this = std::move(copy);
    }
    return *this;
  }
  request& operator=(request&& o) noexcept {
    if (this != &o) {
      release();
      s_ = std::move(o.s_);
    }
    return *this;
  }
  ~request() {
    if (s_ && --s_->handles_ == 0 && !s_->done_) s_->abandon_pending();
  }

  /// Advances the operation without blocking; true once it is over (wait() then returns or
  /// rethrows immediately).
  bool test() { return !s_ || s_->test(); }

  /// Waits until the operation completes, at most `timeout` (and never past the deadline its
  /// options set). A timeout fails the operation with timeout_error. Rethrows the stored error.
  void wait(seconds timeout = no_wait_limit) {
    if (!s_) return;
    s_->wait(timeout);
    if (s_->error()) std::rethrow_exception(s_->error());
  }

  /// The stored error of a finished operation (null if it succeeded or is still running).
  std::exception_ptr error() const { return s_ ? s_->error() : nullptr; }
  /// Source, tag and size of a completed receive.
  comm::status status() const { return s_ ? s_->status() : comm::status{}; }

  static request completed() { return request(std::make_shared<detail::ready_state>()); }
  static request failed(std::exception_ptr e) {
    return request(std::make_shared<detail::ready_state>(std::move(e)));
  }

 private:
  friend struct detail::request_access;
  // Assignment's release of the old state: the destructor's check, then the reset. The check
  // is one decrement and one test of a flag the last wait has just read (8 instructions more
  // per call, of ~800 for a 1-rank allreduce of 16 floats, by callgrind).
  void release() noexcept {
    if (s_ && --s_->handles_ == 0 && !s_->done_) s_->abandon_pending();
    s_.reset();
  }
  std::shared_ptr<detail::request_state> s_{};
};

inline detail::request_state* detail::request_access::state(const request& r) {
  return r.s_.get();
}

/// Waits for every request (each within `timeout`), then rethrows the first error met.
template <class Range>
void wait_all(Range& requests, seconds timeout = no_wait_limit) {
  std::exception_ptr first{};
  for (auto& r : requests) {
    try {
      r.wait(timeout);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace heterograd::comm
