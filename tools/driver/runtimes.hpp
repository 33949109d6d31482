#pragma once
// The threads and MPI runtimes of heterograd-run: the same policy objects as on the simulated
// cluster, with real workers (threads of this process over comm::inproc, or MPI ranks), under
// the shared evaluation loop.
//
// Virtual time stays the configured worker-time model's, so horizons, evaluation times and
// the summary mean what they mean under sim.
//
// Asynchronous family (runtime/server.hpp): the library's recording wrappers
// (runtime/recording.hpp) drive a shadow simulator engine with the calls the simulated
// runtime would make, which gives the recorder the simulator's accounting and trace hash. The
// server runs on its own thread; the policy is gated so that before it is handed a result that
// arrives after the next evaluation time, the server parks; the evaluation loop (this thread)
// evaluates and moves the target on. Workers keep computing their jobs while the server is
// parked.
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
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "drive.hpp"
#include "realtime.hpp"
#include "heterograd/algorithms/sync/common.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/kernels/gemm.hpp"
#include "heterograd/runtime/recording.hpp"
#include "heterograd/runtime/round_threads.hpp"
#include "heterograd/runtime/server.hpp"
#include "heterograd/runtime/sim.hpp"
#include "heterograd/sim/engine.hpp"
#include "heterograd/sim/recorder.hpp"
#include "mpi_world.hpp"

