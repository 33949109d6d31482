// heterograd-run's real runtimes: "threads" (workers are threads of this process) and "mpi"
// (mpirun -np K heterograd-run ...) against the simulated cluster ("sim") on the same
// configuration and seed.
//
// What must be equal (tools/driver/runtimes.hpp): virtual time is the worker-time model's on
// every runtime, the asynchronous servers hand results over in the simulator's order
// (arrival_order::virtual_time) and the round methods run exactly the rounds the simulator
// finishes by each evaluation, so threads gives bitwise the simulator's parameters,
// evaluations, update counts, events and trace hash; so does MPI for the asynchronous family,
// and for the round family up to the MPI allreduce's summation order (within 1e-6).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "config.hpp"
#include "heterograd/data/idx.hpp"
#include "report.hpp"
#include "run.hpp"

namespace fs = std::filesystem;
using hgrun::json;

namespace {

/// Whether Debian's Fashion-MNIST files are installed (./hg deps); says so when not.
bool have_fashion_mnist() {
  const auto d = heterograd::data::fashion_mnist_dir();
  if (fs::exists(d / "t10k-labels-idx1-ubyte") || fs::exists(d / "t10k-labels-idx1-ubyte.gz")) return true;
  BOOST_TEST_MESSAGE("no Fashion-MNIST files (./hg deps): skipped");
  return false;
}

fs::path scratch(const std::string& name) {
  const auto p = fs::temp_directory_path() / ("hg-runtime-test-" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Heterogeneous workers (tau_i = 1 + i permuted, half-normal noise, an outage), a quadratic
// whose model is larger than the inproc eager limit (rendezvous sends, as real models).
json quadratic_experiment(std::size_t dim) {
  json j = json::parse(R"({
    "name": "runtime", "data": {"dataset": "worst_case_quadratic", "noise": 0.1},
    "workers": {"count": 4, "time": {"base": "linear", "noise": "half_normal",
                                     "outages": [{"worker": 1, "begin": 5, "end": 12}]}},
    "horizon": {"time": 40}, "eval_interval": 5, "optimizer": {"lr": 0.1},
    "target": {"metric": "loss", "value": 0.05, "below": true},
    "methods": [{"label": "ASGD", "algorithm": "asgd"},
                {"label": "Ringmaster", "algorithm": "ringmaster", "threshold": 2, "variant": "interrupt"},
                {"label": "SSP", "algorithm": "ssp", "staleness": 1},
                {"label": "BSP", "algorithm": "bsp"},
                {"label": "local SGD", "algorithm": "local_sgd", "local_steps": [3, 2, 2, 1]}]})");
  j["data"]["dim"] = dim;
  return j;
}

// The same workers on a Fashion-MNIST subset, with an accuracy target.
json fashion_experiment(std::size_t train_samples, const char* model) {
  json j = quadratic_experiment(1);
  j["data"] = {{"dataset", "fashion_mnist"}, {"train_samples", train_samples},
               {"test_samples", 200}, {"batch", 16}};
  j["model"] = json::parse(model);
  j["target"] = json::parse(R"({"metric": "accuracy", "value": 0.5})");
  return j;
}

json run(json raw, const std::string& runtime, const fs::path& dir, std::size_t method) {
  raw["runtime"] = runtime;
  const json cfg = hgrun::resolve(raw);
  hgrun::run_request req{cfg, method, cfg["seed"].get<std::uint64_t>(), dir / runtime, false, 0, {}};
  return hgrun::run_method(req);
}

std::string table(const fs::path& file) {  // a CSV without its '#' header lines
  std::ifstream in(file);
  std::string line, out;
  while (std::getline(in, line))
    if (line.empty() || line[0] != '#') out += line + "\n";
  return out;
}

// Every number the simulator's run reports, except wall-clock seconds.
void same_run(const json& a, const json& b, const fs::path& da, const fs::path& db, bool bitwise) {
  const std::string m = a["label"];
  BOOST_TEST(a["events"] == b["events"], m);
  BOOST_TEST(a["trace_hash"] == b["trace_hash"], m);
  BOOST_TEST(a["updates"] == b["updates"], m);
  BOOST_TEST(a["max_staleness"] == b["max_staleness"], m);
  BOOST_TEST(a["end_time"] == b["end_time"], m);
  BOOST_TEST(table(da / "workers.csv") == table(db / "workers.csv"), m);
  BOOST_TEST(table(da / "staleness.csv") == table(db / "staleness.csv"), m);
  if (bitwise) {
    BOOST_TEST(a["params_hash"] == b["params_hash"], m);
    BOOST_TEST(a["final"] == b["final"], m);
    BOOST_TEST(a["time_to_target"] == b["time_to_target"], m);
    BOOST_TEST(table(da / "evaluations.csv") == table(db / "evaluations.csv"), m);
  } else {
    for (auto it = a["final"].begin(); it != a["final"].end(); ++it) {
      const double x = it.value().get<double>(), y = b["final"][it.key()].get<double>();
      BOOST_TEST(std::abs(x - y) <= 1e-6 * std::max(1.0, std::abs(x)), m << " " << it.key() << ": " << x << " vs " << y);
    }
  }
}

void threads_equal_sim(const json& raw, const std::string& name) {
  const auto dir = scratch(name);
  for (std::size_t i = 0; i < raw["methods"].size(); ++i) {
    const auto d = dir / std::to_string(i);
    const json a = run(raw, "sim", d, i), b = run(raw, "threads", d, i);
    BOOST_TEST_MESSAGE(name << " " << a["label"].get<std::string>() << ": " << a["updates"]["applied"]
                            << " updates, sim " << a["wall_seconds"] << " s, threads " << b["wall_seconds"] << " s");
    BOOST_TEST(b["extra"]["runtime"] == "threads");
    same_run(a, b, d / "sim", d / "threads", true);
  }
}

std::string error_of(const json& raw) {
  try {
    hgrun::resolve(raw);
  } catch (const hgrun::config_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(threads_runtime)

BOOST_AUTO_TEST_CASE(threads_give_the_simulators_parameters_metrics_and_trace_bit_for_bit) {
  // 20000 floats = 80 kB per model: above the inproc eager limit (64 kB).
  threads_equal_sim(quadratic_experiment(20000), "time-horizon");
}

BOOST_AUTO_TEST_CASE(horizons_in_updates_and_epochs_end_where_the_simulator_ends) {
  json u = quadratic_experiment(64);
  u["horizon"] = json{{"updates", 30}};
  threads_equal_sim(u, "updates-horizon");
  json e = quadratic_experiment(64);
  e["horizon"] = json{{"epochs", 12}};  // the quadratic's "training set" is one sample per worker
  e["eval_interval"] = 2;
  threads_equal_sim(e, "epochs-horizon");
}

BOOST_AUTO_TEST_CASE(selsync_and_omnilearn_on_threads_equal_the_simulator_bit_for_bit) {
  json j = quadratic_experiment(64);
  j["workers"]["time"]["batch_scaling"] = true;  // OmniLearn's batches change the round times
  j["data"]["batch"] = 8;
  j["horizon"] = json{{"time", 60}};
  j["methods"] = json::parse(R"([
    {"label": "SelSync", "algorithm": "selsync", "threshold": 0.3, "window": 3, "alpha": 0.3},
    {"label": "OmniLearn", "algorithm": "omnilearn", "rebalance_every": 2, "min_batch": 2, "max_batch": 32,
     "deadband": 0.05}])");
  threads_equal_sim(j, "selsync-omnilearn");
  // Both mechanisms are exercised: SelSync both synchronises and steps locally, OmniLearn
  // rebalances.
  const auto d = scratch("selsync-omnilearn-sim");
  const json sel = run(j, "sim", d, 0), omni = run(j, "sim", d / "1", 1);
  const double local = sel["extra"]["local_fraction"];
  BOOST_TEST(local > 0.0);
  BOOST_TEST(local < 1.0);
  BOOST_TEST(omni["extra"]["rebalances"].get<std::size_t>() > 0);
}

// FedAvg (device sampling: 2 of the 4 workers a round, drawn from the run's seed) and gossip on a
// ring (each worker averages with its neighbours; worker 0's model after each round evaluated):
// the threads runtime gives the simulator's numbers bit for bit, and each method does what it
// says: FedAvg processes exactly rounds x 2 workers x H gradients, gossip ends apart from plain
// local SGD's global average.
BOOST_AUTO_TEST_CASE(fedavg_sampling_and_gossip_on_threads_equal_the_simulator_bit_for_bit) {
  json j = quadratic_experiment(64);
  j["horizon"] = json{{"updates", 12}};
  j["methods"] = json::parse(R"([
    {"label": "FedAvg", "algorithm": "local_sgd", "period": 2, "sampled": 2},
    {"label": "gossip", "algorithm": "local_sgd", "period": 2, "gossip": "ring"},
    {"label": "local SGD", "algorithm": "local_sgd", "period": 2}])");
  threads_equal_sim(j, "fedavg-gossip");
  const auto d = scratch("fedavg-gossip-sim");
  const json fed = run(j, "sim", d / "0", 0), gossip = run(j, "sim", d / "1", 1), plain = run(j, "sim", d / "2", 2);
  BOOST_TEST(fed["final"]["updates"].get<double>() == 12.0);
  BOOST_TEST(fed["final"]["samples"].get<double>() == 12.0 * 2 * 2);  // one sample a gradient here
  BOOST_TEST(plain["final"]["samples"].get<double>() == 12.0 * 4 * 2);
  BOOST_TEST(gossip["final"]["samples"].get<double>() == 12.0 * 4 * 2);
  BOOST_TEST(gossip["params_hash"] != plain["params_hash"]);
  BOOST_TEST(fed["params_hash"] != plain["params_hash"]);
  // Refused with the key: more sampled workers than workers; gossip with sampling, with averaged
  // optimizer states or FedNova's weights; a topology that is not offered.
  json bad = j;
  for (const auto& [method, key] : std::vector<std::pair<const char*, const char*>>{
           {R"({"label": "m", "algorithm": "local_sgd", "sampled": 5})", "methods[0].sampled"},
           {R"({"label": "m", "algorithm": "local_sgd", "sampled": 2, "gossip": "ring"})", "methods[0].gossip"},
           {R"({"label": "m", "algorithm": "local_sgd", "gossip": "ring", "states": "average"})", "methods[0].states"},
           {R"({"label": "m", "algorithm": "local_sgd", "gossip": "ring", "weighting": "fednova"})", "methods[0].weighting"},
           {R"({"label": "m", "algorithm": "local_sgd", "gossip": "torus"})", "methods[0].gossip"}}) {
    bad["methods"] = json::array({json::parse(method)});
    BOOST_TEST(error_of(bad).find(key) != std::string::npos, error_of(bad));
  }
}

// eager-SGD with injected imbalance (one random worker per step is 3 time units late) and a
// small staleness bound, so rounds fire without every worker, late gradients are carried to the
// next round and the bound holds fresh workers back.
json eager_experiment() {
  json j = quadratic_experiment(64);
  j["workers"]["time"]["subset_delay"] = json{{"count", 1}, {"delay", 3.0}};
  j["methods"] = json::parse(R"([
    {"label": "eager majority", "algorithm": "eager", "mode": "majority", "staleness_bound": 2},
    {"label": "eager solo", "algorithm": "eager", "mode": "solo", "staleness_bound": 1}])");
  return j;
}

BOOST_AUTO_TEST_CASE(eager_sgd_on_threads_equals_the_simulator_bit_for_bit_fresh_and_late) {
  // Real workers compute the gradients at their own replicas; which contributions are fresh
  // or late in each round follows the worker-time model, so every round, every replica and
  // every count is the simulator's.
  const json j = eager_experiment();
  threads_equal_sim(j, "eager");
  json u = j;
  u["horizon"] = json{{"updates", 23}};  // 23 fired rounds
  u["eval_interval"] = 7.5;
  threads_equal_sim(u, "eager-updates");
  const auto d = scratch("eager-extra");
  for (std::size_t i = 0; i < j["methods"].size(); ++i) {
    json a = run(j, "sim", d / std::to_string(i), i), b = run(j, "threads", d / std::to_string(i), i);
    const std::string m = a["label"];
    // Both mechanisms are exercised: rounds fire with fewer than n fresh contributions, and
    // late contributions are folded into later rounds; the threads run counts the same.
    const double fresh = a["extra"]["mean_fresh_per_round"];
    BOOST_TEST(fresh > 0.0, m);
    BOOST_TEST(fresh < static_cast<double>(j["workers"]["count"].get<std::size_t>()), m);
    BOOST_TEST(a["extra"]["late_contributions"].get<std::uint64_t>() > 0u, m);
    BOOST_TEST(a["extra"]["late_contributions"] == b["extra"]["late_contributions"], m);
    BOOST_TEST(a["extra"]["mean_fresh_per_round"] == b["extra"]["mean_fresh_per_round"], m);
    std::string sub = "u";  // not "u" + to_string(i): GCC 12's -Wrestrict false positive there
    sub += std::to_string(i);
    const json u1 = run(u, "threads", d / sub, i);
    BOOST_TEST(u1["updates"]["applied"].get<std::uint64_t>() > 0u, m);
  }
}

BOOST_AUTO_TEST_CASE(an_updates_horizon_ends_at_exactly_that_many_updates_or_rounds) {
  // An evaluation interval covers many updates, and the count is not a multiple of what one
  // gives: the run stops right after the N-th update (round), the last evaluation is there.
  for (std::uint64_t n : {17u, 31u}) {
    json j = quadratic_experiment(16);
    j["horizon"] = json{{"updates", n}};
    j["eval_interval"] = 7.5;
    j["methods"].push_back(json::parse(R"({"label": "SelSync", "algorithm": "selsync", "threshold": 0.3,
                                           "window": 3, "alpha": 0.3})"));
    j["methods"].push_back(json::parse(R"({"label": "OmniLearn", "algorithm": "omnilearn", "rebalance_every": 2})"));
    threads_equal_sim(j, "exact-updates-" + std::to_string(n));
    const auto dir = scratch("exact-updates-sim-" + std::to_string(n));
    for (std::size_t i = 0; i < j["methods"].size(); ++i) {
      const json s = run(j, "sim", dir / std::to_string(i), i);
      const std::string a = j["methods"][i]["algorithm"];
      const bool rounds = a == "bsp" || a == "local_sgd" || a == "selsync" || a == "omnilearn";
      const std::uint64_t got = rounds ? s["extra"]["rounds"].get<std::uint64_t>()
                                       : s["updates"]["applied"].get<std::uint64_t>();
      BOOST_TEST(got == n, a << ": " << got << " updates, horizon " << n);
      // The last evaluation is at the virtual time of the N-th update, before the grid's next.
      const double end = s["end_time"];
      const std::string evs = table(dir / std::to_string(i) / "sim" / "evaluations.csv");
      const auto evals = static_cast<std::size_t>(std::count(evs.begin(), evs.end(), '\n')) - 1;  // header
      BOOST_TEST(end <= 7.5 * static_cast<double>(evals - 1), a);
      BOOST_TEST(end > 7.5 * static_cast<double>(evals - 2), a);
    }
  }
}

BOOST_AUTO_TEST_CASE(an_epochs_horizon_stops_at_the_first_event_that_processes_enough_samples) {
  // The quadratic's training set is one sample per worker and a job draws one sample: a
  // server's event delivers one result, a round of local SGD [3, 2, 2, 1] processes 8.
  const double epochs = 9.75;  // 39 samples
  json j = quadratic_experiment(16);
  j["horizon"] = json{{"epochs", epochs}};
  j["eval_interval"] = 7.5;
  threads_equal_sim(j, "exact-epochs");
  const auto dir = scratch("exact-epochs-sim");
  for (std::size_t i = 0; i < j["methods"].size(); ++i) {
    const json s = run(j, "sim", dir / std::to_string(i), i);
    const std::string a = j["methods"][i]["algorithm"];
    const double per_event = a == "local_sgd" ? 8.0 / 4.0 : a == "bsp" ? 4.0 / 4.0 : 1.0 / 4.0;
    const double got = s["extra"]["epochs"];
    BOOST_TEST(got >= epochs, a << ": " << got);
    BOOST_TEST(got < epochs + per_event, a << ": " << got);
  }
}

BOOST_AUTO_TEST_CASE(omnilearn_asgd_on_threads_equals_the_simulator_bit_for_bit_as_its_batches_change) {
  // OmniLearn's ASP server: jobs of b samples take tau_i x b / 16 (tau_i = 1 + i permuted, no
  // noise), every worker starts at b = 16, so the controller's first run gives b_i =
  // 16 t̄ / tau_i with t̄ = 2.5: 40, 20, 13, 10, mid-run. The server times each job at its batch
  // and sends it, the worker draws that many samples; under a time horizon and an epochs one
  // (a result counts its job's batch).
  if (!have_fashion_mnist()) return;
  json j = fashion_experiment(800, R"({"hidden": [16]})");
  j["workers"]["time"] = json::parse(R"({"base": "linear", "batch_scaling": true})");
  j["optimizer"] = json::parse(R"({"lr": 0.05})");  // x 40 / 16 for the fastest worker's pushes
  j["horizon"] = json{{"time", 120}};
  j["eval_interval"] = 30;
  j["methods"] = json::parse(R"([{"label": "OmniLearn ASP", "algorithm": "omnilearn_asgd", "min_batch": 4,
                                   "max_batch": 64, "rebalance_every": 8}])");
  threads_equal_sim(j, "omnilearn-asgd");
  json e = j;
  e["horizon"] = json{{"epochs", 3}};
  e["eval_interval"] = 20;
  threads_equal_sim(e, "omnilearn-asgd-epochs");
  const auto d = scratch("omnilearn-asgd-sim");
  const json s = run(j, "sim", d, 0), se = run(e, "sim", d / "epochs", 0);
  // It learns: 50% accuracy crossed (at 60 of 120; not held for target.window 60, since 90's
  // evaluation fell back below it).
  BOOST_TEST(!s["first_crossing"].is_null());
  BOOST_TEST(s["extra"]["changes"].get<std::size_t>() == 1u);  // later runs: inside the dead-band
  BOOST_TEST(s["extra"]["rebalances"].get<std::size_t>() > 1u);
  auto b = s["extra"]["final_batches"].get<std::vector<double>>();
  std::sort(b.begin(), b.end());
  const std::vector<double> theory{10, 13, 20, 40};
  BOOST_TEST(b == theory, boost::test_tools::per_element());
  // The epochs horizon ends at the first result past 3 epochs: at most one more job's batch.
  const double epochs = se["extra"]["epochs"];
  BOOST_TEST(epochs >= 3.0);
  BOOST_TEST(epochs < 3.0 + 64.0 / 800.0);
}

