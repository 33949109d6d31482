#pragma once
// Recording a server policy's run on real workers (threads, MPI: runtime/server.hpp) as the
// simulator records it. A shadow simulator engine is driven by exactly the calls the
// simulated runtime (runtime/sim.hpp) would make: job starts, holds, releases, interruptions,
// deliveries and clock moves to the horizon. It gives the recorder the simulator's per-worker
// accounting, update counts, staleness histograms, event count and trace hash, so a run on
// real workers can be compared with the simulated one record for record.
//
// The server must take results in arrival_order::virtual_time (the simulator's order): then
// the shadow sees the same events in the same order and a deterministic policy ends with
// bitwise the simulator's parameters. Any divergence (a job started at another time or with
// another index than the shadow expects) is a std::logic_error, not a silent difference.
//
// The pieces, for a driver that evaluates the model at chosen virtual times while the server
// runs on its own thread:
//   shadow_run             the engine, the recorder and what the wrappers share;
//   shadow_time_model<M>   the worker-time model the server asks, starting each job in the shadow;
//   recording_control<C>   the control handle the policy sees, mirrored into the shadow;
//   arrival_gate           the handshake that parks the server before an arrival past a target
//   time; gated_policy<P>        the policy as the server drives it: parked at the gate, recorded.
//
// Thread safety: the shadow is touched by the server's thread, or by the driver's thread only
// while the server is parked at the gate (under arrival_gate::m).

#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>

#include "heterograd/sim/engine.hpp"
#include "heterograd/sim/recorder.hpp"

namespace heterograd::runtime {

/// The simulator's engine and recorder, fed by the remote server's calls.
struct shadow_run {
  sim::engine eng;
  sim::recorder rec;
  std::uint64_t started = 0;  ///< jobs started (each computes one mini-batch gradient)
  /// The worker whose job the server is starting (set by shadow_time_model::duration, which
  /// the server calls right before it sends the job's parameters): a policy with one replica
  /// per worker (eager-SGD) sends that worker's own (params_for).
  sim::worker_id starting = 0;
  /// The policy's model version (the tag the simulator gives a starting job).
  std::function<std::uint64_t()> version;
  explicit shadow_run(std::size_t workers) : eng(workers), rec(workers) {}
};

/// The worker-time model as the remote server sees it: `base` at the job's batch (the
/// server's remote_options::batch, or what the policy's set_batch gave the worker), starting
/// the job in the shadow engine with the simulator's tag.
template <class Model>
struct shadow_time_model {
  const Model* base;
  shadow_run* s;
  double duration(sim::worker_id w, std::uint64_t k, double t, std::size_t batch) const {
    const double d = base->duration(w, k, t, batch);
    if (std::isnan(d) || d < 0) return d;  // the server rejects it
    if (t != s->eng.now() || k != s->eng.next_job_index(w))
      throw std::logic_error("recording runtime: the shadow simulator diverged from the server");
    s->starting = w;
    s->eng.start(w, d, s->version());
    ++s->started;
    return d;
  }
};

/// The control handle the policy sees: the remote server's, mirrored into the shadow engine
/// and recorder in the order the simulator's control makes them.
template <class Ctl>
struct recording_control {
  Ctl& c;
  shadow_run& s;
  double now() const { return c.now(); }
  std::size_t workers() const { return c.workers(); }
  bool busy(sim::worker_id w) const { return c.busy(w); }
  bool waiting(sim::worker_id w) const { return c.waiting(w); }
  std::uint64_t version_of(sim::worker_id w) const { return c.version_of(w); }
  void restart(sim::worker_id w) { c.restart(w); }
  void hold(sim::worker_id w) {
    c.hold(w);
    s.eng.wait(w);
  }
  void release(sim::worker_id w) {
    s.eng.release(w);
    c.release(w);
  }
  void interrupt(sim::worker_id w) {
    s.rec.record_update(w, s.version() - c.version_of(w), sim::update_outcome::interrupted);
    s.eng.cancel(w);
    c.interrupt(w);
  }
  void applied(sim::worker_id w, std::uint64_t st) {
    s.rec.record_update(w, st, sim::update_outcome::applied);
    c.applied(w, st);
  }
  void buffered(sim::worker_id w, std::uint64_t st) {
    s.rec.record_update(w, st, sim::update_outcome::buffered);
    c.buffered(w, st);
  }
  void discarded(sim::worker_id w, std::uint64_t st) {
    s.rec.record_update(w, st, sim::update_outcome::discarded);
    c.discarded(w, st);
  }
  /// The batch of w's next jobs (the server times them at it, so the shadow does too).
  void set_batch(sim::worker_id w, std::size_t b)
    requires requires(Ctl& x, sim::worker_id v, std::size_t n) { x.set_batch(v, n); }
  {
    c.set_batch(w, b);
  }
};

/// The handshake between the server's thread and the driver's.
struct arrival_gate {
  std::mutex m;
  std::condition_variable cv;
  double target = 0;             ///< the server may hand over arrivals at or before this time
  std::uint64_t want = 0;        ///< advances the driver asked for so far
  std::uint64_t parked_for = 0;  ///< the advance the server last parked for
  bool finished = false, stop = false;
  /// The driver's stop rule held when the server came to its next arrival: the run ended at
  /// the shadow clock's time and the arrival is not handed over.
  bool limited = false;
  std::function<bool()> reached;  ///< the stop rule (empty: none); server thread only
  std::exception_ptr error;
};

/// The policy as the remote server drives it: parks before an arrival later than the gate's
/// target; after stop, holds every worker that reports (the run is over, nothing is applied).
template <class Policy>
class gated_policy {
 public:
  gated_policy(Policy& p, shadow_run& s, arrival_gate& g) : p_(p), s_(s), g_(g) {}
  std::size_t workers() const { return p_.workers(); }
  std::size_t dim() const { return p_.dim(); }
  std::uint64_t version() const { return p_.version(); }
  /// The parameters a starting job carries: the policy's model, or (a policy with one
  /// replica per worker, eager-SGD) the starting worker's replica.
  auto params() const {
    if constexpr (requires { p_.params_for(sim::worker_id{}); })
      return p_.params_for(s_.starting);
    else
      return p_.params();
  }

