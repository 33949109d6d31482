#pragma once
// heterograd._core.simulate: one simulated run of an asynchronous server policy, or of local
// SGD on the round runtime (sim_rounds.hpp); see sim_run.hpp for the callbacks' contract and
// sim_models.hpp for methods and time models.
// Every argument is checked before anything runs; the result is a dict of numpy arrays that
// heterograd.sim wraps in a SimResult.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "configs.hpp"
#include "sim_rounds.hpp"
#include "sim_run.hpp"

namespace hgpy::simpy {

/// The names of every method, for errors.
inline std::string method_names() {
  std::string s;
  const auto add = [&](const auto& m) { s += (s.empty() ? "" : ", ") + std::string(m.name); };
  for_each_method(add);
  for_each_round_method(add);
  return s;
}

/// Calls f(m) for every method, servers and round methods (their configurations only).
template <class F>
void for_each_described(F&& f) {
  for_each_method(f);
  for_each_round_method(f);
}

/// Calls f(m) for the method named `name`; ValueError naming `method` otherwise.
template <class F>
void with_method(const std::string& name, F&& f) {
  bool found = false;
  for_each_method([&](const auto& m) {
    if (!found && name == m.name) {
      found = true;
      f(m);
    }
  });
  if (!found) value_rule("method", "'" + name + "'", "must be one of " + method_names());
}

inline void bind_methods(nb::module_& m) {
  m.def("sim_methods", [] {
    nb::list out;
    for_each_described([&](const auto& x) {
      using C = typename std::remove_cvref_t<decltype(x)>::config_type;
      out.append(nb::make_tuple(std::string(x.name), std::string(x.title), config_fields<C>()));
    });
    return out;
  }, "The simulator's methods: (name, title, [(field, default, meaning, rule)]).");
  m.def("sim_method_config", [](const std::string& name, nb::handle kwargs) {
    nb::dict d;
    bool found = false;
    for_each_described([&](const auto& x) {
      using C = typename std::remove_cvref_t<decltype(x)>::config_type;
      if (found || name != x.name) return;
      found = true;
      d = config_dict(config_from<C>(name, kwargs));
    });
    if (!found) value_rule("method", "'" + name + "'", "must be one of " + method_names());
    return d;
  }, "name"_a, "config"_a = nb::none(),
  "Checks a method's configuration (every key a field, every value by its rule) and returns it "
  "with the defaults filled in.");
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
  run_released(ctx, [&] { rt.run(*p, compute, opt, evaluate); });
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
  if (method == "local_sgd") {
    return x.type == element::f32 ? run_local_sgd<float>(a, copy_x0<float>(x)) : run_local_sgd<double>(a, copy_x0<double>(x));
  }
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
