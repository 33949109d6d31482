// heterograd-run: configuration checks (good and bad), the table format, checkpoint + resume
// giving the uninterrupted run's trace hash, and the numbers the named experiments reproduce
// at test size (E1, E2 of docs/references.md).
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <fstream>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "config.hpp"
#include "run_exe.hpp"
#include "described.hpp"
#include "drive.hpp"
#include "heterograd/algorithms/decoupled/local_learning.hpp"
#include "heterograd/algorithms/sync/biased.hpp"
#include "heterograd/algorithms/sync/eager.hpp"
#include "heterograd/algorithms/sync/local_sgd.hpp"
#include "heterograd/algorithms/sync/selsync.hpp"
#include "heterograd/balance/omnilearn.hpp"
#include "registry.hpp"
#include "messages.hpp"
#include "report.hpp"
#include "run.hpp"

namespace fs = std::filesystem;
using hgrun::json;

namespace {

// The message of the config_error `f` throws (empty when it does not throw).
template <class F>
std::string error_of(F&& f) {
  return hg_test::message_of<hgrun::config_error>(f);
}

json minimal() {
  return json::parse(R"({
    "name": "t", "data": {"dataset": "fashion_mnist"}, "model": {"hidden": [8]},
    "workers": {"count": 4, "time": {"base": "fixed", "tau": [1, 2, 4, 8]}},
    "horizon": {"time": 100}, "eval_interval": 10,
    "methods": [{"label": "a", "algorithm": "local_learning"}]})");
}

// Resolved `minimal()` with `patch` merged first.
json resolved_with(const std::string& patch) {
  json j = minimal();
  j.merge_patch(json::parse(patch));
  return hgrun::resolve(j);
}

