#pragma once
// heterograd._core.simulate: one simulated run of an asynchronous server policy (see
// sim_run.hpp for the callbacks' contract and sim_models.hpp for methods and time models).
// Every argument is checked before anything runs; the result is a dict of numpy arrays that
// heterograd.sim wraps in a SimResult.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "configs.hpp"
#include "sim_run.hpp"

namespace hgpy::simpy {

/// What simulate() was given, checked.
struct sim_args {
  std::string method;
  nb::object config, grad, eval;
  const problem* builtin = nullptr;
  time_model times;
  std::size_t workers = 0;
  double horizon = 0, eval_interval = 0;
  std::uint64_t max_events = 0;
  heterograd::optim::schedule lr;
  heterograd::algorithms::nonfinite_policy nonfinite = heterograd::algorithms::nonfinite_policy::fail;
  std::vector<std::size_t> shape;
};

template <class X>
nb::object to_numpy(std::vector<X> v, std::vector<std::size_t> shape) {
  auto* h = new std::vector<X>(std::move(v));
  nb::capsule own(h, [](void* q) noexcept { delete static_cast<std::vector<X>*>(q); });
  return nb::ndarray<nb::numpy, X>(h->data(), shape.size(), shape.data(), own).cast();
}

/// The run's results: final x, evaluations, per-worker outcomes and times, staleness.
template <class T, class Policy, class Runtime>
nb::dict results(const Policy& p, const Runtime& rt, run_context<T>& ctx, const sim_args& a) {
  const auto& rec = rt.recorder();
  const std::size_t n = a.workers;
  nb::dict d;
  const auto x = p.params();
  d["x"] = to_numpy(std::vector<T>(x.begin(), x.end()), a.shape);
  std::vector<double> times;
  for (const auto& e : rec.evaluations()) times.push_back(e.time);
  const std::size_t m = times.size();
  std::vector<std::size_t> tshape{m};
  tshape.insert(tshape.end(), a.shape.begin(), a.shape.end());
  d["times"] = to_numpy(std::move(times), {m});
  d["trajectory"] = to_numpy(std::move(ctx.trajectory), tshape);
  d["metrics"] = to_numpy(std::move(ctx.metrics), {m, ctx.metric_count});
  nb::dict staleness;
  for (std::size_t o = 0; o < hsim::update_outcome_count; ++o) {
    const auto outcome = static_cast<hsim::update_outcome>(o);
    std::vector<std::uint64_t> per(n);
    for (std::size_t w = 0; w < n; ++w) per[w] = rec.count(static_cast<worker_id>(w), outcome);
    d[hsim::to_string(outcome)] = to_numpy(std::move(per), {n});
    const auto& h = rec.staleness_histogram(outcome);
    staleness[hsim::to_string(outcome)] = to_numpy(std::vector<std::uint64_t>(h), {h.size()});
  }
  d["staleness"] = staleness;
  std::vector<std::uint64_t> finished(n), cancelled(n);
  std::vector<double> busy(n), idle(n), waiting(n);
  for (std::size_t w = 0; w < n; ++w) {
    const auto& s = rec.worker(static_cast<worker_id>(w));
    finished[w] = s.jobs_finished;
    cancelled[w] = s.jobs_cancelled;
    busy[w] = s.busy;
    idle[w] = s.idle;
    waiting[w] = s.waiting;
  }
  d["jobs_finished"] = to_numpy(std::move(finished), {n});
  d["jobs_cancelled"] = to_numpy(std::move(cancelled), {n});
  d["busy"] = to_numpy(std::move(busy), {n});
  d["idle"] = to_numpy(std::move(idle), {n});
  d["waiting"] = to_numpy(std::move(waiting), {n});
  d["updates"] = p.version();
  d["end_time"] = rec.end_time();
  d["events"] = rec.events();
  d["trace_hash"] = rec.trace_hash();
  d["nonfinite_skipped"] = p.server().nonfinite_skipped();
  return d;
}

/// Runs method m (config type C) in element type T from x0.
template <class T, class M>
nb::dict run_method(const M& m, const sim_args& a, std::vector<T> x0) {
  using C = typename M::config_type;
  const C cfg = config_from<C>(m.name, a.config);
  const std::size_t n = a.workers;
  as::model_server<T> server(std::move(x0), heterograd::optim::sgd(heterograd::optim::sgd_config{.lr = a.lr}),
                             a.nonfinite);
  using P = decltype(m.make(n, std::move(server), cfg));
  auto* p = new P(m.make(n, std::move(server), cfg));
  run_context<T> ctx;
  ctx.owner = nb::capsule(p, [](void* q) noexcept { delete static_cast<P*>(q); });
  ctx.shape = a.shape;
  ctx.dim = p->dim();
  ctx.grad = a.grad;
  ctx.eval = a.eval;
  ctx.builtin = a.builtin;
  hr::async_runtime<std::vector<T>, hsim::any_time_model> rt(n, a.times.model);
  hr::run_options opt;
  opt.horizon = a.horizon;
  opt.max_events = a.max_events;
  opt.eval_interval = a.eval_interval;
  auto compute = [&](worker_id w, std::uint64_t, std::uint64_t k, std::vector<T>& out) {
    ctx.gradient(w, k, p->params(), out);
  };
  auto evaluate = [&](double t) { return ctx.evaluate(t, p->params()); };
  bool failed = false;
  {
    nb::gil_scoped_release release;
    try {
      rt.run(*p, compute, opt, evaluate);
    } catch (callback_failed&) {
      failed = true;
    }
  }
  if (failed) throw nb::python_error(*ctx.error);
  return results(*p, rt, ctx, a);
}

/// x0 as a vector of its own dtype (copied), with its shape.
template <class T>
std::vector<T> copy_x0(const array_ref& r) {
  const T* p = static_cast<const T*>(r.data);
  return std::vector<T>(p, p + r.size);
}

inline void check_workers(sim_args& a, std::size_t workers) {
  const std::size_t fixed = a.times.workers;
  if (workers == 0 && fixed == 0)
    value_rule("workers", "None", "must be given: the time model " + a.times.text + " does not fix the number of workers");
  if (workers && fixed && workers != fixed)
    value_rule("workers", std::to_string(workers), "must equal the time model's number of workers (" + std::to_string(fixed) + ")");
  a.workers = workers ? workers : fixed;
  if (a.builtin && !a.builtin->centers.empty() && a.builtin->centers.size() != a.workers)
    value_rule("grad", a.builtin->name, "must have one centre per worker (" + std::to_string(a.workers) + ")");
}

inline void check_run(const sim_args& a) {
  if (!(a.horizon > 0)) value_rule("horizon", heterograd::detail::format_value(a.horizon), "must be > 0 (virtual seconds)");
  if (!(std::isfinite(a.eval_interval) && a.eval_interval >= 0))
    value_rule("eval_interval", heterograd::detail::format_value(a.eval_interval), "must be finite and >= 0 (0: no evaluation)");
  if (!a.builtin && !PyCallable_Check(a.grad.ptr()))
    type_rule("grad", py_repr(a.grad), "must be a callable grad(x, worker, job) or a heterograd.sim Problem");
  if (!a.eval.is_none() && !PyCallable_Check(a.eval.ptr()))
    type_rule("eval", py_repr(a.eval), "must be a callable eval(x) or None");
  a.lr.validate("lr");
}

inline nb::dict simulate(const std::string& method, nb::object config, nb::object grad, nb::handle x0,
                         const time_model& times, double horizon, heterograd::optim::schedule lr,
                         std::size_t workers, std::uint64_t max_events, double eval_interval,
                         nb::object eval, const std::string& nonfinite) {
  sim_args a{method, std::move(config), std::move(grad), std::move(eval)};
  problem* builtin = nullptr;
  if (nb::try_cast(a.grad, builtin, false)) a.builtin = builtin;
  a.times = times;
  a.horizon = horizon;
  a.max_events = max_events == 0 ? std::numeric_limits<std::uint64_t>::max() : max_events;
  a.eval_interval = eval_interval;
  a.lr = lr;
  check_run(a);
  if (std::isinf(horizon) && max_events == 0) value_rule("horizon", "inf", "must be finite unless max_events is given");
  check_workers(a, workers);
  bool known = false;
  for (const auto& c : heterograd::algorithms::nonfinite_policies)
    if (c.name == nonfinite) a.nonfinite = c.value, known = true;
  if (!known) value_rule("nonfinite", "'" + nonfinite + "'", "must be one of fail, skip, zero");
  const array_ref x = take_array(x0, "x0", false);
  for (std::size_t i = 0; i < x.keep.ndim(); ++i) a.shape.push_back(x.keep.shape(i));
  if (x.size == 0) value_rule("x0", "an empty array", "must hold at least one parameter");
  if (a.builtin && a.builtin->dim() != x.size)
    value_rule("x0", std::to_string(x.size) + " elements", "must have " + a.builtin->name + "'s dimension (" + std::to_string(a.builtin->dim()) + ")");
  nb::dict out;
  with_method(method, [&](const auto& m) {
    out = x.type == element::f32 ? run_method<float>(m, a, copy_x0<float>(x)) : run_method<double>(m, a, copy_x0<double>(x));
  });
  return out;
}

inline void bind_sim(nb::module_& m) {
  bind_time_models(m);
  bind_methods(m);
  bind_problems(m);
  m.def("simulate", &simulate, "method"_a, "config"_a.none(), "grad"_a, "x0"_a, "times"_a, "horizon"_a,
        "lr"_a, "workers"_a = 0, "max_events"_a = 0, "eval_interval"_a = 0.0, "eval"_a.none() = nb::none(),
        "nonfinite"_a = "fail",
        "One simulated run (heterograd.sim.simulate documents it): the method's policy on a "
        "parameter server with SGD at lr, workers timed by `times`, each job's gradient from "
        "grad(x, worker, job) or a built-in Problem. Returns a dict of numpy arrays.");
}

}  // namespace hgpy::simpy
