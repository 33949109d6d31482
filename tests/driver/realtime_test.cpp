// heterograd-run with clock "real" (tools/driver/realtime.hpp): the methods on real threads in
// real arrival order, jobs paced to the worker-time model on the wall clock. Real runs are not
// deterministic, so what is tested are their invariants: the bounds of each method (Ringmaster
// applies no gradient of delay >= R; SSP's clock gap), the conservation of results (every
// result handed to the policy has exactly one outcome, per worker), the evaluations' wall
// clock, and that a paced run never gets ahead of the simulator's prediction (each job lasts
// at least its model time, so a worker finishes no more jobs than in the simulated run).
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "config.hpp"
#include "heterograd/data/idx.hpp"
#include "heterograd/runtime/placement.hpp"
#include "realtime.hpp"
#include "report.hpp"
#include "run.hpp"

namespace fs = std::filesystem;
using hgrun::json;

namespace {

fs::path scratch(const std::string& name) {
  const auto p = fs::temp_directory_path() / ("hg-realtime-test-" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Four workers (tau_i = 1 + i permuted, half-normal noise, an outage) on a quadratic whose
// gradients cost microseconds: with 4 ms per model unit the jobs last 4-40 ms, so the real
// compute is far below the model's time.
json experiment() {
  return json::parse(R"({
    "name": "realtime", "runtime": "threads", "clock": "real", "real_scale": 0.004,
    "data": {"dataset": "worst_case_quadratic", "dim": 200, "noise": 0.1},
    "workers": {"count": 4, "time": {"base": "linear", "noise": "half_normal",
                                     "outages": [{"worker": 1, "begin": 5, "end": 12}]}},
    "horizon": {"time": 60}, "eval_interval": 5, "optimizer": {"lr": 0.1},
    "target": {"metric": "loss", "value": 0.105, "below": true},
    "methods": [{"label": "ASGD", "algorithm": "asgd"}]})");
}

json run(json raw, const fs::path& dir, const json& method) {
  raw["methods"] = json::array({method});
  const json cfg = hgrun::resolve(raw);
  hgrun::run_request req{cfg, 0, cfg["seed"].get<std::uint64_t>(), dir, false, 0, {}};
  return hgrun::run_method(req);
}

json simulated(json raw, const fs::path& dir, const json& method) {
  raw["runtime"] = "sim";
  raw["clock"] = "virtual";
  raw.erase("real_scale");
  return run(raw, dir, method);
}

// A CSV's rows (without '#' lines) as numbers by column name; text cells are skipped.
struct csv {
  std::vector<std::string> names;
  std::vector<std::vector<double>> rows;
  explicit csv(const fs::path& file) {
    std::ifstream in(file);
    BOOST_TEST_REQUIRE(in.good(), file);
    std::string line;
    bool head = true;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::vector<std::string> cells;
      std::stringstream ss(line);
      for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
      if (head) {
        names = cells;
        head = false;
        continue;
      }
      std::vector<double> r;
      for (const auto& c : cells) r.push_back(c.empty() || c[0] == '"' ? 0.0 : std::strtod(c.c_str(), nullptr));
      rows.push_back(r);
    }
  }
  std::size_t col(const std::string& n) const {
    const auto it = std::find(names.begin(), names.end(), n);
    BOOST_TEST_REQUIRE((it != names.end()), "no column " << n);
    return static_cast<std::size_t>(it - names.begin());
  }
  double at(std::size_t r, const std::string& n) const { return rows.at(r).at(col(n)); }
};

// What every real run must show: the wall clock in the evaluations, one outcome per result
// (per worker), the measured per-worker table.
void common_invariants(const json& s, const fs::path& dir, double scale) {
  const std::string m = s["label"];
  BOOST_TEST(s["extra"]["clock"] == "real", m);
  const csv ev(dir / "evaluations.csv");
  BOOST_TEST_REQUIRE(ev.rows.size() >= 2u, m);
  for (std::size_t r = 0; r < ev.rows.size(); ++r) {
    // An evaluation at model time t is taken once the wall clock passed t x real_scale.
    BOOST_TEST(ev.at(r, "wall_seconds") >= ev.at(r, "time") * scale - 1e-3, m << " row " << r);
    if (r > 0) BOOST_TEST(ev.at(r, "wall_seconds") >= ev.at(r - 1, "wall_seconds"), m);
  }
  const csv wk(dir / "workers.csv");
  std::uint64_t finished = 0;
  for (std::size_t w = 0; w < wk.rows.size(); ++w) {
    const double outcomes = wk.at(w, "applied") + wk.at(w, "buffered") + wk.at(w, "discarded");
    BOOST_TEST(outcomes == wk.at(w, "jobs_finished"), m << " worker " << w);
    BOOST_TEST(wk.at(w, "jobs_started") >= wk.at(w, "jobs_finished"), m << " worker " << w);
    finished += static_cast<std::uint64_t>(wk.at(w, "jobs_finished"));
  }
  if (!s["extra"].contains("rounds")) BOOST_TEST(finished == s["events"].get<std::uint64_t>(), m);
  const csv rw(dir / "real_workers.csv");
  BOOST_TEST(rw.rows.size() == wk.rows.size(), m);
  // Every measured job, as a trace: a server's results handed over (one row each; a resumed
  // run's since its resume), a round's gradients.
  const csv jobs(dir / "real_jobs.csv");
  if (!s["extra"].contains("rounds") && s["algorithm"] != "eager") {
    if (s["extra"].contains("resumed")) BOOST_TEST(jobs.rows.size() <= s["events"].get<std::size_t>(), m);
    else BOOST_TEST(jobs.rows.size() == s["events"].get<std::size_t>(), m);
  }
  for (std::size_t r = 0; r < jobs.rows.size(); ++r) {
    BOOST_TEST(jobs.at(r, "worker") < static_cast<double>(wk.rows.size()), m);
    BOOST_TEST(jobs.at(r, "duration") >= 0.0, m);
  }
  for (std::size_t w = 0; w < rw.rows.size(); ++w) {
    BOOST_TEST(rw.at(w, "violations") <= rw.at(w, "jobs"), m);
    BOOST_TEST(rw.at(w, "paced_seconds") >= 0.0, m);
  }
}


// heterograd-run on the configuration `raw` (written beside `out`), under `launcher` (mpirun
// and its flags) when given, with `args`; killed after 90 s (coreutils timeout: a run that
// hangs fails the case, and leaves no process behind). Its exit status and output.
struct exe_run {
  int status;
  std::string log;
};
exe_run run_exe(const json& raw, const fs::path& out, const std::string& args, const std::string& launcher = "") {
  json j = raw;
  j["output"] = out.string();
  const fs::path cfg = out.string() + ".json", log = out.string() + "." + std::to_string(std::hash<std::string>{}(args)) + ".log";
  std::ofstream(cfg) << j.dump(2);
  const std::string cmd = "timeout -k 5 90 " + launcher + " " + HG_RUN_EXE + " " + cfg.string() + " --quiet --no-plots " +
                          args + " > " + log.string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::stringstream text;
  text << std::ifstream(log).rdbuf();
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, cmd + "\n" + text.str()};
}

