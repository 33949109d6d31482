#pragma once
// A method running on the wall clock beside the loop that watches it: what the method's
// threads (a server and its workers, the ranks of a round method) share with the evaluation
// loop, and the thread the method runs on.
//
//   live_run       the shared state: the model's lock (held while the model changes and while
//                  it is copied, so that an evaluation sees a model, never half an update), the
//                  counters the loop reads (updates, events, epochs, the model time of the last
//                  event), the wall clock's origin, and the checkpoint handshake (cut / hold)
//   method_thread  runs the method on a thread of its own; its end or its error wakes the loop
//
// Checkpoints take a consistent cut. The method calls cut() wherever its state is one (a
// server between two arrivals, a round's end); the loop calls hold(), which asks for the next
// cut and waits there, with the method stopped, until the returned function lets it go. A
// hold never waits past limit_s: past it the run fails, naming what it waited for. Before the
// method's threads start nothing runs, and the state is a cut as it is (hold returns at once).
//
// Evaluations never stall the workers: the loop copies the model under the lock (as long as a
// copy takes) and evaluates the copy while the method goes on.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

namespace heterograd::runtime {

/// The deadline of every receive and hold of the real-clock runtimes: a failing run ends
/// instead of hanging.
inline constexpr double real_clock_timeout_s = 300.0;

struct live_run {
  using clock = std::chrono::steady_clock;

  std::mutex model;  ///< held while the model changes and while it is copied
  std::mutex m;
  std::condition_variable cv;
  bool finished = false;
  clock::time_point ended{};  ///< when finished became true
  std::exception_ptr error;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> updates{0}, events{0};
  std::atomic<double> epochs{0}, last{0};  ///< passes so far; model time of the last event
  /// Model time 0 on the wall clock; a resumed run moves it back by the saved time.
  clock::time_point origin = clock::now();
  /// Starts the method's threads (the loop calls it at its first advance: after a checkpoint
  /// is loaded); the clock starts then (a fresh run's origin is reset there, a resumed run's
  /// was set by the load).
  std::function<void()> start;
  bool started = false;  ///< start ran (the loop's thread alone reads and writes it)
  bool resumed = false;
  bool pause = false, paused = false;
  std::atomic<bool> pause_requested{false};  ///< pause, readable without the lock
  /// How long a hold waits for the method's next cut and for `quiet()`. A cut is one arrival
  /// (servers) or one round (round methods) away, and the runtimes wait at most this long for
  /// each message of either, so a method that reached no cut within it will not.
  double limit_s = real_clock_timeout_s;

  void start_clock() {
    if (!resumed) origin = clock::now();
  }
  double seconds_since_origin() const { return std::chrono::duration<double>(clock::now() - origin).count(); }
  /// Model time now, for `unit` wall seconds a model time unit.
  double model_now(double unit) const { return seconds_since_origin() / unit; }
  /// Moves the origin so that model time `t` is now (a resumed run goes on from its cut's time).
  void resume_at(double t, double unit) {
    origin = clock::now() - std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(t * unit));
    last = t;
    resumed = true;
  }

  /// The method's thread at a consistent cut: waits there while a checkpoint copies the
  /// state. `at_cut` runs first, on the method's thread (what the checkpoint needs from it).
  template <class AtCut = void (*)()>
  void cut(AtCut at_cut = [] {}) {
    // Every server arrival passes here: no lock unless a checkpoint waits (a request seen one
    // arrival late is taken at the next cut).
    if (!pause_requested.load(std::memory_order_acquire)) return;
    std::unique_lock l(m);
    if (!pause) return;
    at_cut();
    paused = true;
    cv.notify_all();
    // Bounded without a deadline of its own: the loop lets go once the state is copied (or the
    // copy fails: the release runs in a destructor), and method_thread::join lets go too.
    cv.wait(l, [&] { return !pause; });
    paused = false;
  }

  /// The loop: stops the method at its next cut (and until `quiet()`, when given); the returned
  /// function lets it go on. Neither wait outlasts limit_s: past it the method is let go and
  /// std::runtime_error names what was waited for and the limit.
  std::function<void()> hold(const std::function<bool()>& quiet = {}) {
    // Before the method's threads start nothing runs: the state is the initial one (a fresh
    // run's, or the loaded checkpoint's), a consistent cut as it is.
    if (!started) return [] {};
    const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(limit_s));
    auto release = [this] {
      std::lock_guard l(m);
      pause = false;
      pause_requested.store(false, std::memory_order_release);
      cv.notify_all();
    };
    auto fail = [&](const char* what) {
      release();  // the method goes on to its stop instead of halting at a cut nobody saves
      std::ostringstream o;
      o << "heterograd: runtime: a checkpoint waited " << limit_s << " s (the real clock's receive deadline) for "
        << what << ", which did not happen";
      throw std::runtime_error(o.str());
    };
    bool at_cut = false;
    {
      std::unique_lock l(m);
      pause = true;
      pause_requested.store(true, std::memory_order_release);
      cv.notify_all();
      at_cut = cv.wait_until(l, deadline, [&] { return paused || finished; });
    }
    if (!at_cut) fail("the method to reach a consistent cut (a server between two arrivals, a round's end)");
    if (quiet)
      while (!quiet()) {
        if (clock::now() >= deadline) fail("the workers' gradients in flight to end at the cut");
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    return release;
  }
};

/// Runs a method's body on a thread of its own; its end (or error, kept in live_run::error)
/// wakes the loop.
class method_thread {
 public:
  method_thread(live_run& s, std::function<void()> body) : s_(s) {
    t_ = std::thread([this, b = std::move(body)] {
      try {
        b();
      } catch (...) {
        std::lock_guard l(s_.m);
        s_.error = std::current_exception();
      }
      std::lock_guard l(s_.m);
      s_.finished = true;
      s_.ended = live_run::clock::now();
      s_.cv.notify_all();
    });
  }
  method_thread(const method_thread&) = delete;
  method_thread& operator=(const method_thread&) = delete;
  /// Asks the method to stop (live_run::stop, read at its next arrival, round or vote) and
  /// waits for it. Bounded because every wait inside the method has a deadline.
  void join() {
    s_.stop = true;
    {
      std::lock_guard l(s_.m);  // a method held at a cut goes on, to its end
      s_.pause = false;
      s_.pause_requested.store(false, std::memory_order_release);
      s_.cv.notify_all();
    }
    if (t_.joinable()) t_.join();
  }
  ~method_thread() { join(); }

 private:
  live_run& s_;
  std::thread t_;
};

}  // namespace heterograd::runtime