fs::path scratch(const std::string& name) {
  const auto p = fs::temp_directory_path() / ("hg-driver-test-" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(config)

BOOST_AUTO_TEST_CASE(every_named_experiment_resolves_with_its_tiny_patch) {
  const auto names = hgrun::list_experiments();
  BOOST_TEST(names.size() >= 10u);  // E1-E8, local learning, demo
  for (const auto& n : names) {
    json raw = hgrun::load_experiment(n);
    BOOST_TEST(!raw.value("paper", "").empty(), n << " states the paper's number");
    BOOST_TEST(error_of([&] { (void)hgrun::resolve(raw); }) == "", n);
    raw.merge_patch(raw["tiny"]);
    BOOST_TEST(error_of([&] { (void)hgrun::resolve(raw); }) == "", n << " --tiny");
  }
}

BOOST_AUTO_TEST_CASE(defaults_are_filled_and_overrides_reach_nested_keys) {
  const json c = hgrun::resolve(minimal());
  BOOST_TEST(c["seed"].get<int>() == 1);
  BOOST_TEST(c["runtime"].get<std::string>() == "sim");
  BOOST_TEST(c["output"].get<std::string>() == "out/t");
  BOOST_TEST(c["optimizer"]["lr"].get<double>() == 0.01);  // kernels::sgd_config's default
  BOOST_TEST(c["methods"][0]["optimizer"]["kind"].get<std::string>() == "sgd");  // inherited
  BOOST_TEST(c["methods"][0]["batch"].get<int>() == 32);                          // data.batch
  BOOST_TEST(c["methods"][0]["modules"].get<int>() == 2);                         // algorithm default
  BOOST_TEST(c["methods"][0]["pgl_period"].get<int>() == 0);
  BOOST_TEST(c["baseline"].get<std::string>() == "a");
  json j = minimal();
  hgrun::apply_override(j, "workers.time.tau[2]=5.5");
  hgrun::apply_override(j, "methods[0].modules=1");
  hgrun::apply_override(j, "title=hello world");
  hgrun::apply_override(j, "model.hidden=[32,16]");
  const json r = hgrun::resolve(j);
  BOOST_TEST(r["workers"]["time"]["tau"][2].get<double>() == 5.5);
  BOOST_TEST(r["methods"][0]["modules"].get<int>() == 1);
  BOOST_TEST(r["title"].get<std::string>() == "hello world");
  BOOST_TEST(r["model"]["hidden"].size() == 2u);
  BOOST_TEST(error_of([&] { hgrun::apply_override(j, "methods[7].modules=1"); }).find("methods[7]") !=
             std::string::npos);
  BOOST_TEST(!error_of([&] { hgrun::apply_override(j, "no-equals-sign"); }).empty());
}

BOOST_AUTO_TEST_CASE(unknown_keys_wrong_types_and_impossible_values_name_the_key_path_and_form) {
  struct bad {
    std::string patch, path, expected;
  };
  const std::vector<bad> cases{
      {R"({"workers": {"tme": {}}})", "'workers.tme'", "unknown key; expected one of: count, time"},
      {R"({"workers": {"count": "sixteen"}})", "'workers.count'", "expected an integer in [1, 4194304], got \"sixteen\""},
      {R"({"workers": {"count": 0}})", "'workers.count'", "expected an integer"},
      {R"({"eval_interval": 0})", "'eval_interval'", "expected a number > 0, got 0"},
      {R"({"eval_interval": -3})", "'eval_interval'", "expected a number > 0"},
      {R"({"optimizer": {"lr": "fast"}})", "'optimizer.lr'", "expected a number >= 0, got \"fast\""},
      {R"({"optimizer": {"kind": "rmsprop"}})", "'optimizer.kind'",
       "expected one of \"sgd\", \"momentum\", \"nesterov\", \"adam\", \"adamw\", \"adagrad\", \"lamb\", got \"rmsprop\""},
      {R"({"optimizer": {"momentum": 1.0}})", "'optimizer.momentum'", "expected a number in [0, 1)"},
      {R"({"workers": {"time": {"tau": [1, 2, 4]}}})", "'workers.time.tau'", "expected 4 times"},
      {R"({"workers": {"time": {"outages": [{"worker": 9, "begin": 1, "end": 2}]}}})",
       "'workers.time.outages[0].worker'", "expected a worker index < workers.count = 4"},
      {R"({"workers": {"time": {"outages": [{"worker": 1, "begin": 5, "end": 2}]}}})",
       "'workers.time.outages[0].end'", "expected a time > begin"},
      {R"({"workers": {"time": {"outages": [{"worker": 1, "end": 2}]}}})", "'workers.time.outages[0].begin'",
       "missing; expected a number >= 0"},
      {R"({"horizon": {"time": 10, "epochs": 1}})", "'horizon'", "expected exactly one of time, epochs, updates"},
      {R"({"horizon": {"time": -1}})", "'horizon.time'", "expected a number > 0"},
      {R"({"data": {"dataset": "scalar_quadratics", "centers": [1, 2]}})", "'data.centers'", "expected 4 centers"},
      {R"({"data": {"dataset": "cifar10"}})", "'data.dataset'", "expected one of \"fashion_mnist\""},
      {R"({"baseline": "nobody"})", "'baseline'", "expected the label of one of the methods"},
      {R"({"runtime": "gpu"})", "'runtime'", "expected one of \"sim\", \"threads\", \"mpi\""},
      {R"({"target": {"below": "yes"}})", "'target.below'", "expected true or false"},
      {R"({"target": {"window": -1}})", "'target.window'", "expected a number >= 0, got -1"},
      {R"({"target": {"window": "long"}})", "'target.window'", "expected a number >= 0, got \"long\""},
      {R"({"methods": []})", "'methods'", "expected an array of at least 1"},
      {R"({"methods": [{"label": "a", "algorithm": "sgd9"}]})", "'methods[0].algorithm'", "expected one of"},
      {R"({"methods": [{"label": "a", "algorithm": "local_learning", "threshold": 3}]})",
       "'methods[0].threshold'", "unknown key"},
      {R"({"methods": [{"label": "a", "algorithm": "ringmaster", "threshold": 0}]})", "'methods[0].threshold'",
       "expected an integer >= 1 or the string \"inf\""},
      {R"({"methods": [{"label": "a", "algorithm": "local_sgd", "local_steps": [1, 2]}]})",
       "'methods[0].local_steps'", "expected 4 values (one per worker)"},
      {R"({"methods": [{"label": "a", "algorithm": "omnilearn", "min_batch": 64, "max_batch": 32}]})",
       "'methods[0].min_batch'", "expected <= max_batch"},
      {R"({"methods": [{"label": "a", "algorithm": "local_learning"}, {"label": "a", "algorithm": "local_learning"}]})",
       "'methods[1].label'", "expected a unique label"},
      {R"({"methods": [{"label": "a", "algorithm": "local_learning", "modules": 3}]})", "'methods[0].modules'",
       "expected at most the number of dense layers (2), got 3"},
      {R"({"data": {"dataset": "worst_case_quadratic"}})", "'methods[0].algorithm'",
       "local_learning needs data.dataset \"fashion_mnist\""},
      {R"({"methods": [{"label": "a", "algorithm": "asgd", "optimizer": {"lr": -1}}]})",
       "'methods[0].optimizer.lr'", "expected a number >= 0, got -1"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of([&] { (void)resolved_with(c.patch); });
    BOOST_TEST(e.find(c.path) != std::string::npos, c.patch << " -> " << e);
    BOOST_TEST(e.find(c.expected) != std::string::npos, c.patch << " -> " << e);
  }
  BOOST_TEST(error_of([] { (void)hgrun::resolve(json::array()); }).find("expected a JSON object") != std::string::npos);
  BOOST_TEST(error_of([] { (void)hgrun::load_experiment("no_such_experiment"); }).find("named experiment") !=
             std::string::npos);
}

// target.window: model units, two evaluation intervals where none is given, written into the
// resolved configuration; a negative or non-finite one (a program's document) refused by name.
BOOST_AUTO_TEST_CASE(the_target_window_defaults_to_two_evaluation_intervals_and_is_refused_when_negative_or_not_finite) {
  BOOST_TEST(resolved_with("{}")["target"]["window"] == json(20.0));
  BOOST_TEST(resolved_with(R"({"eval_interval": 0.1})")["target"]["window"] == json(2 * 0.1));
  BOOST_TEST(resolved_with(R"({"target": {"window": 0}})")["target"]["window"] == json(0));
  BOOST_TEST(resolved_with(R"({"target": {"window": 35.5}})")["target"]["window"] == json(35.5));
  for (double bad : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    json raw = minimal();
    raw["target"]["window"] = bad;
    const std::string e = error_of([&] { (void)hgrun::resolve(raw); });
    BOOST_TEST(e.find("config error at 'target.window': expected a number >= 0") == 0u, e);
  }
}

BOOST_AUTO_TEST_CASE(the_demo_is_sixteen_heterogeneous_workers_with_one_outage_and_the_seven_methods) {
  json raw = hgrun::load_experiment("demo");
  raw.erase("methods");  // checked below whatever this build holds
  raw["methods"] = json::array({json{{"label", "x"}, {"algorithm", "local_learning"}}});
  const json c = hgrun::resolve(raw);
  BOOST_TEST(c["data"]["dataset"].get<std::string>() == "fashion_mnist");
  BOOST_TEST(c["model"]["kind"].get<std::string>() == "mlp");
  BOOST_TEST(c["workers"]["count"].get<int>() == 16);
  BOOST_TEST(c["workers"]["time"]["base"].get<std::string>() == "linear");  // tau_i = 1 + i
  BOOST_TEST(c["workers"]["time"]["permute"].get<bool>());
  BOOST_TEST(c["workers"]["time"]["noise"].get<std::string>() == "half_normal");
  BOOST_TEST(c["workers"]["time"]["outages"].size() == 1u);
  BOOST_TEST(c["target"]["value"].get<double>() == 0.85);
  BOOST_TEST(c["target"]["window"].get<double>() == 600.0);  // two evaluation intervals of 300
  std::vector<std::string> algs;
  const json demo = hgrun::load_experiment("demo");
  for (const auto& m : demo["methods"]) algs.push_back(m["algorithm"]);
  const std::vector<std::string> want{"bsp", "asgd", "ringmaster", "rescaled", "local_sgd", "omnilearn", "eager"};
  BOOST_TEST(algs == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------------
// Hostile input (issue 17): every refusal names the key path, before anything runs.

namespace {

// The message of what `f` throws: config_error's, or "OTHER: " + what() for anything else.
template <class F>
std::string refusal_of(F&& f) {
  try {
    f();
  } catch (const hgrun::config_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("OTHER: ") + e.what();
  }
  return "";
}

// A small simulated experiment on the scalar quadratics (no dataset files needed).
json quadratics() {
  return json::parse(R"({
    "name": "q", "data": {"dataset": "scalar_quadratics", "centers": [0, 1, 2, 3]},
    "workers": {"count": 4, "time": {"base": "fixed", "tau": [1, 2, 4, 8]}},
    "horizon": {"time": 100}, "eval_interval": 10, "target": {"metric": "loss", "value": 0.1, "below": true},
    "methods": [{"label": "ASGD", "algorithm": "asgd"}]})");
}

// resolve() and preflight() of `base` with `patch` merged (preflight: the checks that need
// the worker-time model and the problem).
std::string refusal_with(json base, const std::string& patch) {
  base.merge_patch(json::parse(patch));
  return refusal_of([&] { hgrun::preflight(hgrun::resolve(base)); });
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

using hg_test::run_exe;  // heterograd-run's exit status and output (run_exe.hpp)

}  // namespace

BOOST_AUTO_TEST_SUITE(hostile_input)

BOOST_AUTO_TEST_CASE(free_text_with_control_characters_colliding_folder_names_and_overlong_labels_are_refused_with_the_key_path,
                     *boost::unit_test::timeout(60)) {
  struct bad {
    std::string patch, path, expected;
  };
  const std::vector<bad> cases{
      // the gnuplot injection of the drill: a newline ends the quoted title
      {R"({"title": "x\nsystem(\"touch X\")\n#"})", "'title'", "without control characters, got byte 0x0a at offset 1"},
      {R"({"paper": "E1\r"})", "'paper'", "byte 0x0d"},
      {R"({"notes": "bell \u0007"})", "'notes'", "byte 0x07"},
      {R"({"name": "q\u007f"})", "'name'", "byte 0x7f"},
      {R"({"name": "../up"})", "'name'", "usable as a folder name"},
      {R"({"target": {"metric": "loss\u001b[2J"}})", "'target.metric'", "byte 0x1b"},
      {R"({"methods": [{"label": "AS\tGD", "algorithm": "asgd"}]})", "'methods[0].label'", "byte 0x09"},
      {R"({"data": {"path": "/tmp/\n"}})", "'data.path'", "byte 0x0a"},
      {R"({"output": "out\u0000x"})", "'output'", "byte 0x00"},
      // slug(): lower case, runs of anything but letters and digits become one '-'
      {R"({"methods": [{"label": "BSP", "algorithm": "asgd"}, {"label": "bsp", "algorithm": "asgd"}]})",
       "'methods[1].label'", "methods[0].label \"BSP\" both write to \"bsp\""},
      {R"({"methods": [{"label": "a b", "algorithm": "asgd"}, {"label": "a-b", "algorithm": "asgd"}]})",
       "'methods[1].label'", "methods[0].label \"a b\" both write to \"a-b\""},
      {R"({"methods": [{"label": "x", "algorithm": "asgd"}, {"label": "Y", "algorithm": "asgd"}, {"label": "  y!", "algorithm": "asgd"}]})",
       "'methods[2].label'", "methods[1].label \"Y\""},
      {R"({"methods": [{"label": ")" + std::string(97, 'L') + R"(", "algorithm": "asgd"}]})", "'methods[0].label'",
       "97 bytes) has at most 96 bytes"},
      {R"({"methods": [{"label": "--", "algorithm": "asgd"}]})", "'methods[0].label'", "with a letter or digit"},
      {R"({"output": "/tmp/)" + std::string(256, 'o') + R"("})", "'output'", "at most 255 bytes, got one of 256"},
      {R"({"name": ")" + std::string(97, 'n') + R"("})", "'name'", "at most 96 bytes"},
  };
  for (const auto& c : cases) {
    const std::string e = refusal_with(quadratics(), c.patch);
    BOOST_TEST(has(e, c.path), c.patch << " -> " << e);
    BOOST_TEST(has(e, c.expected), c.patch << " -> " << e);
  }
  // 96 bytes is a folder name still; an unknown key's control characters are escaped.
  BOOST_TEST(refusal_with(quadratics(), R"({"methods": [{"label": ")" + std::string(96, 'L') + R"(", "algorithm": "asgd"}]})") == "");
  const std::string e = refusal_with(quadratics(), R"({"workers": {"x\ny": 1}})");
  BOOST_TEST(has(e, R"('workers."x\ny"')"), e);
  BOOST_TEST(!has(e, "x\ny"), e);
}

BOOST_AUTO_TEST_CASE(configurations_asking_for_unbounded_work_or_more_memory_than_the_machine_has_are_refused_up_front,
                     *boost::unit_test::timeout(60)) {
  struct bad {
    json base;
    std::string patch, path, expected;
  };
  json worst = quadratics();
  worst["data"] = json{{"dataset", "worst_case_quadratic"}, {"dim", 200}};
  worst["target"]["metric"] = "grad_norm_sq";
  json demo = hgrun::load_experiment("demo");
  const std::vector<bad> cases{
      // the drill
      {quadratics(), R"({"horizon": {"time": 1e300}})", "'eval_interval'", "at most 1e+06 evaluations per run, got horizon.time / eval_interval = 1e+300 / 10"},
      {quadratics(), R"({"eval_interval": 1e-300})", "'eval_interval'", "= 1e+302"},
      {quadratics(), R"({"workers": {"time": {"tau": [1e-300, 1, 1, 1]}}})", "'horizon.time'",
       "at most 1e+09 gradient computations per run, got about 1e+302 (4 workers, the fastest 1e-300 virtual time a job: workers.time.tau, workers.time.scale)"},
      {quadratics(), R"({"workers": {"time": {"scale": 1e-300}}})", "'horizon.time'", "workers.time.scale"},
      {quadratics(), R"({"methods": [{"label": "L", "algorithm": "local_sgd", "period": 1e15}]})", "'methods[0].period'",
       "at most 1e+09 gradient computations per model update (local_sgd), got 4e+15"},
      {quadratics(), R"({"methods": [{"label": "R", "algorithm": "rennala", "gradients": 1e12}]})", "'methods[0].gradients'", "got 1e+12"},
      {quadratics(), R"({"methods": [{"label": "M", "algorithm": "malenia", "threshold": 1e300}]})", "'methods[0].threshold'", "per model update"},
      {quadratics(), R"({"horizon": {"time": null, "updates": 1e14}})", "'horizon.updates'", "got 1e+14 updates x 1"},
      {quadratics(), R"({"horizon": {"time": null, "epochs": 1e12}})", "'horizon.epochs'", "got about 4e+12"},
      {quadratics(), R"({"horizon": {"time": null, "epochs": 10}, "workers": {"time": {"outages": [{"worker": 1, "begin": 0, "end": 1e300}]}}})",
       "'eval_interval'", "evaluations per run, got about 1e+299"},
      {demo, R"({"data": {"train_samples": 1000, "batch": 1001}})", "'data.batch'", "at most data.train_samples = 1000"},
      {demo, R"({"workers": {"count": 1000000}})", "'workers.count'", "fits in memory"},
      {demo, R"({"data": {"train_samples": 100}, "workers": {"count": 101}})", "'workers.count'", "every worker needs a sample"},
      {demo, R"({"model": {"hidden": [1000000000000]}})", "'model.hidden'", "fits in memory"},
      {worst, R"({"data": {"dim": 1e15}})", "'data.dim'", "fits in memory"},
      {worst, R"({"data": {"dim": 2000}, "workers": {"count": 4000000, "time": {"base": "linear"}}})", "'workers.count'",
       "fits in memory"},
      {worst, R"({"runtime": "threads", "workers": {"count": 1000000, "time": {"base": "linear"}}})", "'workers.count'",
       "at most 1024 workers with runtime \"threads\""},
      {worst, R"({"data": {"dim": 10000000}, "methods": [{"label": "E", "algorithm": "eager", "staleness_bound": 1000000}]})",
       "'methods[0].staleness_bound'", "fits in memory"},
  };
  for (const auto& c : cases) {
    const std::string e = refusal_with(c.base, c.patch);
    BOOST_TEST(has(e, c.path), c.patch << " -> " << e);
    BOOST_TEST(has(e, c.expected), c.patch << " -> " << e);
  }
  // An infinite number (1e400 is not JSON: nlohmann refuses it; a program may build one).
  json inf = quadratics();
  inf["horizon"]["time"] = std::numeric_limits<double>::infinity();
  std::string e = refusal_of([&] { hgrun::preflight(hgrun::resolve(inf)); });
  BOOST_TEST(has(e, "'horizon.time': expected a number > 0, got null"), e);
  BOOST_TEST(has(refusal_of([] { (void)hgrun::parse_config(R"({"horizon": {"time": 1e400}})", "t.json"); }),
                 "'t.json' is not valid JSON"));
  // Just inside the limits: accepted.
  BOOST_TEST(refusal_with(quadratics(), R"({"horizon": {"time": 1e7}})") == "");  // 1e6 evaluations
  BOOST_TEST(refusal_with(quadratics(), R"({"methods": [{"label": "L", "algorithm": "local_sgd", "period": 1000}]})") == "");
}

// Every algorithm's library parameters ('<config>.<field>', its row's config_names) name the
// method's key in an error: each key the row offers, under the field name its config gives it
// (renamed read backwards), the fields the driver sets from another section name that section,
// and a field that is no key of the method is left to the caller's fallback.
BOOST_AUTO_TEST_CASE(every_rows_library_parameters_name_the_methods_key_or_the_section_that_sets_them) {
  const auto map = [](const std::string& algorithm, const std::string& parameter) {
    json c = quadratics();
    c["methods"] = json::array({json{{"label", "A"}, {"algorithm", "asgd"}}, json{{"label", "M"}, {"algorithm", algorithm}}});
    const std::string text = "heterograd: invalid argument '" + parameter + "' = 7: must be something";
    return hgrun::from_library_error(std::invalid_argument(text), c, -1, "fallback").path();
  };
  std::size_t checked = 0;
  for (const auto& r : hgrun::algorithm_rows()) {
    for (const auto& config : r.config_names) {
      for (const auto& [key, spec] : r.keys) {
        std::string field = key;
        for (const auto& [f, k] : r.renamed)
          if (k == key) field = f;
        BOOST_TEST(map(r.name, config + "." + field) == "methods[1]." + key, r.name << ": " << config << "." << field);
        ++checked;
      }
      for (const auto& [field, key] : r.set_from) BOOST_TEST(map(r.name, config + "." + field) == key, r.name);
      BOOST_TEST(map(r.name, config + ".no_such_field") == "fallback", r.name);
    }
  }
  BOOST_TEST(checked > 40u);
  // The round methods' own: local SGD's period, biased local SGD's slow workers, PGL's fraction.
  BOOST_TEST(map("local_sgd", "local_sgd.period") == "methods[1].period");
  BOOST_TEST(map("local_sgd", "local_sgd.local_steps[2]") == "methods[1].local_steps[2]");
  BOOST_TEST(map("biased_local_sgd", "biased.slow") == "methods[1].slow_workers");
  BOOST_TEST(map("local_learning", "pgl.epoch_fraction") == "methods[1].pgl_epoch_fraction");
  BOOST_TEST(map("bsp", "bsp.sync_time") == "network");
  // A parameter of a config no configured method is built from: its key, at no method.
  BOOST_TEST(map("omnilearn", "local_sgd.period") == "methods[?].period");
}

BOOST_AUTO_TEST_CASE(config_errors_name_the_users_key_for_overflowing_numbers_library_rules_duplicates_unknown_metrics_and_deep_nesting,
                     *boost::unit_test::timeout(60)) {
  // An array index past 2^64 in --set: the key path, not std::out_of_range from stoull.
  json j = quadratics();
  std::string e = refusal_of([&] { hgrun::apply_override(j, "methods[99999999999999999999999].label=x"); });
  BOOST_TEST(has(e, "config error at 'methods[99999999999999999999999].label'"), e);
  BOOST_TEST(has(e, "below 2^64"), e);
  // A library's rule, in the configuration's words (no 'partition_iid.n').
  const json c = hgrun::resolve(quadratics());
  const auto lib = hgrun::from_library_error(
      std::invalid_argument("heterograd: invalid argument 'partition_iid.n' = 3: must be >= workers (every worker needs data)"),
      c, -1, "data");
  BOOST_TEST(lib.path() == "data.train_samples");
  BOOST_TEST(!has(lib.what(), "partition_iid"), lib.what());
  BOOST_TEST(has(lib.what(), "got 3: must be >= workers"), lib.what());
  json rc = quadratics();
  rc["methods"] = json::parse(R"([{"label": "A", "algorithm": "asgd"}, {"label": "R", "algorithm": "ringmaster"}])");
  const auto lib2 = hgrun::from_library_error(
      std::invalid_argument("heterograd: invalid argument 'ringmaster_config.threshold' = 0: must be >= 1"),
      hgrun::resolve(rc), -1, "methods");
  BOOST_TEST(lib2.path() == "methods[1].threshold");
  // ... and met in preflight(), which builds the problem before anything runs.
  json fm = quadratics();
  fm["data"] = json::parse(R"({"dataset": "fashion_mnist", "train_samples": 1000, "partition": "labels", "labels_per_worker": 11})");
  fm["model"] = json{{"kind", "softmax"}};
  fm["target"] = json{{"metric", "accuracy"}};
  e = refusal_with(fm, "{}");
  BOOST_TEST(has(e, "config error at 'data.labels_per_worker': got 11: must be in [1, classes]"), e);
  BOOST_TEST(!has(e, "partition_k_labels"), e);
  // (and the training set's real size bounds the mini-batch: train_samples 0 is all of it)
  e = refusal_with(fm, R"({"data": {"partition": "iid", "labels_per_worker": null, "train_samples": 0, "batch": 60001}})");
  BOOST_TEST(has(e, "config error at 'data.batch': expected a mini-batch of at most the training set's 60000 samples, got 60001"), e);
  // A batch that reaches the problem from a peer (a server's job header under MPI) is held to
  // the same rule: 1..the training set, refused before anything is drawn or allocated.
  {
    json small = fm;
    small["data"] = json::parse(R"({"dataset": "fashion_mnist", "train_samples": 100, "partition": "iid"})");
    const json cfg = hgrun::resolve(small);
    auto prob = hgrun::make_problem(hgrun::experiment_of(cfg), cfg, 1);
    std::vector<float> x = prob->initial(), g(prob->dim());
    for (const std::size_t b : {std::size_t{0}, std::size_t{101}, std::numeric_limits<std::size_t>::max()}) {
      const auto why = hg_test::message_of<std::invalid_argument>([&] { (void)prob->gradient(0, b, x, g); });
      BOOST_TEST(has(why, "batch " + std::to_string(b) + " was asked for; a batch must be 1..100"), why);
    }
    BOOST_TEST(prob->samples == 0u);  // nothing drawn
    (void)prob->gradient(0, 100, x, g);  // the whole training set is a batch
    BOOST_TEST(prob->samples == 100u);
  }
  // Duplicate keys, at any depth, name the second one's key path.
  e = refusal_of([] { (void)hgrun::parse_config(R"({"seed": 1, "seed": 2})", "t.json"); });
  BOOST_TEST(has(e, "config error at 'seed': a duplicate key"), e);
  e = refusal_of([] {
    (void)hgrun::parse_config(R"({"methods": [{"label": "a"}, {"label": "b", "algorithm": "x", "label": "c"}]})", "t.json");
  });
  BOOST_TEST(has(e, "'methods[1].label'"), e);
  e = refusal_of([&] { hgrun::apply_override(j, R"(optimizer={"lr": 0.1, "lr": 0.2})"); });
  BOOST_TEST(has(e, "'optimizer.lr'"), e);
  // Comments are allowed; what is not JSON names the file.
  BOOST_TEST(hgrun::parse_config("// c\n{\"a\": 1}", "t.json")["a"] == 1);
  BOOST_TEST(has(refusal_of([] { (void)hgrun::parse_config("{\"a\": }", "t.json"); }), "'t.json' is not valid JSON"));
  // A target metric the problem does not report.
  e = refusal_with(quadratics(), R"({"target": {"metric": "accuracy"}})");
  BOOST_TEST(has(e, "config error at 'target.metric'"), e);
  BOOST_TEST(has(e, R"(one of "loss", "grad_norm_sq", "x"; got "accuracy")"), e);
  // Deep nesting: refused while parsing (no recursion over 100000 levels), in files, values
  // and key paths alike.
  const std::string deep(100000, '[');
  e = refusal_of([&] { (void)hgrun::parse_config(deep, "deep.json"); });
  BOOST_TEST(has(e, "nested deeper than 64 levels"), e);
  e = refusal_of([&] { (void)hgrun::parse_config(R"({"tiny": )" + std::string(70, '[') + std::string(70, ']') + "}", "t.json"); });
  BOOST_TEST(has(e, "config error at 'tiny"), e);
  e = refusal_of([&] { hgrun::apply_override(j, "notes=" + deep); });
  BOOST_TEST(has(e, "config error at 'notes[0][0]"), e);
  BOOST_TEST(has(e, "nested deeper"), e);
  std::string path = "a";
  for (int i = 0; i < 100000; ++i) path += ".a";
  e = refusal_of([&] { hgrun::apply_override(j, path + "=1"); });
  BOOST_TEST(has(e, "expected a key path of at most 64 keys"), e);
  BOOST_TEST(hgrun::parse_config(std::string(64, '[') + std::string(64, ']'), "t.json").is_array());
}

BOOST_AUTO_TEST_CASE(the_command_line_refuses_overflowing_seeds_a_missing_tiny_block_and_deep_files_with_exit_status_2,
                     *boost::unit_test::timeout(60)) {
  const auto dir = scratch("cli");
  auto [rc, out] = run_exe("demo --check --seeds 1,99999999999999999999999");
  BOOST_TEST(rc == 2);
  BOOST_TEST(has(out, "config error at '--seeds': expected comma-separated integers in [0, 1000000000000000] (a seed's "
                      "bound, as the configuration's), got \"99999999999999999999999\""),
             out);
  {
    json q = quadratics();
    std::ofstream(dir / "no_tiny.json") << q.dump();
    std::ofstream(dir / "deep.json") << std::string(100000, '[');
    q["seed"] = 7;
    std::string text = q.dump();
    text.insert(1, "\"seed\": 3, ");
    std::ofstream(dir / "dup.json") << text;
  }
  std::tie(rc, out) = run_exe((dir / "no_tiny.json").string() + " --tiny --check");
  BOOST_TEST(rc == 2);
  BOOST_TEST(has(out, "config error at 'tiny': --tiny needs a \"tiny\" object"), out);
  std::tie(rc, out) = run_exe((dir / "deep.json").string() + " --check");
  BOOST_TEST(rc == 2);
  BOOST_TEST(has(out, "nested deeper than 64 levels"), out);
  std::tie(rc, out) = run_exe((dir / "dup.json").string() + " --check");
  BOOST_TEST(rc == 2);
  BOOST_TEST(has(out, "config error at 'seed': a duplicate key"), out);
  std::tie(rc, out) = run_exe((dir / "no_tiny.json").string() + " --check --set \"$(printf 'methods[0].label=a\\tb')\"");
  BOOST_TEST(rc == 2);
  BOOST_TEST(has(out, "config error at 'methods[0].label'"), out);
  std::tie(rc, out) = run_exe((dir / "no_tiny.json").string() + " --check");
  BOOST_TEST(rc == 0, out);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(the_table_lists_method_sustained_time_first_crossing_final_metric_and_speedup_against_the_baseline) {
  json raw = minimal();
  raw["methods"] = json::array({json{{"label", "synchronous SGD"}, {"algorithm", "local_learning"}},
                                json{{"label", "fast"}, {"algorithm", "local_learning"}},
                                json{{"label", "lucky"}, {"algorithm", "local_learning"}},
                                json{{"label", "never"}, {"algorithm", "local_learning"}}});
  raw["baseline"] = "synchronous SGD";
  const json c = hgrun::resolve(raw);  // eval_interval 10: target.window 20
  auto summary = [](const char* label, json t, json first, double acc) {
    return json{{"label", label}, {"time_to_target", t}, {"first_crossing", first},
                {"final", {{"accuracy", acc}, {"loss", 0.5}}}, {"end_time", 1000.0}, {"extra", json::object()}};
  };
  const std::vector<hgrun::method_result> r{{summary("synchronous SGD", 800.0, 700.0, 0.86), {}},
                                            {summary("fast", 200.0, 150.0, 0.87), {}},
                                            {summary("lucky", nullptr, 100.0, 0.84), {}},
                                            {summary("never", nullptr, nullptr, 0.61), {}}};
  const std::string t = hgrun::markdown_table(c, r);
  const std::string want =
      "| method | time to accuracy >= 0.85 held for 20 (virtual time) | first crossing | final accuracy | "
      "speed-up vs synchronous SGD |\n"
      "|---|---:|---:|---:|---:|\n"
      "| synchronous SGD | 800 | 700 | 0.86 | 1.00x |\n"
      "| fast | 200 | 150 | 0.87 | 4x |\n"
      "| lucky | not held | 100 | 0.84 | — |\n"
      "| never | not reached | not reached | 0.61 | — |\n";
  BOOST_TEST(t == want);
  // A baseline without a sustained time: the speed-up is a lower bound. Never reached: its
  // time is after the horizon (1000 / 250). Crossed at 990 or 900: a run of reaching
  // evaluations open at the end began after 1000 - 20 and not before the crossing.
  auto fast_row = [&](json base_first) {
    const std::vector<hgrun::method_result> r2{{summary("synchronous SGD", nullptr, base_first, 0.8), {}},
                                               {summary("fast", 250.0, 250.0, 0.87), {}}};
    const std::string table = hgrun::markdown_table(c, r2);
    const auto at = table.find("| fast |");
    return at == std::string::npos ? table : table.substr(at, table.find('\n', at) - at);
  };
  BOOST_TEST(fast_row(nullptr) == "| fast | 250 | 250 | 0.87 | > 4x |");
  BOOST_TEST(fast_row(990.0) == "| fast | 250 | 250 | 0.87 | ≥ 3.96x |");
  BOOST_TEST(fast_row(900.0) == "| fast | 250 | 250 | 0.87 | ≥ 3.92x |");
}

BOOST_AUTO_TEST_CASE(the_seeds_table_gives_the_sustained_times_with_the_first_crossings_beside_them) {
  json raw = minimal();
  raw["methods"] = json::array({json{{"label", "base"}, {"algorithm", "local_learning"}},
                                json{{"label", "noisy"}, {"algorithm", "local_learning"}}});
  raw["target"] = {{"window", 30}};
  const json c = hgrun::resolve(raw);
  auto run = [](const char* label, json t, json first, double acc, std::uint64_t seed) {
    return hgrun::method_result{json{{"label", label}, {"time_to_target", t}, {"first_crossing", first},
                                     {"final", {{"accuracy", acc}}}, {"extra", json::object()}},
                                {}, seed};
  };
  const std::vector<std::vector<hgrun::method_result>> runs{
      {run("base", 400.0, 400.0, 0.86, 1), run("base", 600.0, 500.0, 0.88, 2)},
      {run("noisy", 200.0, 100.0, 0.86, 1), run("noisy", nullptr, 300.0, 0.84, 2)}};
  const std::string t = hgrun::seeds_table(c, runs);
  // base: times 400, 600 (sd 141.4, ci95 12.706 x 141.4 / sqrt 2 = 1271); crossings 400, 500.
  const std::string want =
      "| method | reached accuracy >= 0.85 held for 30 | time to it (virtual time), mean ± 95% CI | sd | "
      "first crossing, mean ± 95% CI | final accuracy, mean ± 95% CI | sd | speed-up vs base (mean times) |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|\n"
      "| base | 2 of 2 | 500 ± 1.3e+03 | 1.4e+02 | 450 ± 6.4e+02 | 0.87 ± 0.13 | 0.014 | 1.00x |\n"
      "| noisy | 1 of 2 | 200 | — | 200 ± 1.3e+03 (2 of 2) | 0.85 ± 0.13 | 0.014 | 2.5x |\n";
  BOOST_TEST(t.substr(0, want.size()) == want);
  const json s = hgrun::seeds_summary(c, runs);
  BOOST_TEST(s["methods"][1]["reached"] == json(1));
  BOOST_TEST(s["methods"][1]["crossed"] == json(2));
  BOOST_TEST(s["methods"][1]["first_crossing"]["mean"] == json(200.0));
  BOOST_TEST(s["methods"][1]["per_seed"][1]["time_to_target"].is_null());
  BOOST_TEST(s["methods"][1]["per_seed"][1]["first_crossing"] == json(300.0));
}

namespace {

// Synchronous SGD on noisy scalar quadratics: the loss falls to its floor (0.625) in a few
// rounds and then hovers around it, crossing loss <= 0.63 early and holding it only later.
json noisy_quadratics() {
  return json::parse(R"({
    "name": "noisy", "data": {"dataset": "scalar_quadratics", "centers": [0, 1, 2, 3], "noise": 1.0},
    "optimizer": {"lr": 0.3}, "workers": {"count": 4, "time": {"base": "fixed", "tau": [1, 1, 1, 1]}},
    "horizon": {"time": 60}, "eval_interval": 2, "target": {"metric": "loss", "value": 0.63, "below": true},
    "methods": [{"label": "BSP", "algorithm": "bsp"}]})");
}

// (time, loss) of each evaluation of a run's evaluations.csv.
std::vector<std::pair<double, double>> losses_of(const fs::path& dir) {
  const auto rows = hgrun::read_csv(dir / "evaluations.csv");
  std::vector<std::pair<double, double>> out;
  for (std::size_t i = 1; i < rows.size(); ++i) out.emplace_back(std::stod(rows[i][0]), std::stod(rows[i][1]));
  return out;
}

// The time to a target below `value` by its definition, written out here: the first
// evaluation t at the target such that every evaluation from t up to the first at or after
// t + window is at it too (none: not held).
json sustained_by_definition(const std::vector<std::pair<double, double>>& ev, double value, double window) {
  for (std::size_t i = 0; i < ev.size(); ++i)
    for (std::size_t j = i; j < ev.size() && ev[j].second <= value; ++j)
      if (ev[j].first - ev[i].first >= window) return json(ev[i].first);
  return json(nullptr);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_noisy_curve_reaches_its_target_after_its_first_crossing_and_a_resumed_run_agrees,
                     *boost::unit_test::timeout(60)) {
  const json cfg = hgrun::resolve(noisy_quadratics());
  BOOST_TEST_REQUIRE(cfg["target"]["window"] == json(4.0));
  const auto dir = scratch("noisy-whole");
  const json a = hgrun::run_method({cfg, 0, 1, dir, false, 0, {}});
  const auto ev = losses_of(dir);
  BOOST_TEST_REQUIRE(ev.size() == 31u);
  BOOST_TEST(a["first_crossing"] == sustained_by_definition(ev, 0.63, 0.0));
  BOOST_TEST(a["time_to_target"] == sustained_by_definition(ev, 0.63, 4.0));
  BOOST_TEST_REQUIRE(a["time_to_target"].is_number());
  BOOST_TEST(a["first_crossing"].get<double>() < a["time_to_target"].get<double>());  // the curve is noisy
  // window 0: the time to target is the first crossing.
  json zero = noisy_quadratics();
  zero["target"]["window"] = 0;
  const json z = hgrun::run_method({hgrun::resolve(zero), 0, 1, scratch("noisy-zero"), false, 0, {}});
  BOOST_TEST(z["time_to_target"] == a["first_crossing"]);
  BOOST_TEST(z["first_crossing"] == a["first_crossing"]);
  // Killed right after the evaluation that opens the held run (its window not yet covered) and
  // resumed: the checkpoint carried the open run.
  json every = noisy_quadratics();
  every["checkpoint_every"] = 1;
  const json ce = hgrun::resolve(every);
  const auto k = static_cast<std::uint64_t>(a["time_to_target"].get<double>() / 2) + 1;
  const auto cut = scratch("noisy-cut");
  BOOST_CHECK_THROW(hgrun::run_method({ce, 0, 1, cut, false, k, {}}), hgrun::halted);
  const json b = hgrun::run_method({ce, 0, 1, cut, true, 0, {}});
  BOOST_TEST(b["trace_hash"] == a["trace_hash"]);
  BOOST_TEST(b["time_to_target"] == a["time_to_target"]);
  BOOST_TEST(b["first_crossing"] == a["first_crossing"]);
  BOOST_TEST(b["best"] == a["best"]);
}

// ---------------------------------------------------------------------------------------------
// Checkpoint and resume: a policy whose whole state serialises, on the simulated cluster.

namespace {

// Vanilla ASGD written out (server SGD step, staleness recorded), with serialize(): what every
// checkpointable policy provides.
struct test_asgd {
  std::vector<float> x;
  std::uint64_t k = 0;
  float lr = 0.01f;
  std::uint64_t version() const { return k; }
  heterograd::span<const float> params() const { return heterograd::span<const float>(x); }
  template <class Ctl, class A>
  void on_arrival(Ctl& ctl, const A& a, const std::vector<float>& g) {
    for (std::size_t i = 0; i < x.size(); ++i) x[i] -= lr * g[i];
    ctl.applied(a.worker, k - a.version);
    ++k;
  }
  template <class Ar>
  void serialize(Ar& ar) {
    ar(x, k, lr);
  }
};

json run_test_policy(const json& cfg, const fs::path& dir, bool resume, std::uint64_t halt_after) {
  auto prob = hgrun::make_problem(hgrun::experiment_of(cfg), cfg, cfg["seed"].get<std::uint64_t>());
  hgrun::context ctx{cfg, cfg["methods"][0], cfg["seed"].get<std::uint64_t>(), dir, *prob, resume, halt_after, {}};
  test_asgd p{prob->initial(), 0, 0.01f};
  auto compute = [&](heterograd::sim::worker_id w, std::uint64_t, std::uint64_t, std::vector<float>& g) {
    g.resize(prob->dim());
    prob->gradient(w, ctx.batch(), std::span<const float>(p.x), g);
  };
  return hgrun::drive_async(ctx, p, compute, [&] { return p.params(); },
                            hgrun::make_time_model(ctx.exp, ctx.seed, ctx.batch()));
}

}  // namespace

// The worst-case quadratic as the papers set it: x0 = sqrt(d) e_1 on request, and the noise
// one shared scalar on every coordinate (the authors' simulator), per coordinate, or
// multiplicative; a bad choice names its key.
BOOST_AUTO_TEST_CASE(the_worst_case_quadratic_starts_and_adds_noise_as_configured) {
  json raw = quadratics();
  raw["data"] = json::parse(R"({"dataset": "worst_case_quadratic", "dim": 9, "noise": 0.5, "start": "sqrt_d_e1"})");
  auto make = [&](const char* model, double sigma) {
    json r = raw;
    r["data"]["noise_model"] = model;
    r["data"]["noise"] = sigma;
    const json cfg = hgrun::resolve(r);
    return hgrun::make_problem(hgrun::experiment_of(cfg), cfg, 3);
  };
  const auto clean = make("shared", 0.0);
  const std::vector<float> x = clean->initial();
  BOOST_TEST(x[0] == 3.0f);  // sqrt(9)
  for (std::size_t j = 1; j < x.size(); ++j) BOOST_TEST(x[j] == 0.0f);
  std::vector<float> g0(9), g(9);
  (void)clean->gradient(0, 1, x, g0);
  auto spread = [&](auto f) {  // max - min over the coordinates of f(g[j], g0[j])
    double lo = 1e300, hi = -1e300;
    for (std::size_t j = 0; j < g.size(); ++j) {
      if (!std::isfinite(f(g[j], g0[j]))) continue;
      lo = std::min(lo, f(g[j], g0[j]));
      hi = std::max(hi, f(g[j], g0[j]));
    }
    return std::pair{lo, hi};
  };
  auto shift = [](double a, double b) { return a - b; };
  auto ratio = [](double a, double b) { return b != 0 ? a / b : std::numeric_limits<double>::quiet_NaN(); };
  (void)make("shared", 0.5)->gradient(0, 1, x, g);
  auto [slo, shi] = spread(shift);
  BOOST_TEST(shi - slo < 1e-5);   // one scalar on every coordinate ...
  BOOST_TEST(std::fabs(slo) > 1e-3);  // ... and not zero
  (void)make("multiplicative", 0.5)->gradient(0, 1, x, g);
  auto [mlo, mhi] = spread(ratio);
  BOOST_TEST(mhi - mlo < 1e-5);  // the clean gradient scaled by one factor
  BOOST_TEST(std::fabs(mlo - 1.0) > 1e-3);
  (void)make("per_coordinate", 0.5)->gradient(0, 1, x, g);
  auto [plo, phi] = spread(shift);
  BOOST_TEST(phi - plo > 1e-2);  // independent per coordinate
  json bad = raw;
  bad["data"]["noise_model"] = "additive";
  const std::string e = error_of([&] { (void)hgrun::resolve(bad); });
  BOOST_TEST(has(e, "'data.noise_model'"), e);
}

// problem::seek puts a worker's stream where the draws would have: a resumed server's workers
// on MPI ranks get their streams from the counts of jobs and samples sent before the cut.
BOOST_AUTO_TEST_CASE(seek_puts_a_workers_sample_stream_where_its_draws_would_have) {
  json fm = quadratics();
  fm["data"] = json::parse(R"({"dataset": "fashion_mnist", "train_samples": 100, "partition": "iid"})");
  fm["model"] = json{{"kind", "softmax"}};
  fm["target"] = json{{"metric", "accuracy"}};
  json wc = quadratics();
  wc["data"] = json::parse(R"({"dataset": "worst_case_quadratic", "dim": 6, "noise": 0.5})");
  json sq = quadratics();
  sq["data"]["noise"] = 0.5;
  for (const json& raw : {fm, wc, sq}) {
    const json cfg = hgrun::resolve(raw);
    const std::string what = cfg["data"]["dataset"];
    // Worker 1's shard has 25 of the 100 samples: draws of 7, 18 (one whole epoch), 60
    // (wrapping twice) and 25; each compared at the next batch of 9 with a fresh problem sought there.
    auto ran = hgrun::make_problem(hgrun::experiment_of(cfg), cfg, 5);
    std::vector<float> x = ran->initial(), g(ran->dim()), h(ran->dim());
    for (float& v : x) v += 0.25f;
    std::uint64_t jobs = 0, drawn = 0;
    for (const std::size_t b : {std::size_t{7}, std::size_t{18}, std::size_t{60}, std::size_t{25}}) {
      (void)ran->gradient(1, b, x, g);
      ++jobs;
      drawn += ran->samples_per_gradient(b);
      auto sought = hgrun::make_problem(hgrun::experiment_of(cfg), cfg, 5);
      sought->seek(1, jobs, drawn);
      auto copy = hgrun::make_problem(hgrun::experiment_of(cfg), cfg, 5);
      heterograd::archive_writer w;
      ran->serialize(w);
      heterograd::archive_reader r(w.bytes());
      copy->serialize(r);
      (void)copy->gradient(1, 9, x, g);  // the run's own next batch
      (void)sought->gradient(1, 9, x, h);
      BOOST_TEST(g == h, what << " after " << jobs << " gradients of " << drawn << " samples");
      // (and the seek is not a no-op: a fresh stream's batch of 9 is another one)
      auto fresh = hgrun::make_problem(hgrun::experiment_of(cfg), cfg, 5);
      (void)fresh->gradient(1, 9, x, h);
      BOOST_TEST(g != h, what << " after " << jobs << " gradients");
    }
  }
}

BOOST_AUTO_TEST_CASE(a_run_killed_after_a_checkpoint_and_resumed_gives_the_uninterrupted_trace_hash) {
  json raw = minimal();
  raw["methods"] = json::array({json{{"label", "test ASGD"}, {"algorithm", "asgd"}}});
  raw["data"] = json::parse(R"({"dataset": "scalar_quadratics", "centers": [0, 1, 2, 3]})");
  raw.erase("model");  // (the quadratics have none)
  raw["workers"] = json::parse(R"({"count": 4, "time": {"base": "linear", "noise": "half_normal",
                                   "outages": [{"worker": 2, "begin": 30, "end": 55}]}})");
  raw["data"]["noise"] = 0.5;  // random gradients: the RNG counters must be restored too
  raw["horizon"] = json{{"time", 200}};
  raw["checkpoint_every"] = 3;
  const json cfg = hgrun::resolve(raw);
  const auto a = scratch("uninterrupted"), b = scratch("resumed");
  const json full = run_test_policy(cfg, a, false, 0);
  BOOST_CHECK_THROW(run_test_policy(cfg, b, false, 7), hgrun::halted);  // dies after evaluation 7
  BOOST_TEST(fs::exists(b / "checkpoint.bin"));                         // written at evaluation 6
  const json resumed = run_test_policy(cfg, b, true, 0);
  BOOST_TEST(resumed["trace_hash"].get<std::string>() == full["trace_hash"].get<std::string>());
  BOOST_TEST(resumed["params_hash"].get<std::string>() == full["params_hash"].get<std::string>());
  BOOST_TEST(resumed["events"].get<std::uint64_t>() == full["events"].get<std::uint64_t>());
  BOOST_TEST(resumed["updates"] == full["updates"]);
  // Same evaluations, bit for bit (the resumed run's CSV holds the ones before the kill too).
  const auto ea = hgrun::read_csv(a / "evaluations.csv"), eb = hgrun::read_csv(b / "evaluations.csv");
  BOOST_TEST(ea.size() == 22u);  // header, t = 0, 10, ..., 200
  BOOST_TEST((ea == eb));
  // A checkpoint of another configuration is refused.
  json other = cfg;
  other["seed"] = 2;
  const auto c = scratch("other");
  BOOST_CHECK_THROW(run_test_policy(cfg, c, false, 4), hgrun::halted);
  BOOST_CHECK_THROW(run_test_policy(other, c, true, 0), std::runtime_error);
}

// ---------------------------------------------------------------------------------------------
// Numbers of the named experiments at test size.

namespace {
json run_named(const std::string& name, const std::string& label, const std::string& dir_name) {
  json raw = hgrun::load_experiment(name);
  raw.merge_patch(raw["tiny"]);
  const json cfg = hgrun::resolve(raw);
  for (std::size_t i = 0; i < cfg["methods"].size(); ++i)
    if (cfg["methods"][i]["label"] == label) {
      hgrun::run_request req{cfg, i, cfg["seed"].get<std::uint64_t>(), scratch(dir_name), false, 0, {}};
      return hgrun::run_method(req);
    }
  BOOST_FAIL("no method " << label << " in " << name);
  return {};
}
}  // namespace

BOOST_AUTO_TEST_CASE(e1_vanilla_asgd_meets_the_frequency_weighted_point_and_rescaled_asgd_the_optimum) {
  // E1: sum(c_i / tau_i) / sum(1 / tau_i) with c = (0, 1, 2, 3), tau = (1, 2, 4, 8).
  const double weighted = (0.0 / 1 + 1.0 / 2 + 2.0 / 4 + 3.0 / 8) / (1.0 + 1.0 / 2 + 1.0 / 4 + 1.0 / 8);
  BOOST_TEST(std::fabs(weighted - 0.7333) < 1e-4);
  const double x_vanilla = run_named("e1_rescaled", "vanilla ASGD", "e1a")["final"]["x"];
  const double x_rescaled = run_named("e1_rescaled", "Rescaled ASGD", "e1b")["final"]["x"];
  const double x_ia2 = run_named("e1_rescaled", "IA2SGD", "e1c")["final"]["x"];
  BOOST_TEST(std::fabs(x_vanilla - weighted) < 1e-3);
  BOOST_TEST(std::fabs(x_rescaled - 1.5) < 1e-3);
  BOOST_TEST(std::fabs(x_ia2 - 1.5) < 1e-3);
}

BOOST_AUTO_TEST_CASE(e2_ringmaster_with_an_infinite_threshold_is_vanilla_asgd_bit_for_bit) {
  const json a = run_named("e2_ringmaster", "vanilla ASGD", "e2a");
  const json r = run_named("e2_ringmaster", "Ringmaster R=inf", "e2b");
  BOOST_TEST(a["params_hash"].get<std::string>() == r["params_hash"].get<std::string>());
  BOOST_TEST(a["trace_hash"].get<std::string>() == r["trace_hash"].get<std::string>());
  BOOST_TEST(r["updates"]["interrupted"].get<std::uint64_t>() == 0u);
}

BOOST_AUTO_TEST_CASE(biased_local_sgds_samples_per_redraw_beyond_the_training_set_are_refused_naming_local_steps) {
  // shuffle_rounds x H_i x batch per worker, the slow workers' disjoint: 2 x 6 x 256 x 3 slow
  // workers = 9216 of 2000 samples (was a library error once the run started).
  const std::string base = R"({"data": {"train_samples": 2000, "batch": 256}, "methods": [{"label": "b",
      "algorithm": "biased_local_sgd", "slow_workers": [1, 2, 3], "local_steps": [4, 6, 6, 6], "shuffle_rounds": 2}]})";
  const std::string e = error_of([&] { resolved_with(base); });
  BOOST_TEST((e.find("methods[0].local_steps") != std::string::npos && e.find("9216") != std::string::npos), e);
  json fits = json::parse(base);
  fits["data"]["batch"] = 32;  // 2 x 6 x 32 x 3 = 1152
  BOOST_TEST(error_of([&] { resolved_with(fits.dump()); }).empty());
  // shuffle_rounds 0, the authors' one pass (biased_config::rounds_per_redraw): 2000 / (256 x
  // 22) rounds down to 0, at least 1: 1 x 6 x 256 x 3 = 4608 refused; at batch 16, 2000 / 352
  // = 5 rounds: 5 x 6 x 16 x 3 = 1440 fits.
  json pass = json::parse(base);
  pass["methods"][0]["shuffle_rounds"] = 0;
  const std::string e0 = error_of([&] { resolved_with(pass.dump()); });
  BOOST_TEST((e0.find("methods[0].local_steps") != std::string::npos && e0.find("4608") != std::string::npos), e0);
  pass["data"]["batch"] = 16;
  BOOST_TEST(error_of([&] { resolved_with(pass.dump()); }).empty());
}

BOOST_AUTO_TEST_CASE(a_trace_of_each_workers_constant_job_time_replays_the_fixed_model_bit_for_bit) {
  // workers.time.base "trace" (a real run's real_jobs.csv, inline): rows of constant
  // durations per worker give every job the fixed model's time, so the runs are the same bit
  // for bit; a trace that leaves a worker out or names an unknown one is refused with the key.
  json fixed = json::parse(R"({
    "name": "trace", "data": {"dataset": "worst_case_quadratic", "dim": 50, "noise": 0.1},
    "workers": {"count": 4, "time": {"base": "fixed", "tau": [1, 2.5, 3, 7]}},
    "horizon": {"time": 80}, "eval_interval": 10, "optimizer": {"lr": 0.1},
    "methods": [{"label": "ASGD", "algorithm": "asgd"}, {"label": "BSP", "algorithm": "bsp"}]})");
  json traced = fixed;
  json& t = traced["workers"]["time"];
  t["base"] = "trace";
  t["trace"] = json::array();
  for (std::size_t w = 0; w < 4; ++w)
    for (double start : {0.0, 30.0, 55.5})  // several measured jobs, all of the worker's time
      t["trace"].push_back({{"worker", w}, {"start", start}, {"duration", fixed["workers"]["time"]["tau"][w]}});
  const json a = hgrun::resolve(fixed), b = hgrun::resolve(traced);
  for (std::size_t i = 0; i < 2; ++i) {
    const json x = hgrun::run_method({a, i, 1, scratch("trace-fixed-" + std::to_string(i)), false, 0, {}});
    const json y = hgrun::run_method({b, i, 1, scratch("trace-trace-" + std::to_string(i)), false, 0, {}});
    BOOST_TEST(x["params_hash"] == y["params_hash"], i);
    BOOST_TEST(x["trace_hash"] == y["trace_hash"], i);
    BOOST_TEST(x["events"].get<std::uint64_t>() > 10u, i);
  }
  json missing = traced;
  missing["workers"]["time"]["trace"].erase(missing["workers"]["time"]["trace"].size() - 1);
  for (int k = 0; k < 2; ++k) missing["workers"]["time"]["trace"].erase(missing["workers"]["time"]["trace"].size() - 1);
  std::string e = error_of([&] { hgrun::resolve(missing); });
  BOOST_TEST((e.find("workers.time.trace") != std::string::npos && e.find("3") != std::string::npos), e);
  json unknown = traced;
  unknown["workers"]["time"]["trace"][5]["worker"] = 9;
  e = error_of([&] { hgrun::resolve(unknown); });
  BOOST_TEST((e.find("workers.time.trace") != std::string::npos && e.find("9") != std::string::npos), e);
  json zero = traced;
  zero["workers"]["time"]["trace"][2]["duration"] = 0;
  e = error_of([&] { hgrun::resolve(zero); });
  BOOST_TEST(e.find("workers.time.trace[2].duration") != std::string::npos, e);
}