// checkpoint_every 1, halted after the first evaluation (its checkpoint the first cut) and
// resumed: `methods` of `raw`, each in out/<slug>. What the resumed run must show: it went on
// from exactly the cut (resumed == cuts[0]), which is the initial model (version 0 at time 0,
// the same parameters for every method: the cut was taken before the method started); a cut
// at every later evaluation but the last, versions never going back; no evaluation lost or
// repeated (t = 0, 5, ..., 60); the target reached; the finished run's checkpoint dropped.
std::vector<json> halt_at_the_first_cut_and_resume(json raw, const fs::path& out, const std::string& launcher = "") {
  raw["checkpoint_every"] = 1;
  const exe_run halted = run_exe(raw, out, "--halt-after 1", launcher);
  BOOST_TEST_REQUIRE(halted.log.find("halted after 1 evaluations") != std::string::npos, halted.log);
  for (const auto& m : raw["methods"]) BOOST_TEST_REQUIRE(fs::exists(out / hgrun::slug(m["label"]) / "checkpoint.bin"), m);
  const exe_run resumed = run_exe(raw, out, "--resume", launcher);
  BOOST_TEST_REQUIRE(resumed.status == 0, resumed.log);
  std::vector<json> all;
  for (const auto& m : raw["methods"]) {
    const std::string label = m["label"];
    const auto d = out / hgrun::slug(label);
    std::ifstream in(d / "summary.json");
    const json s = json::parse(in);
    const json& cuts = s["extra"]["cuts"];
    BOOST_TEST_MESSAGE(label << ": resumed " << s["extra"]["resumed"] << ", " << cuts.size() << " cuts");
    BOOST_TEST_REQUIRE(cuts.size() == 12u, label);
    BOOST_TEST(s["extra"]["resumed"] == cuts[0], label);
    BOOST_TEST(cuts[0]["version"].get<std::uint64_t>() == 0u, label);
    BOOST_TEST(cuts[0]["time"].get<double>() == 0.0, label);
    if (!all.empty()) BOOST_TEST(cuts[0]["params_hash"] == all[0]["extra"]["cuts"][0]["params_hash"], label);
    for (std::size_t k = 1; k < cuts.size(); ++k)
      BOOST_TEST(cuts[k]["version"].get<std::uint64_t>() >= cuts[k - 1]["version"].get<std::uint64_t>(), label << " cut " << k);
    const csv ev(d / "evaluations.csv");
    BOOST_TEST_REQUIRE(ev.rows.size() == 13u, label);
    for (std::size_t r = 0; r < ev.rows.size(); ++r) BOOST_TEST(ev.at(r, "time") == 5.0 * static_cast<double>(r), label);
    BOOST_TEST(!s["first_crossing"].is_null(), label);
    BOOST_TEST(!fs::exists(d / "checkpoint.bin"), label);
    common_invariants(s, d, raw["real_scale"]);
    all.push_back(s);
  }
  return all;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(real_clock)

BOOST_AUTO_TEST_CASE(bad_real_clock_inputs_are_refused_naming_the_key_the_value_and_the_rule) {
  auto error_of = [](json j) -> std::string {
    try {
      hgrun::resolve(j);
    } catch (const hgrun::config_error& e) {
      return e.what();
    }
    return "";
  };
  auto has = [](const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; };
  json j = experiment();
  j["runtime"] = "sim";
  j.erase("real_scale");
  std::string e = error_of(j);
  BOOST_TEST((has(e, "'clock'") && has(e, "\"real\"") && has(e, "threads")), e);
  for (double bad : {0.0, -1.0, 1e9}) {
    json k = experiment();
    k["real_scale"] = bad;
    e = error_of(k);
    BOOST_TEST(has(e, "'real_scale'"), bad << ": " << e);
  }
  json v = experiment();
  v["clock"] = "virtual";  // one configuration, both clocks: virtual ignores real_scale
  BOOST_TEST(error_of(v).empty());
  json l = experiment();
  l["methods"] = json::array({json{{"label", "x"}, {"algorithm", "local_learning"}}});
  l["data"] = {{"dataset", "fashion_mnist"}};
  e = error_of(l);
  BOOST_TEST((has(e, "methods[0].algorithm") && has(e, "local_learning")), e);
  json g = experiment();  // eager-SGD runs on the real clock, but without checkpoints there
  g["methods"] = json::array({json{{"label", "x"}, {"algorithm", "eager"}}});
  BOOST_TEST(error_of(g).empty());
  g["checkpoint_every"] = 2;
  e = error_of(g);
  BOOST_TEST((has(e, "'checkpoint_every'") && has(e, "methods[0] (eager)")), e);
  for (const char* a : {"omnilearn", "omnilearn_asgd"}) {
    json o = experiment();  // OmniLearn's initial batch outside its bounds: refused before any run
    o["methods"] = json::parse(R"([{"label": "a", "algorithm": "asgd"},
                                   {"label": "o", "batch": 256, "max_batch": 96}])");
    o["methods"][1]["algorithm"] = a;
    e = error_of(o);
    BOOST_TEST((has(e, "methods[1].batch") && has(e, "256") && has(e, "96")), a << ": " << e);
    o["methods"][1] = json::parse(R"({"label": "o", "min_batch": 40})");  // data.batch below min_batch
    o["methods"][1]["algorithm"] = a;
    o["data"]["batch"] = 32;
    e = error_of(o);
    BOOST_TEST((has(e, "data.batch") && has(e, "[40, 96]") && has(e, "32")), a << ": " << e);
  }
  json p = experiment();
  p["workers"]["placement"] = {"0", "0", "0", "1023"};  // a core no test machine has
  e = error_of(p);
  BOOST_TEST((has(e, "workers.placement") && has(e, "1023")), e);
  p["workers"]["placement"] = {"0", "0", "0-"};
  e = error_of(p);
  BOOST_TEST((has(e, "workers.placement") && has(e, "one cpulist per worker")), e);
  p["workers"]["placement"] = {"0", "0", "0", "0-"};
  e = error_of(p);
  BOOST_TEST((has(e, "workers.placement[3]") && has(e, "0-")), e);
  p["workers"]["placement"] = {"0", "0", "0", "0"};
  p["clock"] = "virtual";
  p.erase("real_scale");
  e = error_of(p);
  BOOST_TEST(has(e, "workers.placement"), e);
  p["clock"] = "real";
  BOOST_TEST(error_of(p).empty());  // core 0 exists everywhere
  // The server thread's cores (issue 50): a cpulist this process has, on real threads only.
  p["workers"]["server_placement"] = "0-";
  e = error_of(p);
  BOOST_TEST((has(e, "workers.server_placement") && has(e, "0-") && has(e, "ranges a-b")), e);
  p["workers"]["server_placement"] = "1023";
  e = error_of(p);
  BOOST_TEST((has(e, "workers.server_placement") && has(e, "core 1023 is not available")), e);
  p["workers"]["server_placement"] = "0";
  p["runtime"] = "mpi";
  e = error_of(p);
  BOOST_TEST((has(e, "workers.server_placement") && has(e, "bind it with the launcher")), e);
  p["runtime"] = "threads";
  BOOST_TEST(error_of(p).empty());
}

