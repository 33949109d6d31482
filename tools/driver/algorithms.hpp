#pragma once
// heterograd-run's built-in algorithms: one row each (registry.hpp). A server policy's row
// names its type, its config struct (whose described fields are the method's keys, with their
// defaults and rules) and how it is built from the server and the config; `Bind` decides what
// the row holds (schema_binder: the keys; the runner's binder, servers.hpp: the factory too).
//
// Adding an asynchronous server policy to the driver is one row here (or add_algorithm with
// server_row() from outside the driver: tests/driver/toy_row_test.cpp).
//
// A round method's or local learning's row is whole too: its keys from its library configs'
// descriptions (plus the few keys only the driver has: OmniLearn's rebalance_every, local
// SGD's and biased local SGD's speed_proportional, biased local SGD's slow_workers), the
// configs whose errors it owns (method_spec: config names, renamed fields, fields set from
// another section), its gradients per update, and its runner (runners.hpp: run_sync.cpp /
// run_local.cpp, which read the same configs back, described.hpp). Nothing in the driver
// switches on a method's name.

#include <cstddef>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/algorithms/async.hpp"
#include "heterograd/algorithms/decoupled/local_learning.hpp"
#include "heterograd/algorithms/sync/biased.hpp"
#include "heterograd/algorithms/sync/bsp.hpp"
#include "heterograd/algorithms/sync/eager.hpp"
#include "heterograd/algorithms/sync/local_sgd.hpp"
#include "heterograd/algorithms/sync/selsync.hpp"
#include "heterograd/balance/dssp.hpp"
#include "heterograd/balance/omnilearn.hpp"
#include "method_checks.hpp"
#include "optimizer.hpp"
#include "registry.hpp"
#include "runners.hpp"