  template <class Ctl>
  void on_start(Ctl& c) {
    recording_control<Ctl> sc{c, s_};
    if constexpr (requires { p_.on_start(sc); }) {
      p_.on_start(sc);
    } else {
      for (std::size_t w = 0; w < c.workers(); ++w) sc.restart(static_cast<sim::worker_id>(w));
    }
  }

  /// The server is about to wait for the result finishing at t (virtual_time order): park
  /// here, before that wait, so that when the run ends (stop) the server stops at once
  /// instead of waiting for a computation it would only hold.
  bool ready(double t) { return wait_until(t); }

  template <class Ctl, class A, class G>
  void on_arrival(Ctl& c, const A& a, const G& g) {
    if (!wait_until(a.time)) {
      c.hold(a.worker);
      return;
    }
    sim::event ev;
    if (!s_.eng.next(ev) || ev.kind != sim::event_kind::job_finished || ev.worker != a.worker ||
        ev.time != a.time)
      throw std::logic_error("recording runtime: the shadow simulator diverged from the server");
    recording_control<Ctl> sc{c, s_};
    p_.on_arrival(sc, a, g);
  }

 private:
  bool wait_until(double t) {
    std::unique_lock l(g_.m);
    // The previous arrival (and the job restarts after it) met the stop rule: the simulated
    // run stops right after that event, so this arrival is never delivered.
    if (!g_.stop && !g_.limited && g_.reached && g_.reached()) g_.limited = true;
    while (!g_.stop && (g_.limited || t > g_.target)) {
      if (g_.parked_for != g_.want) {
        // The simulated run's clock move to its horizon (the target) before parking.
        sim::event ev;
        if (!g_.limited && g_.target > s_.eng.now()) s_.eng.next(ev, g_.target);
        g_.parked_for = g_.want;
        g_.cv.notify_all();
      }
      g_.cv.wait(l);
    }
    return !g_.stop;
  }
  Policy& p_;
  shadow_run& s_;
  arrival_gate& g_;
};

}  // namespace heterograd::runtime