BOOST_AUTO_TEST_CASE(servers_take_results_as_they_arrive_keep_their_bounds_and_never_outrun_the_model) {
  const auto dir = scratch("servers");
  const json raw = experiment();
  const double scale = raw["real_scale"];
  const std::size_t R = 2, s_bound = 1;
  for (const json& m : {json::parse(R"({"label": "ASGD", "algorithm": "asgd"})"),
                        json::parse(R"({"label": "Ringmaster", "algorithm": "ringmaster", "threshold": 2, "variant": "interrupt"})"),
                        json::parse(R"({"label": "Ringmaster discard", "algorithm": "ringmaster", "threshold": 2})"),
                        json::parse(R"({"label": "Rennala", "algorithm": "rennala", "gradients": 3})"),
                        json::parse(R"({"label": "SSP", "algorithm": "ssp", "staleness": 1})"),
                        json::parse(R"({"label": "DSSP", "algorithm": "dssp", "lower": 1, "range": 2})"),
                        json::parse(R"({"label": "Malenia", "algorithm": "malenia", "threshold": 0.5})"),
                        json::parse(R"({"label": "Ringleader", "algorithm": "ringleader"})"),
                        json::parse(R"({"label": "Rescaled", "algorithm": "rescaled"})"),
                        json::parse(R"({"label": "delay-adaptive", "algorithm": "delay_adaptive"})"),
                        json::parse(R"({"label": "IA2SGD", "algorithm": "ia2sgd"})")}) {
    const std::string label = m["label"];
    const auto d = dir / hgrun::slug(label);
    const json s = run(raw, d / "real", m);
    const json p = simulated(raw, d / "sim", m);
    BOOST_TEST_MESSAGE(label << ": real " << s["updates"] << " in " << s["wall_seconds"] << " s; sim "
                             << p["updates"] << ", time to target real " << s["time_to_target"] << " sim "
                             << p["time_to_target"]);
    common_invariants(s, d / "real", scale);
    // The target is reached (IA2SGD's averaged steps do not get there in 60 units at this
    // step size, in the simulated run either).
    BOOST_TEST((!s["first_crossing"].is_null() || label == "IA2SGD"), label);
    const csv st(d / "real" / "staleness.csv");
    if (label.rfind("Ringmaster", 0) == 0)
      for (std::size_t r = R; r < st.rows.size(); ++r) BOOST_TEST(st.at(r, "applied") == 0.0, label << " delay " << r);
    const csv wk(d / "real" / "workers.csv"), wp(d / "sim" / "workers.csv");
    if (label == "SSP" || label == "DSSP") {
      // Worker clocks (pushes applied) never differ by more than s + 1 (DSSP: s_L + r_max + 1).
      double lo = 1e300, hi = 0;
      for (std::size_t w = 0; w < wk.rows.size(); ++w) {
        lo = std::min(lo, wk.at(w, "applied"));
        hi = std::max(hi, wk.at(w, "applied"));
      }
      BOOST_TEST(hi - lo <= static_cast<double>((label == "SSP" ? s_bound : 1 + 2) + 1), label);
      const csv rw(d / "real" / "real_workers.csv");
      double held = 0;
      for (std::size_t w = 0; w < rw.rows.size(); ++w) held += rw.at(w, "held_seconds");
      BOOST_TEST(held > 0.0, label << ": the fast workers were held");
    }
    if (label == "ASGD") {
      // Paced jobs last at least their model time: no worker finishes more jobs by the horizon
      // than in the simulated run (one more at most for the arrival that ends the run).
      for (std::size_t w = 0; w < wk.rows.size(); ++w)
        BOOST_TEST(wk.at(w, "jobs_finished") <= wp.at(w, "jobs_finished") + 1, label << " worker " << w);
      // ... and the slow-down is the overhead's, not a stall: at least half the simulated updates.
      BOOST_TEST(s["updates"]["applied"].get<double>() >= 0.5 * p["updates"]["applied"].get<double>(), label);
    }
  }
}

BOOST_AUTO_TEST_CASE(round_methods_run_real_rounds_paced_to_the_model_and_omnilearn_reads_measured_times) {
  const auto dir = scratch("rounds");
  json raw = experiment();
  const double scale = raw["real_scale"];
  for (const json& m : {json::parse(R"({"label": "BSP", "algorithm": "bsp"})"),
                        json::parse(R"({"label": "local SGD", "algorithm": "local_sgd", "local_steps": [3, 2, 2, 1]})"),
                        json::parse(R"({"label": "OmniLearn", "algorithm": "omnilearn", "rebalance_every": 2})"),
                        json::parse(R"({"label": "SelSync", "algorithm": "selsync", "threshold": 0.3, "window": 3, "alpha": 0.3})")}) {
    const std::string label = m["label"];
    const auto d = dir / hgrun::slug(label);
    const json s = run(raw, d / "real", m);
    const json p = simulated(raw, d / "sim", m);
    BOOST_TEST_MESSAGE(label << ": real " << s["extra"]["rounds"] << " rounds in " << s["wall_seconds"] << " s; sim "
                             << p["extra"]["rounds"] << "; time to target real " << s["time_to_target"] << " sim "
                             << p["time_to_target"]);
    common_invariants(s, d / "real", scale);
    BOOST_TEST(!s["first_crossing"].is_null(), label);
    const auto real_rounds = s["extra"]["rounds"].get<double>(), sim_rounds = p["extra"]["rounds"].get<double>();
    // Every worker's round lasts at least its model time: never more rounds than simulated.
    BOOST_TEST(real_rounds <= sim_rounds + 1, label);
    BOOST_TEST(real_rounds >= 0.5 * sim_rounds, label);
    if (label == "OmniLearn") {
      // The controller rebalanced from the measured times: the worker measured slowest per
      // gradient ends with a batch no larger than the fastest one's, and smaller than at the start.
      BOOST_TEST(s["extra"]["rebalances"].get<int>() >= 1);
      const auto spg = s["extra"]["real"]["seconds_per_gradient"].get<std::vector<double>>();
      const auto b = s["extra"]["final_batches"].get<std::vector<double>>();
      const auto slow = static_cast<std::size_t>(std::max_element(spg.begin(), spg.end()) - spg.begin());
      const auto fast = static_cast<std::size_t>(std::min_element(spg.begin(), spg.end()) - spg.begin());
      BOOST_TEST(b.at(slow) <= b.at(fast));
      BOOST_TEST(b.at(slow) < hgrun::resolve(raw)["data"]["batch"].get<double>());
    }
  }
}

