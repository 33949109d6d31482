#pragma once
// Driving a policy on the simulated cluster under the shared evaluation loop: the
// asynchronous runtime (parameter server, eager-SGD's partial rounds) and the round runtime
// (BSP, local SGD, SelSync, OmniLearn). Each method is a small adapter that builds its policy
// and calls one of these.

#include <cmath>
#include <concepts>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "heterograd/runtime/sim.hpp"
#include "optimizer.hpp"
#include "run.hpp"

namespace hgrun {

/// Policies whose whole state can be checkpointed.
template <class P>
concept checkpointable = requires(P& p, heterograd::archive_writer& w, heterograd::archive_reader& r) {
  p.serialize(w);
  p.serialize(r);
};

/// The gradient oracle of the sync layer's policies (sync/common.hpp's shape).
struct oracle {
  problem* prob;
  double operator()(std::size_t w, std::uint64_t, std::size_t b, heterograd::span<const float> x,
                    heterograd::span<float> g) const {
    single_threaded_here();  // worker threads of the threads runtime
    return prob->gradient(w, b, std::span<const float>(x.data(), x.size()),
                          std::span<float>(g.data(), g.size()));
  }
};

/// The batch of worker w's next job: the policy's, for a policy with per-worker batches
/// (OmniLearn's ASP server), else the method's `b`.
template <class Policy>
std::size_t batch_of(const Policy& p, heterograd::sim::worker_id w, std::size_t b) {
  if constexpr (requires { { p.batch(w) } -> std::convertible_to<std::size_t>; }) return p.batch(w);
  else return b;
}

/// A policy with per-worker batches says the batch each running job started with.
template <class P>
concept per_worker_batches = requires(const P& p, heterograd::sim::worker_id w) {
  { p.job_batch(w) } -> std::convertible_to<std::size_t>;
};

namespace detail {

template <class Policy>
void save_policy(heterograd::archive_writer& w, Policy& p) {
  if constexpr (checkpointable<Policy>) p.serialize(w);
  else throw std::runtime_error("this method's policy cannot be checkpointed");
}
template <class Policy>
void load_policy(heterograd::archive_reader& r, Policy& p) {
  if constexpr (checkpointable<Policy>) p.serialize(r);
  else throw std::runtime_error("this method's policy cannot be checkpointed");
}

inline void describe(context& ctx, heterograd::sim::recorder& rec) {
  rec.set_seed(ctx.seed);
  rec.set("experiment", ctx.exp.name);
  rec.set("method", ctx.method["label"].get<std::string>());
  rec.set("algorithm", ctx.method["algorithm"].get<std::string>());
  rec.set("workers", ctx.workers());
  rec.set("batch", ctx.batch());
}

/// Runs `rt` (an async_runtime or round_runtime) up to virtual time t and, when the horizon
/// has an updates/epochs stop rule, event by event so that it stops right after the event at
/// which the rule holds (stop_rule). The events, their order and the clock are those of one
/// run(t) call up to there.
template <class Runtime, class Policy, class Compute, class Reached>
bool advance_runtime(Runtime& rt, Policy& p, Compute& compute, double t, const stop_rule& rule,
                     Reached reached) {
  namespace sim = heterograd::sim;
  namespace hr = heterograd::runtime;
  if (rt.engine().events_delivered() > 0 && rt.engine().next_time() == sim::never) return false;
  hr::run_options o;
  o.horizon = t;
  if (!rule.active()) {
    rt.run(p, compute, o);
    return true;
  }
  o.max_events = 1;
  while (!reached())
    if (rt.run(p, compute, o).events == 0) break;  // the clock is at t
  return true;
}

}  // namespace detail

/// An asynchronous-runtime policy: `compute(w, version, k, out)` fills a worker's result (a
/// Result: a vector of the model's element type) when its job starts; `params()` is the model
/// to evaluate.
template <class Result = std::vector<float>, class Policy, class Compute, class Params>
json drive_async(context& ctx, Policy& p, Compute compute, Params params,
                 heterograd::sim::any_time_model model) {
  namespace sim = heterograd::sim;
  namespace hr = heterograd::runtime;
  using T = typename Result::value_type;
  hr::async_runtime<Result, sim::any_time_model> rt(ctx.workers(), std::move(model), ctx.batch());
  detail::describe(ctx, rt.recorder());
  // membership (elastic.hpp): the leaves and joins as the simulator's churn schedule.
  const bool elastic = ctx.exp.membership.options.elastic;
  if (elastic) rt.set_churn(churn_of(ctx.exp.membership).schedule);
  const stop_rule rule = stop_rule_of(ctx);
  // Samples processed: a delivered result (every event of this runtime) counts its batch. With
  // per-worker batches: the samples drawn (each job's, when it started) less those of the jobs
  // still running.
  auto epochs = [&] {
    std::uint64_t samples = rt.engine().events_delivered() * ctx.prob.samples_per_gradient(ctx.batch());
    if constexpr (per_worker_batches<Policy>) {
      samples = ctx.prob.samples;
      for (std::size_t w = 0; w < ctx.workers(); ++w)
        if (rt.engine().state(static_cast<sim::worker_id>(w)) == sim::worker_state::busy)
          samples -= ctx.prob.samples_per_gradient(p.job_batch(static_cast<sim::worker_id>(w)));
    }
    return static_cast<double>(samples) / static_cast<double>(ctx.prob.train_size());
  };
  loop_hooks h;
  h.advance = [&](double t) {
    return detail::advance_runtime(rt, p, compute, t, rule, [&] {
      return rule.reached(static_cast<std::uint64_t>(p.version()), epochs());
    });
  };
  h.epochs_done = epochs;
  h.now = [&] { return rt.engine().now(); };
  h.params = [&] {
    const auto x = params();
    return model_vector(std::vector<T>(x.begin(), x.end()));
  };
  h.updates = [&] { return static_cast<std::uint64_t>(p.version()); };
  h.events = [&] { return rt.engine().events_delivered(); };
  h.save = [&](heterograd::archive_writer& w) {
    detail::save_policy(w, p);
    rt.serialize(w);
  };
  h.load = [&](heterograd::archive_reader& r) {
    detail::load_policy(r, p);
    rt.serialize(r);
  };
  const auto x = evaluation_loop(ctx, rt.recorder(), h);
  rt.recorder().capture(rt.engine());
  if (elastic) ctx.extra["membership"] = sim_membership_record(ctx.exp.membership, rt.lost_jobs());
  return finish(ctx, rt.recorder(), x);
}

/// A round-runtime policy (on_round, batch, communication_time, compute) whose jobs produce
/// a `Result` each.
template <class Result, class Policy, class Params>
json drive_rounds(context& ctx, Policy& p, Params params, heterograd::sim::any_time_model model,
                  std::uint64_t* rounds_out = nullptr) {
  namespace sim = heterograd::sim;
  namespace hr = heterograd::runtime;
  hr::round_runtime<Result, sim::any_time_model> rt(
      ctx.workers(), std::move(model), ctx.batch());
  detail::describe(ctx, rt.recorder());
  // Samples processed: those drawn by the rounds that ended (the problem counts a gradient's
  // samples when its round starts; the round in progress started with worker 0's job).
  std::uint64_t ended = 0;
  auto compute = [&](sim::worker_id w, std::uint64_t round, std::uint64_t k, Result& out) {
    if (w == 0) ended = ctx.prob.samples;
    p.compute(w, round, k, out);
  };
  auto epochs = [&] { return static_cast<double>(ended) / static_cast<double>(ctx.prob.train_size()); };
  if constexpr (requires { p.attach(rt.engine()); }) p.attach(rt.engine());
  const stop_rule rule = stop_rule_of(ctx);
  loop_hooks h;
  h.advance = [&](double t) {
    return detail::advance_runtime(rt, p, compute, t, rule, [&] { return rule.reached(rt.round(), epochs()); });
  };
  h.epochs_done = epochs;
  h.now = [&] { return rt.engine().now(); };
  h.params = [&] {
    const auto x = params();
    return std::vector<float>(x.begin(), x.end());
  };
  h.updates = [&] { return rt.round(); };
  h.events = [&] { return rt.engine().events_delivered(); };
  h.save = [&](heterograd::archive_writer& w) {
    detail::save_policy(w, p);
    rt.serialize(w);
    w(ended);
  };
  h.load = [&](heterograd::archive_reader& r) {
    detail::load_policy(r, p);
    rt.serialize(r);
    r(ended);
  };
  const auto x = evaluation_loop(ctx, rt.recorder(), h);
  rt.recorder().capture(rt.engine());
  if (rounds_out) *rounds_out = rt.round();
  ctx.extra["rounds"] = rt.round();
  return finish(ctx, rt.recorder(), x);
}

}  // namespace hgrun
