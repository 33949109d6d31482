#pragma once
// heterograd.sim's round methods: the local SGD family (algorithms/sync/local_sgd.hpp: local
// SGD, FedAvg, post-local SGD, hierarchical, device sampling, per-worker H_i) under the
// simulated round runtime (runtime/sim.hpp, round_runtime), with each local step's gradient
// from the Python callback as grad(x, worker, step): x is the worker's own replica, `step` its
// local step count. A round lasts the sum of its steps' times (steps_time) plus the
// configuration's sync_time. The model reported (x, trajectory) is the anchor: the model of
// the last global synchronisation. Only plain SGD locally and no outer optimizer.

#include <limits>

#include "heterograd/algorithms/sync/local_sgd.hpp"
#include "sim_models.hpp"
#include "sim_run.hpp"

namespace hgpy::simpy {

namespace hs = heterograd::algorithms::sync;

/// The round methods by name (their configurations described like the servers').
template <class F>
void for_each_round_method(F&& f) {
  f(def<hs::local_sgd_config>("local_sgd",
                              "local SGD / FedAvg: H local steps per worker, then the models are averaged",
                              nullptr));
}

/// The local SGD oracle over a run context: one local step's gradient of worker w.
template <class T>
struct callback_oracle {
  run_context<T>* ctx;
  double operator()(std::size_t w, std::uint64_t step, std::size_t, heterograd::span<const T> x,
                    heterograd::span<T> out) const {
    ctx->gradient_into(static_cast<worker_id>(w), step, x, out);
    return 0.0;
  }
};

/// The results of a round run: as results() for servers, x the anchor, updates the rounds.
template <class T>
nb::dict run_local_sgd(const sim_args& a, std::vector<T> x0) {
  hs::local_sgd_config cfg = config_from<hs::local_sgd_config>("local_sgd", a.config);
  cfg.validate(a.workers);
  const std::size_t n = a.workers;
  using P = hs::local_sgd<T, heterograd::optim::sgd, callback_oracle<T>>;
  auto ctx = std::make_unique<run_context<T>>();
  auto* p = new P(n, heterograd::span<const T>(x0.data(), x0.size()),
                  heterograd::optim::sgd(heterograd::optim::sgd_config{.lr = a.lr}),
                  callback_oracle<T>{ctx.get()}, std::vector<std::size_t>(n, 1), cfg);
  ctx->owner = nb::capsule(p, [](void* q) noexcept { delete static_cast<P*>(q); });
  ctx->shape = a.shape;
  ctx->dim = x0.size();
  ctx->grad = a.grad;
  ctx->eval = a.eval;
  ctx->builtin = a.builtin;
  hs::steps_time<hsim::any_time_model> timing(a.times.model, p->schedule());
  hr::round_runtime<hs::round_stats, decltype(timing)> rt(n, timing);
  p->limit_rounds(std::numeric_limits<std::uint64_t>::max());
  hr::run_options opt;
  opt.horizon = a.horizon;
  opt.max_events = a.max_events;
  opt.eval_interval = a.eval_interval;
  auto compute = [&](auto w, std::uint64_t round, std::uint64_t k, hs::round_stats& out) {
    p->compute(w, round, k, out);
  };
  auto evaluate = [&](double t) {
    const auto& x = p->anchor();
    return ctx->evaluate(t, heterograd::span<const T>(x.data(), x.size()));
  };
  run_released(*ctx, [&] { rt.run(*p, compute, opt, evaluate); });
  return round_results(*p, rt, *ctx, a);
}

}  // namespace hgpy::simpy