BOOST_AUTO_TEST_CASE(fashion_mnist_workers_compute_concurrently_with_their_own_scratch) {
  if (!have_fashion_mnist()) return;
  json j = fashion_experiment(800, R"({"hidden": [16]})");
  j["horizon"] = json{{"time", 120}};
  j["eval_interval"] = 30;
  j["methods"] = json::parse(R"([{"label": "Ringmaster", "algorithm": "ringmaster", "threshold": 2, "variant": "interrupt"},
                                  {"label": "BSP", "algorithm": "bsp"},
                                  {"label": "biased", "algorithm": "biased_local_sgd", "slow_workers": [3],
                                   "local_steps": [3, 2, 2, 1], "shuffle_rounds": 2}])");
  threads_equal_sim(j, "fashion");
}

BOOST_AUTO_TEST_CASE(local_learning_on_threads_runs_its_modules_as_a_pipeline_equal_to_the_sequential_loop) {
  // One thread per module (decoupled/pipeline.hpp); PGL's global steps drain the pipeline and
  // run between its segments. Parameters, evaluations and counts are the sequential run's.
  if (!have_fashion_mnist()) return;
  json j = fashion_experiment(800, R"({"kind": "mlp", "hidden": [32, 16]})");
  j["horizon"] = json{{"epochs", 2}};
  j["eval_interval"] = 0.3;  // evaluations fall inside pipeline segments
  j["methods"] = json::parse(R"([
    {"label": "DGL", "algorithm": "local_learning", "modules": 3, "head_hidden": [8]},
    {"label": "PGL", "algorithm": "local_learning", "modules": 3, "pgl_period": 7, "pgl_epoch_fraction": 0.5},
    {"label": "end-to-end", "algorithm": "local_learning", "modules": 1}])");
  threads_equal_sim(j, "local-learning");
  const auto d = scratch("local-learning-extra");
  const json pgl = run(j, "threads", d, 1);
  BOOST_TEST(pgl["extra"]["global_steps"].get<std::size_t>() > 0u);
  BOOST_TEST(pgl["extra"]["global_steps"].get<std::size_t>() < pgl["extra"]["iterations"].get<std::size_t>());
  BOOST_TEST(pgl["extra"]["pipeline_busy_seconds"].size() == 3u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(runtime_checks)

BOOST_AUTO_TEST_CASE(every_method_including_local_learning_is_accepted_on_threads_and_mpi) {
  // Every method of the driver runs on threads and MPI; local learning as a pipeline of its
  // modules (threads of one process, or one MPI rank per module).
  for (const char* a : {"eager", "biased_local_sgd"}) {
    json j = quadratic_experiment(8);
    j["methods"] = json::array({json{{"label", "m"}, {"algorithm", a}}});
    if (std::string(a) == "biased_local_sgd") j["methods"][0]["local_steps"] = json::array({1, 1, 1, 1});
    for (const char* rt : {"threads", "mpi"}) {
      j["runtime"] = rt;
      BOOST_TEST(error_of(j).empty(), a << " on " << rt << ": " << error_of(j));
    }
  }
  json j = quadratic_experiment(8);
  j["data"] = json::parse(R"({"dataset": "fashion_mnist"})");
  j["model"] = json::parse(R"({"kind": "mlp", "hidden": [16]})");
  j["horizon"] = json{{"epochs", 1}};
  j["eval_interval"] = 0.5;
  j["methods"] = json::array({json{{"label", "m"}, {"algorithm", "local_learning"}, {"pgl_period", 3}}});
  for (const char* rt : {"sim", "threads", "mpi"}) {
    j["runtime"] = rt;
    BOOST_TEST(error_of(j).empty(), "local_learning on " << rt << ": " << error_of(j));
  }
}

BOOST_AUTO_TEST_CASE(checkpoints_need_the_simulated_cluster_or_the_real_clock) {
  json j = quadratic_experiment(8);
  j["checkpoint_every"] = 2;
  for (const char* rt : {"threads", "mpi"}) {
    j["runtime"] = rt;
    const std::string e = error_of(j);
    BOOST_TEST(e.find("'checkpoint_every'") != std::string::npos, e);
    BOOST_TEST(e.find("expected 0 with runtime \"" + std::string(rt) + "\" and clock \"virtual\"") != std::string::npos, e);
    j["clock"] = "real";
    j["real_scale"] = 0.01;
    BOOST_TEST(error_of(j).empty(), rt);
    j.erase("clock");
    j.erase("real_scale");
  }
  j["runtime"] = "sim";
  BOOST_TEST(error_of(j).empty());
}

BOOST_AUTO_TEST_CASE(mpi_needs_workers_plus_one_ranks_for_a_server_and_workers_ranks_for_rounds) {
  json j = quadratic_experiment(8);
  j["workers"]["count"] = 6;
  j["workers"]["time"].erase("outages");
  j["methods"] = json::parse(R"([{"label": "a", "algorithm": "asgd"}, {"label": "r", "algorithm": "rescaled"}])");
  BOOST_TEST(hgrun::mpi_ranks_needed(hgrun::resolve(j)) == 7);
  j["methods"] = json::parse(R"([{"label": "a", "algorithm": "asgd"}, {"label": "e", "algorithm": "eager"}])");
  BOOST_TEST(hgrun::mpi_ranks_needed(hgrun::resolve(j)) == 7);  // eager: rank 0 plays the rounds
  j["methods"] = json::parse(R"([{"label": "b", "algorithm": "bsp"}, {"label": "l", "algorithm": "local_sgd"}])");
  BOOST_TEST(hgrun::mpi_ranks_needed(hgrun::resolve(j)) == 6);
  j["methods"] = json::parse(R"([{"label": "a", "algorithm": "asgd"}, {"label": "b", "algorithm": "bsp"}])");
  BOOST_CHECK_THROW(hgrun::mpi_ranks_needed(hgrun::resolve(j)), hgrun::config_error);
}

BOOST_AUTO_TEST_CASE(local_learning_under_mpi_needs_one_rank_per_module_and_says_which_key_sets_it) {
  json j = quadratic_experiment(8);
  j["data"] = json::parse(R"({"dataset": "fashion_mnist"})");
  j["model"] = json::parse(R"({"kind": "mlp", "hidden": [16, 16, 16]})");
  j["horizon"] = json{{"epochs", 1}};
  j["eval_interval"] = 0.5;
  j["runtime"] = "mpi";
  for (std::size_t k : {1u, 3u, 4u}) {  // workers.count (4) plays no part
    j["methods"] = json::array({json{{"label", "m"}, {"algorithm", "local_learning"}, {"modules", k}}});
    const json cfg = hgrun::resolve(j);
    BOOST_TEST(hgrun::mpi_ranks_needed(cfg) == static_cast<int>(k));
    const std::string e = hgrun::mpi_ranks_mismatch(cfg, 2).what();
    BOOST_TEST(e.find("'methods[0].modules'") != std::string::npos, e);
    BOOST_TEST(e.find("-np " + std::to_string(k)) != std::string::npos, e);
    BOOST_TEST(e.find("got -np 2") != std::string::npos, e);
  }
  // Beside a round method with another rank count: one mpirun cannot run both.
  j["methods"] = json::parse(R"([{"label": "b", "algorithm": "bsp"}, {"label": "m", "algorithm": "local_learning", "modules": 2}])");
  try {
    hgrun::mpi_ranks_needed(hgrun::resolve(j));
    BOOST_TEST(false, "expected a config_error");
  } catch (const hgrun::config_error& e) {
    const std::string w = e.what();
    BOOST_TEST(w.find("needs -np 4") != std::string::npos, w);
    BOOST_TEST(w.find("methods[1] (local_learning) needs -np 2") != std::string::npos, w);
  }
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------------
// Under mpirun: the CTest entry driver_runtime_mpi (label mpi) sets HG_RUNTIME_TEST_MPIEXEC
// (and the process-count flag) from CMake's FindMPI variables; elsewhere the suite is skipped.

namespace {

boost::test_tools::assertion_result mpi_available(boost::unit_test::test_unit_id) {
  return std::getenv("HG_RUNTIME_TEST_MPIEXEC") != nullptr;
}

// `args`: more of heterograd-run's flags; `halts`: the run stops as if killed (--halt-after),
// so its exit status is not 0 and no summary is read.
json mpirun(json raw, int np, const fs::path& dir, const std::string& args = "", bool halts = false) {
  raw["runtime"] = "mpi";
  raw["output"] = dir.string();
  const auto cfg = dir.parent_path() / (dir.filename().string() + ".json");
  std::ofstream(cfg) << raw.dump(2);
  std::string cmd = std::string(std::getenv("HG_RUNTIME_TEST_MPIEXEC")) + " " +
                    std::getenv("HG_RUNTIME_TEST_NP_FLAG") + " " + std::to_string(np) + " --oversubscribe " +
                    std::getenv("HG_RUNTIME_TEST_PREFLAGS") + " " + HG_RUN_EXE + " " + cfg.string() +
                    " --quiet --no-plots " + args + " > " + (dir.string() + ".log") + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::stringstream log;
  log << std::ifstream(dir.string() + ".log").rdbuf();
  if (halts) {
    BOOST_TEST_REQUIRE(log.str().find("halted after") != std::string::npos, cmd << "\n" << log.str());
    return json::object();
  }
  BOOST_TEST_REQUIRE(rc == 0, cmd << "\n" << log.str());
  json out = json::object();
  for (const auto& m : raw["methods"]) {
    std::ifstream in(dir / hgrun::slug(m["label"]) / "summary.json");
    out[m["label"].get<std::string>()] = json::parse(in);
  }
  return out;
}

// The quadratic experiment on the wall clock: jobs paced at 4 ms a model unit, 60 units, a
// loss target every method but IA2SGD reaches in that time.
json real_quadratic_experiment() {
  json raw = quadratic_experiment(200);
  raw["clock"] = "real";
  raw["real_scale"] = 0.004;
  raw["horizon"] = {{"time", 60}};
  raw["target"] = json::parse(R"({"metric": "loss", "value": 0.105, "below": true})");
  return raw;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(mpi_runtime, *boost::unit_test::precondition(mpi_available))

BOOST_AUTO_TEST_CASE(mpirun_gives_the_simulators_numbers_bitwise_for_servers_and_to_1e_6_for_rounds) {
  const auto dir = scratch("mpi");
  json raw = quadratic_experiment(20000);
  const std::size_t n = raw["workers"]["count"];
  const json selsync = json::parse(R"({"label": "SelSync", "algorithm": "selsync", "threshold": 0.3, "window": 3,
                                       "alpha": 0.3})");
  const json omnilearn = json::parse(R"({"label": "OmniLearn", "algorithm": "omnilearn", "rebalance_every": 2})");
  json servers = raw, rounds = raw;
  const json eager = json::parse(R"({"label": "eager", "algorithm": "eager", "staleness_bound": 2})");
  const json omnilearn_asgd = json::parse(R"({"label": "OmniLearn ASP", "algorithm": "omnilearn_asgd", "batch": 16,
                                             "min_batch": 4, "max_batch": 64, "rebalance_every": 8})");
  servers["methods"] = json::array({raw["methods"][0], raw["methods"][1], eager, omnilearn_asgd});
  const json fedavg = json::parse(R"({"label": "FedAvg", "algorithm": "local_sgd", "period": 2, "sampled": 2})");
  const json gossip = json::parse(R"({"label": "gossip", "algorithm": "local_sgd", "period": 2, "gossip": "ring"})");
  rounds["methods"] = json::array({raw["methods"][3], raw["methods"][4], selsync, omnilearn, fedavg, gossip});
  // Exact updates horizons (stop_rule): 17 applied updates, 17 rounds.
  json servers_n = servers, rounds_n = rounds;
  servers_n["horizon"] = rounds_n["horizon"] = json{{"updates", 17}};
  servers_n["eval_interval"] = rounds_n["eval_interval"] = 7.5;
  rounds_n["methods"] = json::array({raw["methods"][3], selsync});
  const int np_server = static_cast<int>(n + 1), np_rounds = static_cast<int>(n);  // rank 0 serves
  for (auto [name, cfg, np, bitwise] : {std::tuple{"servers", servers, np_server, true},
                                        std::tuple{"rounds", rounds, np_rounds, false},
                                        std::tuple{"servers-17", servers_n, np_server, true},
                                        std::tuple{"rounds-17", rounds_n, np_rounds, false}}) {
    const auto sub = dir / name;
    const json got = mpirun(cfg, np, sub);
    for (std::size_t i = 0; i < cfg["methods"].size(); ++i) {
      const std::string label = cfg["methods"][i]["label"];
      const json s = run(cfg, "sim", sub / "sim" / std::to_string(i), i);
      BOOST_TEST(got[label]["extra"]["runtime"] == "mpi");
      same_run(s, got[label], sub / "sim" / std::to_string(i) / "sim", sub / hgrun::slug(label), bitwise);
      // (eager's version is its fired rounds; updates.applied counts its contributions)
      if (cfg["horizon"].contains("updates") && label != "eager")
        BOOST_TEST((bitwise ? got[label]["updates"]["applied"] : got[label]["extra"]["rounds"]) == 17, label);
    }
  }
}

// clock "real" under mpirun: real arrival order across processes, rounds agreed by the ranks,
// jobs paced to the model; invariants (tests/driver/realtime_test.cpp has them on threads).
BOOST_AUTO_TEST_CASE(clock_real_under_mpirun_keeps_each_methods_invariants_and_never_outruns_the_model) {
  const auto dir = scratch("mpi-real");
  json raw = real_quadratic_experiment();
  const std::size_t n = raw["workers"]["count"];
  json servers = raw, rounds = raw;
  // ASGD, Ringmaster R = 2, OmniLearn ASP (its batches move, but the quadratic's gradient
  // does not improve with them: no learning-rate scaling).
  // ... and every other server method of the threads test (tests/driver/realtime_test.cpp).
  servers["methods"] = json::array({raw["methods"][0], raw["methods"][1],
                                    json::parse(R"({"label": "OmniLearn ASP", "algorithm": "omnilearn_asgd", "batch": 16,
                                                    "min_batch": 4, "max_batch": 64, "rebalance_every": 8,
                                                    "scale_learning_rate": false})")});
  for (const char* m : {R"({"label": "Rennala", "algorithm": "rennala", "gradients": 3})",
                        R"({"label": "SSP", "algorithm": "ssp", "staleness": 1})",
                        R"({"label": "DSSP", "algorithm": "dssp", "lower": 1, "range": 2})",
                        R"({"label": "Malenia", "algorithm": "malenia", "threshold": 0.5})",
                        R"({"label": "Ringleader", "algorithm": "ringleader"})",
                        R"({"label": "Rescaled", "algorithm": "rescaled"})",
                        R"({"label": "delay-adaptive", "algorithm": "delay_adaptive"})",
                        R"({"label": "IA2SGD", "algorithm": "ia2sgd"})"})
    servers["methods"].push_back(json::parse(m));
  // BSP, local SGD, OmniLearn, SelSync, and eager-SGD (on the real clock rank w is worker w, as
  // for the rounds)
  rounds["methods"] = json::array({raw["methods"][3], raw["methods"][4],
                                   json::parse(R"({"label": "OmniLearn", "algorithm": "omnilearn", "rebalance_every": 2})"),
                                   json::parse(R"({"label": "SelSync", "algorithm": "selsync", "threshold": 0.3, "window": 3,
                                                   "alpha": 0.3})"),
                                   json::parse(R"({"label": "eager", "algorithm": "eager", "staleness_bound": 2})")});
  for (auto [name, cfg, np] : {std::tuple{"servers", servers, static_cast<int>(n + 1)},
                               std::tuple{"rounds", rounds, static_cast<int>(n)}}) {
    const auto sub = dir / name;
    const json got = mpirun(cfg, np, sub);
    for (std::size_t i = 0; i < cfg["methods"].size(); ++i) {
      const std::string label = cfg["methods"][i]["label"];
      json virt = cfg;
      virt["clock"] = "virtual";
      const json s = run(virt, "sim", sub / "sim" / std::to_string(i), i);
      const json& r = got[label];
      BOOST_TEST_MESSAGE(label << " under mpirun, clock real: " << r["updates"] << ", rounds " << r["extra"].value("rounds", json()));
      BOOST_TEST(r["extra"]["clock"] == "real", label);
      BOOST_TEST(r["extra"]["runtime"] == "mpi", label);
      // The target is reached where the simulated run reaches it (IA2SGD's averaged steps do
      // not in 60 units at this step size), unless the real run made fewer updates than the
      // simulated one had made by then: 2 cores shared by the ranks (and, in CI, by other
      // tests) can starve a method with few steps (Malenia's ~8); its invariants still hold.
      // Reached: a first crossing (a real run may end inside the sustained time's window).
      if (!s["time_to_target"].is_null() && r["first_crossing"].is_null()) {
        // evaluations.csv's updates column (server steps, rounds): the simulated run's at its
        // target, the real run's at its end.
        auto updates_at = [](const fs::path& file, double until) {
          const auto ev = hgrun::read_csv(file);
          const auto u = static_cast<std::size_t>(std::find(ev[0].begin(), ev[0].end(), "updates") - ev[0].begin());
          BOOST_TEST_REQUIRE(u < ev[0].size());
          double x = 0;
          for (std::size_t k = 1; k < ev.size(); ++k)
            if (std::stod(ev[k][0]) <= until) x = std::stod(ev[k][u]);
          return x;
        };
        const double needed = updates_at(sub / "sim" / std::to_string(i) / "sim" / "evaluations.csv",
                                         s["time_to_target"].get<double>());
        const double made = updates_at(sub / hgrun::slug(label) / "evaluations.csv", 1e300);
        BOOST_TEST_MESSAGE(label << ": target not reached; " << made << " updates made, the simulated run had "
                                 << needed << " at its target");
        BOOST_TEST(made < needed, label << ": the target is reached in the simulated run with " << needed
                                        << " updates; this run made " << made);
      }
      BOOST_TEST(r["extra"]["real"]["seconds_per_gradient"].size() == n, label);  // every rank's report
      if (label == "eager") {
        // Every rank's replica is the same and every computed gradient was applied, across
        // the ranks; contributions: at most the simulated ones and, at the end, the vote's
        // round and the flush, which a rank B = 2 rounds behind reaches too.
        BOOST_TEST(r["extra"]["real"]["replicas_agree"].get<bool>());
        BOOST_TEST(r["extra"]["real"]["conservation_error"].get<double>() <= 1e-5);
        BOOST_TEST(r["events"].get<double>() <= s["events"].get<double>() + (2.0 + 2.0) * static_cast<double>(n));
        BOOST_TEST(r["max_staleness"].get<double>() <= 2.0);
      } else if (r["extra"].contains("rounds")) {
        BOOST_TEST(r["extra"]["rounds"].get<double>() <= s["extra"]["rounds"].get<double>() + 1, label);
      } else {
        BOOST_TEST(r["events"].get<double>() <= s["events"].get<double>() + static_cast<double>(n), label);
        const auto rows = hgrun::read_csv(sub / hgrun::slug(label) / "staleness.csv");
        const int a = 1;  // staleness,applied,...
        if (label == "Ringmaster")
          for (std::size_t k = 1 + 2; k < rows.size(); ++k) BOOST_TEST(rows[k][a] == "0", label << " delay " << k - 1);
        if (label == "SSP" || label == "DSSP") {
          // Worker clocks (pushes applied) never differ by more than s + 1 (DSSP: s_L + r_max + 1).
          const auto wk = hgrun::read_csv(sub / hgrun::slug(label) / "workers.csv");
          const auto col = static_cast<std::size_t>(std::find(wk[0].begin(), wk[0].end(), "applied") - wk[0].begin());
          BOOST_TEST_REQUIRE(col < wk[0].size());
          double lo = 1e300, hi = 0;
          for (std::size_t w = 1; w < wk.size(); ++w) {
            lo = std::min(lo, std::stod(wk[w][col]));
            hi = std::max(hi, std::stod(wk[w][col]));
          }
          BOOST_TEST(hi - lo <= (label == "SSP" ? 1.0 + 1.0 : 1.0 + 2.0 + 1.0), label << ": " << lo << " to " << hi);
        }
      }
    }
  }
}

// Kill and resume under mpirun: a real run halted after its third evaluation's checkpoint (as
// if killed) and resumed goes on from exactly the saved model (version and parameter hash at
// the cut), on every rank: the server's workers' streams where the cut left them, each round
// method's rank its own replica and stream; it keeps its invariants and reaches the target.
BOOST_AUTO_TEST_CASE(a_real_run_under_mpirun_killed_after_a_checkpoint_resumes_from_the_saved_model) {
  const auto dir = scratch("mpi-resume");
  json raw = real_quadratic_experiment();
  raw["checkpoint_every"] = 3;
  // 10 ms of wall time per model second, not 4: this case asserts the target too, and beside
  // another test on 2 cores (ctest --parallel 2) the oversubscribed ranks' overruns at 4 ms
  // left local SGD short of it (one run in about ten; it passed alone).
  raw["real_scale"] = 0.01;
  const std::size_t n = raw["workers"]["count"];
  json servers = raw, rounds = raw;
  servers["methods"] = json::array({raw["methods"][1]});                    // Ringmaster
  rounds["methods"] = json::array({raw["methods"][3], raw["methods"][4]});  // BSP, local SGD
  for (auto [name, cfg, np] : {std::tuple{"servers", servers, static_cast<int>(n + 1)},
                               std::tuple{"rounds", rounds, static_cast<int>(n)}}) {
    const auto sub = dir / name;
    (void)mpirun(cfg, np, sub, "--halt-after 3", true);
    for (const auto& m : cfg["methods"])
      BOOST_TEST_REQUIRE(fs::exists(sub / hgrun::slug(m["label"]) / "checkpoint.bin"), m["label"]);
    const json got = mpirun(cfg, np, sub, "--resume");
    for (const auto& m : cfg["methods"]) {
      const std::string label = m["label"];
      const json& r = got[label];
      BOOST_TEST_MESSAGE(label << " under mpirun: cuts " << r["extra"]["cuts"] << ", resumed " << r["extra"]["resumed"]);
      BOOST_TEST_REQUIRE(r["extra"]["cuts"].size() >= 1u, label);
      BOOST_TEST(r["extra"]["resumed"] == r["extra"]["cuts"][0], label);
      BOOST_TEST(r["extra"]["resumed"]["version"].get<std::uint64_t>() > 0u, label);
      BOOST_TEST(r["extra"]["runtime"] == "mpi", label);
      BOOST_TEST(!r["first_crossing"].is_null(), label);  // reached (the held time may end with the run)
      BOOST_TEST(r["extra"]["real"]["seconds_per_gradient"].size() == n, label);
      const auto ev = hgrun::read_csv(sub / hgrun::slug(label) / "evaluations.csv");
      BOOST_TEST(ev.size() == 1u + 13u, label);  // the header, t = 0, 5, ..., 60: none lost or repeated
      BOOST_TEST(!fs::exists(sub / hgrun::slug(label) / "checkpoint.bin"), label);
      if (name == std::string("rounds")) {
        // Every rank went on from the saved round: its own part of the checkpoint was loaded.
        const auto at = r["extra"]["resumed_rounds_per_rank"].get<std::vector<std::uint64_t>>();
        BOOST_TEST(at == std::vector<std::uint64_t>(n, r["extra"]["resumed"]["version"].get<std::uint64_t>()),
                   label << ": " << json(at));
      }
      if (label == "Ringmaster") {
        const auto rows = hgrun::read_csv(sub / hgrun::slug(label) / "staleness.csv");
        for (std::size_t k = 1 + 2; k < rows.size(); ++k) BOOST_TEST(rows[k][1] == "0", label << " delay " << k - 1);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(biased_local_sgd_under_mpirun_redraws_from_every_ranks_scores_like_the_simulator) {
  // Worker w's score table fills on rank w; the redraw allgathers them, so every rank draws the
  // simulator's plan (the numbers agree to the round family's 1e-6).
  if (!have_fashion_mnist()) return;
  const auto dir = scratch("mpi-biased");
  json j = fashion_experiment(800, R"({"hidden": [16]})");
  j["horizon"] = json{{"time", 120}};
  j["eval_interval"] = 30;
  j["methods"] = json::parse(R"([{"label": "biased", "algorithm": "biased_local_sgd", "slow_workers": [3],
                                   "local_steps": [3, 2, 2, 1], "shuffle_rounds": 2}])");
  const json got = mpirun(j, static_cast<int>(j["workers"]["count"].get<std::size_t>()), dir / "mpi");
  const json s = run(j, "sim", dir / "sim", 0);
  BOOST_TEST(got["biased"]["extra"]["runtime"] == "mpi");
  BOOST_TEST(s["extra"]["rounds"].get<std::uint64_t>() > 2u);  // several redraws (every 2 rounds)
  same_run(s, got["biased"], dir / "sim" / "sim", dir / "mpi" / "biased", false);
}

BOOST_AUTO_TEST_CASE(local_learning_under_mpirun_runs_one_module_per_rank_bitwise_like_the_simulator) {
  // Rank k runs module k (decoupled/transport_pipeline.hpp); PGL's global steps broadcast the
  // batch and every slice, so the parameters rank 0 gathers at each evaluation are the
  // sequential loop's bit for bit: params_hash, evaluations and final metrics equal sim's.
  if (!have_fashion_mnist()) return;
  const auto dir = scratch("mpi-local-learning");
  json j = fashion_experiment(640, R"({"kind": "mlp", "hidden": [32, 16]})");
  j["horizon"] = json{{"epochs", 2}};
  j["eval_interval"] = 0.3;  // evaluations fall inside pipeline segments
  j["optimizer"] = json::parse(R"({"kind": "momentum", "lr": 0.05, "momentum": 0.9})");
  j["methods"] = json::parse(R"([
    {"label": "DGL", "algorithm": "local_learning", "modules": 2, "head_hidden": [8]},
    {"label": "PGL", "algorithm": "local_learning", "modules": 2, "pgl_period": 7, "pgl_epoch_fraction": 0.5}])");
  const json got = mpirun(j, 2, dir / "mpi");
  for (std::size_t i = 0; i < j["methods"].size(); ++i) {
    const std::string label = j["methods"][i]["label"];
    const auto d = dir / "sim" / std::to_string(i);
    const json s = run(j, "sim", d, i);
    BOOST_TEST(got[label]["extra"]["runtime"] == "mpi");
    BOOST_TEST(got[label]["extra"]["pipeline_busy_seconds"].size() == 2u);
    BOOST_TEST(got[label]["extra"]["iterations"] == s["extra"]["iterations"], label);
    BOOST_TEST(got[label]["extra"]["global_steps"] == s["extra"]["global_steps"], label);
    same_run(s, got[label], d / "sim", dir / "mpi" / hgrun::slug(label), true);
  }
  BOOST_TEST(got["PGL"]["extra"]["global_steps"].get<std::size_t>() > 0u);
  BOOST_TEST(got["PGL"]["extra"]["global_steps"].get<std::size_t>() <
             got["PGL"]["extra"]["iterations"].get<std::size_t>());
}

BOOST_AUTO_TEST_SUITE_END()
