#pragma once
// The simulated runtime: drivers over the sim engine, where algorithm policies plug in.
//
// 1. runtime::run(engine, handler, options): the generic event loop. The handler reacts to
//    delivered events (on_job_finished, on_timer), may evaluate the model at virtual-time
//    intervals (evaluate) and may stop the run (done). Everything else (which job to start,
//    when to cancel, wait, release) is the handler's business, through the engine's API.
//
// 2. runtime::async_runtime: a parameter server with n asynchronous workers, for the
//    asynchronous policies (vanilla / delay-adaptive ASGD, Ringmaster, Rennala, Rescaled ASGD,
//    IA2SGD, Ringleader, SSP / DSSP, ...). The policy is a plain object with no threads and
//    no I/O (runtime/concepts.hpp: async_policy):
//        std::uint64_t version() const;                          // server model version k
//        template <class Ctl>
//        void on_arrival(Ctl& ctl, const arrival& a, Result& r); // r computed at a.version
//        template <class Ctl> void on_start(Ctl& ctl);           // optional
//    and it answers through the control handle `ctl` (async_control: members only, so a
//    policy never needs to name a simulator type): ctl.applied / buffered / discarded
//    (worker, staleness) report the outcome; ctl.restart(w), ctl.hold(w), ctl.release(w),
//    ctl.interrupt(w) steer workers; ctl.now(), ctl.workers(), ctl.version_of(w) observe. A
//    worker left idle after on_arrival restarts at the current version (the ASGD default); a
//    held worker stays blocked until some later on_arrival releases it, and then starts at
//    that very instant. The real computation runs when a job starts: the runtime calls
//        compute(worker, version, job_index, Result& out)
//    on the parameters as they are then, and hands `out` to the policy at the job's virtual
//    finish time. An interrupted job's result is never handed over.
//    Churn (set_churn, sim/churn.hpp; docs/elastic.md): at a leave the worker's job in
//    flight is lost (cancelled, counted in lost_jobs(), never handed over) and the policy's
//    on_leave(ctl, w) runs; at a join the policy's on_join(ctl, w) runs and the worker, if
//    still idle, starts at the current version; a stall delays the worker's job times. The
//    hooks are optional (concepts.hpp: has_on_leave / has_on_join).
//
// 3. runtime::round_runtime: synchronous rounds for BSP / local-SGD style policies
//    (round_policy):
//        template <class Ctl>
//        void on_round(Ctl& ctl, std::uint64_t round, std::vector<Result>& contributions);
//        std::size_t batch(worker_id) const;                     // optional, per-worker b_i
//        double communication_time(std::uint64_t round) const;  // optional
//    Every worker computes round r's job at version r; workers that finish early wait at the
//    barrier; the round ends at the slowest finish plus the communication time, then
//    on_round is called and round r+1 starts.
//
// The threads and MPI runtimes (runtime/server.hpp) offer the same control members, so a
// policy written once runs under all three.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/runtime/concepts.hpp"
#include "heterograd/runtime/options.hpp"
#include "heterograd/sim/churn.hpp"
#include "heterograd/sim/engine.hpp"
#include "heterograd/sim/recorder.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace heterograd::runtime {


struct run_summary {
  std::uint64_t events = 0;
  std::uint64_t evaluations = 0;
  double end_time = 0;
  bool stopped = false;  ///< the handler's done() ended the run
};