BOOST_AUTO_TEST_CASE(omnilearn_asgd_on_the_real_clock_reads_measured_job_times_and_balances_like_the_simulator) {
  // OmniLearn's ASP server with jobs paced to tau_i x b / 8 model units (tau_i = 1 + i permuted,
  // no noise, no outage), every worker starting at b = 8: measured t_i = tau_i, t̄ = 2.5, so one
  // controller run gives b_i = 8 t̄ / tau_i = 20, 10, 7, 5 (rounded), after which every
  // iteration takes about t̄ and the later runs stay inside the dead-band. The simulated run
  // (the model's times) lands there exactly; the real one reads each arrival's wall job time
  // (the server's clock in model units), so it lands there up to the measured overheads: within
  // the dead-band (0.2) of the simulated batches, plus one for the rounding. (The quadratic's
  // gradient does not improve with the batch: no learning-rate scaling.)
  const auto dir = scratch("omnilearn-asgd");
  json raw = experiment();
  raw["workers"]["time"] = json::parse(R"({"base": "linear", "batch_scaling": true})");
  raw["data"]["batch"] = 8;
  const json m = json::parse(R"({"label": "OmniLearn ASP", "algorithm": "omnilearn_asgd", "min_batch": 2,
                                 "max_batch": 32, "rebalance_every": 8, "scale_learning_rate": false})");
  const json s = run(raw, dir / "real", m);
  const json p = simulated(raw, dir / "sim", m);
  BOOST_TEST_MESSAGE("OmniLearn ASP: real " << s["extra"]["final_batches"] << " after " << s["extra"]["changes"]
                     << " changes, time to target " << s["time_to_target"] << "; sim " << p["extra"]["final_batches"]
                     << ", " << p["time_to_target"]);
  common_invariants(s, dir / "real", raw["real_scale"]);
  BOOST_TEST(!s["first_crossing"].is_null());
  BOOST_TEST(!p["time_to_target"].is_null());
  BOOST_TEST(s["extra"]["changes"].get<int>() >= 1);
  BOOST_TEST(p["extra"]["changes"].get<int>() == 1);
  const auto br = s["extra"]["final_batches"].get<std::vector<double>>();
  auto bs = p["extra"]["final_batches"].get<std::vector<double>>();
  BOOST_TEST_REQUIRE(br.size() == bs.size());
  for (std::size_t w = 0; w < br.size(); ++w) BOOST_TEST(std::abs(br[w] - bs[w]) <= 0.2 * bs[w] + 1, "worker " << w);
  std::sort(bs.begin(), bs.end());
  const std::vector<double> theory{5, 7, 10, 20};
  BOOST_TEST(bs == theory, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(eager_sgd_over_the_real_partial_allreduce_keeps_the_replicas_identical_and_applies_every_gradient) {
  // Real arrival decides who is fresh: the fresh share and the late parts come from the wall
  // clock, while the run ends for every rank at one flush round (the ranks' vote), so the
  // replicas agree and the sum of the applied results is the sum of the computed gradients.
  const auto dir = scratch("eager");
  json raw = experiment();
  const double scale = raw["real_scale"];
  for (const char* mode : {"majority", "solo"}) {
    const json m = {{"label", std::string("eager ") + mode}, {"algorithm", "eager"}, {"mode", mode}, {"staleness_bound", 2}};
    const auto d = dir / mode;
    const json s = run(raw, d / "real", m);
    const json p = simulated(raw, d / "sim", m);
    const json& r = s["extra"]["real"];
    BOOST_TEST_MESSAGE("eager " << mode << ": real " << r["rounds"] << " rounds, " << s["updates"] << "; sim "
                                << p["updates"] << "; time to target real " << s["time_to_target"] << " sim "
                                << p["time_to_target"]);
    common_invariants(s, d / "real", scale);
    BOOST_TEST(r["replicas_agree"].get<bool>(), mode);
    BOOST_TEST(r["conservation_error"].get<double>() <= 1e-5, mode);
    BOOST_TEST(!s["first_crossing"].is_null(), mode);
    // Every rank took part in every round: fresh + late = rounds, per worker.
    const auto rounds = r["rounds"].get<std::uint64_t>();
    const auto late = r["late_per_worker"].get<std::vector<std::uint64_t>>();
    const csv wk(d / "real" / "workers.csv");
    std::uint64_t late_sum = 0;
    for (std::size_t w = 0; w < late.size(); ++w) {
      BOOST_TEST(wk.at(w, "jobs_finished") == static_cast<double>(rounds), mode << " worker " << w);
      BOOST_TEST(wk.at(w, "buffered") == static_cast<double>(late[w]), mode << " worker " << w);
      late_sum += late[w];
    }
    BOOST_TEST(late_sum == s["extra"]["late_contributions"].get<std::uint64_t>(), mode);
    // The staleness bound B = 2: no part folded in more than B rounds late... a late part
    // waits for the next round that fires, which cannot run more than B ahead of any rank.
    BOOST_TEST(s["max_staleness"].get<std::uint64_t>() <= 2u, mode);
    // Paced rounds last at least their model time: never more contributions than simulated,
    // but for the end: the vote's round and the flush, which a rank up to B rounds behind
    // rank 0 (the voter) reaches too: B + 2 rounds of every worker.
    const double real_contrib = s["updates"]["applied"].get<double>() + s["updates"]["buffered"].get<double>();
    const double sim_contrib = p["updates"]["applied"].get<double>() + p["updates"]["buffered"].get<double>();
    BOOST_TEST(real_contrib <= sim_contrib + (2.0 + 2.0) * static_cast<double>(late.size()), mode);
    BOOST_TEST(real_contrib >= 0.5 * sim_contrib, mode);
  }
}

BOOST_AUTO_TEST_CASE(heterograd_run_writes_the_simulators_prediction_next_to_the_measured_times) {
  const auto dir = scratch("exe");
  json raw = experiment();
  raw["methods"] = json::parse(R"([{"label": "synchronous SGD", "algorithm": "bsp"},
                                    {"label": "ASGD", "algorithm": "asgd"}])");
  raw["output"] = (dir / "out").string();
  std::ofstream(dir / "real.json") << raw.dump(2);
  const std::string cmd = std::string(HG_RUN_EXE) + " " + (dir / "real.json").string() + " --quiet --no-plots > " +
                          (dir / "log.txt").string() + " 2>&1";
  BOOST_TEST_REQUIRE(std::system(cmd.c_str()) == 0, cmd);
  std::ifstream in(dir / "out" / "sim_vs_real.md");
  BOOST_TEST_REQUIRE(in.good());
  std::stringstream md;
  md << in.rdbuf();
  const std::string t = md.str();
  BOOST_TEST_MESSAGE(t);
  BOOST_TEST(t.find("| synchronous SGD | 1 |") != std::string::npos, t);
  BOOST_TEST(t.find("| ASGD | 1 |") != std::string::npos, t);
  // Each real run's prediction is a simulated run of its own, in the method's folder.
  for (const char* m : {"synchronous-sgd", "asgd"}) {
    const auto p = dir / "out" / m / "predicted" / "summary.json";
    BOOST_TEST_REQUIRE(fs::exists(p), p);
    std::ifstream ps(p);
    const json s = json::parse(ps);
    BOOST_TEST(!s["extra"].contains("clock"), m);  // the simulated cluster's run
    BOOST_TEST(!s["time_to_target"].is_null(), m);
  }
  // Without real_scale (model time = wall seconds) the prediction replays the run's measured
  // jobs (real_jobs.csv as a trace): ASGD's replay makes about as many updates as the run, and
  // BSP's about as many rounds: its rows are whole rounds (a round's thread start and
  // allreduce, which dwarf this quadratic's microsecond gradients; a model of each worker's
  // mean compute would predict several times more rounds).
  raw.erase("real_scale");
  raw["horizon"] = {{"time", 0.6}};
  raw["eval_interval"] = 0.1;
  raw["methods"] = json::parse(R"([{"label": "ASGD", "algorithm": "asgd"}, {"label": "BSP", "algorithm": "bsp"}])");
  raw["output"] = (dir / "wall").string();
  std::ofstream(dir / "wall.json") << raw.dump(2);
  const std::string wall = std::string(HG_RUN_EXE) + " " + (dir / "wall.json").string() + " --quiet --no-plots > " +
                           (dir / "log2.txt").string() + " 2>&1";
  BOOST_TEST_REQUIRE(std::system(wall.c_str()) == 0, wall);
  std::ifstream rs(dir / "wall" / "asgd" / "summary.json"), ps(dir / "wall" / "asgd" / "predicted" / "summary.json");
  const json real = json::parse(rs), pred = json::parse(ps);
  const double m = real["updates"]["applied"].get<double>(), p = pred["updates"]["applied"].get<double>();
  BOOST_TEST_MESSAGE("ASGD on wall seconds: " << m << " updates, the trace's replay " << p);
  BOOST_TEST(std::abs(p - m) <= 0.15 * m + 4.0, m << " vs " << p);
  std::ifstream rb(dir / "wall" / "bsp" / "summary.json"), pb(dir / "wall" / "bsp" / "predicted" / "summary.json");
  const json real_b = json::parse(rb), pred_b = json::parse(pb);
  const double mr = real_b["extra"]["rounds"].get<double>(), pr = pred_b["extra"]["rounds"].get<double>();
  BOOST_TEST_MESSAGE("BSP on wall seconds: " << mr << " rounds, the trace's replay " << pr);
  // (35%: the replay draws each worker's cycles independently, while a loaded machine slows a
  // whole round at once, so the replay's rounds spread out: 2557 measured, 2323 replayed idle;
  // 411 and 317 once under load. The mean compute model predicts several times more.)
  BOOST_TEST(std::abs(pr - mr) <= 0.35 * mr + 2.0, mr << " vs " << pr);
}