// Asynchronous methods pay communication: a server method's job pulls the model and pushes
// its gradient (network "ps": 2 (alpha + 4 d / beta) per job, one worker on the link), and an
// eager-SGD step pays its allreduce (network "ring": 2(n-1) alpha + 2(n-1)/n 4d/beta). Each is
// the run without a network whose workers take that much longer per job, bit for bit (the
// numbers are exact in binary: alpha 0.25 s, beta 400 B/s, d = 50).
BOOST_AUTO_TEST_CASE(asynchronous_methods_pay_the_networks_exchange_per_job_as_longer_jobs_bit_for_bit) {
  json paid = json::parse(R"({
    "name": "exchange", "data": {"dataset": "worst_case_quadratic", "dim": 50, "noise": 0.1},
    "workers": {"count": 4, "time": {"base": "fixed", "tau": [1, 2.5, 3, 7]}},
    "network": {"kind": "ps", "latency": 0.25, "bandwidth": 400},
    "horizon": {"time": 80}, "eval_interval": 10, "optimizer": {"lr": 0.05},
    "methods": [{"label": "ASGD", "algorithm": "asgd"},
                {"label": "Ringmaster", "algorithm": "ringmaster", "threshold": 2},
                {"label": "Rennala", "algorithm": "rennala", "gradients": 3},
                {"label": "Rescaled", "algorithm": "rescaled", "known_tau": true}]})");
  json longer = paid;
  longer["network"] = {{"kind", "none"}};
  longer["workers"]["time"]["tau"] = json::array({2.5, 4, 4.5, 8.5});  // + 2 (0.25 + 200 / 400)
  json eager = paid, eager_longer = paid;
  eager["network"]["kind"] = "ring";
  eager["methods"] = json::parse(R"([{"label": "eager", "algorithm": "eager"}])");
  eager_longer = eager;
  eager_longer["network"] = {{"kind", "none"}};
  eager_longer["workers"]["time"]["tau"] = json::array({3.25, 4.75, 5.25, 9.25});  // + 6 * 0.25 + 1.5 * 0.5
  const json a = hgrun::resolve(paid), b = hgrun::resolve(longer), c = hgrun::resolve(eager),
             d = hgrun::resolve(eager_longer);
  // (Rescaled ASGD's known tau_i is a worker's time between arrivals: its job and exchange.)
  for (std::size_t i = 0; i < 4; ++i) {
    const json x = hgrun::run_method({a, i, 1, scratch("paid-" + std::to_string(i)), false, 0, {}});
    const json y = hgrun::run_method({b, i, 1, scratch("longer-" + std::to_string(i)), false, 0, {}});
    BOOST_TEST(x["params_hash"] == y["params_hash"], i);
    BOOST_TEST(x["trace_hash"] == y["trace_hash"], i);
    BOOST_TEST(x["extra"]["exchange_time"].get<double>() == 1.5, i);
    BOOST_TEST(y["extra"]["exchange_time"].get<double>() == 0.0, i);
  }
  const json x = hgrun::run_method({c, 0, 1, scratch("eager-paid"), false, 0, {}});
  const json y = hgrun::run_method({d, 0, 1, scratch("eager-longer"), false, 0, {}});
  BOOST_TEST(x["params_hash"] == y["params_hash"]);
  BOOST_TEST(x["trace_hash"] == y["trace_hash"]);
  // Without the network the runs differ (the check above could not pass by accident).
  json free = eager_longer;
  free["workers"]["time"]["tau"] = json::array({1, 2.5, 3, 7});
  const json z = hgrun::run_method({hgrun::resolve(free), 0, 1, scratch("eager-free"), false, 0, {}});
  BOOST_TEST(z["trace_hash"] != x["trace_hash"]);
}