/// Drives `eng` with `h` until the horizon, max_events, done(), or no event is left.
template <class Handler>
run_summary run(sim::engine& eng, Handler& h, const run_options& opt = {}) {
  opt.validate();
  opt.membership.require_real_time(false, "run_options.membership.elastic",
                                   "; the simulator's churn is async_runtime::set_churn (sim/churn.hpp)");
  run_summary s;
  const double t0 = eng.now();
  const double dt = opt.eval_interval;
  double next_eval = dt > 0 ? t0 : sim::never;
  std::uint64_t j = 0;
  sim::event ev;
  for (;;) {
    const double t = eng.next_time();
    const bool more = t != sim::never && t <= opt.horizon;
    // Evaluations due strictly before the next event (or, with no event left before the
    // horizon, up to the horizon when it is finite).
    while (dt > 0 && next_eval <= opt.horizon && next_eval < t &&
           (more || opt.horizon != sim::never)) {
      eng.advance_to(next_eval);
      if constexpr (requires { h.evaluate(eng, next_eval); }) h.evaluate(eng, next_eval);
      ++s.evaluations;
      ++j;
      next_eval = t0 + static_cast<double>(j) * dt;
    }
    if (!more || s.events >= opt.max_events) break;
    eng.next(ev, opt.horizon);
    ++s.events;
    if (ev.kind == sim::event_kind::job_finished) {
      if constexpr (requires { h.on_job_finished(eng, ev); }) h.on_job_finished(eng, ev);
    } else {
      if constexpr (requires { h.on_timer(eng, ev); }) h.on_timer(eng, ev);
    }
    if constexpr (requires { { h.done(eng) } -> std::convertible_to<bool>; }) {
      if (h.done(eng)) {
        s.stopped = true;
        break;
      }
    }
  }
  if (!s.stopped && s.events < opt.max_events && opt.horizon != sim::never)
    eng.next(ev, opt.horizon);
  s.end_time = eng.now();
  return s;
}

/// An evaluation callback that records nothing.
struct no_evaluation {};

namespace detail {
template <class Eval>
void evaluate_into(sim::recorder& rec, Eval& eval, double t) {
  if constexpr (!std::is_same_v<std::remove_cvref_t<Eval>, no_evaluation>) {
    rec.record_evaluation(t, eval(t));
  }
}

/// What both simulated runtimes hold: the engine, the worker-time model, the recorder and
/// one Result per worker (allocated once), with the drawing of a job's duration and the end
/// of a run.
template <class Result, sim::worker_time_model Model>
class simulated {
 public:
  sim::engine& engine() { return engine_; }
  const sim::engine& engine() const { return engine_; }
  sim::recorder& recorder() { return recorder_; }
  const sim::recorder& recorder() const { return recorder_; }
  const Model& model() const { return model_; }

 protected:
  simulated(std::size_t workers, Model model)
      : engine_(workers), model_(std::move(model)), recorder_(workers), results_(workers) {}

  /// The duration of worker w's job k of `batch` samples starting now, checked before the
  /// caller computes anything, so a bad model value leaves everything as it was.
  double job_duration(worker_id w, std::uint64_t k, std::size_t batch) {
    const double d = model_.duration(w, k, engine_.now(), batch);
    require(!std::isnan(d) && d >= 0.0, "duration", d, "must be >= 0 (from the worker-time model)");
    return d;
  }

  template <class Handler>
  run_summary run_engine(Handler& h, const run_options& opt) {
    const run_summary s = runtime::run(engine_, h, opt);
    recorder_.capture(engine_);
    return s;
  }

  sim::engine engine_;
  Model model_;
  sim::recorder recorder_;
  std::vector<Result> results_;
};

}  // namespace detail

/// A parameter server and n asynchronous workers (see the header comment for the policy
/// contract). `Result` is what one job produces (a gradient buffer, a model delta), kept per
/// worker: memory is O(workers) results, allocated once.
template <class Result, sim::worker_time_model Model>
class async_runtime : public detail::simulated<Result, Model> {
  using base = detail::simulated<Result, Model>;
  using base::engine_;
  using base::recorder_;
  using base::results_;

 public:
  async_runtime(std::size_t workers, Model model, std::size_t batch = 1)
      : base(workers, std::move(model)), batch_(workers, batch), absent_(workers, 0),
        lost_(workers, 0) {
    require(batch > 0, "batch", batch, "must be > 0");
  }