// Core placement, no injected time: one worker alone on a core, three sharing another. The
// shared ones are really slower, and vanilla ASGD's results from them meet more updates. (The
// server thread is not placed: it shares the cores too, so the spread is below 3x.)
BOOST_AUTO_TEST_CASE(core_placement_makes_the_workers_sharing_a_core_slower_and_their_results_staler) {
  const auto cores = heterograd::runtime::available_cores();
  const auto d = heterograd::data::fashion_mnist_dir();
  if (cores.size() < 2 || !(fs::exists(d / "t10k-labels-idx1-ubyte") || fs::exists(d / "t10k-labels-idx1-ubyte.gz"))) {
    BOOST_TEST_MESSAGE("needs 2 cores and Fashion-MNIST (./hg deps): skipped");
    return;
  }
  const auto dir = scratch("placement");
  json raw = experiment();
  raw.erase("real_scale");
  raw["data"] = {{"dataset", "fashion_mnist"}, {"train_samples", 2000}, {"test_samples", 200}, {"batch", 256}};
  raw["model"] = {{"kind", "mlp"}, {"hidden", {256}}};
  raw["workers"] = {{"count", 4}};
  const std::string a = std::to_string(cores.cores[0]), b = std::to_string(cores.cores[1]);
  raw["workers"]["placement"] = {a, b, b, b};
  raw["horizon"] = {{"time", 1.5}};  // wall seconds
  raw["eval_interval"] = 0.5;
  raw["target"] = {{"metric", "accuracy"}, {"value", 0.3}};
  const json s = run(raw, dir, json::parse(R"({"label": "ASGD", "algorithm": "asgd"})"));
  const auto spg = s["extra"]["real"]["seconds_per_gradient"].get<std::vector<double>>();
  const auto delay = s["extra"]["real"]["mean_staleness"].get<std::vector<double>>();
  BOOST_TEST_MESSAGE("seconds per gradient " << json(spg) << ", mean staleness " << json(delay));
  common_invariants(s, dir, 1.0);
  // A third of a core against what the lone worker's core leaves it: the unpinned server
  // thread, which the OS mostly puts beside the lone worker, takes a varying share of it
  // (measured 1.08x to 1.5x over the sharing workers' mean here, 2026-12-02), so only the
  // direction is asserted for the server; local SGD below, with no server, gives the 3x.
  const auto mean3 = [](const std::vector<double>& v) { return (v[1] + v[2] + v[3]) / 3.0; };
  BOOST_TEST(mean3(spg) > spg[0], json(spg));
  BOOST_TEST(mean3(delay) > delay[0], json(delay));
  for (std::size_t w = 1; w < 4; ++w) BOOST_TEST(delay[w] > 1.0, "worker " << w);
  // workers.csv's time per job is the measured one (no worker-time model is followed): the
  // lone worker's is below the sharing ones'.
  {
    const auto rows = hgrun::read_csv(dir / "workers.csv");
    BOOST_TEST_REQUIRE(rows.size() == 5u);
    const auto t = static_cast<std::size_t>(std::find(rows[0].begin(), rows[0].end(), "model_time") - rows[0].begin());
    BOOST_TEST_REQUIRE(t + 1 < rows[0].size());
    std::vector<double> tau;
    for (std::size_t w = 0; w < 4; ++w) tau.push_back(std::stod(rows[w + 1][t]));
    BOOST_TEST(mean3(tau) > tau[0], json(tau));
  }
  // Round methods too: each round's threads are placed anew (a thread made by a pinned one
  // may still go to any of the process's cores), and the shared cores' compute is slower.
  const json r = run(raw, dir / "bsp", json::parse(R"({"label": "BSP", "algorithm": "bsp"})"));
  common_invariants(r, dir / "bsp", 1.0);
  const auto rs = r["extra"]["real"]["seconds_per_gradient"].get<std::vector<double>>();
  BOOST_TEST_MESSAGE("BSP seconds per gradient " << json(rs));
  // The sharers compute at once only while their round's threads overlap (they start one after
  // another): their mean was 1.4x to 2x the lone worker's, and once 1.16x, with one sharer that
  // ran alone as fast as the lone worker (2026-12-03). So: slower on average, and at least one
  // sharer by more than 1.2x (1.5x to 2.4x measured).
  BOOST_TEST(mean3(rs) > rs[0], json(rs));
  BOOST_TEST(std::max({rs[1], rs[2], rs[3]}) > 1.2 * rs[0], json(rs));
  // H_i proportional to speed, measured where the workers run (no injected time): the lone
  // worker takes the most local steps, H = 6, a sharing one fewer.
  const json l = run(raw, dir / "local", json::parse(R"({"label": "local SGD", "algorithm": "local_sgd",
                                                          "period": 6, "speed_proportional": true})"));
  common_invariants(l, dir / "local", 1.0);
  const auto h = l["extra"]["local_steps"].get<std::vector<std::size_t>>();
  const auto measured = l["extra"]["measured_seconds_per_gradient"].get<std::vector<double>>();
  BOOST_TEST_MESSAGE("local SGD measured seconds per gradient " << json(measured) << ", H_i " << json(h));
  BOOST_TEST_REQUIRE(h.size() == 4u);
  BOOST_TEST(h[0] == 6u);
  // No server: a third of a core against a whole one (measured 2.7x to 3.1x).
  BOOST_TEST(mean3(measured) > 2.0 * measured[0], json(measured));
  for (std::size_t w = 1; w < 4; ++w) BOOST_TEST((h[w] >= 1u && h[w] < h[0]), "worker " << w);
  // Biased local SGD the same way: the largest configured H_i (2) for the fastest worker. (Its
  // slow workers' samples per redraw must fit the 2000 training samples: 3 x 2 x 256.)
  const json bl = run(raw, dir / "biased", json::parse(R"({"label": "biased", "algorithm": "biased_local_sgd",
      "slow_workers": [1, 2, 3], "local_steps": [1, 2, 2, 2], "speed_proportional": true})"));
  common_invariants(bl, dir / "biased", 1.0);
  const auto hb = bl["extra"]["local_steps"].get<std::vector<std::size_t>>();
  BOOST_TEST_MESSAGE("biased local SGD H_i " << json(hb));
  BOOST_TEST_REQUIRE(hb.size() == 4u);
  BOOST_TEST(hb[0] == 2u);
  for (std::size_t w = 1; w < 4; ++w) BOOST_TEST(hb[w] == 1u, "worker " << w);
}

