// heterograd-run's checkpoints for every algorithm of the driver: a run killed after a
// checkpoint and resumed from it ends with the uninterrupted run's trace hash (every event,
// in order), parameters, evaluations, update counts and method-specific numbers, bit for bit.
// Tiny sizes: four simulated workers, a scalar quadratic per worker with Gaussian gradient
// noise (so the samplers' RNG counters must be restored), half-normal job-time noise and an
// outage (the time model's counters and the event queue), momentum (optimizer state).
// Biased local SGD needs per-sample losses: it runs on a few hundred Fashion-MNIST samples.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/core/archive.hpp"
#include "config.hpp"
#include "files.hpp"
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
  c["ringmaster"] = {q, m(R"({"label": "Ringmaster", "algorithm": "ringmaster", "threshold": 2, "variant": "interrupt"})")};
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
  // Per-worker batches on Fashion-MNIST: the gradients draw them, the epochs count them.
  c["omnilearn_asgd"] = {fashion(), m(R"({"label": "OmniLearn ASP", "algorithm": "omnilearn_asgd", "min_batch": 2,
                                          "max_batch": 40, "rebalance_every": 4})")};
  c["omnilearn_asgd"].base["workers"]["time"]["batch_scaling"] = true;
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
  BOOST_TEST(fulls["omnilearn_asgd"]["extra"]["changes"].get<std::size_t>() > 0u);
  BOOST_TEST(fulls["eager"]["extra"]["late_contributions"].get<std::uint64_t>() > 0u);
  const double local = fulls["selsync"]["extra"]["local_fraction"];
  BOOST_TEST((local > 0.0 && local < 1.0));
  BOOST_TEST(fulls["dssp"]["extra"]["max_gap_started"].get<std::uint64_t>() <= 3u);  // s_L + r_max
  BOOST_TEST(fulls["rennala"]["updates"]["buffered"].get<std::uint64_t>() > 0u);
  BOOST_TEST(fulls["ringleader"]["updates"]["buffered"].get<std::uint64_t>() > 0u);
  BOOST_TEST(fulls["ringmaster"]["updates"]["interrupted"].get<std::uint64_t>() > 0u);
}

// The first and last offsets of the "bytes A-B" ranges named in a checkpoint error.
std::vector<std::pair<std::size_t, std::size_t>> named_ranges(const std::string& what) {
  std::vector<std::pair<std::size_t, std::size_t>> r;
  const std::regex re("bytes ([0-9]+)-([0-9]+)");
  for (auto it = std::sregex_iterator(what.begin(), what.end(), re); it != std::sregex_iterator(); ++it)
    r.emplace_back(std::stoull((*it)[1]), std::stoull((*it)[2]));
  return r;
}