  /// Churn for this run (sim/churn.hpp): validated here (the key, value and rule of the
  /// first broken rule), before the run starts. Configuration, like the model: a resumed
  /// run is given the same schedule again.
  void set_churn(sim::churn_schedule s) {
    require(!started_, "churn", s.events.size(), "must be set before the run starts");
    s.validate(engine_.workers());
    stalls_ = stall_model(s);
    churn_ = std::move(s);
  }
  const sim::churn_schedule& churn() const { return churn_; }
  /// Whether worker w is a member now.
  bool present(worker_id w) const { return !absent_.at(w); }
  /// Jobs lost because their worker left while they were in flight (all, or worker w's).
  std::uint64_t lost_jobs() const {
    std::uint64_t n = 0;
    for (auto x : lost_) n += x;
    return n;
  }
  std::uint64_t lost_jobs(worker_id w) const { return lost_.at(w); }
  /// Batch size worker w's next jobs are timed with.
  void set_batch(worker_id w, std::size_t b) {
    require(w < batch_.size(), "worker", w, "must be < the number of workers");
    require(b > 0, "batch", b, "must be > 0");
    batch_[w] = b;
  }

  /// Checkpointing: the engine (event queue, clock, trace hash), the recorder, the results of
  /// the jobs in flight and the batch sizes, in a fixed order (see engine::serialize). The
  /// worker-time model is configuration, rebuilt by the caller; the policy is saved apart.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(engine_, recorder_, results_, batch_, started_, absent_, lost_);
  }

  /// The control handle a policy receives.
  template <class Policy, class Compute>
  class control : public sim::reports_outcomes<control<Policy, Compute>> {
   public:
    control(async_runtime& rt, Policy& p, Compute& c) : rt_(rt), policy_(p), compute_(c) {}
    double now() const { return rt_.engine_.now(); }
    std::size_t workers() const { return rt_.engine_.workers(); }
    bool busy(worker_id w) const { return rt_.engine_.state(w) == sim::worker_state::busy; }
    bool waiting(worker_id w) const { return rt_.engine_.state(w) == sim::worker_state::waiting; }
    /// Version the busy worker w is computing at.
    std::uint64_t version_of(worker_id w) const { return rt_.engine_.current_job(w).tag; }

    /// Starts idle worker w on the current model version; the computation happens now.
    void restart(worker_id w) {
      auto& e = rt_.engine_;
      require(e.state(w) == sim::worker_state::idle, "worker", w, "must be idle to restart");
      require(!rt_.absent_[w], "worker", w, "must be present to restart (it left)");
      const std::uint64_t v = policy_.version();
      const std::uint64_t k = e.next_job_index(w);
      double d = rt_.job_duration(w, k, rt_.batch_[w]);
      if (rt_.stalls_) d = rt_.stalls_->finish(w, now(), d) - now();
      compute_(w, v, k, rt_.results_[w]);
      e.start(w, d, v);
    }
    /// Blocks idle worker w (SSP / DSSP) until release(w).
    void hold(worker_id w) { rt_.engine_.wait(w); }
    /// Unblocks waiting worker w now and restarts it at this instant.
    void release(worker_id w) {
      rt_.engine_.release(w);
      restart(w);
    }
    /// Calculation stops: w's job is dropped (never delivered), recorded as interrupted with
    /// its current staleness, and w restarts now at the current version.
    void interrupt(worker_id w) {
      const sim::job j = rt_.engine_.cancel(w);
      rt_.recorder_.record_update(w, policy_.version() - j.tag, sim::update_outcome::interrupted);
      restart(w);
    }
    void set_batch(worker_id w, std::size_t b) { rt_.set_batch(w, b); }

   private:
    friend sim::reports_outcomes<control>;
    sim::recorder& outcome_log() { return rt_.recorder_; }

    async_runtime& rt_;
    Policy& policy_;
    Compute& compute_;
  };

  /// Runs `policy` with `compute(worker, version, job_index, Result&)` and an optional
  /// `evaluate(double t) -> std::vector<double>` recorded at options.eval_interval.
  template <class Policy, class Compute, class Evaluate = no_evaluation>
    requires async_policy<Policy, Result, control<Policy, std::remove_reference_t<Compute>>>
  run_summary run(Policy& policy, Compute&& compute, const run_options& opt = {},
                  Evaluate&& evaluate = {}) {
    using ctl_t = control<Policy, std::remove_reference_t<Compute>>;
    ctl_t ctl(*this, policy, compute);
    if (!started_) start(policy, ctl);
    struct handler {
      async_runtime& rt;
      Policy& policy;
      ctl_t& ctl;
      Evaluate& eval;
      void on_job_finished(sim::engine&, const sim::event& ev) {
        const arrival a{ev.worker, ev.job.tag, ev.job.index, ev.job.start, ev.time};
        policy.on_arrival(ctl, a, rt.results_[ev.worker]);
        if (rt.engine_.state(ev.worker) == sim::worker_state::idle && !rt.absent_[ev.worker])
          ctl.restart(ev.worker);
      }
      void on_timer(sim::engine&, const sim::event& ev) { rt.apply_churn(policy, ctl, ev.tag); }
      void evaluate(sim::engine&, double t) { detail::evaluate_into(rt.recorder_, eval, t); }
    } h{*this, policy, ctl, evaluate};
    return this->run_engine(h, opt);
  }

 private:
  /// The stalls of a schedule as an outage model (nothing when it has none).
  static std::optional<sim::windowed<sim::constant_time>> stall_model(const sim::churn_schedule& s) {
    auto w = sim::stall_windows(s);
    if (w.empty()) return std::nullopt;
    return sim::windowed<sim::constant_time>(sim::constant_time{}, std::move(w));
  }

  // The first start: workers absent from the start leave before anything runs (no job is
  // lost), the churn events become timers (tag: the event's index), then the policy's
  // on_start, or every present worker starts at version 0.
  template <class Policy, class Ctl>
  void start(Policy& policy, Ctl& ctl) {
    started_ = true;
    for (const auto w : churn_.absent) {
      absent_[w] = 1;
      if constexpr (has_on_leave<Policy, Ctl>) policy.on_leave(ctl, w);
    }
    for (std::size_t i = 0; i < churn_.events.size(); ++i)
      if (churn_.events[i].kind != sim::churn_kind::stall)
        engine_.schedule_at(churn_.events[i].time, i);
    if constexpr (requires { policy.on_start(ctl); }) {
      policy.on_start(ctl);
    } else {
      for (std::size_t w = 0; w < engine_.workers(); ++w)
        if (!absent_[w]) ctl.restart(static_cast<worker_id>(w));
    }
  }

  // A leave: the job in flight is lost, a held worker is let go, then the policy forgets
  // the worker. A join: the policy first, then the worker starts at the current version
  // unless the policy held or started it.
  template <class Policy, class Ctl>
  void apply_churn(Policy& policy, Ctl& ctl, std::uint64_t index) {
    const sim::churn_event& e = churn_.events.at(index);
    const worker_id w = e.worker;
    if (e.kind == sim::churn_kind::leave) {
      if (engine_.state(w) == sim::worker_state::busy) {
        engine_.cancel(w);
        ++lost_[w];
      } else if (engine_.state(w) == sim::worker_state::waiting) {
        engine_.release(w);
      }
      absent_[w] = 1;
      if constexpr (has_on_leave<Policy, Ctl>) policy.on_leave(ctl, w);
    } else if (e.kind == sim::churn_kind::join) {
      absent_[w] = 0;
      if constexpr (has_on_join<Policy, Ctl>) policy.on_join(ctl, w);
      if (engine_.state(w) == sim::worker_state::idle) ctl.restart(w);
    }
  }

  std::vector<std::size_t> batch_;
  bool started_ = false;
  sim::churn_schedule churn_;
  std::optional<sim::windowed<sim::constant_time>> stalls_;
  std::vector<char> absent_;
  std::vector<std::uint64_t> lost_;
};