// Kill and resume: a run halted after a checkpoint (as if killed) and resumed continues from
// exactly the saved model (version and parameter hash at the cut), keeps its invariants and
// reaches the target; a damaged checkpoint is refused.
BOOST_AUTO_TEST_CASE(a_killed_real_run_resumes_from_the_saved_model_at_a_consistent_cut) {
  const auto dir = scratch("resume");
  json raw = experiment();
  raw["checkpoint_every"] = 3;
  const double scale = raw["real_scale"];
  for (const json& m : {json::parse(R"({"label": "BSP", "algorithm": "bsp"})"),
                        json::parse(R"({"label": "Ringmaster", "algorithm": "ringmaster", "threshold": 2})"),
                        json::parse(R"({"label": "SSP", "algorithm": "ssp", "staleness": 1})")}) {
    const std::string label = m["label"];
    const auto d = dir / hgrun::slug(label);
    json one = raw;
    one["methods"] = json::array({m});
    const json cfg = hgrun::resolve(one);
    hgrun::run_request req{cfg, 0, 1, d, false, 3, {}};
    BOOST_CHECK_THROW(hgrun::run_method(req), hgrun::halted);
    BOOST_TEST_REQUIRE(fs::exists(d / "checkpoint.bin"), label);
    // A flipped byte is refused before anything is used (the checksum), and leaves the file.
    {
      std::string bytes;
      {
        std::ifstream in(d / "checkpoint.bin", std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
      }
      std::string bad = bytes;
      bad[bad.size() / 2] = static_cast<char>(bad[bad.size() / 2] ^ 0x20);
      std::ofstream(d / "checkpoint.bin", std::ios::binary | std::ios::trunc) << bad;
      hgrun::run_request r2{cfg, 0, 1, d, true, 0, {}};
      BOOST_CHECK_THROW(hgrun::run_method(r2), std::exception);
      std::ofstream(d / "checkpoint.bin", std::ios::binary | std::ios::trunc) << bytes;
    }
    hgrun::run_request again{cfg, 0, 1, d, true, 0, {}};
    const json s = hgrun::run_method(again);
    BOOST_TEST_MESSAGE(label << ": cuts " << s["extra"]["cuts"] << ", resumed " << s["extra"]["resumed"]);
    BOOST_TEST_REQUIRE(s["extra"]["cuts"].size() >= 1u, label);
    BOOST_TEST(s["extra"]["resumed"] == s["extra"]["cuts"][0], label);
    BOOST_TEST(s["extra"]["resumed"]["version"].get<std::uint64_t>() > 0u, label);
    BOOST_TEST(!s["first_crossing"].is_null(), label);
    common_invariants(s, d, scale);
    const csv ev(d / "evaluations.csv");
    BOOST_TEST(ev.rows.size() == 13u, label);  // t = 0, 5, ..., 60: none lost or repeated
    BOOST_TEST(!fs::exists(d / "checkpoint.bin"), label);  // a finished run drops it
  }
}

// checkpoint_every 1: the first evaluation's checkpoint is asked for before the method's
// threads start (they start at the first advance), so the hold waited for a cut that nothing
// would reach and the run never ended. Now it is the initial state, and the run resumes from
// it; for every family that checkpoints on the real clock (servers: Ringmaster, SSP, whose
// holds are the server's; round methods: BSP, local SGD), through the executable. Eager-SGD
// and local learning do not checkpoint on the real clock: refused at once, naming the key.
BOOST_AUTO_TEST_CASE(real_runs_with_a_checkpoint_at_every_evaluation_end_and_resume_from_the_first_cut,
                     *boost::unit_test::timeout(240)) {
  const auto dir = scratch("checkpoint-every-evaluation");
  json raw = experiment();
  raw["real_scale"] = 0.01;  // (as the mpirun resume test: the target on a loaded machine)
  raw["methods"] = json::parse(R"([{"label": "Ringmaster", "algorithm": "ringmaster", "threshold": 2},
                                   {"label": "SSP", "algorithm": "ssp", "staleness": 1},
                                   {"label": "BSP", "algorithm": "bsp"},
                                   {"label": "local SGD", "algorithm": "local_sgd", "local_steps": [3, 2, 2, 1]}])");
  (void)halt_at_the_first_cut_and_resume(raw, dir / "out");
  json eager = experiment(), local = experiment();
  eager["checkpoint_every"] = local["checkpoint_every"] = 1;
  eager["methods"] = json::parse(R"([{"label": "eager", "algorithm": "eager"}])");
  local["methods"] = json::parse(R"([{"label": "local", "algorithm": "local_learning"}])");
  local["data"] = {{"dataset", "fashion_mnist"}};
  for (const auto& [j, key] : {std::pair{eager, "'checkpoint_every'"}, std::pair{local, "methods[0].algorithm"}}) {
    std::string e;
    try {
      hgrun::resolve(j);
    } catch (const hgrun::config_error& x) {
      e = x.what();
    }
    BOOST_TEST(e.find(key) != std::string::npos, key << ": " << e);
  }
}

// A checkpoint at every evaluation makes the evaluation loop fall behind the wall clock (each
// waits for a cut, up to a round). A loop behind a method that ended at its horizon still
// evaluates the grid's times left, on the final model (before, it took the end for one by no
// rule and dropped them, the horizon's evaluation with them); a method that ended before its
// horizon by no rule (every worker held) still leaves nothing to evaluate.
BOOST_AUTO_TEST_CASE(an_evaluation_loop_behind_a_method_that_ended_at_its_horizon_evaluates_up_to_it) {
  namespace w = hgrun::wall;
  const json cfg = hgrun::resolve(experiment());  // horizon 60 model units of 4 ms
  auto prob = hgrun::make_problem(hgrun::experiment_of(cfg), cfg, 1);
  hgrun::context ctx{cfg, cfg["methods"][0], 1, scratch("behind"), *prob, false, 0, {}};
  const auto units = [](double t) {
    return std::chrono::duration_cast<w::clock::duration>(std::chrono::duration<double>(t * 0.004));
  };
  for (const double end : {61.0, 20.0}) {  // the model time at which the method ended
    w::shared_run s;
    s.started = true;
    s.origin = w::clock::now() - units(70);  // the wall clock is at 70, the loop at 50
    s.finished = true;
    s.ended = s.origin + units(end);
    auto h = w::hooks(ctx, s, [] { return std::vector<float>(); }, [] { return false; });
    BOOST_TEST(h.advance(50.0) == (end > 60.0), "ended at " << end);
    BOOST_TEST(h.advance(60.0), "ended at " << end);  // the horizon's: the final model
  }
}