namespace hgrun {


namespace rt_detail {

namespace hg = heterograd;
namespace sim = heterograd::sim;
namespace hr = heterograd::runtime;
namespace hs = heterograd::algorithms::sync;

// ---------------------------------------------------------------------------------------------
// Asynchronous family.

inline hr::remote_options remote_options_of(const context& ctx) {
  hr::remote_options o;
  o.order = hr::arrival_order::virtual_time;
  o.timeout = hg::seconds{runtime_timeout_s};
  o.batch = ctx.batch();
  return o;
}

/// The shadow's worker-time model, counting the samples of each job the server starts (what
/// a delivered result of a policy with per-worker batches counts).
struct counted_time_model {
  const hr::shadow_time_model<sim::any_time_model>* m;
  const problem* prob;
  std::vector<std::uint64_t>* job;  ///< per worker: its running job's samples
  std::uint64_t* started;           ///< samples of every job started
  double duration(sim::worker_id w, std::uint64_t k, double t, std::size_t b) const {
    const double d = m->duration(w, k, t, b);
    const auto n = static_cast<std::uint64_t>(prob->samples_per_gradient(b));
    job->at(w) = n;
    *started += n;
    return d;
  }
};

/// A thread running `serve()` (single-threaded kernels), which records in `g` an exception it
/// throws and that it finished.
template <class Serve>
std::thread serve_in_thread(hr::arrival_gate& g, Serve serve) {
  return std::thread([&g, serve] {
    single_threaded_here();
    try {
      serve();
    } catch (...) {
      std::lock_guard l(g.m);
      g.error = std::current_exception();
    }
    std::lock_guard l(g.m);
    g.finished = true;
    g.cv.notify_all();
  });
}

/// Runs policy `p` under the evaluation loop with `launch(gated_policy&, const
/// counted_time_model&)` serving it (returning when the server stops) on a thread of its own.
template <class Policy, class Launch>
json drive_remote(context& ctx, Policy& p, sim::any_time_model model, Launch launch) {
  hr::shadow_run s(ctx.workers());
  s.version = [&p] { return static_cast<std::uint64_t>(p.version()); };
  const hr::shadow_time_model<sim::any_time_model> shadow{&model, &s};
  std::vector<std::uint64_t> job_samples(ctx.workers(), 0);
  std::uint64_t started_samples = 0;
  const counted_time_model sm{&shadow, &ctx.prob, &job_samples, &started_samples};
  hr::arrival_gate g;
  const stop_rule rule = stop_rule_of(ctx);
  auto epochs = [&] {  // stop_rule: a delivered result counts its batch
    std::uint64_t samples = s.eng.events_delivered() * ctx.prob.samples_per_gradient(ctx.batch());
    if constexpr (per_worker_batches<Policy>) {  // its job's batch
      samples = started_samples;
      for (std::size_t w = 0; w < ctx.workers(); ++w)
        if (s.eng.state(static_cast<sim::worker_id>(w)) == sim::worker_state::busy) samples -= job_samples[w];
    }
    return static_cast<double>(samples) / static_cast<double>(ctx.prob.train_size());
  };
  auto reached = [&] { return rule.reached(static_cast<std::uint64_t>(p.version()), epochs()); };
  if (rule.active()) g.reached = reached;
  hr::gated_policy<Policy> gp(p, s, g);
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
    if (!server.joinable()) server = serve_in_thread(g, [&] { launch(gp, sm); });
    else g.cv.notify_all();
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

/// The workers' gradient: at the parameters the job carries, of the job's batch (the method's,
/// or what a policy with per-worker batches gave the worker), on the worker's sample stream.
inline auto remote_compute(context& ctx) {
  const std::size_t d = ctx.prob.dim();
  problem* prob = &ctx.prob;
  return [prob, d](sim::worker_id w, std::uint64_t, std::uint64_t, std::size_t b, hg::span<const float> x,
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

}  // namespace rt_detail

/// An asynchronous policy (a server of algorithms/async) on the configured real runtime.
template <class Policy>
json drive_server_real(context& ctx, Policy& p, heterograd::sim::any_time_model model) {
  namespace hr = heterograd::runtime;
  namespace d = rt_detail;
  if (ctx.exp.real_clock) {
    if constexpr (requires { p.params_for(heterograd::sim::worker_id{}); })
      throw std::logic_error("drive_server_real: a policy with per-worker replicas has no real-clock server");
    else
      return drive_server_wall(ctx, p, model);
  }
  const auto o = d::remote_options_of(ctx);
  auto compute = d::remote_compute(ctx);
  ctx.extra["runtime"] = ctx.runtime();
  if (ctx.runtime() == "threads") {
    const int n = static_cast<int>(ctx.workers());
    return d::drive_remote(ctx, p, std::move(model), [&](auto& gp, const d::counted_time_model& sm) {
      heterograd::comm::inproc::spawn(n + 1, [&](heterograd::comm::inproc::communicator c) {
        single_threaded_here();
        if (c.rank() == 0) hr::serve<float>(gp, c, o, sm);
        else hr::work<float>(c, ctx.prob.dim(), compute, o);
      });
    });
  }
  // Rank 0 serves (on a thread beside the evaluation loop); ranks 1..n are the workers.
  return with_world<json>([&](const auto& c) {
    if (c.rank() != 0) {
      hr::work<float>(c, ctx.prob.dim(), compute, o);
      return json();
    }
    return d::drive_remote(ctx, p, std::move(model),
                           [&](auto& gp, const d::counted_time_model& sm) { hr::serve<float>(gp, c, o, sm); });
  });
}

/// Runs `rounds(from, to)` of `real` (a policy of algorithms/sync: bsp, local_sgd, selsync)
/// on the configured real runtime: threads of this process, or this MPI rank's worker.
template <class Real>
std::function<void(std::uint64_t, std::uint64_t)> real_rounds(context& ctx, Real& real) {
  namespace hs = heterograd::algorithms::sync;
  hs::worker_options options;
  options.timeout = heterograd::seconds{runtime_timeout_s};
  if (ctx.runtime() == "threads")
    // The oracle sets each worker thread's OpenMP team on its first call (oracle::operator()).
    return [&real, options](std::uint64_t from, std::uint64_t to) {
      heterograd::runtime::run_threads(real, to - from, options);
    };
  // Rank w is worker w; every rank runs the same shadow (so the same rounds), rank 0 evaluates.
  // One communicator for all the calls (made here, by every rank: its construction is a
  // collective).
  return [&real, options, world = make_world()](std::uint64_t from, std::uint64_t to) {
    with_world<void>(world, [&](const auto& c) { run_rounds_mpi(real, c, to - from, options); });
  };
}

/// A round policy on the configured real runtime; `params()` is the model evaluated (worker
/// 0's replica or the anchor). `p` gives the timing (batch(w), steps_in_round(w, r),
/// communication_time(r)); `wiring` how the real rounds run in the simulator's order (default:
/// p's own rounds on runtime::run_threads / run_mpi). On the real clock p's own rounds run
/// through runtime::run (drive_rounds_wall).
template <class Policy, class Params>
json drive_rounds_real(context& ctx, Policy& p, Params params, heterograd::sim::any_time_model model,
                       rt_detail::round_wiring wiring = {}) {
  ctx.extra["runtime"] = ctx.runtime();
  if (ctx.exp.real_clock) {
    // Clock real: runtime::run's rounds (realtime.hpp); an adapter (OmniLearn, biased local
    // SGD) calls drive_rounds_wall itself, with its method and what acts between rounds.
    if constexpr (heterograd::runtime::per_rank_round_policy<Policy>)
      return drive_rounds_wall(ctx, heterograd::runtime::rounds_of{p, params}, model);
    else
      throw std::logic_error("drive_rounds_real: an adapter runs on the real clock through drive_rounds_wall");
  }
  if (!wiring.run) {
    if constexpr (heterograd::runtime::per_rank_round_policy<Policy>) wiring.run = real_rounds(ctx, p);
    else throw std::logic_error("drive_rounds_real: no real runner for this policy");
  }
  return rt_detail::drive_rounds_remote(ctx, p, params, std::move(model), wiring);
}

}  // namespace hgrun
