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

// A small simulated experiment on the scalar quadratics (no dataset files needed).
json quadratics() {
  return json::parse(R"({
    "name": "q", "data": {"dataset": "scalar_quadratics", "centers": [0, 1, 2, 3]},
    "workers": {"count": 4, "time": {"base": "fixed", "tau": [1, 2, 4, 8]}},
    "horizon": {"time": 100}, "eval_interval": 10, "target": {"metric": "loss", "value": 0.1, "below": true},
    "methods": [{"label": "ASGD", "algorithm": "asgd"}]})");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(refusals, *boost::unit_test::timeout(120))

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

BOOST_AUTO_TEST_SUITE_END()