// The hold's deadline: a method that never reaches a cut (an injected stall), or whose
// workers' gradients in flight never end, fails the hold once its limit has passed, naming
// what it waited for and the limit, and lets the method go on to its stop. (The limit is
// runtime_timeout_s, minutes; the stall is checked against half a second.)
BOOST_AUTO_TEST_CASE(a_hold_that_cannot_complete_fails_at_its_limit_naming_what_it_waited_for,
                     *boost::unit_test::timeout(60)) {
  namespace w = hgrun::wall;
  for (const bool at_cuts : {false, true}) {
    w::shared_run s;
    s.limit_s = 0.5;
    std::optional<w::runner> method;
    method.emplace(s, [&] {
      while (!s.stop) {
        if (at_cuts) s.cut();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
    s.started = true;
    const auto begin = std::chrono::steady_clock::now();
    std::string what;
    try {
      (void)s.hold([&] { return !at_cuts; });
    } catch (const std::runtime_error& e) {
      what = e.what();
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    BOOST_TEST_MESSAGE("waited " << waited << " s: " << what);
    BOOST_TEST(waited >= 0.5, at_cuts);
    BOOST_TEST(what.find("waited 0.5 s") != std::string::npos, what);
    BOOST_TEST(what.find(at_cuts ? "gradients in flight" : "consistent cut") != std::string::npos, what);
    BOOST_TEST(!s.pause_requested.load(), at_cuts);  // let go: no later cut halts it
    method.reset();                                   // stops and joins it
    BOOST_TEST(s.finished);
  }
}

// membership (tools/driver/elastic.hpp; issue 46): four slots of fixed times (1, 1.5, 2, 1.2),
// slot 3 a spare; worker 1 leaves at model time 5 and comes back at 30, slot 3 joins at 15.
// The same configuration on runtime "sim" (the simulator's churn schedule) and on threads with
// clock "real" (runtime::run's where::threads leaves and joins).
namespace {
json elastic_experiment() {
  json j = experiment();
  j["workers"]["time"] = {{"base", "fixed"}, {"tau", {1, 1.5, 2, 1.2}}, {"permute", false}};
  j["horizon"] = {{"time", 60}};
  j["membership"] = json::parse(R"({"elastic": true, "absent": [3],
      "leaves": [{"worker": 1, "time": 5}],
      "joins": [{"worker": 3, "time": 15}, {"worker": 1, "time": 30}]})");
  return j;
}

// What an elastic run's summary must show: one job lost (ASGD: the leaver's job in flight at
// the leave), every result handed over has exactly one outcome (applied + buffered + discarded
// = the results, workers.csv's jobs finished; the simulator's events also count its three
// churn timers), the events leave 1, join 3, join 1 in time order.
void elastic_invariants(const json& s, const fs::path& dir, const std::string& what) {
  const json& m = s["extra"]["membership"];
  BOOST_TEST_MESSAGE(what << ": " << m.dump());
  BOOST_TEST(m["lost"].get<std::uint64_t>() == 1u, what);
  BOOST_TEST(m["refused_late"].get<std::uint64_t>() == 0u, what);
  const json& u = s["updates"];
  const double outcomes = u["applied"].get<double>() + u["buffered"].get<double>() + u["discarded"].get<double>();
  const csv wk(dir / "workers.csv");
  double results = 0;
  for (std::size_t w = 0; w < wk.rows.size(); ++w) results += wk.at(w, "jobs_finished");
  BOOST_TEST(outcomes == results, what);
  BOOST_TEST(s["events"].get<double>() == results + (what == "sim" ? 3.0 : 0.0), what);
  BOOST_TEST(outcomes > 0.0, what);
  const json& ev = m["events"];
  BOOST_TEST_REQUIRE(ev.size() == 3u, what);
  const std::pair<const char*, int> want[] = {{"leave", 1}, {"join", 3}, {"join", 1}};
  for (std::size_t i = 0; i < 3; ++i) {
    BOOST_TEST(ev[i]["kind"] == want[i].first, what << " event " << i);
    BOOST_TEST(ev[i]["worker"].get<int>() == want[i].second, what << " event " << i);
    if (i > 0) BOOST_TEST(ev[i]["time"].get<double>() >= ev[i - 1]["time"].get<double>(), what << " event " << i);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(one_membership_section_runs_a_leave_and_joins_on_the_simulator_and_on_real_threads) {
  const auto dir = scratch("elastic");
  const json raw = elastic_experiment();
  const json asgd = json::parse(R"({"label": "ASGD", "algorithm": "asgd"})");
  // The simulator: the leave at 5 cancels worker 1's job started at 4.5 (its 4th, of 1.5).
  const json p = simulated(raw, dir / "sim", asgd);
  elastic_invariants(p, dir / "sim", "sim");
  const json& pe = p["extra"]["membership"]["events"];
  BOOST_TEST(pe[0]["time"].get<double>() == 5.0);
  BOOST_TEST(pe[1]["time"].get<double>() == 15.0);
  BOOST_TEST(pe[2]["time"].get<double>() == 30.0);
  // Real threads: worker 1 leaves in place of its first job started at model time 5 or later.
  const json s = run(raw, dir / "real", asgd);
  common_invariants(s, dir / "real", raw["real_scale"]);
  elastic_invariants(s, dir / "real", "real");
  // The events' times are the server's clock, which starts when it begins serving, a few
  // milliseconds after the run's (whose model time the leaves and joins wait for; e11_churn
  // measured 0.8 units of 4 ms): each at most 5 units (20 ms) before its time, or later.
  const json& m = s["extra"]["membership"];
  BOOST_TEST(m["events"][0]["time"].get<double>() >= 0.0);
  BOOST_TEST(m["events"][1]["time"].get<double>() >= 10.0);
  BOOST_TEST(m["events"][2]["time"].get<double>() >= 25.0);
  // Each joiner checked the model it was welcomed with: the hash and version the server sent.
  BOOST_TEST_REQUIRE(m["joiners"].size() == 2u);
  for (const auto& j : m["joiners"]) {
    bool found = false;
    for (const auto& e : m["events"])
      found = found || (e["kind"] == "join" && e["params_hash"] == j["joined_hash"] &&
                        e["version"] == j["joined_version"]);
    BOOST_TEST(found, j.dump());
  }
  BOOST_TEST(!s["first_crossing"].is_null());  // the run reaches its target across the changes
}

BOOST_AUTO_TEST_CASE(real_leaves_after_a_count_of_jobs_and_joins_after_a_count_of_updates_keep_ringmasters_bound) {
  const auto dir = scratch("elastic_counts");
  json raw = elastic_experiment();
  raw["membership"]["leaves"] = json::parse(R"([{"worker": 1, "after_jobs": 3}])");
  // Joins after u and 2u updates: u = 30 (ASGD, Ringmaster: about 2 updates a unit); Rennala
  // (B = 3) makes an update of three gradients: u = 8. The horizon, 120 units, leaves each run
  // twice the time it needs for 2u on a loaded machine.
  for (const json& m : {json::parse(R"({"label": "ASGD", "algorithm": "asgd"})"),
                        json::parse(R"({"label": "Ringmaster", "algorithm": "ringmaster", "threshold": 2})"),
                        json::parse(R"({"label": "Rennala", "algorithm": "rennala", "gradients": 3})")}) {
    const std::string label = m["label"];
    const std::uint64_t u = label == "Rennala" ? 8 : 30;
    raw["horizon"] = {{"time", 120}};
    raw["membership"]["joins"] =
        json::array({json{{"worker", 3}, {"after_updates", u}}, json{{"worker", 1}, {"after_updates", 2 * u}}});
    const auto d = dir / hgrun::slug(label);
    const json s = run(raw, d, m);
    common_invariants(s, d, raw["real_scale"]);
    const json& e = s["extra"]["membership"]["events"];
    BOOST_TEST_REQUIRE(e.size() == 3u, label << ": " << e.dump());
    BOOST_TEST(e[0]["kind"] == "leave", label);
    BOOST_TEST(e[1]["version"].get<std::uint64_t>() >= u, label);  // joined once u updates were made
    BOOST_TEST(e[2]["version"].get<std::uint64_t>() >= 2 * u, label);
    // Worker 1 computed its jobs 0, 1, 2; job 3 was sent and lost (ASGD: exactly that one).
    const json& lost = s["extra"]["membership"]["lost"];
    BOOST_TEST(lost.get<std::uint64_t>() <= 1u, label);
    if (label == "ASGD") BOOST_TEST(lost.get<std::uint64_t>() == 1u, label);
    if (label == "Ringmaster") {
      const csv st(d / "staleness.csv");
      for (std::size_t r = 2; r < st.rows.size(); ++r) BOOST_TEST(st.at(r, "applied") == 0.0, label << " delay " << r);
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_membership_keys_are_refused_naming_the_key_the_value_and_the_rule) {
  auto error_of = [](json j, const std::string& set = "") -> std::string {
    try {
      if (!set.empty()) hgrun::apply_override(j, set);
      hgrun::resolve(j);
    } catch (const hgrun::config_error& e) {
      return e.what();
    }
    return "";
  };
  auto has = [](const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; };
  BOOST_TEST(error_of(elastic_experiment()).empty());
  std::string e = error_of(elastic_experiment(), "membership.leaves[0].worker=7");
  BOOST_TEST(e == "config error at 'membership.leaves[0].worker': expected a worker index < workers.count = 4, got 7");
  e = error_of(elastic_experiment(), "membership.joins[1].worker=4294967297");  // 1 in 32 bits
  BOOST_TEST(e == "config error at 'membership.joins[1].worker': expected a worker index < workers.count = 4, got "
                  "4294967297");
  e = error_of(elastic_experiment(), "membership.absent[0]=4294967299");  // 3 in 32 bits
  BOOST_TEST(e == "config error at 'membership.absent[0]': expected a worker index < workers.count = 4, got "
                  "4294967299");
  e = error_of(elastic_experiment(), "membership.joins[0].worker=2");  // 2 never leaves, is no spare
  BOOST_TEST(e == "config error at 'membership.joins[0].worker': expected a slot absent at the start "
                  "(membership.absent) or that leaves before (membership.leaves), got 2: it never left and is not "
                  "a spare");
  json thrice = elastic_experiment();  // worker 1 leaves three times and comes back once
  thrice["membership"]["leaves"] = json::parse(R"([{"worker": 1, "time": 5}, {"worker": 1, "time": 40},
                                                   {"worker": 1, "time": 50}])");
  e = error_of(thrice);
  BOOST_TEST(e == "config error at 'membership.leaves[2].worker': expected a slot that takes part when it leaves, "
                  "got 1: leave 3 of the slot, which joins 1 times");
  e = error_of(elastic_experiment(), "membership.leaves[0].time=-1");
  BOOST_TEST((has(e, "'membership.leaves[0].time'") && has(e, "-1")), e);
  e = error_of(elastic_experiment(), "membership.joins[1].time=NaN");
  BOOST_TEST((has(e, "'membership.joins[1].time'") && has(e, "NaN")), e);
  e = error_of(elastic_experiment(), "runtime=mpi");
  BOOST_TEST((has(e, "'membership.elastic'") && has(e, "runtime \"mpi\"") && has(e, "ULFM")), e);
  e = error_of(elastic_experiment(), "clock=virtual");
  BOOST_TEST((has(e, "'membership.elastic'") && has(e, "clock \"virtual\"")), e);
  json r = elastic_experiment();
  r["methods"] = json::parse(R"([{"label": "BSP", "algorithm": "bsp"}])");
  e = error_of(r);
  BOOST_TEST(e == "config error at 'methods[0].algorithm': expected an asynchronous server method with "
                  "membership.elastic, got \"bsp\": round methods' quorums and local learning's membership are "
                  "not built (docs/elastic.md)");
  e = error_of(elastic_experiment(), "checkpoint_every=1");
  BOOST_TEST(e == "config error at 'checkpoint_every': expected 0 with membership.elastic: a cut does not record "
                  "the membership (docs/elastic.md)");
  e = error_of(elastic_experiment(), "membership.elastic=false");
  BOOST_TEST((has(e, "'membership.elastic'") && has(e, "expected true")), e);
  json both = elastic_experiment();
  both["membership"]["leaves"][0]["after_jobs"] = 3;
  e = error_of(both);
  BOOST_TEST(e == "config error at 'membership.leaves[0]': expected exactly one of after_jobs, time; got both");
  json sim = elastic_experiment();
  sim["runtime"] = "sim";
  sim["clock"] = "virtual";
  BOOST_TEST(error_of(sim).empty());
  sim["membership"]["joins"][0] = json::parse(R"({"worker": 3, "after_updates": 30})");
  e = error_of(sim);
  BOOST_TEST((has(e, "'membership.joins[0].after_updates'") && has(e, "runtime \"sim\"")), e);
  sim["membership"]["joins"][0] = json::parse(R"({"worker": 3, "time": 15})");
  sim["membership"]["joins"][1]["time"] = 2;  // worker 1 joins at 2, before it leaves at 5
  e = error_of(sim);
  BOOST_TEST((has(e, "'membership.joins[1].worker'") && has(e, "must be absent to join")), e);
  e = error_of(elastic_experiment(), "membership.absent=[3,3]");
  BOOST_TEST((has(e, "membership.absent[1]") && has(e, "twice")), e);
  e = error_of(elastic_experiment(), "membership.deadline.quantile=0");
  BOOST_TEST(has(e, "'membership.deadline.quantile'"), e);
}

BOOST_AUTO_TEST_SUITE_END()

// Under mpirun: the CTest entry driver_realtime_mpi (label mpi) sets HG_RUNTIME_TEST_MPIEXEC
// and the process-count flag from CMake's FindMPI variables; elsewhere the suite is skipped.
namespace {
boost::test_tools::assertion_result mpi_available(boost::unit_test::test_unit_id) {
  return std::getenv("HG_RUNTIME_TEST_MPIEXEC") != nullptr;
}
std::string mpirun(int np) {
  return std::string(std::getenv("HG_RUNTIME_TEST_MPIEXEC")) + " " + std::getenv("HG_RUNTIME_TEST_NP_FLAG") + " " +
         std::to_string(np) + " --oversubscribe " + std::getenv("HG_RUNTIME_TEST_PREFLAGS");
}
}  // namespace

BOOST_AUTO_TEST_SUITE(real_clock_mpi, *boost::unit_test::precondition(mpi_available))

// The same under mpirun, on two workers: a server's workers are ranks 1 and 2 (they wait for
// rank 0's streams before the method starts), a round method's ranks wait for their parts of
// the checkpoint (a fresh run's: empty); every rank goes on from round 0. Halted at the first
// evaluation, rank 0 still starts its method, stopped, so that the other ranks' first
// collectives are met.
BOOST_AUTO_TEST_CASE(real_runs_under_mpirun_with_a_checkpoint_at_every_evaluation_end_and_resume_from_the_first_cut,
                     *boost::unit_test::timeout(270)) {
  const auto dir = scratch("mpi-checkpoint-every-evaluation");
  json raw = experiment();
  raw["runtime"] = "mpi";
  raw["real_scale"] = 0.01;
  raw["workers"] = json::parse(R"({"count": 2, "time": {"base": "linear", "noise": "half_normal"}})");
  json servers = raw, rounds = raw;
  servers["methods"] = json::parse(R"([{"label": "Ringmaster", "algorithm": "ringmaster", "threshold": 2}])");
  rounds["methods"] = json::parse(R"([{"label": "BSP", "algorithm": "bsp"},
                                      {"label": "local SGD", "algorithm": "local_sgd", "local_steps": [2, 1]}])");
  (void)halt_at_the_first_cut_and_resume(servers, dir / "servers", mpirun(3));
  for (const json& s : halt_at_the_first_cut_and_resume(rounds, dir / "rounds", mpirun(2)))
    BOOST_TEST(s["extra"]["resumed_rounds_per_rank"] == json::array({0, 0}), s["label"]);
}

BOOST_AUTO_TEST_SUITE_END()
