#pragma once
// Asynchronous server policies in the driver: the runner's binder of the algorithm table
// (algorithms.hpp) and server_row(), which makes a registry row (registry.hpp) from a policy
// type, its config struct and how to build it. Each server runs on the configured runtime:
// the simulated cluster (drive_async) or real workers (drive_server_real).

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "described.hpp"
#include "drive.hpp"
#include "heterograd/algorithms/async/server.hpp"
#include "registry.hpp"
#include "runtimes.hpp"

namespace hgrun {

/// A server policy on the configured runtime.
template <class Policy>
json drive_server(context& ctx, Policy& p) {
  const std::size_t b = ctx.batch();
  const std::size_t d = ctx.prob.dim();
  // Each job pays its exchange with the server (the model pulled, the gradient pushed).
  auto model = with_exchange(make_time_model(ctx.exp, ctx.seed, b), exchange_time(ctx.exp, d));
  if (ctx.runtime() != "sim") return drive_server_real(ctx, p, std::move(model));
  // The gradient is computed when the job starts, at the server's parameters of that moment,
  // on the batch the runtime times the job with: the policy's for worker w (OmniLearn's ASP
  // controller sets it, control handle set_batch), else the method's.
  auto compute = [&ctx, &p, b, d](heterograd::sim::worker_id w, std::uint64_t, std::uint64_t,
                                  std::vector<float>& g) {
    g.resize(d);
    const auto x = p.params();
    ctx.prob.gradient(w, batch_of(p, w, b), std::span<const float>(x.data(), x.size()), g);
  };
  auto params = [&p] { return p.params(); };
  return drive_async(ctx, p, compute, params, std::move(model));
}

/// The runner's binder: schema_binder's rows with their factories.
struct run_binder {
  /// `make(ctx, workers, server, config)` builds the policy from the method's model server
  /// (its optimizer and non-finite policy configured) and its config (the defaults with the
  /// method's keys, `renamed` as in keys_of); `report(policy, config, extra)` may add numbers
  /// to the summary's "extra".
  template <class Policy, class Config, class Make, class Report = std::nullptr_t>
  static algorithm_row server(std::string name, const Config& defaults,
                              std::vector<std::pair<std::string, std::string>> renamed,
                              method_keys extra, Make make, Report report = nullptr) {
    algorithm_row row =
        schema_binder::server<Policy>(name, defaults, renamed, std::move(extra), make);
    row.checkpointable = checkpointable<Policy>;
    row.run = [defaults, renamed, make, report](context& ctx) -> json {
      using server_type = heterograd::algorithms::async::model_server<float, any_optimizer>;
      server_type server(ctx.prob.initial(), make_optimizer(ctx.method["optimizer"]),
                         nonfinite_of(ctx.method));
      const Config cfg = from_json(ctx.method, defaults, renamed);
      Policy p = make(ctx, ctx.workers(), std::move(server), cfg);
      json s = drive_server(ctx, p);
      if (!s.is_null()) s["extra"]["exchange_time"] = exchange_time(ctx.exp, ctx.prob.dim());
      if constexpr (!std::is_same_v<Report, std::nullptr_t>)
        if (!s.is_null()) report(p, cfg, s["extra"]);  // null: an MPI worker rank
      return s;
    };
    return row;
  }
  static algorithm_row round(std::string name, method_keys keys) {
    algorithm_row row = schema_binder::round(std::move(name), std::move(keys));
    row.run = run_sync_family;
    row.checkpointable = sync_checkpointable(row.name);
    return row;
  }
  static algorithm_row local(std::string name, method_keys keys) {
    algorithm_row row = schema_binder::local(std::move(name), std::move(keys));
    row.run = run_local_learning;
    row.checkpointable = true;  // run_local.cpp saves its modules and optimizer states
    return row;
  }
};

/// A registry row for a server policy defined outside the driver (add_algorithm): as a row
/// of the built-in table.
template <class Policy, class Config, class Make>
algorithm_row server_row(std::string name, const Config& defaults, Make make,
                         method_keys extra = {}) {
  return run_binder::server<Policy>(std::move(name), defaults, {}, std::move(extra),
                                    std::move(make));
}

}  // namespace hgrun