/// Synchronous rounds over n workers (see the header comment for the policy contract).
template <class Result, sim::worker_time_model Model>
class round_runtime : public detail::simulated<Result, Model> {
  using base = detail::simulated<Result, Model>;
  using base::engine_;
  using base::recorder_;
  using base::results_;

 public:
  /// `communication_time` virtual seconds are added to every round (e.g. a network model's
  /// ring_allreduce(n, bytes).seconds) unless the policy provides communication_time(round).
  round_runtime(std::size_t workers, Model model, std::size_t batch = 1,
                double communication_time = 0.0)
      : base(workers, std::move(model)), batch_(batch), comm_(communication_time) {
    require(batch > 0, "batch", batch, "must be > 0");
    require(std::isfinite(comm_) && comm_ >= 0, "communication_time", comm_,
            "must be finite and >= 0 (a negative time)");
  }

  std::uint64_t round() const { return round_; }

  /// Checkpointing: engine, recorder, the round's contributions and counters (see
  /// async_runtime::serialize).
  template <class Archive>
  void serialize(Archive& ar) {
    ar(engine_, recorder_, results_, batch_, comm_, round_, finished_, started_);
  }

  class control : public sim::reports_outcomes<control> {
   public:
    explicit control(round_runtime& rt) : rt_(rt) {}
    double now() const { return rt_.engine_.now(); }
    std::size_t workers() const { return rt_.engine_.workers(); }
    std::uint64_t round() const { return rt_.round_; }