namespace {
// Column `name` of evaluations.csv as numbers (the header row names the columns).
std::vector<double> column(const fs::path& csv, const std::string& name) {
  const auto rows = hgrun::read_csv(csv);
  std::size_t k = rows.at(0).size();
  for (std::size_t j = 0; j < rows[0].size(); ++j)
    if (rows[0][j] == name) k = j;
  BOOST_REQUIRE(k < rows[0].size());
  std::vector<double> v;
  for (std::size_t i = 1; i < rows.size(); ++i) v.push_back(std::stod(rows[i][k]));
  return v;
}
}  // namespace

BOOST_AUTO_TEST_CASE(float64_gives_the_double_recursion_bit_for_bit_where_float32_stops_at_its_rounding) {
  // One worker, f(x) = (x - c)^2 / 2, plain SGD with step 1/2: x_{k+1} = x_k - (x_k - c) / 2.
  const double c = 1.0 / 3.0;
  json raw = json::parse(R"({
    "name": "f64", "data": {"dataset": "scalar_quadratics", "precision": "float64"},
    "workers": {"count": 1, "time": {"base": "fixed", "tau": [1]}},
    "horizon": {"updates": 120}, "eval_interval": 10, "optimizer": {"kind": "sgd", "lr": 0.5},
    "methods": [{"label": "ASGD", "algorithm": "asgd"}]})");
  raw["data"]["centers"] = json::array({c});
  json single = raw;
  single["data"]["precision"] = "float32";
  const auto a = scratch("f64-recursion"), b = scratch("f32-recursion");
  hgrun::run_method({hgrun::resolve(raw), 0, 1, a, false, 0, {}});
  hgrun::run_method({hgrun::resolve(single), 0, 1, b, false, 0, {}});
  const auto x = column(a / "evaluations.csv", "x"), updates = column(a / "evaluations.csv", "updates");
  BOOST_REQUIRE(x.size() == 13u);  // t = 0, 10, ..., 120
  for (std::size_t i = 0; i < x.size(); ++i) {
    double want = 0.0;
    for (int k = 0; k < static_cast<int>(updates[i]); ++k) want = want - 0.5 * (want - c);
    BOOST_TEST(x[i] == want, "evaluation " << i);  // the CSV prints 17 significant digits
  }
  BOOST_TEST(std::fabs(x.back() - c) < 1e-15);
  // float32's iterate stalls where its rounding does (c as a float is ~1e-8 off).
  const auto xs = column(b / "evaluations.csv", "x");
  BOOST_TEST(std::fabs(xs.back() - c) > 1e-9);
  BOOST_TEST(std::fabs(xs.back() - c) < 1e-7);
}

