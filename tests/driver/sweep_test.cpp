// Sweeps, tuning and seeds (tools/driver/sweep.hpp): grids and their errors, the Student t
// quantile and the seeds' statistics against independent values, the tuning rule, and through
// the executable a sweep whose best setting theory gives (plain SGD on one quadratic: the step
// size 1/L lands on the minimum in one step), a diverging setting recorded as failed, a
// resumed sweep equal to an uninterrupted one, and the seeds' summary recomputed here.
#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "config.hpp"
#include "files.hpp"
#include "messages.hpp"
#include "sweep.hpp"

namespace fs = std::filesystem;
using hgrun::json;

namespace {

fs::path scratch(const std::string& name) {
  const auto p = fs::temp_directory_path() / ("hg-sweep-test-" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

struct outcome {
  int rc;
  std::string out;
};

// heterograd-run with `args` (shell words, quoted by the caller), its stdout and stderr.
outcome run(const std::string& args, const fs::path& log) {
  const std::string cmd = std::string(HG_RUN_EXE) + " " + args + " > '" + log.string() + "' 2>&1";
  const int st = std::system(cmd.c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128, hgrun::read_file(log)};
}

// Plain SGD on f(x) = (x - 2)^2 / 2 (L = 1) with one worker of time 1: x_k - 2 = (1 - lr)^k (x_0 - 2),
// so lr = 1 is at the minimum after one step, 0.5 needs 15 steps for grad^2 <= 1e-8, 0.1 does
// not get there in 20, and 1e30 overflows float32 in its second step.
json one_quadratic() {
  return json::parse(R"({
    "name": "sweep", "seed": 1,
    "data": {"dataset": "scalar_quadratics", "centers": [2]},
    "optimizer": {"kind": "sgd", "lr": 0.01},
    "workers": {"count": 1, "time": {"base": "fixed", "tau": [1]}},
    "horizon": {"time": 20}, "eval_interval": 5,
    "target": {"metric": "grad_norm_sq", "value": 1e-8, "below": true},
    "sweep": {"optimizer.lr": [0.1, 0.5, 1, 1e30]},
    "seeds": [1, 2],
    "methods": [{"label": "SGD", "algorithm": "asgd"}]})");
}

fs::path write(const fs::path& dir, const json& j) {
  const auto p = dir / "experiment.json";
  std::ofstream(p) << j.dump(2);
  return p;
}

json read_json(const fs::path& p) { return json::parse(hgrun::read_file(p)); }

// A path as one shell word (appended piecewise: GCC 12's -Wrestrict false positive on "'" + s).
std::string q(const fs::path& p) {
  std::string s(1, '\'');
  s += p.string();
  s += '\'';
  return s;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sweeps, *boost::unit_test::timeout(120))

BOOST_AUTO_TEST_CASE(a_grid_is_the_product_of_its_keys_values_the_first_key_slowest) {
  const json raw = json::parse(R"({"sweep": {"optimizer.lr": [1, 2], "batch": {"from": 8, "to": 64, "points": 4, "scale": "log"}},
    "methods": [{"label": "a", "algorithm": "asgd"},
                {"label": "b", "algorithm": "ringmaster", "sweep": {"threshold": [2, 4, 8], "optimizer.lr": [5]}}]})");
  const auto g = hgrun::sweep_grids(raw);
  BOOST_TEST_REQUIRE(g.size() == 2u);
  BOOST_TEST(g[0].size() == 8u);
  // (Keys in a JSON object's order: alphabetical.)
  BOOST_TEST(g[0].keys == (std::vector<std::string>{"batch", "optimizer.lr"}));
  BOOST_TEST(g[0].settings[0][0] == json(8));
  BOOST_TEST(g[0].settings[2][0] == json(16));  // 8 * 8^(1/3) = 16, an integer
  BOOST_TEST(g[0].settings[6][0] == json(64));
  BOOST_TEST(g[0].settings[1][1] == json(2));
  // A method's own keys replace the experiment's (lr: one value) and add to them.
  BOOST_TEST(g[1].size() == 12u);
  BOOST_TEST(g[1].settings[11][1] == json(5));
  BOOST_TEST(hgrun::setting_text(g[1], 11) == "batch=64, optimizer.lr=5, threshold=8");
  std::vector<hgrun::expanded_method> which;
  const json e = hgrun::expand_methods(raw, g, which);
  BOOST_TEST(e["methods"].size() == 20u);
  BOOST_TEST(which[19].method == 1u);
  BOOST_TEST(which[19].setting == 11u);
  BOOST_TEST(e["methods"][19]["threshold"] == json(8));
  BOOST_TEST(e["methods"][19]["optimizer"]["lr"] == json(5));
  BOOST_TEST(!e["methods"][19].contains("sweep"));
  BOOST_TEST(e["methods"][19]["label"] == "b [batch=64, optimizer.lr=5, threshold=8]");
}

BOOST_AUTO_TEST_CASE(a_bad_sweep_is_refused_naming_its_key) {
  auto error_at = [](const std::string& text) -> std::string {
    try {
      (void)hgrun::sweep_grids(json::parse(text));
    } catch (const hgrun::config_error& e) {
      return e.path();
    }
    return "(accepted)";
  };
  BOOST_TEST(error_at(R"({"sweep": {"optimizer.lr": []}, "methods": [{}]})") == "sweep.optimizer.lr");
  BOOST_TEST(error_at(R"({"sweep": {"label": ["x"]}, "methods": [{}]})") == "sweep.label");
  BOOST_TEST(error_at(R"({"sweep": [1], "methods": [{}]})") == "sweep");
  BOOST_TEST(error_at(R"({"methods": [{"sweep": {"lr": {"from": 0, "to": 1, "points": 3, "scale": "log"}}}]})") ==
             "methods[0].sweep.lr.from");
  BOOST_TEST(error_at(R"({"methods": [{"sweep": {"lr": {"from": 1, "to": 2, "points": 2.5}}}]})") ==
             "methods[0].sweep.lr.points");
  BOOST_TEST(error_at(R"({"methods": [{"sweep": {"lr": {"from": 1, "to": 2, "points": 2, "step": 1}}}]})") ==
             "methods[0].sweep.lr.step");
  BOOST_TEST(error_at(R"({"methods": [{"sweep": {"a[x]": [1]}}]})") == "methods[0].sweep.a[x]");
  // An empty key or text after an index would name another key ("optimizer..lr" is not
  // optimizer.lr): refused, naming the sweep key.
  for (const char* key : {"optimizer..lr", ".lr", "optimizer.", "local_steps[0]x", "[0].lr"})
    BOOST_TEST(error_at(json{{"sweep", {{key, {0.1, 1}}}}, {"methods", {json::object()}}}.dump()) ==
                   "sweep." + std::string(key),
               key);
  try {
    (void)hgrun::sweep_grids(json::parse(R"({"sweep": {"optimizer..lr": [0.1, 1]}, "methods": [{}]})"));
    BOOST_FAIL("optimizer..lr was accepted");
  } catch (const hgrun::config_error& e) {
    BOOST_TEST(std::string(e.what()) ==
               "config error at 'sweep.optimizer..lr': expected a key path of non-empty keys joined by '.', each "
               "followed by any [N] (workers.count, methods[1].threshold), got an empty key at offset 10");
  }
  // 101^2 = 10201 settings: over the bound.
  json big = json::parse(R"({"methods": [{}]})");
  for (const char* k : {"a", "b"}) {
    big["sweep"][k] = json::array();
    for (int i = 0; i < 101; ++i) big["sweep"][k].push_back(i);
  }
  BOOST_TEST(error_at(big.dump()) == "methods[0].sweep");
  // A value the key does not take: resolve()'s error, said of the sweep and the setting.
  json raw = one_quadratic();
  raw["sweep"]["optimizer.lr"] = json::array({0.1, -1});
  const auto g = hgrun::sweep_grids(raw);
  std::vector<hgrun::expanded_method> which;
  try {
    (void)hgrun::resolve_expanded(hgrun::expand_methods(raw, g, which), raw, g, which);
    BOOST_FAIL("a negative step size was accepted");
  } catch (const hgrun::config_error& e) {
    BOOST_TEST(e.path() == "sweep.optimizer.lr");
    BOOST_TEST(std::string(e.what()).find("optimizer.lr=-1") != std::string::npos, e.what());
  }
  raw.erase("sweep");
  raw["methods"][0]["sweep"] = {{"no_such_key", {1}}};
  const auto g2 = hgrun::sweep_grids(raw);
  try {
    (void)hgrun::resolve_expanded(hgrun::expand_methods(raw, g2, which), raw, g2, which);
    BOOST_FAIL("an unknown key was accepted");
  } catch (const hgrun::config_error& e) {
    BOOST_TEST(e.path() == "methods[0].sweep.no_such_key");
  }
}

// t_{0.975, df}: the table's df = 2 value to 1e-9, and beyond it (Cornish-Fisher) against
// quantiles computed independently (R's qt(0.975, df)).
BOOST_AUTO_TEST_CASE(the_t_quantile_and_the_seeds_statistics_match_independent_values) {
  BOOST_TEST(std::abs(hgrun::t975(2) - 4.302652729911275) < 1e-9);
  BOOST_TEST(std::abs(hgrun::t975(1) - 12.70620473617471) < 1e-8);
  BOOST_TEST(std::abs(hgrun::t975(31) - 2.039513446) < 2e-5);
  BOOST_TEST(std::abs(hgrun::t975(40) - 2.021075390) < 2e-5);
  BOOST_TEST(std::abs(hgrun::t975(100) - 1.983971519) < 2e-6);
  BOOST_TEST(std::abs(hgrun::t975(100000) - 1.959988) < 2e-6);
  // 1, 2, 3, 4: mean 2.5, sd sqrt(5/3), ci95 = t(3) sd / 2; a non-finite value is left out.
  const auto s = hgrun::stats_of({1, 2, std::nan(""), 3, 4});
  BOOST_TEST(s.n == 4u);
  BOOST_TEST(s.mean == 2.5);
  BOOST_TEST(std::abs(s.sd - std::sqrt(5.0 / 3.0)) < 1e-12);
  BOOST_TEST(std::abs(s.ci95 - 3.182446305 * std::sqrt(5.0 / 3.0) / 2) < 1e-8);
  BOOST_TEST(hgrun::stats_of({}).to_json()["mean"].is_null());
  BOOST_TEST(hgrun::stats_of({7}).to_json()["ci95"].is_null());
}

BOOST_AUTO_TEST_CASE(tuning_prefers_reaching_on_more_seeds_then_less_time_and_a_failure_ranks_last) {
  auto summary = [](json t, double final) { return json{{"time_to_target", t}, {"final", {{"loss", final}}}}; };
  using hgrun::score_of;
  const std::vector<hgrun::candidate_score> c{
      score_of({summary(10, 0.1), summary(nullptr, 0.2)}, "loss"),    // reached on 1 of 2
      score_of({summary(30, 0.1), summary(40, 0.3)}, "loss"),         // 2 of 2, mean 35
      score_of({summary(20, 0.5), summary(30, 0.5)}, "loss"),         // 2 of 2, mean 25: best by time
      score_of({json(nullptr), summary(1, 0.0)}, "loss")};            // one run failed
  BOOST_TEST(c[3].failed == 1u);
  BOOST_TEST(hgrun::best_candidate(c, "time_to_target", true) == 2u);
  // final: the least mean final loss among those with every seed finite (a failure ranks last,
  // though its one finite value is the smallest).
  BOOST_TEST(hgrun::best_candidate(c, "final", true) == 0u);
  BOOST_TEST(hgrun::best_candidate(c, "final", false) == 2u);
  // Nothing reached: the final metric decides; ties go to the earlier setting.
  const std::vector<hgrun::candidate_score> none{score_of({summary(nullptr, 0.4)}, "loss"),
                                                 score_of({summary(nullptr, 0.2)}, "loss"),
                                                 score_of({summary(nullptr, 0.2)}, "loss")};
  BOOST_TEST(hgrun::best_candidate(none, "time_to_target", true) == 1u);
}

// Tuning ranks by the sustained time (time_to_target), never by the first crossing: a setting
// whose noisy curve touched the target at 5 and held it from 50 loses to one holding it from 30.
BOOST_AUTO_TEST_CASE(tuning_ranks_by_the_sustained_time_and_shows_the_first_crossings) {
  auto summary = [](json t, json first) {
    return json{{"time_to_target", t}, {"first_crossing", first}, {"final", {{"loss", 0.1}}}};
  };
  using hgrun::score_of;
  const std::vector<hgrun::candidate_score> c{score_of({summary(50, 5), summary(60, 6)}, "loss"),
                                              score_of({summary(30, 30), summary(40, 35)}, "loss"),
                                              score_of({summary(nullptr, 1), summary(nullptr, 2)}, "loss")};
  BOOST_TEST(hgrun::best_candidate(c, "time_to_target", true) == 1u);
  BOOST_TEST(c[0].first.mean == 5.5);
  BOOST_TEST(c[0].time.mean == 55.0);
  BOOST_TEST(c[2].reached == 0u);
  BOOST_TEST(c[2].crossed == 2u);  // crossed on both seeds, held on neither
  BOOST_TEST(c[2].first.mean == 1.5);
  BOOST_TEST(hgrun::score_json(c[0], "time_to_target")["mean"] == json(55.0));
}

BOOST_AUTO_TEST_CASE(a_sweep_chooses_the_step_size_theory_gives_and_evaluates_it_on_fresh_seeds) {
  const auto dir = scratch("choose");
  json j = one_quadratic();
  // One evaluation interval: lr = 0.5 reaches the target at 15 and holds it to the horizon, 20
  // (a longer horizon would round its x to 2 in float32, tying with lr = 1 under "final").
  j["target"]["window"] = 5;
  const auto cfg = write(dir, j);
  const auto out = dir / "out";
  const auto r = run(q(cfg) + " --quiet --no-plots --out " + q(out), dir / "log");
  BOOST_TEST_REQUIRE(r.rc == 0, r.out);
  // Tuning on seed 3 (the largest evaluation seed + 1): lr = 1 reaches the target first.
  const json t = read_json(out / "tuning" / "summary.json");
  BOOST_TEST(t["seeds"] == json::array({3}));
  const json& m = t["methods"][0];
  BOOST_TEST(m["chosen"] == (json{{"optimizer.lr", 1}}));
  BOOST_TEST(m["candidates"].size() == 4u);
  BOOST_TEST(m["candidates"][2]["score"]["mean"] == json(5.0));   // the first evaluation, t = 5
  BOOST_TEST(m["candidates"][1]["score"]["mean"] == json(15.0));  // 15 steps
  BOOST_TEST(m["candidates"][0]["reached"] == json(0));
  BOOST_TEST(m["candidates"][3]["failed"] == json(1));            // lr = 1e30 overflowed
  BOOST_TEST(fs::exists(out / "tuning" / "sgd-optimizer-lr-1e-30" / "failed.txt"));
  // The evaluation runs: the chosen setting, seeds 1 and 2, said in config.json and the table.
  const json c = read_json(out / "config.json");
  BOOST_TEST(c["methods"][0]["optimizer"]["lr"] == json(1));
  BOOST_TEST(c["resolved"]["seeds"] == json::array({1, 2}));
  BOOST_TEST(c["resolved"]["tuning"]["methods"][0]["chosen"] == (json{{"optimizer.lr", 1}}));
  BOOST_TEST(fs::exists(out / "seed-1" / "sgd" / "summary.json"));
  BOOST_TEST(fs::exists(out / "seed-2" / "sgd" / "summary.json"));
  const std::string table = hgrun::read_file(out / "table.md");
  BOOST_TEST(table.find("| SGD | optimizer.lr=1 | 2 of 2 | 5 ± 0 |") != std::string::npos, table);
  BOOST_TEST(table.find("**optimizer.lr=1**") != std::string::npos, table);
  // The criterion "final": the least final grad norm, again lr = 1 (0.5 is 2^-20 away).
  const auto r2 = run(q(cfg) + " --quiet --no-plots --set tuning.criterion='\"final\"' --out " + q(dir / "final"),
                      dir / "log2");
  BOOST_TEST_REQUIRE(r2.rc == 0, r2.out);
  BOOST_TEST(read_json(dir / "final" / "config.json")["methods"][0]["optimizer"]["lr"] == json(1));
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_sweep_halted_in_tuning_resumes_to_the_uninterrupted_table) {
  const auto dir = scratch("resume");
  json j = one_quadratic();
  j["sweep"]["optimizer.lr"] = json::array({0.1, 0.5, 1});
  const auto cfg = write(dir, j);
  const auto full = run(q(cfg) + " --quiet --no-plots --out " + q(dir / "full"), dir / "l1");
  BOOST_TEST_REQUIRE(full.rc == 0, full.out);
  const auto cut = run(q(cfg) + " --quiet --no-plots --checkpoint-every 1 --halt-after 2 --out " + q(dir / "cut"),
                       dir / "l2");
  BOOST_TEST_REQUIRE(cut.rc == 3, cut.out);
  BOOST_TEST(!fs::exists(dir / "cut" / "table.md"));
  const auto again = run(q(cfg) + " --quiet --no-plots --checkpoint-every 1 --resume --out " + q(dir / "cut"),
                         dir / "l3");
  BOOST_TEST_REQUIRE(again.rc == 0, again.out);
  BOOST_TEST(hgrun::read_file(dir / "cut" / "table.md") == hgrun::read_file(dir / "full" / "table.md"));
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(sweep_and_seed_errors_name_the_key) {
  const auto dir = scratch("errors");
  const auto cfg = write(dir, one_quadratic());
  const std::string base = q(cfg) + " --quiet --no-plots --out " + q(dir / "o") + " ";
  const auto overlap = run(base + "--set tuning.seeds=[2]", dir / "l1");
  BOOST_TEST(overlap.rc == 2);
  BOOST_TEST(overlap.out.find("'tuning.seeds'") != std::string::npos, overlap.out);
  const auto twice = run(base + "--seeds 4,4", dir / "l2");
  BOOST_TEST(twice.rc == 2);
  BOOST_TEST(twice.out.find("'--seeds'") != std::string::npos, twice.out);
  const auto bad = run(base + "--sweep optimizer.lr=0.1,x", dir / "l3");
  BOOST_TEST(bad.rc == 2);
  BOOST_TEST(bad.out.find("'sweep.optimizer.lr'") != std::string::npos, bad.out);
  BOOST_TEST(bad.out.find("optimizer.lr=x") != std::string::npos, bad.out);
  const auto repeated = run(base + "--set tuning.seeds=[9,9]", dir / "l6");
  BOOST_TEST(repeated.rc == 2);
  BOOST_TEST(repeated.out.find("config error at 'tuning.seeds[1]': expected distinct items (each value once), got 9 "
                               "again (as tuning.seeds[0])") != std::string::npos,
             repeated.out);
  const auto wrapped = run(base + "--seeds 18446744073709551615", dir / "l7");
  BOOST_TEST(wrapped.rc == 2);
  BOOST_TEST(wrapped.out.find("config error at '--seeds': expected comma-separated integers in [0, 1000000000000000] "
                              "(a seed's bound, as the configuration's), got \"18446744073709551615\"") !=
                 std::string::npos,
             wrapped.out);
  const auto top = run(base + "--seeds 1000000000000000", dir / "l8");
  BOOST_TEST(top.rc == 2);
  BOOST_TEST(top.out.find("config error at 'tuning.seeds'") != std::string::npos, top.out);
  const auto empty_key = run(base + "--sweep optimizer..lr=0.1,1", dir / "l9");
  BOOST_TEST(empty_key.rc == 2);
  BOOST_TEST(empty_key.out.find("config error at 'sweep.optimizer..lr'") != std::string::npos, empty_key.out);
  const auto form = run(base + "--sweep optimizer.lr", dir / "l4");
  BOOST_TEST(form.rc == 2);
  BOOST_TEST(form.out.find("'--sweep'") != std::string::npos, form.out);
  BOOST_TEST(!fs::exists(dir / "o" / "tuning"));  // nothing ran
  // --sweep replaces the config's grid for that key (lists with brackets stay one value).
  const auto cli = run(base + "--sweep optimizer.lr=0.5,1 --check", dir / "l5");
  BOOST_TEST(cli.rc == 0, cli.out);
  BOOST_TEST(cli.out.find("2 settings x 1 tuning seed(s)") != std::string::npos, cli.out);
  fs::remove_all(dir);
}

// Seeds enter from seed, seeds, tuning.seeds and --seeds, each held to max_seed (the schema's
// integer bound, 1e15); the default tuning seed (the largest evaluation seed + 1) is refused
// past it, never wrapped to 0.
BOOST_AUTO_TEST_CASE(every_seed_is_at_most_1e15_wherever_it_enters_and_no_derived_seed_wraps) {
  auto cli_error = [](const std::string& t) {
    return hg_test::message_of<hgrun::config_error>([&] { (void)hgrun::parse_seeds(t); });
  };
  const std::string rule = "config error at '--seeds': expected comma-separated integers in [0, 1000000000000000] "
                           "(a seed's bound, as the configuration's), got ";
  BOOST_TEST(cli_error("1,18446744073709551615") == rule + "\"18446744073709551615\"");
  BOOST_TEST(cli_error("1000000000000001") == rule + "\"1000000000000001\"");
  BOOST_TEST(cli_error("99999999999999999999999") == rule + "\"99999999999999999999999\"");
  BOOST_TEST(cli_error("1,") == rule + "\"\"");
  BOOST_TEST(cli_error("-1") == rule + "\"-1\"");
  BOOST_TEST(cli_error("4,5,4") == "config error at '--seeds': expected distinct seeds, got 4 twice");
  BOOST_TEST(hgrun::parse_seeds("1000000000000000,0,7") == (std::vector<std::uint64_t>{hgrun::max_seed, 0, 7}),
             boost::test_tools::per_element());
  // The configuration's: the same bound.
  for (const char* patch : {R"({"seed": 1000000000000001})", R"({"seeds": [1000000000000001]})",
                            R"({"tuning": {"seeds": [1000000000000001]}})"}) {
    json raw = one_quadratic();
    raw.merge_patch(json::parse(patch));
    const std::string e = hg_test::message_of<hgrun::config_error>([&] { (void)hgrun::resolve(raw); });
    BOOST_TEST(e.find("expected an integer in [0, 1e15], got 1000000000000001") != std::string::npos, patch << " -> " << e);
  }
  // Derived: the largest evaluation seed + 1, up to the bound.
  const json raw = one_quadratic();  // seeds [1, 2], a sweep of 4 settings, no tuning seeds
  const json c = hgrun::resolve(raw);
  const auto g = hgrun::sweep_grids(raw);
  auto s = hgrun::seeds_of(c, g, {});
  BOOST_TEST(s.evaluation == (std::vector<std::uint64_t>{1, 2}), boost::test_tools::per_element());
  BOOST_TEST(s.tuning == (std::vector<std::uint64_t>{3}), boost::test_tools::per_element());
  s = hgrun::seeds_of(c, g, {hgrun::max_seed - 1});
  BOOST_TEST(s.tuning == (std::vector<std::uint64_t>{hgrun::max_seed}), boost::test_tools::per_element());
  const std::string past = "config error at 'tuning.seeds': expected tuning seeds with a sweep whose largest "
                           "evaluation seed is ";
  BOOST_TEST(hg_test::message_of<hgrun::config_error>([&] { (void)hgrun::seeds_of(c, g, {hgrun::max_seed}); }) ==
             past + "1000000000000000: the default, that seed + 1, passes a seed's bound 1000000000000000; list "
                    "tuning.seeds");
  // (a program's seed past the bound does not wrap to 0 either)
  BOOST_TEST(hg_test::message_of<hgrun::config_error>([&] {
               (void)hgrun::seeds_of(c, g, {std::numeric_limits<std::uint64_t>::max()});
             }).rfind(past, 0) == 0u);
  // Without a sweep no tuning seed is derived, so the bound itself is a seed.
  json plain = raw;
  plain.erase("sweep");
  BOOST_TEST(hgrun::seeds_of(hgrun::resolve(plain), hgrun::sweep_grids(plain), {hgrun::max_seed}).tuning.empty());
}

// Each run's work is bounded (config.hpp); an invocation's runs, over its seeds and sweep
// points, are at most max_runs, so its work is too. The error names the key with the larger count.
BOOST_AUTO_TEST_CASE(an_invocations_runs_over_its_seeds_and_sweep_points_are_at_most_max_runs) {
  auto refusal = [](const json& raw, const std::vector<std::uint64_t>& cli) {
    return hg_test::message_of<hgrun::config_error>(
        [&] { (void)hgrun::seeds_of(hgrun::resolve(raw), hgrun::sweep_grids(raw), cli); });
  };
  const std::string rule = "expected at most 10000 runs in all (each run's work is bounded, and so is an "
                           "invocation's), got ";
  json raw = one_quadratic();
  raw.erase("sweep");
  json many = raw;
  many["seeds"] = json::array();
  for (int i = 0; i < 100000; ++i) many["seeds"].push_back(i);
  BOOST_TEST(refusal(many, {}) ==
             "config error at 'seeds': " + rule + "1 method(s) x 100000 evaluation seed(s) (seeds) = 100000");
  // 2 methods x 5000 seeds is the bound; one seed more is past it.
  many["methods"].push_back({{"label", "R"}, {"algorithm", "ringmaster"}});
  many["seeds"] = json::array();
  for (int i = 0; i < 5000; ++i) many["seeds"].push_back(i);
  BOOST_TEST(refusal(many, {}) == "");
  many["seeds"].push_back(5000);
  BOOST_TEST(refusal(many, {}) == "config error at 'seeds': " + rule + "2 method(s) x 5001 evaluation seed(s) (seeds) = 10002");
  std::string text;
  for (int i = 0; i < 10001; ++i) text += (i ? "," : "") + std::to_string(i);
  BOOST_TEST(refusal(raw, hgrun::parse_seeds(text)) ==
             "config error at '--seeds': " + rule + "1 method(s) x 10001 evaluation seed(s) (--seeds) = 10001");
  // A sweep: 100 x 50 settings x 2 tuning seeds + 1 method x 2 evaluation seeds.
  json swept = raw;
  for (int i = 0; i < 100; ++i) swept["sweep"]["optimizer.lr"].push_back(0.001 * (i + 1));
  for (int i = 0; i < 50; ++i) swept["sweep"]["batch"].push_back(i + 1);
  swept["tuning"]["seeds"] = {7, 8};
  BOOST_TEST(refusal(swept, {}) ==
             "config error at 'sweep': " + rule + "1 method(s) x 2 evaluation seed(s) (seeds) + 5000 setting(s) of the "
                                                  "methods' grids (sweep) x 2 tuning seed(s) (tuning.seeds) = 10002");
  swept["tuning"]["seeds"] = {7};
  BOOST_TEST(refusal(swept, {}) == "");
  // --check refuses it, before anything runs.
  const auto dir = scratch("runs");
  const auto cfg = write(dir, raw);
  const auto r = run(q(cfg) + " --check --seeds " + text, dir / "log");
  BOOST_TEST(r.rc == 2);
  BOOST_TEST(r.out.find("config error at '--seeds': " + rule + "1 method(s) x 10001") != std::string::npos, r.out);
  fs::remove_all(dir);
}

// The seeds' summary: mean, sd and 95% interval of each final metric recomputed here from the
// seeds' own summaries (t_{0.975, 2} = 4.302652729911275), and the count reaching the target.
BOOST_AUTO_TEST_CASE(the_seeds_summary_is_the_mean_sd_and_t_interval_of_the_seeds_own_results) {
  const auto dir = scratch("seeds");
  json j = one_quadratic();
  j.erase("sweep");
  j["data"]["centers"] = json::array({0, 3});
  j["data"]["noise"] = 0.5;
  j["workers"] = {{"count", 2}, {"time", {{"base", "fixed"}, {"tau", {1, 3}}}}};
  j["optimizer"]["lr"] = 0.2;
  j["horizon"]["time"] = 200;
  j["eval_interval"] = 20;
  j["target"]["value"] = 0.2;
  j["methods"] = json::parse(R"([{"label": "ASGD", "algorithm": "asgd"}, {"label": "Rennala", "algorithm": "rennala", "gradients": 2}])");
  const auto cfg = write(dir, j);
  const auto out = dir / "out";
  const auto r = run(q(cfg) + " --quiet --no-plots --seeds 4,5,6 --out " + q(out), dir / "log");
  BOOST_TEST_REQUIRE(r.rc == 0, r.out);
  const json s = read_json(out / "summary.json");
  BOOST_TEST_REQUIRE(s["methods"].size() == 2u);
  for (const auto& m : s["methods"]) {
    const std::string slug = hgrun::slug(m["label"]);
    std::vector<double> v, t, first;
    for (int seed : {4, 5, 6}) {
      const json one = read_json(out / ("seed-" + std::to_string(seed)) / slug / "summary.json");
      v.push_back(one["final"]["grad_norm_sq"].get<double>());
      if (one["time_to_target"].is_number()) t.push_back(one["time_to_target"].get<double>());
      if (one["first_crossing"].is_number()) first.push_back(one["first_crossing"].get<double>());
      BOOST_TEST(m["per_seed"][seed - 4]["first_crossing"] == one["first_crossing"]);
    }
    const double mean = (v[0] + v[1] + v[2]) / 3;
    const double sd = std::sqrt(((v[0] - mean) * (v[0] - mean) + (v[1] - mean) * (v[1] - mean) +
                                 (v[2] - mean) * (v[2] - mean)) / 2);
    const json& f = m["final"]["grad_norm_sq"];
    BOOST_TEST(f["n"] == json(3));
    BOOST_TEST(std::abs(f["mean"].get<double>() - mean) <= 1e-12 * std::abs(mean));
    BOOST_TEST(std::abs(f["sd"].get<double>() - sd) <= 1e-9 * sd);
    BOOST_TEST(std::abs(f["ci95"].get<double>() - 4.302652729911275 * sd / std::sqrt(3.0)) <= 1e-8 * sd);
    BOOST_TEST(sd > 0);  // the seeds differ (noisy gradients)
    BOOST_TEST(m["reached"] == json(t.size()));
    BOOST_TEST(m["crossed"] == json(first.size()));
    BOOST_TEST(first.size() >= t.size());  // every seed that held the target crossed it
    BOOST_TEST(m["per_seed"].size() == 3u);
  }
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()
