// Asynchronous parameter-server methods (algorithms/async, issue 6): one adapter each, all on
// drive_async.
#include <fstream>
#include <set>

#include "drive.hpp"
#include "runtimes.hpp"

#include "heterograd/algorithms/async.hpp"

namespace hgrun {

namespace {
const std::set<std::string>& async_names() {
  static const std::set<std::string> s{"asgd",    "delay_adaptive", "ringmaster", "rescaled", "rennala",
                                       "ia2sgd",  "malenia",        "ringleader", "ssp",      "dssp"};
  return s;
}
}  // namespace

bool is_async_algorithm(const std::string& a) { return async_names().count(a) > 0; }

namespace {

namespace hg = heterograd;
namespace as = heterograd::algorithms::async;

// Instantiates `f` with a default-constructed policy type of each algorithm (checkpointable
// is a property of the type, independent of its configuration).
template <class O>
bool checkpointable_with(const std::string& a) {
  using T = float;
  if (a == "asgd") return checkpointable<as::asgd<T, O>>;
  if (a == "delay_adaptive") return checkpointable<as::delay_adaptive_asgd<T, O>>;
  if (a == "ringmaster") return checkpointable<as::ringmaster_asgd<T, O>>;
  if (a == "rescaled") return checkpointable<as::rescaled_asgd<T, O>>;
  if (a == "rennala") return checkpointable<as::rennala_sgd<T, O>>;
  if (a == "ia2sgd") return checkpointable<as::ia2sgd<T, O>>;
  if (a == "malenia") return checkpointable<as::malenia_sgd<T, O>>;
  if (a == "ringleader") return checkpointable<as::ringleader_asgd<T, O>>;
  if (a == "ssp") return checkpointable<as::ssp_server<T, O>>;
  if (a == "dssp") return checkpointable<as::dssp_server<T, O>>;
  return false;
}

template <class Policy>
json drive_server(context& ctx, Policy& p) {
  const std::size_t b = ctx.batch();
  const std::size_t d = ctx.prob.dim();
  if (ctx.runtime() != "sim") return drive_server_real(ctx, p, make_time_model(ctx.config, ctx.seed, b));
  // The gradient is computed when the job starts, at the server's parameters of that moment.
  auto compute = [&ctx, &p, b, d](hg::sim::worker_id w, std::uint64_t, std::uint64_t, std::vector<float>& g) {
    g.resize(d);
    const auto x = p.params();
    ctx.prob.gradient(w, b, std::span<const float>(x.data(), x.size()), g);
  };
  auto params = [&p] { return p.params(); };
  json s = drive_async(ctx, p, compute, params, make_time_model(ctx.config, ctx.seed, b));
  return s;
}

template <class O>
json run_with(context& ctx, O opt) {
  const json& m = ctx.method;
  const std::string a = m["algorithm"];
  const std::size_t n = ctx.workers();
  as::model_server<float, O> server(ctx.prob.initial(), opt, nonfinite_of(m));
  if (a == "asgd") {
    as::asgd<float, O> p(n, std::move(server));
    return drive_server(ctx, p);
  }
  if (a == "delay_adaptive") {
    as::delay_adaptive_asgd<float, O> p(n, std::move(server), {.reference = m["reference"].get<std::size_t>()});
    return drive_server(ctx, p);
  }
  if (a == "ringmaster") {
    const json& r = m["threshold"];
    as::ringmaster_config cfg;
    cfg.threshold = r.is_string() ? as::infinite_delay : r.get<std::uint64_t>();
    cfg.variant = m["variant"] == "discard" ? as::ringmaster_variant::discard : as::ringmaster_variant::interrupt;
    as::ringmaster_asgd<float, O> p(n, std::move(server), cfg);
    return drive_server(ctx, p);
  }
  if (a == "rescaled") {
    as::rescaled_config cfg;
    cfg.ema = m["ema"].get<double>();
    cfg.reference = m["reference"].get<double>();
    if (m["known_tau"].get<bool>()) cfg.initial_tau = mean_job_times(ctx.config, ctx.seed, ctx.batch());
    as::rescaled_asgd<float, O> p(n, std::move(server), cfg);
    return drive_server(ctx, p);
  }
  if (a == "rennala") {
    as::rennala_sgd<float, O> p(n, std::move(server), {.batch = m["gradients"].get<std::size_t>()});
    return drive_server(ctx, p);
  }
  if (a == "ia2sgd") {
    as::ia2sgd<float, O> p(n, std::move(server));
    return drive_server(ctx, p);
  }
  if (a == "malenia") {
    as::malenia_sgd<float, O> p(n, std::move(server), {.threshold = m["threshold"].get<double>()});
    return drive_server(ctx, p);
  }
  if (a == "ringleader") {
    as::ringleader_asgd<float, O> p(n, std::move(server));
    return drive_server(ctx, p);
  }
  if (a == "ssp") {
    as::ssp_server<float, O> p(n, std::move(server), {.staleness = m["staleness"].get<std::uint64_t>()});
    return drive_server(ctx, p);
  }
  // dssp
  as::dssp_server<float, O> p(n, std::move(server),
                              hg::balance::dssp_config{.lower = m["lower"].get<std::size_t>(),
                                                       .range = m["range"].get<std::size_t>()});
  json s = drive_server(ctx, p);
  if (s.is_null()) return s;  // an MPI worker rank
  // DSSP's bound: no worker ever started an iteration more than s_L + r_max ahead.
  s["extra"]["max_gap_started"] = p.max_gap_started();
  s["extra"]["bound"] = m["lower"].get<std::size_t>() + m["range"].get<std::size_t>();
  return s;
}

}  // namespace

bool async_checkpointable(const std::string& a) {
  return checkpointable_with<hg::optim::sgd>(a) && checkpointable_with<hg::optim::momentum>(a);
}

json run_async_family(context& ctx) {
  return with_optimizer(ctx.method["optimizer"], [&](auto opt) { return run_with(ctx, opt); });
}

}  // namespace hgrun