BOOST_AUTO_TEST_CASE(float64_runs_every_server_method_on_the_float32_schedule_and_resumes_bit_for_bit) {
  json raw = json::parse(R"({
    "name": "f64", "data": {"dataset": "worst_case_quadratic", "dim": 50, "noise": 0.1,
                            "noise_model": "shared", "start": "sqrt_d_e1", "precision": "float64"},
    "workers": {"count": 4, "time": {"base": "fixed", "tau": [1, 2.5, 3, 7]}},
    "horizon": {"time": 60}, "eval_interval": 10, "optimizer": {"lr": 0.05}, "checkpoint_every": 2,
    "methods": [{"label": "ASGD", "algorithm": "asgd"}, {"label": "DA", "algorithm": "delay_adaptive"},
                {"label": "RM", "algorithm": "ringmaster", "threshold": 2},
                {"label": "RS", "algorithm": "rescaled", "known_tau": true},
                {"label": "RN", "algorithm": "rennala", "gradients": 3},
                {"label": "IA", "algorithm": "ia2sgd"}, {"label": "ML", "algorithm": "malenia"},
                {"label": "RL", "algorithm": "ringleader"}, {"label": "SSP", "algorithm": "ssp"},
                {"label": "OA", "algorithm": "omnilearn_asgd"}, {"label": "DSSP", "algorithm": "dssp"}]})");
  json single = raw;
  single["data"]["precision"] = "float32";
  const json cd = hgrun::resolve(raw), cs = hgrun::resolve(single);
  std::set<std::string> server_algorithms;
  for (const auto& r : hgrun::algorithm_rows())
    if (r.kind == hgrun::family::server) server_algorithms.insert(r.name);
  std::set<std::string> tested;
  for (std::size_t i = 0; i < cd["methods"].size(); ++i) {
    const std::string label = cd["methods"][i]["label"];
    tested.insert(cd["methods"][i]["algorithm"].get<std::string>());
    const json d = hgrun::run_method({cd, i, 1, scratch("f64-" + label), false, 0, {}});
    const json f = hgrun::run_method({cs, i, 1, scratch("f32-" + label), false, 0, {}});
    // The schedule does not depend on the values: the same events, outcomes and draws.
    BOOST_TEST(d["trace_hash"] == f["trace_hash"], label);
    BOOST_TEST(d["updates"] == f["updates"], label);
    BOOST_TEST(d["params_hash"] != f["params_hash"], label);
    const double ld = d["final"]["loss"], lf = f["final"]["loss"];
    BOOST_TEST(std::isfinite(ld), label);
    BOOST_TEST(std::fabs(ld - lf) <= 1e-3 * std::fabs(ld) + 1e-6, label << ": " << ld << " vs " << lf);
    // Killed after evaluation 3 (checkpoint at 2) and resumed: the uninterrupted run.
    const auto k = scratch("f64-kill-" + label);
    BOOST_CHECK_THROW(hgrun::run_method({cd, i, 1, k, false, 3, {}}), hgrun::halted);
    const json r = hgrun::run_method({cd, i, 1, k, true, 0, {}});
    BOOST_TEST(r["params_hash"] == d["params_hash"], label);
    BOOST_TEST(r["trace_hash"] == d["trace_hash"], label);
    // A float32 run does not resume from the float64 checkpoint.
    const auto k32 = scratch("f32-kill-" + label);
    BOOST_CHECK_THROW(hgrun::run_method({cd, i, 1, k32, false, 3, {}}), hgrun::halted);
    BOOST_CHECK_THROW(hgrun::run_method({cs, i, 1, k32, true, 0, {}}), std::runtime_error);
  }
  BOOST_TEST((tested == server_algorithms));
  // The exchange with the server carries 8-byte values: 2 (0.25 + 8 * 50 / 400), against
  // 2 (0.25 + 4 * 50 / 400) in float32.
  for (json* c : {&raw, &single}) {
    (*c)["network"] = json::parse(R"({"kind": "ps", "latency": 0.25, "bandwidth": 400})");
    (*c)["checkpoint_every"] = 0;
  }
  const json d = hgrun::run_method({hgrun::resolve(raw), 0, 1, scratch("f64-exchange"), false, 0, {}});
  const json f = hgrun::run_method({hgrun::resolve(single), 0, 1, scratch("f32-exchange"), false, 0, {}});
  BOOST_TEST(d["extra"]["exchange_time"].get<double>() == 2.5);
  BOOST_TEST(f["extra"]["exchange_time"].get<double>() == 1.5);
}