BOOST_AUTO_TEST_CASE(a_sealed_checkpoint_names_the_damaged_block_and_refuses_truncation_and_old_versions) {
  // Three blocks and a bit, so that damage in the middle names one block of the payload.
  std::vector<std::byte> payload(3 * heterograd::checkpoint_block_size + 100);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::byte>(i * 131 + 7);
  const std::string f = heterograd::seal_checkpoint(payload);
  const fs::path name = "some/dir/checkpoint.bin";
  BOOST_TEST((heterograd::open_checkpoint(name, f) == payload));
  BOOST_TEST((heterograd::open_checkpoint(name, heterograd::seal_checkpoint({})).empty()));
  auto error_of = [&](const std::string& bytes) -> std::string {
    try {
      heterograd::open_checkpoint(name, bytes);
    } catch (const heterograd::checkpoint_error& e) {
      BOOST_TEST(e.file() == name);
      return e.what();
    }
    return "(accepted)";
  };
  const std::size_t h = heterograd::checkpoint_header_size, b = heterograd::checkpoint_block_size;
  std::string g = f;
  g[h + b + 5] ^= 0x01;  // block 1 of the payload
  std::string what = error_of(g);
  BOOST_TEST(what.find("checkpoint some/dir/checkpoint.bin: bytes " + std::to_string(h + b) + "-" +
                       std::to_string(h + 2 * b - 1) + " damaged") == 0u, what);
  g = f;
  g[3] ^= 0x20;
  BOOST_TEST(error_of(g).find("bytes 0-31 (the header) damaged") != std::string::npos, error_of(g));
  g = f;
  g[f.size() - 1] ^= 0x80;
  BOOST_TEST(error_of(g).find("(the file checksum) damaged") != std::string::npos, error_of(g));
  g = f;
  g[f.size() - 9] ^= 0x80;  // the table's own checksum: a table entry would say the same
  BOOST_TEST(error_of(g).find("(the block checksums) damaged") != std::string::npos, error_of(g));
  BOOST_TEST(error_of(f.substr(0, f.size() - 3)).find("truncated: ") != std::string::npos);
  BOOST_TEST(error_of(f.substr(0, 10)).find("truncated: 10 bytes") != std::string::npos);
  BOOST_TEST(error_of(f + "x").find("trailing bytes") != std::string::npos);
  // Version 1 was the unsealed archive: its magic string first.
  heterograd::archive_writer v1;
  v1(std::string("heterograd-run checkpoint 1"), std::string("digest"), std::uint64_t{3});
  const auto& vb = v1.bytes();
  BOOST_TEST(error_of(std::string(reinterpret_cast<const char*>(vb.data()), vb.size())).find("format version 1") !=
             std::string::npos);
  // A genuine header of another version (its checksum matches) is named as such.
  g = f;
  g[8] = 3;
  const std::uint32_t c = heterograd::crc32c(g.data(), 28);
  for (int i = 0; i < 4; ++i) g[28 + i] = static_cast<char>((c >> (8 * i)) & 0xff);
  BOOST_TEST(error_of(g).find("format version 3;") != std::string::npos, error_of(g));
  // CRC-32C's check value (RFC 3720's polynomial): "123456789" -> 0xE3069283.
  BOOST_TEST(heterograd::crc32c("123456789", 9) == 0xE3069283u);
}

// A model of 40000 floats with momentum: a checkpoint of several 64 KiB blocks.
json large_quadratic(std::uint64_t every) {
  json raw = json::parse(R"({
    "name": "ckpt-large", "seed": 5,
    "data": {"dataset": "worst_case_quadratic", "dim": 40000, "noise": 0.1},
    "optimizer": {"kind": "momentum", "lr": 0.1, "momentum": 0.5},
    "workers": {"count": 3, "time": {"base": "linear", "noise": "half_normal"}},
    "horizon": {"time": 24}, "eval_interval": 4,
    "methods": [{"label": "ASGD", "algorithm": "asgd"}]})");
  raw["checkpoint_every"] = every;
  return hgrun::resolve(raw);
}

