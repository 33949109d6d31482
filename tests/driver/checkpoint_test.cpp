// heterograd-run's checkpoints for every algorithm of the driver: a run killed after a
// checkpoint and resumed from it ends with the uninterrupted run's trace hash (every event,
// in order), parameters, evaluations, update counts and method-specific numbers, bit for bit.
// Tiny sizes: four simulated workers, a scalar quadratic per worker with Gaussian gradient
// noise (so the samplers' RNG counters must be restored), half-normal job-time noise and an
// outage (the time model's counters and the event queue), momentum (optimizer state).
// Biased local SGD needs per-sample losses: it runs on a few hundred Fashion-MNIST samples.
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "config.hpp"
#include "report.hpp"
#include "run.hpp"

namespace fs = std::filesystem;
using hgrun::json;

namespace {

fs::path scratch(const std::string& name) {
  const auto p = fs::temp_directory_path() / ("hg-checkpoint-test-" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

json quadratics() {
  return json::parse(R"({
    "name": "ckpt", "seed": 7,
    "data": {"dataset": "scalar_quadratics", "centers": [0, 1, 2, 3], "noise": 0.5, "batch": 16},
    "optimizer": {"kind": "momentum", "lr": 0.05, "momentum": 0.5},
    "workers": {"count": 4, "time": {"base": "linear", "noise": "half_normal", "noise_scale": 0.5,
                                     "outages": [{"worker": 1, "begin": 12, "end": 19}]}},
    "horizon": {"time": 50}, "eval_interval": 4,
    "target": {"metric": "loss", "value": 0.6, "below": true}})");
}

json fashion() {
  return json::parse(R"({
    "name": "ckpt-fmnist", "seed": 3,
    "data": {"dataset": "fashion_mnist", "train_samples": 256, "test_samples": 64, "batch": 8},
    "model": {"hidden": [8]},
    "optimizer": {"kind": "momentum", "lr": 0.05, "momentum": 0.5},
    "workers": {"count": 4, "time": {"base": "linear", "noise": "half_normal", "noise_scale": 0.5}},
    "horizon": {"time": 60}, "eval_interval": 5})");
}

// One method per algorithm, with hyper-parameters that make its state non-trivial at a kill
// (rounds in progress, workers waiting, buffered or late gradients).
struct case_t {
  json base;
  json method;
};
std::map<std::string, case_t> cases() {
  const json q = quadratics();
  auto m = [](const std::string& s) { return json::parse(s); };
  std::map<std::string, case_t> c;
  c["asgd"] = {q, m(R"({"label": "ASGD", "algorithm": "asgd"})")};
  c["delay_adaptive"] = {q, m(R"({"label": "delay-adaptive", "algorithm": "delay_adaptive"})")};
  c["ringmaster"] = {q, m(R"({"label": "Ringmaster", "algorithm": "ringmaster", "threshold": 2})")};
  c["rescaled"] = {q, m(R"({"label": "Rescaled", "algorithm": "rescaled"})")};
  c["rennala"] = {q, m(R"({"label": "Rennala", "algorithm": "rennala", "gradients": 3})")};
  c["ia2sgd"] = {q, m(R"({"label": "IA2SGD", "algorithm": "ia2sgd"})")};
  c["malenia"] = {q, m(R"({"label": "Malenia", "algorithm": "malenia", "threshold": 1.5})")};
  c["ringleader"] = {q, m(R"({"label": "Ringleader", "algorithm": "ringleader"})")};
  c["ssp"] = {q, m(R"({"label": "SSP", "algorithm": "ssp", "staleness": 1})")};
  c["dssp"] = {q, m(R"({"label": "DSSP", "algorithm": "dssp", "lower": 1, "range": 2})")};
  c["bsp"] = {q, m(R"({"label": "BSP", "algorithm": "bsp"})")};
  c["omnilearn"] = {q, m(R"({"label": "OmniLearn", "algorithm": "omnilearn", "min_batch": 4,
                             "max_batch": 40, "deadband": 0.05, "rebalance_every": 3})")};
  c["omnilearn"].base["workers"]["time"]["batch_scaling"] = true;
  c["local_sgd"] = {q, m(R"({"label": "local SGD", "algorithm": "local_sgd", "local_steps": [2, 1, 2, 1]})")};
  c["selsync"] = {q, m(R"({"label": "SelSync", "algorithm": "selsync", "window": 2, "threshold": 0.5})")};
  c["eager"] = {q, m(R"({"label": "eager-SGD", "algorithm": "eager", "staleness_bound": 2})")};
  c["biased_local_sgd"] = {fashion(), m(R"({"label": "biased local SGD", "algorithm": "biased_local_sgd",
                                            "slow_workers": [3], "local_steps": [2, 2, 2, 1]})")};
  // The sequential reference: time is epochs, so its base runs two epochs of 32 iterations.
  c["local_learning"] = {fashion(), m(R"({"label": "PGL K=2", "algorithm": "local_learning", "modules": 2,
                                          "head_hidden": [6], "pgl_period": 3})")};
  c["local_learning"].base["horizon"] = json{{"epochs", 2}};
  c["local_learning"].base["eval_interval"] = 0.2;
  c["local_learning"].base["workers"] = json::parse(R"({"count": 1, "time": {"base": "fixed", "tau": [1.0]}})");
  return c;
}

json config_of(const case_t& c, std::uint64_t checkpoint_every) {
  json raw = c.base;
  raw["checkpoint_every"] = checkpoint_every;
  raw["methods"] = json::array({c.method});
  return hgrun::resolve(raw);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint)

BOOST_AUTO_TEST_CASE(every_algorithm_is_checkpointable_and_has_a_case_here) {
  const auto c = cases();
  for (const auto& a : hgrun::algorithm_names()) {
    BOOST_TEST(hgrun::algorithm_checkpointable(a), a);
    BOOST_TEST(c.count(a) == 1u, a);
  }
  BOOST_TEST(c.size() == hgrun::algorithm_names().size());
}

BOOST_AUTO_TEST_CASE(a_run_killed_at_any_evaluation_resumes_to_the_uninterrupted_run_for_every_algorithm) {
  std::map<std::string, json> fulls;
  for (const auto& [a, c] : cases()) {
    // A checkpoint at every evaluation, killed right after each one in turn (every state the
    // run passes through at an evaluation is restored once); then a checkpoint every third
    // evaluation, killed one evaluation later (the work after the checkpoint is done again).
    for (const std::uint64_t every : {1, 3}) {
      const json cfg = config_of(c, every);
      hgrun::preflight(cfg);  // checkpoint_every > 0 is accepted
      const auto seed = cfg["seed"].get<std::uint64_t>();
      const auto full_dir = scratch(a + "-full");
      const json full = hgrun::run_method({cfg, 0, seed, full_dir, false, 0, {}});
      const auto full_csv = hgrun::read_csv(full_dir / "evaluations.csv");
      const std::size_t evaluations = full_csv.size() - 1;
      std::vector<std::uint64_t> kills;
      if (every == 1)
        for (std::uint64_t k = 1; k < evaluations; ++k) kills.push_back(k);
      else
        kills.push_back(every + 1);
      for (const std::uint64_t k : kills) {
        const std::string at = a + ", checkpoint_every " + std::to_string(every) + ", killed after " + std::to_string(k);
        const auto kill_dir = scratch(a + "-kill");
        BOOST_CHECK_THROW(hgrun::run_method({cfg, 0, seed, kill_dir, false, k, {}}), hgrun::halted);
        BOOST_TEST(fs::exists(kill_dir / "checkpoint.bin"), at);
        const json resumed = hgrun::run_method({cfg, 0, seed, kill_dir, true, 0, {}});
        BOOST_TEST(resumed["trace_hash"].get<std::string>() == full["trace_hash"].get<std::string>(), at);
        BOOST_TEST(resumed["params_hash"].get<std::string>() == full["params_hash"].get<std::string>(), at);
        BOOST_TEST(resumed["events"].get<std::uint64_t>() == full["events"].get<std::uint64_t>(), at);
        BOOST_TEST(resumed["updates"] == full["updates"], at);
        BOOST_TEST(resumed["final"] == full["final"], at);
        BOOST_TEST(resumed["extra"] == full["extra"], at);  // rebalances, DSSP's gap, late gradients...
        BOOST_TEST((hgrun::read_csv(kill_dir / "evaluations.csv") == full_csv), at);
      }
      BOOST_TEST(evaluations >= 10u, a);
      // The run did something to restore (local learning has no simulated events: iterations).
      const json& work = a == "local_learning" ? full["extra"]["iterations"] : full["events"];
      BOOST_TEST(work.get<std::uint64_t>() > 20u, a);
      fulls[a] = full;
    }
  }
  // What makes the resumes non-trivial: rebalanced batches, late eager contributions, SelSync's
  // local and synchronised steps, buffered gradients of Rennala and Ringleader.
  BOOST_TEST(fulls["omnilearn"]["extra"]["rebalances"].get<std::size_t>() > 0u);
  BOOST_TEST(fulls["eager"]["extra"]["late_contributions"].get<std::uint64_t>() > 0u);
  const double local = fulls["selsync"]["extra"]["local_fraction"];
  BOOST_TEST((local > 0.0 && local < 1.0));
  BOOST_TEST(fulls["dssp"]["extra"]["max_gap_started"].get<std::uint64_t>() <= 3u);  // s_L + r_max
  BOOST_TEST(fulls["rennala"]["updates"]["buffered"].get<std::uint64_t>() > 0u);
  BOOST_TEST(fulls["ringleader"]["updates"]["buffered"].get<std::uint64_t>() > 0u);
  BOOST_TEST(fulls["ringmaster"]["updates"]["interrupted"].get<std::uint64_t>() > 0u);
}

BOOST_AUTO_TEST_SUITE_END()