BOOST_AUTO_TEST_CASE(float64_is_refused_naming_data_precision_where_it_is_not_offered) {
  const std::string quad = R"("data": {"dataset": "scalar_quadratics", "centers": [0, 1, 2, 3], "precision": "float64"})";
  auto refused = [](const std::string& patch, const std::string& why) {
    const std::string e = error_of([&] { resolved_with(patch); });
    BOOST_TEST(e.find("'data.precision'") != std::string::npos, patch << ": " << e);
    BOOST_TEST(e.find(why) != std::string::npos, patch << ": " << e);
  };
  refused(R"({"data": {"precision": "float64"}})", "fashion_mnist");
  refused("{" + quad + R"(, "methods": [{"label": "a", "algorithm": "asgd"}], "runtime": "threads"})", "runtime \"threads\"");
  refused("{" + quad + R"(, "methods": [{"label": "a", "algorithm": "asgd"}, {"label": "b", "algorithm": "bsp"}]})",
          "methods[1].algorithm \"bsp\"");
  refused(R"({"data": {"precision": "double"}})", "expected one of \"float32\", \"float64\"");
  BOOST_TEST(error_of([&] { resolved_with("{" + quad + R"(, "model": null, "methods": [{"label": "a", "algorithm": "rennala"}]})"); })
                 .empty());
}

