// heterograd-run's refusals of configurations and command lines it used to run as something
// else (issue 43, "accepted nonsense"). Each refusal names the key (or flag), the value and the
// rule, and comes before anything runs.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "config.hpp"
#include "run_exe.hpp"
#include "messages.hpp"
#include "sweep.hpp"

namespace fs = std::filesystem;
using hgrun::json;

namespace {

// The message of the config_error `f` throws (empty when it throws none).
template <class F>
std::string error_of(F&& f) {
  return hg_test::message_of<hgrun::config_error>(f);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A small simulated experiment on the scalar quadratics (no dataset files needed).
json quadratics() {
  return json::parse(R"({
    "name": "q", "data": {"dataset": "scalar_quadratics", "centers": [0, 1, 2, 3]},
    "workers": {"count": 4, "time": {"base": "fixed", "tau": [1, 2, 4, 8]}},
    "horizon": {"time": 100}, "eval_interval": 10, "target": {"metric": "loss", "value": 0.1, "below": true},
    "methods": [{"label": "ASGD", "algorithm": "asgd"}]})");
}

// The same cluster on Fashion-MNIST (resolve() reads no dataset file).
json fashion() {
  json j = quadratics();
  j["data"] = {{"dataset", "fashion_mnist"}};
  j["target"] = {{"metric", "accuracy"}};
  return j;
}

// The resolve() error of `base` with `patch` merged ("" when it resolves).
std::string refusal(json base, const std::string& patch) {
  base.merge_patch(json::parse(patch));
  return error_of([&] { (void)hgrun::resolve(base); });
}

fs::path scratch(const std::string& name) {
  const auto p = fs::temp_directory_path() / ("hg-refusals-test-" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

using hg_test::run_exe;  // heterograd-run's exit status and output (run_exe.hpp)

}  // namespace

BOOST_AUTO_TEST_SUITE(refusals, *boost::unit_test::timeout(120))

// The schema's "applies when" rule: a key given where the dataset or the model does not read
// it is refused by name; the same key where it applies is accepted.
BOOST_AUTO_TEST_CASE(a_key_the_dataset_or_the_model_does_not_read_is_refused_naming_it_and_where_it_applies) {
  json text = quadratics();
  text["data"] = {{"dataset", "text"}};
  text["model"] = {{"kind", "torch"}, {"preset", "transformer"}};
  text["target"] = {{"metric", "loss"}};
  json worst = quadratics();
  worst["data"] = {{"dataset", "worst_case_quadratic"}};
  const json torch = json::parse(R"({"model": {"kind": "torch", "preset": "lenet5"}})");
  struct bad {
    json base;
    std::string patch, path, rule;
  };
  const std::vector<bad> cases{
      // the issue's three
      {fashion(), R"({"data": {"noise_model": "shared"}})", "'data.noise_model'",
       R"(not used with data.dataset "fashion_mnist": the key applies when data.dataset is "worst_case_quadratic"; got "shared")"},
      {fashion(), R"({"data": {"start": "sqrt_d_e1"}})", "'data.start'",
       R"(the key applies when data.dataset is "worst_case_quadratic"; got "sqrt_d_e1")"},
      {fashion(), R"({"model": {"kind": "torch", "preset": "resnet8", "hidden": [64]}})", "'model.hidden'",
       R"(not used with model.kind "torch": the key applies when data.dataset is one of "fashion_mnist", "text" and model.kind is "mlp"; got [64])"},
      // the class: data keys of other datasets and partitions
      {fashion(), R"({"data": {"dim": 10}})", "'data.dim'", "applies when data.dataset is \"worst_case_quadratic\""},
      {fashion(), R"({"data": {"centers": [1, 2, 3, 4]}})", "'data.centers'", "applies when data.dataset is \"scalar_quadratics\""},
      {fashion(), R"({"data": {"noise": 0.1}})", "'data.noise'", "one of \"scalar_quadratics\", \"worst_case_quadratic\""},
      {fashion(), R"({"data": {"alpha": 0.5}})", "'data.alpha'", "not used with data.partition \"iid\""},
      {fashion(), R"({"data": {"partition": "dirichlet", "labels_per_worker": 3}})", "'data.labels_per_worker'",
       "not used with data.partition \"dirichlet\""},
      {quadratics(), R"({"data": {"train_samples": 100}})", "'data.train_samples'",
       "not used with data.dataset \"scalar_quadratics\""},
      {quadratics(), R"({"data": {"path": "/tmp"}})", "'data.path'", "one of \"fashion_mnist\", \"text\""},
      {quadratics(), R"({"data": {"smoothness": 2}})", "'data.smoothness'", "\"worst_case_quadratic\""},
      {worst, R"({"data": {"partition": "iid"}})", "'data.partition'", "not used with data.dataset \"worst_case_quadratic\""},
      // model keys of other datasets, kinds and presets
      {quadratics(), R"({"model": {"hidden": [8]}})", "'model.hidden'", "not used with data.dataset \"scalar_quadratics\""},
      {worst, R"({"model": {"kind": "mlp"}})", "'model.kind'", "not used with data.dataset \"worst_case_quadratic\""},
      {fashion(), R"({"model": {"kind": "softmax", "hidden": [8]}})", "'model.hidden'", "not used with model.kind \"softmax\""},
      {fashion(), R"({"model": {"threads": 2}})", "'model.threads'", "not used with model.kind \"mlp\""},
      {fashion(), R"({"model": {"preset": "resnet8"}})", "'model.preset'", "not used with model.kind \"mlp\""},
      {fashion(), R"({"model": {"input": [1, 28, 28]}})", "'model.input'", "not used with model.kind \"mlp\""},
      {fashion(), R"({"model": {"kind": "torch", "width": 64}})", "'model.width'",
       "not used with model.preset \"lenet5\": the key applies when data.dataset is one of \"fashion_mnist\", \"text\" and "
       "model.kind is \"torch\" and model.preset is \"transformer\""},
      {text, R"({"model": {"input": [1, 28, 28]}})", "'model.input'",
       "model.preset is one of \"lenet5\", \"resnet8\""},
      {text, R"({"model": {"label_smoothing": 0.1}})", "'model.label_smoothing'", "not used with data.dataset \"text\""},
  };
  for (const auto& c : cases) {
    const std::string e = refusal(c.base, c.patch);
    BOOST_TEST(has(e, "config error at " + c.path + ": "), c.patch << " -> " << e);
    BOOST_TEST(has(e, c.rule), c.patch << " -> " << e);
    BOOST_TEST(has(e, "(remove it)"), c.patch << " -> " << e);
  }
  // Where they apply, the same keys are accepted; left out, a key's default is not refused.
  BOOST_TEST(refusal(worst, R"({"data": {"noise": 0.1, "noise_model": "shared", "start": "sqrt_d_e1", "dim": 9}})") == "");
  BOOST_TEST(refusal(fashion(), R"({"data": {"partition": "dirichlet", "alpha": 0.5}, "model": {"hidden": [8]}})") == "");
  BOOST_TEST(refusal(fashion(), R"({"model": {"kind": "torch", "preset": "resnet8", "input": [1, 28, 28], "threads": 1}})") == "");
  BOOST_TEST(refusal(fashion(), torch.dump()) == "");
  BOOST_TEST(refusal(text, R"({"model": {"context": 32, "width": 32, "heads": 2}})") == "");
  BOOST_TEST(refusal(quadratics(), R"({"model": {}})") == "");  // an empty object sets nothing
  // The rule is in --schema and --schema=json, made from the same conditions.
  BOOST_TEST(has(hgrun::schema_markdown(),
                 "| `data.noise_model` | one of \"per_coordinate\", \"shared\", \"multiplicative\" | \"per_coordinate\" |"));
  BOOST_TEST(has(hgrun::schema_markdown(), "(applies when data.dataset is \"worst_case_quadratic\") |"));
  const json s = hgrun::schema_json();
  BOOST_TEST(has(s["properties"]["model"]["properties"]["hidden"]["description"].get<std::string>(),
                 "(applies when model.kind is \"mlp\")"));
}

BOOST_AUTO_TEST_CASE(fashion_mnist_sample_counts_above_its_sets_are_refused_naming_the_sets_size) {
  BOOST_TEST(refusal(fashion(), R"({"data": {"train_samples": 1e12}})") ==
             "config error at 'data.train_samples': expected at most 60000 (Fashion-MNIST's training set; 0: all of "
             "it), got 1000000000000");
  BOOST_TEST(refusal(fashion(), R"({"data": {"test_samples": 10001}})") ==
             "config error at 'data.test_samples': expected at most 10000 (Fashion-MNIST's test set; 0: all of it), "
             "got 10001");
  BOOST_TEST(refusal(fashion(), R"({"data": {"train_samples": 60000, "test_samples": 10000}})") == "");
  BOOST_TEST(refusal(fashion(), R"({"data": {"train_samples": 0, "test_samples": 0}})") == "");
}

// A job an outage stops is paced until the outage's end: (end - begin) x real_scale wall seconds,
// which the pacer bounds by 1e6 (runtime/pacing.hpp); --check refuses it now, naming the end.
BOOST_AUTO_TEST_CASE(an_outage_the_real_clock_cannot_pace_is_refused_by_check_naming_its_end_and_real_scale) {
  json real = quadratics();
  real.merge_patch(json::parse(R"({"runtime": "threads", "clock": "real", "real_scale": 0.5,
      "workers": {"time": {"outages": [{"worker": 1, "begin": 2, "end": 5}, {"worker": 2, "begin": 0, "end": 1e300}]}}})"));
  const std::string want =
      "config error at 'workers.time.outages[1].end': expected (end - begin) x real_scale of at most 1000000 wall "
      "seconds with clock \"real\" (a job the outage stops is paced until its end, and a paced job lasts at most "
      "that), got (1e+300 - 0) x 0.5 = 5e+299; lower the end or real_scale";
  BOOST_TEST(error_of([&] { (void)hgrun::resolve(real); }) == want);
  // At the bound, accepted; on the simulator's clock, or without real_scale, nothing is paced.
  BOOST_TEST(refusal(real, R"({"workers": {"time": {"outages": [{"worker": 2, "begin": 1, "end": 2000001}]}}})") == "");
  BOOST_TEST(has(refusal(real, R"({"workers": {"time": {"outages": [{"worker": 2, "begin": 1, "end": 2000004}]}}})"),
                 "config error at 'workers.time.outages[0].end': expected (end - begin) x real_scale of at most "
                 "1000000 wall seconds with clock \"real\""));
  BOOST_TEST(refusal(real, R"({"clock": "virtual", "runtime": "sim"})") == "");
  json unpaced = real;
  unpaced.erase("real_scale");
  BOOST_TEST(error_of([&] { (void)hgrun::resolve(unpaced); }) == "");
  // Through the executable: --check exits 2 with that message.
  const auto dir = scratch("outage");
  std::ofstream(dir / "real.json") << real.dump();
  const auto [rc, out] = run_exe("'" + (dir / "real.json").string() + "' --check");
  BOOST_TEST(rc == 2);
  BOOST_TEST(has(out, want), out);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_seed_listed_twice_is_refused_naming_the_second_in_either_list) {
  BOOST_TEST(refusal(quadratics(), R"({"tuning": {"seeds": [9, 9]}})") ==
             "config error at 'tuning.seeds[1]': expected distinct items (each value once), got 9 again (as "
             "tuning.seeds[0])");
  BOOST_TEST(refusal(quadratics(), R"({"seeds": [3, 1, 3]})") ==
             "config error at 'seeds[2]': expected distinct items (each value once), got 3 again (as seeds[0])");
  BOOST_TEST(refusal(quadratics(), R"({"seeds": [3, 1], "tuning": {"seeds": [9, 8]}})") == "");
  // The JSON Schema says it too.
  const json s = hgrun::schema_json();
  BOOST_TEST(s["properties"]["tuning"]["properties"]["seeds"]["uniqueItems"] == true);
  BOOST_TEST(s["properties"]["seeds"]["uniqueItems"] == true);
}

// Key paths (--set, sweep keys): an empty part would name another key than the text says.
BOOST_AUTO_TEST_CASE(a_key_path_with_an_empty_key_or_text_after_an_index_is_refused_not_read_as_another_key) {
  const std::string rule =
      "expected a key path of non-empty keys joined by '.', each followed by any [N] (workers.count, "
      "methods[1].threshold), got ";
  const std::vector<std::pair<std::string, std::string>> cases{
      {"optimizer..lr=0.1", "config error at 'optimizer..lr': " + rule + "an empty key at offset 10"},
      {".seed=3", "config error at '.seed': " + rule + "an empty key at offset 0"},
      {"seed.=3", "config error at 'seed.': " + rule + "an empty key at offset 5"},
      {"[0].label=x", "config error at '[0].label': " + rule + "an empty key at offset 0"},
      {"methods.[0].label=x", "config error at 'methods.[0].label': " + rule + "an empty key at offset 8"},
      {"methods[0]label=x", "config error at 'methods[0]label': " + rule + "'l' after an index at offset 10"},
  };
  for (const auto& [assignment, want] : cases) {
    json j = quadratics();
    const json before = j;
    BOOST_TEST(error_of([&] { hgrun::apply_override(j, assignment); }) == want, assignment);
    BOOST_TEST(j == before, assignment);  // nothing set
  }
  json j = quadratics();
  hgrun::apply_override(j, "methods[0].label=x");
  hgrun::apply_override(j, "workers.time.tau[2]=5.5");
  BOOST_TEST(j["methods"][0]["label"] == "x");
  BOOST_TEST(j["workers"]["time"]["tau"][2] == json(5.5));
}

BOOST_AUTO_TEST_CASE(a_methods_name_that_matches_no_method_is_refused_listing_the_labels) {
  json raw = quadratics();
  raw["methods"] = json::parse(R"([{"label": "vanilla ASGD", "algorithm": "asgd"},
                                    {"label": "Ringmaster", "algorithm": "ringmaster"},
                                    {"label": "Rennala SGD", "algorithm": "rennala"}])");
  raw["baseline"] = "vanilla ASGD";
  json typo = raw;
  BOOST_TEST(error_of([&] { hgrun::select_methods(typo, "vanila ASGD,Ringmaster"); }) ==
             "config error at '--methods': expected comma-separated labels of the experiment's methods (or their "
             "folder names), got \"vanila ASGD\", which is none of \"vanilla ASGD\", \"Ringmaster\", \"Rennala SGD\"");
  BOOST_TEST(typo == raw);
  BOOST_TEST(has(error_of([&] { hgrun::select_methods(typo, "Ringmaster,"); }), "got \"\", which is none of"));
  // Labels or folder names, in the experiment's order; a baseline left out is dropped.
  json kept = raw;
  hgrun::select_methods(kept, "rennala-sgd,Ringmaster");
  BOOST_TEST(kept["methods"].size() == 2u);
  BOOST_TEST(kept["methods"][0]["label"] == "Ringmaster");
  BOOST_TEST(kept["methods"][1]["label"] == "Rennala SGD");
  BOOST_TEST(!kept.contains("baseline"));
  BOOST_TEST(hgrun::resolve(kept)["baseline"] == "Ringmaster");
  // Through the executable.
  const auto dir = scratch("methods");
  std::ofstream(dir / "q.json") << raw.dump();
  const auto [rc, out] = run_exe("'" + (dir / "q.json").string() + "' --check --methods 'vanila ASGD,Ringmaster'");
  BOOST_TEST(rc == 2);
  BOOST_TEST(has(out, "config error at '--methods': expected comma-separated labels of the experiment's methods (or "
                      "their folder names), got \"vanila ASGD\""),
             out);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()