namespace hgrun {

// Mean job time of each worker under the base model (run_common.cpp).
struct experiment;
std::vector<double> mean_job_times(const experiment& e, std::uint64_t seed, std::size_t batch);
// The exchange with the server a server method's job pays (run_common.cpp).
double exchange_time(const experiment& e, std::size_t params);

/// A built-in server policy in each precision: P<T, any_optimizer_t<T>>.
template <template <class...> class P>
struct in_both_precisions {
  template <class T>
  using type = P<T, any_optimizer_t<T>>;
  static constexpr bool float64 = true;
};

/// Gradients per round of local SGD: every worker's H_i (local_steps), else n x period.
inline std::pair<double, std::string> local_rounds_work(const json& m, const std::string& p, double n) {
  double h = 0;
  for (const auto& x : m["local_steps"]) h += x.get<double>();
  if (h > 0) return {h, p + ".local_steps"};
  return {n * m["period"].get<double>(), p + ".period"};
}
/// Biased local SGD's: its H_i (else n x ratio), times the ratio x batch candidates whose
/// losses a step computes too.
inline std::pair<double, std::string> biased_rounds_work(const json& m, const std::string& p, double n) {
  double h = 0;
  for (const auto& x : m["local_steps"]) h += x.get<double>();
  const double r = m["ratio"].get<double>();
  if (h > 0) return {h * r, p + ".local_steps"};
  return {n * r * r, p + ".ratio"};
}
/// Rennala's: its batch B of gradients.
inline std::pair<double, std::string> rennala_work(const json& m, const std::string& p, double) {
  return {m["gradients"].get<double>(), p + ".gradients"};
}
/// Malenia's: at least max(1, S) gradients from each of the n workers.
inline std::pair<double, std::string> malenia_work(const json& m, const std::string& p, double n) {
  return {std::max(1.0, m["threshold"].get<double>()) * n, p + ".threshold"};
}

/// Fields of a library config that are no method keys: the driver sets them itself (a
/// synchronisation's time from the network, the seed from the run's, the non-finite policy
/// from the method's common key) or does not offer them. keys_of's renames to "".
inline std::vector<std::pair<std::string, std::string>> not_keys(std::initializer_list<const char*> fields) {
  std::vector<std::pair<std::string, std::string>> r;
  for (const char* f : fields) r.emplace_back(f, "");
  return r;
}

/// The policy P over the model server S's element type and optimizer.
template <template <class...> class P, class S>
using over = P<typename S::value_type, typename S::optimizer_type>;

template <class Bind>
std::vector<algorithm_row> builtin_algorithms() {
  using namespace schema;
  namespace as = heterograd::algorithms::async;
  namespace hb = heterograd::balance;
  namespace hs = heterograd::algorithms::sync;
  // Server rows: (context, workers, model server, config) -> the policy, over the model
  // server's element type (float, or double for data.precision float64) and optimizer. The
  // lambdas are generic, so schema_binder instantiates no policy.
  return {
      // ---- round methods
      Bind::round("bsp", keys_of(hs::bsp_config{}, not_keys({"states", "sync_time", "nonfinite"})),
                  {.config_names = {"bsp"},
                   .set_from = {{"sync_time", "network"}},
                   .runner = Bind::template runner<bsp_runner>()}),
      Bind::round("omnilearn",
                  keys_of(hb::omnilearn_config{}, {},
                          {{"rebalance_every",
                            integer("rounds between controller runs (0: one epoch)", 0, 0)}}),
                  {.config_names = {"omnilearn"},
                   .check = check_batch_range,
                   .runner = Bind::template runner<omnilearn_runner>()}),
      // sampled: FedAvg's device sampling (K of the workers a round, drawn from the run's
      // seed); gossip: a ring's neighbour averaging in place of the global one (NFSGD of #18).
      Bind::round("local_sgd",
                  keys_of(hs::local_sgd_config{},
                          not_keys({"warmup_steps", "groups", "global_period", "seed", "sync_time",
                                    "group_sync_time", "nonfinite"}),
                          {{"speed_proportional",
                            boolean("H_i proportional to worker speed: H_i = max(1, round(H * "
                                    "tau_min / tau_i)) from the mean job times, or measured on the real "
                                    "clock without real_scale",
                                    false)},
                           {"sampled", integer("FedAvg: workers sampled each round, uniformly without replacement "
                                               "from the run's seed (0: all)", 0, 0)},
                           {"gossip", choice("\"ring\": each worker averages with its two ring neighbours "
                                             "(weights 1/3) instead of a global average; the model evaluated is "
                                             "worker 0's after each round", "none", {"none", "ring"})}}),
                  {.config_names = {"local_sgd"},
                   .set_from = {{"sync_time", "network"}},
                   .gradients_per_update = local_rounds_work,
                   .check = check_local_sgd,
                   .runner = Bind::template runner<local_sgd_runner>()}),
      Bind::round("selsync",
                  keys_of(hs::selsync_config{},
                          not_keys({"weighting", "states", "sync_time", "vote_time", "nonfinite"})),
                  {.config_names = {"selsync"},
                   .set_from = {{"sync_time", "network"}},
                   .runner = Bind::template runner<selsync_runner>()}),
      Bind::round("eager", keys_of(hs::eager_config{}, not_keys({"seed", "average", "rounds", "nonfinite"})),
                  {.config_names = {"eager"}, .runner = Bind::template runner<eager_runner>()}),
      // slow_workers: the library's per-worker flags (biased_config::slow) as a list of indices.
      Bind::round("biased_local_sgd",
                  keys_of(hs::biased_config{}, {},
                          {{"slow_workers", array("indices of the slow workers",
                                                  integer("worker", nullptr, 0), json::array())},
                           {"speed_proportional",
                            boolean("H_i = max(1, round(max(local_steps) * tau_min / tau_i)): from the mean job "
                                    "times, or measured on the real clock without real_scale",
                                    false)}}),
                  {.config_names = {"biased"},
                   .renamed = {{"slow", "slow_workers"}},
                   .gradients_per_update = biased_rounds_work,
                   .check = check_biased_local_sgd,
                   .runner = Bind::template runner<biased_local_sgd_runner>()}),
      // ---- local learning
      // split: a torch model's children where modules 2..K start (heterograd/torch/chain.hpp).
      Bind::local("local_learning",
                  keys_of(heterograd::algorithms::decoupled::local_learning_config{}, {},
                          {{"split", array("model.kind torch: the children of the network where modules 2..K start "
                                           "(modules is then their count + 1); [] splits by modules",
                                           string("a child's name", nullptr), json::array())}}),
                  {.config_names = {"local_learning", "decoupled", "pgl"},
                   .renamed = {{"epoch_fraction", "pgl_epoch_fraction"}, {"period", "pgl_period"}},
                   .gradients_per_update = one_gradient,
                   .check = check_local_learning,
                   .runner = Bind::template runner<local_learning_runner>()}),
      // ---- asynchronous server policies
      Bind::template server<in_both_precisions<as::asgd>>("asgd", no_config{}, {}, {},
                                            [](auto&, std::size_t n, auto server, const auto&) {
                                              return over<as::asgd, decltype(server)>(n, std::move(server));
                                            }),
      Bind::template server<in_both_precisions<as::delay_adaptive_asgd>>(
          "delay_adaptive", as::delay_adaptive_config{}, {}, {},
          [](auto&, std::size_t n, auto server, const auto& c) {
            return over<as::delay_adaptive_asgd, decltype(server)>(n, std::move(server), c);
          }),
      Bind::template server<in_both_precisions<as::ringmaster_asgd>>(
          "ringmaster", as::ringmaster_config{}, {},
          {{"threshold", count_or_inf("R: delay threshold", as::ringmaster_config{}.threshold, 1)}},
          [](auto&, std::size_t n, auto server, const auto& c) {
            return over<as::ringmaster_asgd, decltype(server)>(n, std::move(server), c);
          }),
      Bind::template server<in_both_precisions<as::rescaled_asgd>>(
          "rescaled", as::rescaled_config{}, {{"initial_tau", ""}},
          {{"known_tau", boolean("start from the time model's mean tau_i (with each job's exchange with the server)", false)}},
          [](auto& ctx, std::size_t n, auto server, auto c) {
            if (ctx.method["known_tau"].template get<bool>()) {
              // A worker's time between arrivals: its mean job and the job's exchange.
              c.initial_tau = mean_job_times(ctx.exp, ctx.seed, ctx.batch());
              const double exchange = exchange_time(ctx.exp, ctx.prob.dim());
              for (double& t : c.initial_tau) t += exchange;
            }
            return over<as::rescaled_asgd, decltype(server)>(n, std::move(server), c);
          }),
      // "gradients": the key the experiments have always used for Rennala's batch B.
      with_work(Bind::template server<in_both_precisions<as::rennala_sgd>>(
                    "rennala", as::rennala_config{}, {{"batch", "gradients"}}, {},
                    [](auto&, std::size_t n, auto server, const auto& c) {
                      return over<as::rennala_sgd, decltype(server)>(n, std::move(server), c);
                    }),
                rennala_work),
      Bind::template server<in_both_precisions<as::ia2sgd>>("ia2sgd", as::ia2sgd_config{}, {}, {},
                                              [](auto&, std::size_t n, auto server, const auto& c) {
                                                return over<as::ia2sgd, decltype(server)>(n, std::move(server), c);
                                              }),
      with_work(Bind::template server<in_both_precisions<as::malenia_sgd>>(
                    "malenia", as::malenia_config{}, {}, {},
                    [](auto&, std::size_t n, auto server, const auto& c) {
                      return over<as::malenia_sgd, decltype(server)>(n, std::move(server), c);
                    }),
                malenia_work),
      Bind::template server<in_both_precisions<as::ringleader_asgd>>(
          "ringleader", no_config{}, {}, {},
          [](auto&, std::size_t n, auto server,
             const auto&) { return over<as::ringleader_asgd, decltype(server)>(n, std::move(server)); }),
      Bind::template server<in_both_precisions<as::ssp_server>>(
          "ssp", as::ssp_config{}, {}, {},
          [](auto&, std::size_t n, auto server,
             const auto& c) { return over<as::ssp_server, decltype(server)>(n, std::move(server), c); }),
      // OmniLearn's ASP controller on a vanilla ASGD server: the round method's controller keys
      // (the library config's `controller` fields, unprefixed), each worker starting at the
      // method's batch; the summary gives its runs, those that changed a batch and the batches.
      with_check(Bind::template server<in_both_precisions<as::omnilearn_asgd>>(
          "omnilearn_asgd", as::omnilearn_asgd_config{},
          {{"controller_min_batch", "min_batch"},
           {"controller_max_batch", "max_batch"},
           {"controller_deadband", "deadband"},
           {"controller_gain", "gain"}},
          {},
          [](auto& ctx, std::size_t n, auto server, const auto& c) {
            return over<as::omnilearn_asgd, decltype(server)>(n, std::move(server),
                                            std::vector<std::size_t>(n, ctx.batch()), c);
          },
          [](const auto& p, const auto&, json& extra) {
            extra["rebalances"] = p.rebalances();
            extra["changes"] = p.changes();
            std::vector<std::size_t> b;
            for (std::size_t w = 0; w < p.workers(); ++w)
              b.push_back(p.batch(static_cast<heterograd::sim::worker_id>(w)));
            extra["final_batches"] = b;
          }),
                 check_batch_range),
      // DSSP's bound in the summary: no worker ever started an iteration more than s_L + r_max
      // ahead.
      Bind::template server<in_both_precisions<as::dssp_server>>(
          "dssp", hb::dssp_config{}, {}, {},
          [](auto&, std::size_t n, auto server, const auto& c) {
            return over<as::dssp_server, decltype(server)>(n, std::move(server), c);
          },
          [](const auto& p, const auto& c, json& extra) {
            extra["max_gap_started"] = p.max_gap_started();
            extra["bound"] = c.lower + c.range;
          }),
  };
}

}  // namespace hgrun