BOOST_AUTO_TEST_CASE(the_demos_checkpointable_methods_resume_to_the_uninterrupted_trace_and_parameters) {
  json raw = hgrun::load_experiment("demo");
  raw.merge_patch(raw["tiny"]);
  raw["checkpoint_every"] = 1;
  json kept = json::array();
  for (const auto& m : raw["methods"])
    if (hgrun::algorithm_checkpointable(m["algorithm"])) kept.push_back(m);
  raw["methods"] = kept;
  const json cfg = hgrun::resolve(raw);
  hgrun::preflight(cfg);  // checkpoint_every > 0 is accepted for all of them
  std::vector<std::string> labels;
  for (const auto& m : cfg["methods"]) labels.push_back(m["label"]);
  const std::vector<std::string> want{"synchronous SGD", "vanilla ASGD", "Ringmaster", "Rescaled ASGD",
                                      "local SGD (H_i)", "OmniLearn", "eager-SGD (majority)"};
  BOOST_TEST(labels == want, boost::test_tools::per_element());
  for (std::size_t i = 0; i < cfg["methods"].size(); ++i) {
    const auto a = scratch("demo-full-" + std::to_string(i)), b = scratch("demo-kill-" + std::to_string(i));
    const json full = hgrun::run_method({cfg, i, 1, a, false, 0, {}});
    BOOST_CHECK_THROW(hgrun::run_method({cfg, i, 1, b, false, 2, {}}), hgrun::halted);
    const json resumed = hgrun::run_method({cfg, i, 1, b, true, 0, {}});
    BOOST_TEST(resumed["trace_hash"].get<std::string>() == full["trace_hash"].get<std::string>(), labels[i]);
    BOOST_TEST(resumed["params_hash"].get<std::string>() == full["params_hash"].get<std::string>(), labels[i]);
    BOOST_TEST(resumed["final"] == full["final"], labels[i]);
  }
  // Every method of the demo is checkpointable (tests/driver/checkpoint_test.cpp: all algorithms).
}

// ---------------------------------------------------------------------------------------------
// Optimizers: all seven of optim/ through one type-erased optimizer (tools/driver/optimizer.hpp),
// their keys, defaults and rules from kernels/hyperparameters.hpp's descriptions.

BOOST_AUTO_TEST_SUITE(optimizers)

BOOST_AUTO_TEST_CASE(each_optimizer_resolves_to_its_own_keys_and_defaults_and_a_method_inherits_only_the_keys_its_kind_has) {
  const json c = resolved_with(R"({"optimizer": {"kind": "momentum", "lr": 0.2, "momentum": 0.5},
    "methods": [{"label": "m", "algorithm": "local_learning"},
                {"label": "a", "algorithm": "local_learning", "optimizer": {"kind": "adam"}},
                {"label": "w", "algorithm": "local_learning", "optimizer": {"kind": "adamw", "lr": 0.001}}]})");
  const json want_top = json::parse(R"({"kind": "momentum", "lr": 0.2, "momentum": 0.5, "dampening": 0.0,
                                        "weight_decay": 0.0})");
  BOOST_TEST(c["optimizer"] == want_top, c["optimizer"].dump());
  BOOST_TEST(c["methods"][0]["optimizer"] == want_top, c["methods"][0]["optimizer"].dump());
  // adam keeps the experiment's lr (adam has one) and leaves momentum behind.
  const json want_adam = json::parse(R"({"kind": "adam", "lr": 0.2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                                         "weight_decay": 0.0, "bias_correction": true})");
  BOOST_TEST(c["methods"][1]["optimizer"] == want_adam, c["methods"][1]["optimizer"].dump());
  // AdamW's default weight decay is its own (0.01), not Adam's.
  BOOST_TEST(c["methods"][2]["optimizer"]["weight_decay"].get<double>() == 0.01);
  BOOST_TEST(c["methods"][2]["optimizer"]["lr"].get<double>() == 0.001);
  // Every kind resolves, with lr among its keys.
  for (const char* k : {"sgd", "momentum", "nesterov", "adam", "adamw", "adagrad", "lamb"}) {
    const json r = resolved_with(std::string(R"({"optimizer": {"kind": ")") + k + R"("}})");
    BOOST_TEST(r["optimizer"]["kind"].get<std::string>() == k);
    BOOST_TEST(r["optimizer"].contains("lr"), k);
  }
}