   private:
    friend sim::reports_outcomes<control>;
    sim::recorder& outcome_log() { return rt_.recorder_; }

    round_runtime& rt_;
  };

  /// Runs rounds of `compute(worker, round, job_index, Result&)`; `policy.on_round` is called
  /// at each round's end with every worker's contribution.
  template <class Policy, class Compute, class Evaluate = no_evaluation>
    requires round_policy<Policy, Result, control>
  run_summary run(Policy& policy, Compute&& compute, const run_options& opt = {},
                  Evaluate&& evaluate = {}) {
    control ctl(*this);
    auto start_round = [&] {
      finished_ = 0;
      for (std::size_t i = 0; i < engine_.workers(); ++i) {
        const auto w = static_cast<worker_id>(i);
        std::size_t b = batch_;
        if constexpr (requires { policy.batch(w); }) b = policy.batch(w);
        const std::uint64_t k = engine_.next_job_index(w);
        const double d = this->job_duration(w, k, b);
        compute(w, round_, k, results_[w]);
        engine_.start(w, d, round_);
      }
    };
    if (!started_) {
      started_ = true;
      start_round();
    }
    struct handler {
      round_runtime& rt;
      Policy& policy;
      control& ctl;
      Evaluate& eval;
      decltype(start_round)& next_round;
      void on_job_finished(sim::engine& e, const sim::event& ev) {
        e.wait(ev.worker);  // at the barrier until the round ends
        if (++rt.finished_ < e.workers()) return;
        double c = rt.comm_;
        if constexpr (requires { policy.communication_time(rt.round_); })
          c = policy.communication_time(rt.round_);
        e.schedule_after(c, rt.round_);
      }
      void on_timer(sim::engine& e, const sim::event&) {
        for (std::size_t i = 0; i < e.workers(); ++i) e.release(static_cast<worker_id>(i));
        policy.on_round(ctl, rt.round_, rt.results_);
        ++rt.round_;
        next_round();
      }
      void evaluate(sim::engine&, double t) { detail::evaluate_into(rt.recorder_, eval, t); }
    } h{*this, policy, ctl, evaluate, start_round};
    return this->run_engine(h, opt);
  }

 private:
  std::size_t batch_;
  double comm_;
  std::uint64_t round_ = 0;
  std::size_t finished_ = 0;
  bool started_ = false;
};

}  // namespace heterograd::runtime
