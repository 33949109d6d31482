#pragma once
// The threads and MPI runtimes of heterograd-run: the same policy objects as on the simulated
// cluster, with real workers (threads of this process over comm::inproc, or MPI ranks), under
// the shared evaluation loop.
//
// Virtual time stays the configured worker-time model's, so horizons, evaluation times and
// the summary mean what they mean under sim. A "shadow" simulator engine is driven by exactly
// the calls the simulated runtime would make (job starts, holds, releases, interruptions,
// deliveries, clock moves to evaluation times), which gives the recorder the simulator's
// per-worker accounting, update counts, staleness histograms, event count and trace hash.
//
// Asynchronous family (runtime/server.hpp): the server hands results to the policy
// in arrival_order::virtual_time, which is the simulator's order, so a deterministic policy
// ends with bitwise the simulator's parameters. The server runs on its own thread; the policy
// is wrapped ("gated") so that before it is handed a result that arrives after the next
// evaluation time, the server parks; the evaluation loop (this thread) evaluates and moves the
// target on. Workers keep computing their jobs while the server is parked.
//
// Round family (heterograd/runtime/rounds.hpp): a shadow runtime::round_runtime with a timing-only
// policy says how many rounds finish by the next evaluation time; the real runtime
// (runtime::run_threads / runtime::run_mpi) then runs exactly those rounds on its workers. A
// round_wiring lets a method act between real rounds (OmniLearn's controller at a round's
// end, biased local SGD's redraws) or run a round before the shadow ends it (SelSync: the
// step's vote decides its communication time; evaluations keep the model before the step
// until the shadow reaches its end).
//
// Horizons in updates or epochs (stop_rule) stop the shadow right after the event that meets
// them, as the simulated run stops; a gated server parks before the next arrival.

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "drive.hpp"
#include "heterograd/algorithms/sync/common.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/kernels/gemm.hpp"
#include "heterograd/runtime/round_threads.hpp"
#include "heterograd/runtime/server.hpp"
#include "heterograd/runtime/sim.hpp"
#include "heterograd/sim/engine.hpp"
#include "heterograd/sim/recorder.hpp"
#ifdef HG_HAS_MPI
#include "heterograd/comm/mpi.hpp"
#include "heterograd/runtime/round_mpi.hpp"
#endif

namespace hgrun {

/// Deadline of every receive of the real runtimes (a failing run ends instead of hanging).
inline constexpr double runtime_timeout_s = 300.0;

namespace rt_detail {

namespace hg = heterograd;
namespace sim = heterograd::sim;
namespace hr = heterograd::runtime;
namespace hs = heterograd::algorithms::sync;

// ---------------------------------------------------------------------------------------------
// Asynchronous family.

/// The simulator's engine and recorder, fed by the remote server's calls (server thread only,
/// or the evaluation thread while the server is parked).
struct shadow {
  sim::engine eng;
  sim::recorder rec;
  std::uint64_t started = 0;  ///< jobs started (each computes one mini-batch gradient)
  /// The worker whose job the server is starting (set by shadow_model::duration, which the
  /// server calls right before it sends the job's parameters): eager-SGD sends that worker's
  /// own replica (params_for).
  sim::worker_id starting = 0;
  std::function<std::uint64_t()> version;
  explicit shadow(std::size_t n) : eng(n), rec(n) {}
};

/// The worker-time model as the remote server sees it: the configured model at the method's
/// batch (the server asks with batch 1), which also starts the job in the shadow engine with
/// the simulator's tag (the model version).
struct shadow_model {
  const sim::any_time_model* base;
  std::size_t batch;
  shadow* s;
  double duration(sim::worker_id w, std::uint64_t k, double t, std::size_t) const {
    const double d = base->duration(w, k, t, batch);
    if (std::isnan(d) || d < 0) return d;  // the server rejects it
    if (t != s->eng.now() || k != s->eng.next_job_index(w))
      throw std::logic_error("threads/mpi runtime: the shadow simulator diverged from the server");
    s->starting = w;
    s->eng.start(w, d, s->version());
    ++s->started;
    return d;
  }
};

/// The control handle the policy sees: the remote server's, mirrored into the shadow engine
/// and recorder in the order the simulator's control makes them.
template <class Ctl>
struct shadow_control {
  Ctl& c;
  shadow& s;
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
};

/// The handshake between the server thread and the evaluation loop.
struct gate {
  std::mutex m;
  std::condition_variable cv;
  double target = 0;             ///< the server may hand over arrivals at or before this time
  std::uint64_t want = 0;        ///< advance() calls so far
  std::uint64_t parked_for = 0;  ///< the advance() the server last parked for
  bool finished = false, stop = false;
  /// The horizon's stop rule (stop_rule) held when the server came to its next arrival: the
  /// run ended at the shadow clock's time, the arrival is not handed over.
  bool limited = false;
  std::function<bool()> reached;  ///< the stop rule (empty: none); server thread only
  std::exception_ptr error;
};

/// The policy as the remote server drives it: parks before an arrival later than the gate's
/// target; after stop, holds every worker that reports (the run is over, nothing is applied).
template <class Policy>
class gated {
 public:
  gated(Policy& p, shadow& s, gate& g) : p_(p), s_(s), g_(g) {}
  std::size_t workers() const { return p_.workers(); }
  std::size_t dim() const { return p_.dim(); }
  std::uint64_t version() const { return p_.version(); }
  /// The parameters a starting job carries: the policy's model, or (a policy with one
  /// replica per worker, eager-SGD) the starting worker's replica.
  auto params() const {
    if constexpr (requires { p_.params_for(sim::worker_id{}); }) return p_.params_for(s_.starting);
    else return p_.params();
  }