BOOST_AUTO_TEST_CASE(flipping_any_one_byte_of_a_checkpoint_makes_resume_refuse_it_naming_the_file_and_region) {
  const json cfg = large_quadratic(1);
  const auto full_dir = scratch("flip-full");
  const json full = hgrun::run_method({cfg, 0, 5, full_dir, false, 0, {}});
  const auto dir = scratch("flip");
  BOOST_CHECK_THROW(hgrun::run_method({cfg, 0, 5, dir, false, 3, {}}), hgrun::halted);
  const auto ckpt = dir / "checkpoint.bin";
  const std::string good = hgrun::read_file(ckpt);
  BOOST_TEST_REQUIRE(good.size() > 3 * heterograd::checkpoint_block_size);
  // Positions: every header byte, the last 16 bytes, both sides of each block boundary, and
  // 64 drawn from a printed seed over the whole file.
  std::set<std::size_t> at;
  for (std::size_t i = 0; i < heterograd::checkpoint_header_size; ++i) at.insert(i);
  for (std::size_t i = good.size() - 16; i < good.size(); ++i) at.insert(i);
  for (std::size_t b = heterograd::checkpoint_header_size; b < good.size(); b += heterograd::checkpoint_block_size) {
    at.insert(b);
    at.insert(b - 1);
  }
  const auto seed = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  BOOST_TEST_MESSAGE("byte-flip positions from seed " << seed);
  std::mt19937_64 rng(seed);
  for (int k = 0; k < 64; ++k) at.insert(std::uniform_int_distribution<std::size_t>(0, good.size() - 1)(rng));
  BOOST_TEST(at.size() >= 64u + 32u);
  std::size_t refused = 0;
  for (const std::size_t pos : at) {
    std::string bad = good;
    const int mask = std::uniform_int_distribution<int>(1, 255)(rng);
    bad[pos] = static_cast<char>(bad[pos] ^ mask);
    hgrun::write_file(ckpt, bad);
    const std::string where = "byte " + std::to_string(pos) + " ^ " + std::to_string(mask);
    try {
      const json resumed = hgrun::run_method({cfg, 0, 5, dir, true, 0, {}});
      BOOST_ERROR("resumed from a damaged checkpoint, " << where << ": params_hash "
                  << resumed["params_hash"] << " (uninterrupted " << full["params_hash"] << ")");
      hgrun::write_file(ckpt, good);  // the run removed it
    } catch (const heterograd::checkpoint_error& e) {
      const std::string what = e.what();
      BOOST_TEST(what.find(ckpt.string()) != std::string::npos, where << ": " << what);
      const auto ranges = named_ranges(what);
      bool named = what.find("format version") != std::string::npos;  // the version field itself
      for (const auto& [first, last] : ranges) named = named || (first <= pos && pos <= last);
      BOOST_TEST(named, where << ": " << what);
      ++refused;
    }
  }
  BOOST_TEST(refused == at.size());
  // The undamaged checkpoint still resumes to the uninterrupted run.
  hgrun::write_file(ckpt, good);
  const json resumed = hgrun::run_method({cfg, 0, 5, dir, true, 0, {}});
  BOOST_TEST(resumed["params_hash"] == full["params_hash"]);
  BOOST_TEST(resumed["trace_hash"] == full["trace_hash"]);
}

BOOST_AUTO_TEST_CASE(a_checkpoint_resumes_whatever_the_command_line_and_output_and_refuses_other_inputs_by_key) {
  // main.cpp adds a "resolved" block (seed list, code revision, command line) to config.json,
  // which the children of --jobs N read; the command line gains --resume and --jobs varies.
  json cfg = config_of(cases().at("ringmaster"), 2);
  cfg["resolved"] = {{"seeds", {7}}, {"git_revision", "abc"}, {"command", "heterograd-run x.json --jobs 2"}};
  const auto full = hgrun::run_method({cfg, 0, 7, scratch("cmd-full"), false, 0, {}});
  const auto dir = scratch("cmd");
  BOOST_CHECK_THROW(hgrun::run_method({cfg, 0, 7, dir, false, 4, {}}), hgrun::halted);
  json again = cfg;
  again["resolved"]["command"] = "heterograd-run x.json --jobs 3 --resume";
  again["resolved"]["seeds"] = {7, 8};
  again["output"] = "moved";
  again["checkpoint_every"] = 5;
  const fs::path ckpt = dir / "checkpoint.bin";
  const std::string saved = hgrun::read_file(ckpt);
  auto refusal = [&](const json& c) -> std::string {
    hgrun::write_file(ckpt, saved);
    try {
      hgrun::run_method({c, 0, 7, dir, true, 0, {}});
    } catch (const heterograd::checkpoint_error& e) {
      return e.what();
    }
    return "(resumed)";
  };
  json other = again;
  other["methods"][0]["threshold"] = 3;
  other["horizon"]["time"] = 60;
  std::string what = refusal(other);
  BOOST_TEST(what.find(ckpt.string()) != std::string::npos, what);
  BOOST_TEST(what.find("method.threshold: 2 -> 3") != std::string::npos, what);
  BOOST_TEST(what.find("config.horizon.time: 50 -> 60") != std::string::npos, what);
  other = again;
  other["resolved"]["git_revision"] = "def";  // another code revision may compute otherwise
  what = refusal(other);
  BOOST_TEST(what.find("config.resolved.git_revision: \"abc\" -> \"def\"") != std::string::npos, what);
  BOOST_TEST(refusal(again) == "(resumed)");
  const json resumed = hgrun::json::parse(hgrun::read_file(dir / "summary.json"));
  BOOST_TEST(resumed["trace_hash"] == full["trace_hash"]);
  BOOST_TEST(resumed["params_hash"] == full["params_hash"]);
}

BOOST_AUTO_TEST_SUITE_END()
