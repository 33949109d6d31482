#pragma once
// Asynchronous server policies in the driver: the runner's binder of the algorithm table
// (algorithms.hpp) and server_row(), which makes a registry row (registry.hpp) from a policy
// type, its config struct and how to build it. Each server runs on the configured runtime:
// the simulated cluster (drive_async) or real workers (drive_server_real).

#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "described.hpp"
#include "drive.hpp"
#include "heterograd/algorithms/async/server.hpp"
#include "registry.hpp"
#include "runtimes.hpp"

namespace hgrun {

/// The element type of a policy's model (float; double for data.precision float64).
template <class Policy>
using value_of = std::remove_cvref_t<decltype(*std::declval<const Policy&>().params().data())>;

/// A server policy on the configured runtime.
template <class Policy>
json drive_server(context& ctx, Policy& p) {
  using T = value_of<Policy>;
  const std::size_t b = ctx.batch();
  const std::size_t d = ctx.prob.dim();
  // Each job pays its exchange with the server (the model pulled, the gradient pushed).
  auto model = with_exchange(make_time_model(ctx.exp, ctx.seed, b), exchange_time(ctx.exp, d));
  if constexpr (std::is_same_v<T, float>) {
    if (ctx.runtime() != "sim") return drive_server_real(ctx, p, std::move(model));
  } else if (ctx.runtime() != "sim") {
    throw std::logic_error("drive_server: float64 runs on the simulator only (resolve() refuses the rest)");
  }
  // The gradient is computed when the job starts, at the server's parameters of that moment,
  // on the batch the runtime times the job with: the policy's for worker w (OmniLearn's ASP
  // controller sets it, control handle set_batch), else the method's.
  auto compute = [&ctx, &p, b, d](heterograd::sim::worker_id w, std::uint64_t, std::uint64_t,
                                  std::vector<T>& g) {
    g.resize(d);
    const auto x = p.params();
    ctx.prob.gradient(w, batch_of(p, w, b), std::span<const T>(x.data(), x.size()), std::span<T>(g));
  };
  auto params = [&p] { return p.params(); };
  return drive_async<std::vector<T>>(ctx, p, compute, params, std::move(model));
}

/// A policy written for float32 only (server_row from outside the driver) as a family: its
/// type in either precision is itself, and a float64 configuration naming it is refused (the
/// built-in policies' family, in both precisions, is algorithms.hpp's in_both_precisions).
template <class Policy>
struct float32_policy {
  template <class T>
  using type = Policy;
  static constexpr bool float64 = false;
};

/// The runner's binder: schema_binder's rows with their factories.
struct run_binder {
  /// One method of a server policy in the precision T.
  template <class T, class Policy, class Config, class Make, class Report>
  static json run_server(context& ctx, const Config& defaults,
                         const std::vector<std::pair<std::string, std::string>>& renamed, const Make& make,
                         const Report& report) {
    using server_type = heterograd::algorithms::async::model_server<T, any_optimizer_t<T>>;
    server_type server(ctx.prob.initial_as<T>(), make_optimizer<T>(ctx.method["optimizer"]),
                       nonfinite_of(ctx.method));
    const Config cfg = from_json(ctx.method, defaults, renamed);
    Policy p = make(ctx, ctx.workers(), std::move(server), cfg);
    json s = drive_server(ctx, p);
    if (!s.is_null()) s["extra"]["exchange_time"] = exchange_time(ctx.exp, ctx.prob.dim());
    if constexpr (!std::is_same_v<Report, std::nullptr_t>)
      if (!s.is_null()) report(p, cfg, s["extra"]);  // null: an MPI worker rank
    return s;
  }

  /// `make(ctx, workers, server, config)` builds the policy from the method's model server
  /// (its optimizer and non-finite policy configured) and its config (the defaults with the
  /// method's keys, `renamed` as in keys_of); `report(policy, config, extra)` may add numbers
  /// to the summary's "extra".
  template <class Family, class Config, class Make, class Report = std::nullptr_t>
  static algorithm_row server(std::string name, const Config& defaults,
                              std::vector<std::pair<std::string, std::string>> renamed,
                              method_keys extra, Make make, Report report = nullptr) {
    algorithm_row row =
        schema_binder::server<Family>(name, defaults, renamed, std::move(extra), make);
    row.checkpointable = checkpointable<typename Family::template type<float>>;
    row.run = [defaults, renamed, make, report, name](context& ctx) -> json {
      if (!ctx.exp.float64)
        return run_server<float, typename Family::template type<float>>(ctx, defaults, renamed, make, report);
      if constexpr (Family::float64)
        return run_server<double, typename Family::template type<double>>(ctx, defaults, renamed, make, report);
      else
        throw config_error("data.precision", "expected float32: algorithm \"" + name + "\" runs in float32 only");
    };
    return row;
  }
  /// A round method's or local learning's runner (runners.hpp).
  template <class Runner>
  static method_runner runner() {
    return {&Runner::run, &Runner::checkpointable};
  }
  static algorithm_row round(std::string name, method_keys keys, const method_spec& m) {
    algorithm_row row = schema_binder::round(std::move(name), std::move(keys), m);
    row.run = m.runner.run;
    row.checkpointable = m.runner.checkpointable();
    return row;
  }
  static algorithm_row local(std::string name, method_keys keys, const method_spec& m) {
    algorithm_row row = schema_binder::local(std::move(name), std::move(keys), m);
    row.run = m.runner.run;
    row.checkpointable = m.runner.checkpointable();
    return row;
  }
};

/// A registry row for a server policy defined outside the driver (add_algorithm): as a row
/// of the built-in table.
template <class Policy, class Config, class Make>
algorithm_row server_row(std::string name, const Config& defaults, Make make,
                         method_keys extra = {}) {
  return run_binder::server<float32_policy<Policy>>(std::move(name), defaults, {}, std::move(extra),
                                                    std::move(make));
}

}  // namespace hgrun