  template <class Ctl>
  void on_start(Ctl& c) {
    shadow_control<Ctl> sc{c, s_};
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
      throw std::logic_error("threads/mpi runtime: the shadow simulator diverged from the server");
    shadow_control<Ctl> sc{c, s_};
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
        // sim::run's clock move to its horizon (the evaluation time) before parking.
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
  shadow& s_;
  gate& g_;
};

inline hr::remote_options remote_options_of() {
  hr::remote_options o;
  o.order = hr::arrival_order::virtual_time;
  o.timeout = hg::seconds{runtime_timeout_s};
  return o;
}

/// Runs policy `p` under the evaluation loop with `launch(gated&, const shadow_model&)`
/// serving it (returning when the server stops) on a thread of its own.
template <class Policy, class Launch>
json drive_remote(context& ctx, Policy& p, sim::any_time_model model, Launch launch) {
  shadow s(ctx.workers());
  s.version = [&p] { return static_cast<std::uint64_t>(p.version()); };
  const shadow_model sm{&model, ctx.batch(), &s};
  gate g;
  const stop_rule rule = stop_rule_of(ctx);
  auto epochs = [&] {  // stop_rule: a delivered result counts its batch
    return static_cast<double>(s.eng.events_delivered() * ctx.prob.samples_per_gradient(ctx.batch())) /
           static_cast<double>(ctx.prob.train_size());
  };
  auto reached = [&] { return rule.reached(static_cast<std::uint64_t>(p.version()), epochs()); };
  if (rule.active()) g.reached = reached;
  gated<Policy> gp(p, s, g);
  detail::describe(ctx, s.rec);
  std::thread server;
  auto stop = [&] {
    if (!server.joinable()) return;
    {
      std::lock_guard l(g.m);
      g.stop = true;
    }
    g.cv.notify_all();
    server.join();
  };
  struct joiner {
    std::function<void()> f;
    ~joiner() { f(); }
  } guard{stop};

  loop_hooks h;
  h.advance = [&](double t) {
    std::unique_lock l(g.m);
    if (g.error) std::rethrow_exception(g.error);
    if (s.eng.events_delivered() > 0 && s.eng.next_time() == sim::never) return false;
    g.target = t;
    ++g.want;
    if (!server.joinable()) {
      server = std::thread([&] {
        single_threaded_here();
        try {
          launch(gp, sm);
        } catch (...) {
          std::lock_guard l2(g.m);
          g.error = std::current_exception();
        }
        std::lock_guard l2(g.m);
        g.finished = true;
        g.cv.notify_all();
      });
    } else {
      g.cv.notify_all();
    }
    g.cv.wait(l, [&] { return g.parked_for == g.want || g.finished; });
    if (g.error) std::rethrow_exception(g.error);
    if (g.limited || (rule.active() && reached())) return true;  // the horizon: the clock stays
    if (g.finished && t > s.eng.now()) {  // nothing left to run: the clock still moves to t
      sim::event ev;
      s.eng.next(ev, t);
    }
    return true;
  };
  h.params = [&] {
    const auto x = p.params();
    return std::vector<float>(x.begin(), x.end());
  };
  h.updates = [&] { return static_cast<std::uint64_t>(p.version()); };
  h.events = [&] { return s.eng.events_delivered(); };
  h.epochs_done = epochs;
  h.now = [&] { return s.eng.now(); };
  h.save = [](heterograd::archive_writer&) { throw std::runtime_error("checkpoints need runtime \"sim\""); };
  h.load = [](heterograd::archive_reader&) { throw std::runtime_error("checkpoints need runtime \"sim\""); };
  const auto x = evaluation_loop(ctx, s.rec, h);
  s.rec.capture(s.eng);
  stop();
  if (g.error) std::rethrow_exception(g.error);
  return finish(ctx, s.rec, x);
}

/// The workers' gradient: at the parameters the job carries, on the worker's sample stream.
inline auto remote_compute(context& ctx) {
  const std::size_t b = ctx.batch(), d = ctx.prob.dim();
  problem* prob = &ctx.prob;
  return [prob, b, d](sim::worker_id w, std::uint64_t, std::uint64_t, hg::span<const float> x,
                      std::vector<float>& g) {
    single_threaded_here();
    g.resize(d);
    prob->gradient(w, b, std::span<const float>(x.data(), x.size()), std::span<float>(g.data(), g.size()));
  };
}

// ---------------------------------------------------------------------------------------------
// Round family.

/// How a round method runs on real workers (besides the shadow's timing).
struct round_wiring {
  /// Runs the real rounds [from, to) (SelSync: steps) on the workers; the adapter may act
  /// between rounds (biased local SGD's redraws). Empty: runtime::run_threads / run_mpi on the
  /// policy given to drive_rounds_real.
  std::function<void(std::uint64_t, std::uint64_t)> run;
  /// Optional: the shadow ended round r (at its virtual time), after the real rounds up to
  /// r + 1 ran; OmniLearn's controller acts here, between real rounds.
  std::function<void(std::uint64_t)> after_round;
  /// Optional: round r's communication time, read after the real round r ran (SelSync: the
  /// step's vote decides whether it synchronises). The model the evaluations see stays the
  /// one before round r until the shadow reaches its end.
  std::function<double(std::uint64_t)> communication;
};

/// The timing-only policy of the shadow round runtime: the real policy's batches and
/// communication times, the simulator's recorder calls, and the count of samples the
/// simulated run would have drawn.
template <class Policy>
struct round_timing {
  Policy& p;
  const round_wiring& wiring;
  std::function<void(std::uint64_t)> catch_up;   ///< runs the real rounds up to (excluding) r
  std::function<double(std::uint64_t)> ahead;    ///< runs real round r before the shadow ends it
  std::uint64_t samples = 0;
  std::uint64_t rounds_done = 0;  ///< rounds whose end (on_round) the shadow has reached
  std::size_t batch(std::size_t w) const { return p.batch(w); }
  double communication_time(std::uint64_t r) {
    if (wiring.communication) return ahead(r);
    return p.communication_time(r);
  }
  template <class Ctl>
  void on_round(Ctl& c, std::uint64_t r, std::vector<hs::round_stats>& res) {
    for (std::size_t w = 0; w < res.size(); ++w)
      if (res[w].steps > 0) c.applied(static_cast<std::uint32_t>(w), 0);
    rounds_done = r + 1;
    if (wiring.after_round) {
      catch_up(r + 1);
      wiring.after_round(r);
    }
  }
};

/// `p.steps_in_round(w, round)`: local steps of worker w in a round.
template <class Policy, class Params>
json drive_rounds_remote(context& ctx, Policy& p, Params params, sim::any_time_model model,
                         const round_wiring& wiring) {
  hr::round_runtime<hs::round_stats, sim::any_time_model> rt(ctx.workers(), std::move(model), ctx.batch());
  detail::describe(ctx, rt.recorder());
  if constexpr (requires { p.attach(rt.engine()); }) p.attach(rt.engine());
  std::uint64_t done = 0;     // real rounds run
  std::vector<float> before;  // the model before the real rounds the shadow has not ended yet
  auto current = [&] {
    const auto x = params();
    return std::vector<float>(x.begin(), x.end());
  };
  round_timing<Policy> timing{p, wiring, {}, {}};
  timing.catch_up = [&](std::uint64_t to) {
    if (to <= done) return;
    wiring.run(done, to);
    done = to;
  };
  timing.ahead = [&](std::uint64_t r) {
    timing.catch_up(r);
    before = current();
    timing.catch_up(r + 1);
    return wiring.communication(r);
  };
  std::uint64_t ended = 0;  // samples of the rounds that ended (stop_rule; drive_rounds')
  auto compute = [&](sim::worker_id w, std::uint64_t round, std::uint64_t, hs::round_stats& out) {
    if (w == 0) ended = timing.samples;
    out.steps = p.steps_in_round(w, round);
    out.loss = 0;
    timing.samples += static_cast<std::uint64_t>(ctx.prob.samples_per_gradient(p.batch(w))) * out.steps;
  };
  auto epochs = [&] { return static_cast<double>(ended) / static_cast<double>(ctx.prob.train_size()); };
  const stop_rule rule = stop_rule_of(ctx);
  loop_hooks h;
  h.advance = [&](double t) {
    const bool more = detail::advance_runtime(rt, timing, compute, t, rule,
                                              [&] { return rule.reached(rt.round(), epochs()); });
    if (more) timing.catch_up(timing.rounds_done);
    return more;
  };
  h.now = [&] { return rt.engine().now(); };
  h.params = [&] { return done > timing.rounds_done ? before : current(); };
  h.updates = [&] { return rt.round(); };
  h.events = [&] { return rt.engine().events_delivered(); };
  h.epochs_done = epochs;
  h.save = [](heterograd::archive_writer&) { throw std::runtime_error("checkpoints need runtime \"sim\""); };
  h.load = [](heterograd::archive_reader&) { throw std::runtime_error("checkpoints need runtime \"sim\""); };
  const auto x = evaluation_loop(ctx, rt.recorder(), h);
  rt.recorder().capture(rt.engine());
  ctx.extra["rounds"] = rt.round();
  return finish(ctx, rt.recorder(), x);
}

inline void no_mpi() {
  throw config_error("runtime", "expected \"sim\" or \"threads\": this heterograd-run was built without MPI");
}

}  // namespace rt_detail

/// An asynchronous policy (a server of algorithms/async) on the configured real runtime.
template <class Policy>
json drive_server_real(context& ctx, Policy& p, heterograd::sim::any_time_model model) {
  namespace hr = heterograd::runtime;
  namespace d = rt_detail;
  const auto o = d::remote_options_of();
  auto compute = d::remote_compute(ctx);
  ctx.extra["runtime"] = ctx.runtime();
  if (ctx.runtime() == "threads") {
    const int n = static_cast<int>(ctx.workers());
    return d::drive_remote(ctx, p, std::move(model), [&](auto& gp, const d::shadow_model& sm) {
      heterograd::comm::inproc::spawn(n + 1, [&](heterograd::comm::inproc::communicator c) {
        single_threaded_here();
        if (c.rank() == 0) hr::serve<float>(gp, c, o, sm);
        else hr::work<float>(c, ctx.prob.dim(), compute, o);
      });
    });
  }
#ifdef HG_HAS_MPI
  // Rank 0 serves (on a thread beside the evaluation loop); ranks 1..n are the workers.
  const heterograd::comm::mpi::communicator c(MPI_COMM_WORLD);
  if (c.rank() != 0) {
    hr::work<float>(c, ctx.prob.dim(), compute, o);
    return json();
  }
  return d::drive_remote(ctx, p, std::move(model),
                         [&](auto& gp, const d::shadow_model& sm) { hr::serve<float>(gp, c, o, sm); });
#else
  d::no_mpi();
  return json();
#endif
}

/// Runs `rounds(from, to)` of `real` (a policy of algorithms/sync: bsp, local_sgd, selsync)
/// on the configured real runtime: threads of this process, or this MPI rank's worker.
template <class Real>
std::function<void(std::uint64_t, std::uint64_t)> real_rounds(context& ctx, Real& real) {
  namespace hs = heterograd::algorithms::sync;
  hs::worker_options wo;
  wo.timeout = heterograd::seconds{runtime_timeout_s};
  if (ctx.runtime() == "threads")
    // The oracle sets each worker thread's OpenMP team on its first call (oracle::operator()).
    return [&real, wo](std::uint64_t from, std::uint64_t to) {
      heterograd::runtime::run_threads(real, to - from, wo);
    };
#ifdef HG_HAS_MPI
  // Rank w is worker w; every rank runs the same shadow (so the same rounds), rank 0 evaluates.
  return [&real, wo](std::uint64_t from, std::uint64_t to) {
    const heterograd::comm::mpi::communicator c(MPI_COMM_WORLD);
    heterograd::runtime::run_mpi(real, c, to - from, wo);
  };
#else
  rt_detail::no_mpi();
  return {};
#endif
}

/// A round policy on the configured real runtime; `params()` is the model evaluated (worker
/// 0's replica or the anchor). `p` gives the timing (batch(w), steps_in_round(w, r),
/// communication_time(r)); `wiring` how the real rounds run (default: p's own rounds on
/// runtime::run_threads / run_mpi).
template <class Policy, class Params>
json drive_rounds_real(context& ctx, Policy& p, Params params, heterograd::sim::any_time_model model,
                       rt_detail::round_wiring wiring = {}) {
  ctx.extra["runtime"] = ctx.runtime();
  if (!wiring.run) {
    if constexpr (heterograd::runtime::per_rank_round_policy<Policy>) wiring.run = real_rounds(ctx, p);
    else throw std::logic_error("drive_rounds_real: no real runner for this policy");
  }
  return rt_detail::drive_rounds_remote(ctx, p, params, std::move(model), wiring);
}

}  // namespace hgrun