BOOST_AUTO_TEST_CASE(an_unknown_optimizer_or_key_or_an_out_of_range_hyper_parameter_names_the_key_the_value_and_the_rule) {
  struct bad {
    std::string patch, path, expected;
  };
  const std::vector<bad> cases{
      {R"({"optimizer": {"kind": "rmsprop"}})", "'optimizer.kind'",
       "expected one of \"sgd\", \"momentum\", \"nesterov\", \"adam\", \"adamw\", \"adagrad\", \"lamb\", got \"rmsprop\""},
      {R"({"optimizer": {"kind": "adam", "beta1": 1}})", "'optimizer.beta1'", "expected a number in [0, 1), got 1"},
      {R"({"optimizer": {"kind": "adam", "eps": 0}})", "'optimizer.eps'", "expected a number > 0, got 0"},
      {R"({"optimizer": {"kind": "lamb", "weight_decay": -0.5}})", "'optimizer.weight_decay'",
       "expected a number >= 0, got -0.5"},
      {R"({"optimizer": {"kind": "momentum", "dampening": 2}})", "'optimizer.dampening'",
       "expected a number in [0, 1], got 2"},
      {R"({"optimizer": {"kind": "adagrad", "lr_decay": "slow"}})", "'optimizer.lr_decay'",
       "expected a number >= 0, got \"slow\""},
      {R"({"optimizer": {"kind": "adam", "bias_correction": 1}})", "'optimizer.bias_correction'",
       "expected true or false, got 1"},
      {R"({"optimizer": {"kind": "sgd", "beta1": 0.5}})", "'optimizer.beta1'",
       "unknown key for optimizer kind \"sgd\"; expected one of: kind, lr, weight_decay"},
      {R"({"optimizer": {"rho": 0.5}})", "'optimizer.rho'", "unknown key; expected one of: kind, lr,"},
      {R"({"methods": [{"label": "a", "algorithm": "local_learning", "optimizer": {"kind": "adagrad", "momentum": 0.5}}]})",
       "'methods[0].optimizer.momentum'", "unknown key for optimizer kind \"adagrad\""},
      {R"({"methods": [{"label": "a", "algorithm": "local_learning", "optimizer": {"kind": "nesterov", "momentum": 1}}]})",
       "'methods[0].optimizer.momentum'", "expected a number in [0, 1), got 1"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of([&] { (void)resolved_with(c.patch); });
    BOOST_TEST(e.find(c.path) != std::string::npos, c.patch << " -> " << e);
    BOOST_TEST(e.find(c.expected) != std::string::npos, c.patch << " -> " << e);
  }
}

BOOST_AUTO_TEST_CASE(every_optimizer_runs_bsp_and_asgd_through_the_driver_to_their_fixed_points,
                     *boost::unit_test::timeout(120)) {
  // f_i(x) = (x - c_i)^2 / 2 with c = 0, 1, 2, 3 and job times tau = 1, 2, 4, 8; the run starts
  // at 0. BSP descends the mean, whose minimum is 1.5; ASGD applies worker i's gradients at
  // the rate 1 / tau_i and settles at the frequency-weighted point sum_i (c_i / tau_i) /
  // sum_i (1 / tau_i) = 11/15 (E1's). Each optimizer ends within 0.2 of its method's point
  // after 300 updates at lr 0.05 (Adagrad 0.2: its steps shrink like lr / sqrt(steps));
  // momentum 0.5, because ASGD's gradients are up to ~15 updates stale.
  for (const char* kind : {"sgd", "momentum", "nesterov", "adam", "adamw", "adagrad", "lamb"})
    for (const auto& [algorithm, fixed_point] : {std::pair<const char*, double>{"bsp", 1.5}, {"asgd", 11.0 / 15.0}}) {
      json raw = json::parse(R"({
        "name": "opt", "data": {"dataset": "scalar_quadratics", "centers": [0, 1, 2, 3]},
        "workers": {"count": 4, "time": {"base": "fixed", "tau": [1, 2, 4, 8]}},
        "horizon": {"updates": 300}, "eval_interval": 1000, "target": {"metric": "loss", "value": 0.7, "below": true}})");
      raw["optimizer"] = json{{"kind", kind}, {"lr", std::string(kind) == "adagrad" ? 0.2 : 0.05}};
      if (std::string(kind) == "momentum" || std::string(kind) == "nesterov") raw["optimizer"]["momentum"] = 0.5;
      raw["methods"] = json::array({json{{"label", "m"}, {"algorithm", algorithm}}});
      const json cfg = hgrun::resolve(raw);
      hgrun::run_request req;
      req.config = cfg;
      req.dir = scratch(std::string("opt-") + kind + "-" + algorithm);
      const json s = hgrun::run_method(req);
      const double x = s["final"]["x"].get<double>();
      BOOST_TEST(std::fabs(x - fixed_point) < 0.2, kind << " " << algorithm << ": x = " << x);
    }
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------------
// --schema=json: the checker's schema as a JSON Schema (draft 2020-12).

BOOST_AUTO_TEST_SUITE(schema)

BOOST_AUTO_TEST_CASE(schema_json_is_a_draft_2020_12_json_schema_of_every_key_with_its_range_and_default,
                     *boost::unit_test::timeout(60)) {
  const auto [status, text] = run_exe("--schema=json");
  BOOST_TEST_REQUIRE(status == 0, text);
  const json s = json::parse(text);
  BOOST_TEST(s["$schema"].get<std::string>() == "https://json-schema.org/draft/2020-12/schema");
  BOOST_TEST(s["type"].get<std::string>() == "object");
  BOOST_TEST(s["additionalProperties"] == false);
  const json& p = s["properties"];
  const json& count = p["workers"]["properties"]["count"];
  BOOST_TEST(count["type"].get<std::string>() == "integer");
  BOOST_TEST(count["minimum"].get<double>() == 1.0);
  BOOST_TEST((p["workers"]["required"] == json::array({"count"})));
  BOOST_TEST(p["seed"]["default"].get<int>() == 1);
  BOOST_TEST((p["runtime"]["enum"] == json::array({"sim", "threads", "mpi"})));
  BOOST_TEST(p["eval_interval"]["exclusiveMinimum"].get<double>() == 0.0);
  // Methods: one branch per algorithm, with that algorithm's keys.
  const json& m = p["methods"]["items"];
  BOOST_TEST(m["unevaluatedProperties"] == false);
  BOOST_TEST(m["properties"]["algorithm"]["enum"].size() == hgrun::algorithm_names().size());
  bool ringmaster = false;
  for (const auto& b : m["allOf"])
    if (b["if"]["properties"]["algorithm"]["const"] == "ringmaster") {
      ringmaster = true;
      const json& r = b["then"]["properties"]["threshold"]["anyOf"];
      BOOST_TEST(r[0]["minimum"].get<double>() == 1.0);
      BOOST_TEST(r[1]["const"].get<std::string>() == "inf");
    }
  BOOST_TEST(ringmaster);
  // Optimizers: one branch per kind, with that kind's keys and defaults and no other key.
  const json& o = p["optimizer"];
  BOOST_TEST(o["allOf"].size() == 7u);
  for (const auto& b : o["allOf"])
    if (b["if"]["properties"]["kind"]["const"] == "adamw") {
      BOOST_TEST(b["then"]["properties"]["weight_decay"]["default"].get<double>() == 0.01);
      BOOST_TEST(b["then"]["properties"]["beta1"]["exclusiveMaximum"].get<double>() == 1.0);
      BOOST_TEST((b["then"]["propertyNames"]["enum"] ==
                  json::array({"kind", "lr", "beta1", "beta2", "eps", "weight_decay", "bias_correction"})));
    }
  // Plain --schema stays the Markdown table.
  const auto [md_status, md] = run_exe("--schema");
  BOOST_TEST(md_status == 0);
  BOOST_TEST(md.rfind("| key | expected | default | meaning |", 0) == 0u);
  BOOST_TEST(run_exe("--schema=yaml").first == 2);
}

// The round methods' and local learning's keys are their library configs' described fields
// (core/describe.hpp): an enumeration key's names and default are the library's table and
// member initialiser, and a resolved method reads back into the same config.
BOOST_AUTO_TEST_CASE(a_round_methods_enum_key_has_the_library_configs_names_and_default,
                     *boost::unit_test::timeout(60)) {
  namespace hs = heterograd::algorithms::sync;
  namespace dc = heterograd::algorithms::decoupled;
  auto key = [](const std::string& algorithm, const std::string& name) {
    for (const auto& r : hgrun::algorithm_rows())
      if (r.name == algorithm)
        for (const auto& [k, s] : r.keys)
          if (k == name) return s;
    BOOST_FAIL(algorithm + " has no key " + name);
    return hgrun::schema::spec{};
  };
  auto names = [](auto table) {
    std::vector<std::string> v;
    for (const auto& c : table) v.emplace_back(c.name);
    return v;
  };
  auto agg = [](hs::aggregation a) { return std::string(heterograd::name_of(hs::aggregations, a)); };
  const auto bsp = key("bsp", "aggregation");
  BOOST_TEST(bsp.def.get<std::string>() == agg(hs::bsp_config{}.mode));
  BOOST_TEST(bsp.choices == names(std::span(hs::aggregations)), boost::test_tools::per_element());
  BOOST_TEST(key("selsync", "aggregation").def.get<std::string>() == agg(hs::selsync_config{}.mode));
  BOOST_TEST(key("bsp", "weighting").choices == names(hs::step_averagings), boost::test_tools::per_element());
  BOOST_TEST(key("local_sgd", "weighting").choices == names(std::span(hs::averagings)),
             boost::test_tools::per_element());
  BOOST_TEST(key("local_sgd", "states").def.get<std::string>() ==
             std::string(heterograd::name_of(hs::state_policies, hs::local_sgd_config{}.states)));
  BOOST_TEST(key("eager", "mode").def.get<std::string>() ==
             std::string(heterograd::name_of(hs::partial_modes, hs::eager_config{}.mode)));
  BOOST_TEST(key("omnilearn", "max_batch").def.get<std::size_t>() ==
             heterograd::balance::omnilearn_config{}.max_batch);
  BOOST_TEST(key("biased_local_sgd", "ratio").def.get<std::size_t>() == hs::biased_config{}.ratio);
  BOOST_TEST(key("biased_local_sgd", "ratio").lo == 1.0);  // the library's > 0, as an integer
  BOOST_TEST(key("local_learning", "pgl_epoch_fraction").def.get<double>() ==
             dc::local_learning_config{}.pgl.epoch_fraction);
  BOOST_TEST(key("local_learning", "head_hidden").item->lo == 1.0);

  // --schema=json says the same.
  const auto [status, text] = run_exe("--schema=json");
  BOOST_TEST_REQUIRE(status == 0, text);
  const json schema = json::parse(text);
  bool found = false;
  for (const auto& b : schema["properties"]["methods"]["items"]["allOf"])
    if (b["if"]["properties"]["algorithm"]["const"] == "bsp") {
      found = true;
      const json& a = b["then"]["properties"]["aggregation"];
      BOOST_TEST(a["default"].get<std::string>() == agg(hs::bsp_config{}.mode));
      BOOST_TEST((a["enum"] == json(names(std::span(hs::aggregations)))));
    }
  BOOST_TEST(found);

  // A bad name: the key, the value and the allowed names.
  const std::string e = error_of([] {
    (void)resolved_with(R"({"methods": [{"label": "a", "algorithm": "bsp", "aggregation": "mean"}]})");
  });
  BOOST_TEST(e.find("'methods[0].aggregation'") != std::string::npos, e);
  BOOST_TEST(e.find("expected one of \"gradients\", \"parameters\", got \"mean\"") != std::string::npos, e);

  // A resolved method reads back into the library config: the defaults, and what it sets.
  const json c = resolved_with(R"({"methods": [
      {"label": "a", "algorithm": "bsp"},
      {"label": "b", "algorithm": "local_sgd", "states": "reset", "local_steps": [1, 2, 3, 4]},
      {"label": "c", "algorithm": "local_learning", "pgl_period": 3, "head_hidden": [5]}]})");
  const auto b = hgrun::from_json(c["methods"][0], hs::bsp_config{});
  BOOST_TEST((b.mode == hs::bsp_config{}.mode && b.weighting == hs::bsp_config{}.weighting));
  const auto l = hgrun::from_json(c["methods"][1], hs::local_sgd_config{});
  BOOST_TEST((l.states == hs::state_policy::reset));
  BOOST_TEST(l.local_steps == (std::vector<std::size_t>{1, 2, 3, 4}), boost::test_tools::per_element());
  const auto d = hgrun::from_json(c["methods"][2], dc::local_learning_config{});
  BOOST_TEST(d.pgl.period == 3u);
  BOOST_TEST(d.head_hidden == std::vector<std::size_t>{5}, boost::test_tools::per_element());
  // PGL's global momentum (#50): a name of the library's table, read back; a bad one refused.
  const json own = resolved_with(
      R"({"methods": [{"label": "p", "algorithm": "local_learning", "pgl_global_momentum": "own"}]})");
  BOOST_TEST((hgrun::from_json(own["methods"][0], dc::local_learning_config{}).pgl.global_momentum ==
              dc::pgl_momentum::own));
  const std::string pe = error_of([] {
    (void)resolved_with(
        R"({"methods": [{"label": "p", "algorithm": "local_learning", "pgl_global_momentum": "mine"}]})");
  });
  BOOST_TEST(pe.find("'methods[0].pgl_global_momentum'") != std::string::npos, pe);
  BOOST_TEST(pe.find("expected one of \"shared\", \"own\", got \"mine\"") != std::string::npos, pe);
}

BOOST_AUTO_TEST_SUITE_END()
