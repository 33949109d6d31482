// heterograd-run with model.kind "torch" (tools/driver/run_torch.cpp, LibTorch's presets):
// - a ResNet-8 run under the threads runtime equals the simulator's bit for bit (each worker's
//   module computes on the parameters the method hands it; LibTorch single-threaded);
// - a torch-model run killed after a checkpoint and resumed equals the uninterrupted run;
// - local learning on a torch preset (split at named children): the module pipeline on threads
//   and on MPI ranks equals the sequential loop bitwise, a resumed run the uninterrupted one, a
//   split the model cannot take is refused naming methods[i].split[j];
// - bad input names the key: an unknown preset, an input shape the model cannot take, a model
//   on a dataset it does not take, a transformer whose width is no multiple of its heads, a
//   corpus folder that does not exist or holds no .py file;
// - convergence (suite torch_convergence, label convergence): LeNet-5 reaches 88% test accuracy
//   on Fashion-MNIST under BSP on 4 simulated workers in 3.5 epochs, and the byte-level
//   transformer's validation bits per byte fall below the unigram baseline of its corpus.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <boost/test/unit_test.hpp>

#include "config.hpp"
#include "report.hpp"
#include "run.hpp"

namespace fs = std::filesystem;
using hgrun::json;

namespace {

fs::path scratch(const std::string& name) {
  const auto p = fs::temp_directory_path() / ("hg-torch-test-" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Fashion-MNIST on 4 heterogeneous workers with a torch preset.
json images(const std::string& preset, std::size_t train_samples) {
  json j = json::parse(R"({
    "name": "torch", "data": {"dataset": "fashion_mnist", "test_samples": 200, "batch": 8},
    "model": {"kind": "torch", "threads": 1},
    "workers": {"count": 4, "time": {"base": "linear", "noise": "half_normal"}},
    "horizon": {"updates": 12}, "eval_interval": 4, "optimizer": {"kind": "momentum", "lr": 0.02},
    "methods": [{"label": "ASGD", "algorithm": "asgd"},
                {"label": "BSP", "algorithm": "bsp"},
                {"label": "local SGD", "algorithm": "local_sgd", "local_steps": [2, 2, 1, 1]}]})");
  j["model"]["preset"] = preset;
  j["data"]["train_samples"] = train_samples;
  return j;
}

// Decoupled local learning on a torch preset: the sequential reference, time in epochs (256
// samples in batches of 8: 32 iterations an epoch).
json decoupled(const std::string& preset) {
  json j = images(preset, 256);
  j["workers"] = json::parse(R"({"count": 1, "time": {"base": "fixed", "tau": [1.0]}})");
  j["horizon"] = {{"epochs", 0.75}};
  j["eval_interval"] = 0.25;
  j["methods"] = json::parse(R"([
    {"label": "PGL K=3", "algorithm": "local_learning", "split": ["layer2", "layer3"], "head_hidden": [4], "pgl_period": 5},
    {"label": "DGL K=2", "algorithm": "local_learning", "modules": 2}])");
  return j;
}

json text() {
  return json::parse(R"({
    "name": "lm", "data": {"dataset": "text", "batch": 8, "test_samples": 256},
    "model": {"kind": "torch", "preset": "transformer", "context": 128, "layers": 2, "width": 128, "heads": 4},
    "optimizer": {"kind": "adam", "lr": 0.001},
    "workers": {"count": 2, "time": {"base": "fixed", "tau": [1, 1]}},
    "horizon": {"updates": 300}, "eval_interval": 100,
    "target": {"metric": "bits_per_byte", "value": 3.0, "below": true},
    "methods": [{"label": "BSP", "algorithm": "bsp"}]})");
}

json run(json raw, const std::string& runtime, const fs::path& dir, std::size_t method, bool resume = false,
         std::uint64_t halt_after = 0) {
  raw["runtime"] = runtime;
  const json cfg = hgrun::resolve(raw);
  hgrun::run_request req{cfg, method, cfg["seed"].get<std::uint64_t>(), dir, resume, halt_after, {}};
  return hgrun::run_method(req);
}

// The key path of the config_error that resolving and preparing `raw` throws ("" if none).
std::string error_key(const json& raw) {
  try {
    const json cfg = hgrun::resolve(raw);
    hgrun::preflight(cfg);
  } catch (const hgrun::config_error& e) {
    BOOST_TEST_MESSAGE(e.what());
    return e.path();
  }
  return "";
}

std::string table(const fs::path& file) {  // a CSV without its '#' header lines
  std::ifstream in(file);
  std::string line, out;
  while (std::getline(in, line))
    if (line.empty() || line[0] != '#') out += line + "\n";
  return out;
}

// Under mpirun (the CTest entry driver_torch_mpi sets HG_RUNTIME_TEST_MPIEXEC and its flags, as
// driver_runtime_mpi does): heterograd-run on np ranks; the methods' summaries by label.
bool mpi_available() { return std::getenv("HG_RUNTIME_TEST_MPIEXEC") != nullptr; }

json run_mpirun(json raw, const fs::path& dir, int np) {
  raw["runtime"] = "mpi";
  raw["output"] = dir.string();
  const auto cfg = dir.parent_path() / (dir.filename().string() + ".json");
  std::ofstream(cfg) << raw.dump(2);
  const std::string cmd = std::string(std::getenv("HG_RUNTIME_TEST_MPIEXEC")) + " " +
                          std::getenv("HG_RUNTIME_TEST_NP_FLAG") + " " + std::to_string(np) + " --oversubscribe " +
                          std::getenv("HG_RUNTIME_TEST_PREFLAGS") + " " + HG_RUN_EXE + " " + cfg.string() +
                          " --quiet --no-plots > " + dir.string() + ".log 2>&1";
  const int rc = std::system(cmd.c_str());
  std::stringstream log;
  log << std::ifstream(dir.string() + ".log").rdbuf();
  BOOST_TEST_REQUIRE(rc == 0, cmd << "\n" << log.str());
  json out = json::object();
  for (const auto& m : raw["methods"]) {
    std::ifstream in(dir / hgrun::slug(m["label"]) / "summary.json");
    out[m["label"].get<std::string>()] = json::parse(in);
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(torch_mpi, *boost::unit_test::precondition([](boost::unit_test::test_unit_id) {
  return boost::test_tools::assertion_result(mpi_available());
}))

// A server method's ranks compute their gradients at the server's parameters: bitwise the
// simulator's; a round method's allreduce sums in its own order.
BOOST_AUTO_TEST_CASE(a_resnet_under_mpirun_gives_the_simulators_numbers) {
  json raw = images("resnet8", 256);
  for (std::size_t i : {std::size_t{0}, std::size_t{1}}) {
    json one = raw;
    one["methods"] = json::array({raw["methods"][i]});
    const std::string label = one["methods"][0]["label"];
    const auto d = scratch("mpi-" + std::to_string(i));
    const json a = run(one, "sim", d / "sim", 0);
    const json b = run_mpirun(one, d / "mpi", i == 0 ? 5 : 4)[label];
    BOOST_TEST(b["extra"]["runtime"] == "mpi");
    BOOST_TEST(a["trace_hash"] == b["trace_hash"], label);
    if (i == 0) {
      BOOST_TEST(a["params_hash"] == b["params_hash"], label);
      BOOST_TEST(a["final"] == b["final"], label);
    } else {
      // The allreduce's own summation order differs from the simulator's by an ulp a round;
      // 12 steps through batch norm grow that to 4.8e-4 of the loss here (the MLP's stay
      // within 1e-6): the same schedule, the same rounds, the loss within 1%.
      BOOST_TEST(a["final"]["updates"] == b["final"]["updates"], label);
      const double la = a["final"]["loss"].get<double>(), lb = b["final"]["loss"].get<double>();
      BOOST_TEST(std::abs(la - lb) <= 1e-2 * la, label << ": loss " << la << " vs " << lb);
    }
  }
}

// Rank k runs module k of a ResNet-8 (3 modules, PGL global steps broadcast every slice): each
// module's arithmetic is the sequential loop's, so the parameters are the simulator's bitwise.
BOOST_AUTO_TEST_CASE(local_learning_on_a_resnet_over_mpi_ranks_equals_the_sequential_loop) {
  json raw = decoupled("resnet8");
  raw["methods"] = json::array({raw["methods"][0]});
  const auto d = scratch("mpi-decoupled");
  const json a = run(raw, "sim", d / "sim", 0);
  const json b = run_mpirun(raw, d / "mpi", 3)["PGL K=3"];
  BOOST_TEST(b["extra"]["runtime"] == "mpi");
  BOOST_TEST(a["params_hash"] == b["params_hash"]);
  BOOST_TEST(a["final"] == b["final"]);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(torch_models)

BOOST_AUTO_TEST_CASE(local_learning_on_a_resnet_runs_its_modules_as_a_pipeline_equal_to_the_sequential_loop) {
  const json raw = decoupled("resnet8");
  for (std::size_t i = 0; i < raw["methods"].size(); ++i) {
    const auto d = scratch("decoupled-" + std::to_string(i));
    const json a = run(raw, "sim", d / "sim", i), b = run(raw, "threads", d / "threads", i);
    const std::string m = a["label"];
    BOOST_TEST(a["extra"]["iterations"].get<double>() == 24.0, m);  // 0.75 epochs of 32
    BOOST_TEST(a["extra"]["modules"].get<double>() == (i == 0 ? 3.0 : 2.0), m);
    BOOST_TEST(a["extra"]["global_steps"].get<double>() == (i == 0 ? 4.0 : 0.0), m);  // iterations 5, 10, 15, 20
    BOOST_TEST(b["extra"]["pipeline_busy_seconds"].size() == a["extra"]["modules"].get<std::size_t>(), m);
    BOOST_TEST(a["params_hash"] == b["params_hash"], m);
    BOOST_TEST(a["final"] == b["final"], m);
    const auto ev = hgrun::read_csv(d / "sim" / "evaluations.csv");
    BOOST_TEST(std::stod(ev.back()[1]) < std::stod(ev[1][1]), m);  // the loss fell
  }
}

BOOST_AUTO_TEST_CASE(local_learning_on_a_torch_model_resumed_equals_the_uninterrupted_run) {
  json raw = decoupled("lenet5");
  raw["methods"] = json::parse(R"([{"label": "PGL", "algorithm": "local_learning", "split": ["conv2", "fc2"],
                                    "head_hidden": [6], "pgl_period": 4}])");
  raw["checkpoint_every"] = 1;
  const auto a = scratch("decoupled-full"), b = scratch("decoupled-resumed");
  const json full = run(raw, "sim", a, 0);
  BOOST_CHECK_THROW(run(raw, "sim", b, 0, false, 1), hgrun::halted);
  BOOST_TEST(fs::exists(b / "checkpoint.bin"));
  const json resumed = run(raw, "sim", b, 0, true);
  BOOST_TEST(resumed["params_hash"] == full["params_hash"]);
  BOOST_TEST(resumed["final"] == full["final"]);
  BOOST_TEST(table(a / "evaluations.csv") == table(b / "evaluations.csv"));
}

BOOST_AUTO_TEST_CASE(a_split_the_model_cannot_take_is_refused_naming_the_key) {
  json j = decoupled("resnet8");
  j["methods"][0]["split"] = {"layer2", "layer7"};
  BOOST_TEST(error_key(j) == "methods[0].split[1]");
  j["methods"][0]["split"] = {"layer3", "layer2"};
  BOOST_TEST(error_key(j) == "methods[0].split[1]");
  j["methods"][0]["split"] = {"pool"};  // layer3 ... | pool fc: fine; | pool | fc: pool learns nothing
  BOOST_TEST(error_key(j).empty());
  j["methods"][0]["split"] = {"pool", "fc"};
  BOOST_TEST(error_key(j) == "methods[0].split");
  j["methods"][0]["split"] = {"layer2"};
  j["methods"][0]["modules"] = 3;  // a split of one name makes 2 modules
  BOOST_TEST(error_key(j) == "methods[0].modules");
  j = decoupled("resnet8");
  j["methods"][1]["modules"] = 7;  // ResNet-8 has 6 children
  BOOST_TEST(error_key(j) == "methods[1].modules");
  j = decoupled("lenet5");
  j["methods"][0]["split"] = {"layer2"};
  BOOST_TEST(error_key(j) == "methods[0].split[0]");
  j = decoupled("lenet5");
  j["model"] = {{"kind", "mlp"}, {"hidden", {32}}};  // an MLP has no children to name
  BOOST_TEST(error_key(j) == "methods[0].split");
  j = decoupled("resnet8");
  j["methods"][1]["head_hidden"] = {100000000};  // heads of 5.8e10 parameters: the heads' key
  BOOST_TEST(error_key(j) == "methods[1].head_hidden");
}

BOOST_AUTO_TEST_CASE(a_resnet_on_threads_equals_the_simulator_bit_for_bit) {
  const json raw = images("resnet8", 256);
  const auto dir = scratch("sim-threads");
  for (std::size_t i = 0; i < raw["methods"].size(); ++i) {
    const auto d = dir / std::to_string(i);
    const json a = run(raw, "sim", d / "sim", i), b = run(raw, "threads", d / "threads", i);
    const std::string m = a["label"];
    BOOST_TEST(b["extra"]["runtime"] == "threads");
    BOOST_TEST(a["final"]["updates"].get<double>() == 12.0, m);  // model versions (rounds for BSP, local SGD)
    BOOST_TEST(a["params_hash"] == b["params_hash"], m);
    BOOST_TEST(a["trace_hash"] == b["trace_hash"], m);
    BOOST_TEST(a["final"] == b["final"], m);
    BOOST_TEST(table(d / "sim" / "evaluations.csv") == table(d / "threads" / "evaluations.csv"), m);
    // The model learnt something on 12 updates (loss below the initial one).
    const auto ev = hgrun::read_csv(d / "sim" / "evaluations.csv");
    BOOST_TEST(std::stod(ev.back()[1]) < std::stod(ev[1][1]), m);
  }
}

BOOST_AUTO_TEST_CASE(a_torch_run_killed_after_a_checkpoint_and_resumed_equals_the_uninterrupted_one) {
  for (const char* preset : {"resnet8", "lenet5"}) {
    json raw = images(preset, 256);
    raw["methods"] = json::array({json{{"label", "ASGD"}, {"algorithm", "asgd"}}});
    raw["checkpoint_every"] = 1;
    const auto a = scratch(std::string(preset) + "-full"), b = scratch(std::string(preset) + "-resumed");
    const json full = run(raw, "sim", a, 0);
    BOOST_CHECK_THROW(run(raw, "sim", b, 0, false, 2), hgrun::halted);
    BOOST_TEST(fs::exists(b / "checkpoint.bin"));
    const json resumed = run(raw, "sim", b, 0, true);
    BOOST_TEST(resumed["params_hash"] == full["params_hash"], preset);
    BOOST_TEST(resumed["trace_hash"] == full["trace_hash"], preset);
    BOOST_TEST(resumed["final"] == full["final"], preset);
    BOOST_TEST(table(a / "evaluations.csv") == table(b / "evaluations.csv"), preset);
  }
}

BOOST_AUTO_TEST_CASE(bad_models_shapes_and_corpora_are_refused_naming_the_key) {
  json j = images("lenet5", 256);
  j["model"]["preset"] = "vgg16";
  BOOST_TEST(error_key(j) == "model.preset");
  j = images("lenet5", 256);
  j["model"]["input"] = {2, 28, 28};  // 1568 features, Fashion-MNIST has 784
  BOOST_TEST(error_key(j) == "model.input");
  j["model"]["input"] = {1, 784, 1};  // 784 features in a shape LeNet-5 cannot convolve
  BOOST_TEST(error_key(j) == "model.input");
  j["model"]["preset"] = "resnet8";  // ResNet-8 halves the resolution twice: 1 pixel wide is too thin
  BOOST_TEST(error_key(j) == "model.input");
  j["model"]["input"] = {1, 28};
  BOOST_TEST(error_key(j) == "model.input");
  j = images("transformer", 256);  // a language model on images
  BOOST_TEST(error_key(j) == "model.preset");
  json t = text();
  t["model"] = {{"kind", "mlp"}};
  BOOST_TEST(error_key(t) == "model.kind");
  t = text();
  t["model"]["preset"] = "lenet5";
  BOOST_TEST(error_key(t) == "model.preset");
  t = text();
  t["model"]["width"] = 130;
  BOOST_TEST(error_key(t) == "model.width");
  t = text();
  t["data"]["partition"] = "dirichlet";
  BOOST_TEST(error_key(t) == "data.partition");
  t = text();
  t["data"]["path"] = (scratch("no-such") / "missing").string();
  BOOST_TEST(error_key(t) == "data.path");
  const auto empty = scratch("no-py");
  std::ofstream(empty / "notes.txt") << "no python here\n";
  t["data"]["path"] = empty.string();
  BOOST_TEST(error_key(t) == "data.path");
  t = text();
  t["model"]["width"] = 4096;
  t["model"]["layers"] = 64;  // 12.9e9 parameters
  BOOST_TEST(error_key(t) == "model.width");
}

BOOST_AUTO_TEST_CASE(a_missing_plugin_is_refused_naming_model_kind) {
  // heterograd-run loads LibTorch (its plugin) only for a torch model; a plugin that is not
  // where it is looked for is a config error, exit status 2.
  json j = images("lenet5", 256);
  const auto dir = scratch("no-plugin");
  std::ofstream(dir / "c.json") << j.dump();
  const std::string cmd = "HG_TORCH_PLUGIN=" + (dir / "missing.so").string() + " " + HG_RUN_EXE + " " +
                          (dir / "c.json").string() + " --quiet --no-plots --out " + (dir / "out").string() + " > " +
                          (dir / "log").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::stringstream log;
  log << std::ifstream(dir / "log").rdbuf();
  BOOST_TEST(WIFEXITED(rc));
  BOOST_TEST(WEXITSTATUS(rc) == 2, log.str());
  BOOST_TEST(log.str().find("model.kind") != std::string::npos, log.str());
  BOOST_TEST(log.str().find("missing.so is missing") != std::string::npos, log.str());
}

BOOST_AUTO_TEST_CASE(the_corpus_split_and_the_unigram_baseline_are_recorded) {
  // A corpus of four .py files (every tenth file is validation: none here but the split needs
  // one, so ten files): the summary's byte counts follow the documented split exactly.
  const auto dir = scratch("corpus");
  std::size_t train = 0, validation = 0;
  for (int i = 0; i < 10; ++i) {
    const std::string body(300 + 17 * i, static_cast<char>('a' + i));
    std::string name = "f";
    name += std::to_string(i);
    name += ".py";
    std::ofstream(dir / name) << body;
    (i == 9 ? validation : train) += body.size();
  }
  fs::create_directories(dir / "site-packages");
  std::ofstream(dir / "site-packages" / "skipped.py") << std::string(1000, 'z');
  // Hostile entries: a FIFO and a link to a device named .py are not read (nor waited on).
  BOOST_REQUIRE(::mkfifo((dir / "pipe.py").c_str(), 0600) == 0);
  fs::create_symlink("/dev/zero", dir / "zero.py");
  json t = text();
  t["data"]["path"] = dir.string();
  t["data"]["test_samples"] = 0;
  t["horizon"] = {{"updates", 1}};
  t["model"]["context"] = 16;
  t["model"]["width"] = 16;
  t["model"]["heads"] = 2;
  const json s = run(t, "sim", scratch("corpus-run"), 0);
  BOOST_TEST(s["data"]["files"].get<std::size_t>() == 10u);
  BOOST_TEST(s["data"]["train_bytes"].get<std::size_t>() == train);
  BOOST_TEST(s["data"]["validation_bytes"].get<std::size_t>() == validation);
  BOOST_TEST(s["data"]["train_sequences"].get<std::size_t>() == (train - 1) / 16);
  BOOST_TEST(s["data"]["validation_sequences"].get<std::size_t>() == (validation - 1) / 16);
  // Validation is all 'j' (a byte the training text never has): its add-one unigram
  // probability is 1 / (256 + training targets).
  const double targets = static_cast<double>((train - 1) / 16 * 16);
  BOOST_TEST(s["data"]["unigram_bits_per_byte"].get<double>() == std::log2(256 + targets),
             boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(torch_convergence)

BOOST_AUTO_TEST_CASE(lenet5_reaches_88_percent_under_bsp_on_4_simulated_workers) {
  const json raw = json::parse(R"({
    "name": "cnn", "data": {"dataset": "fashion_mnist", "batch": 16},
    "model": {"kind": "torch", "preset": "lenet5"},
    "optimizer": {"kind": "momentum", "lr": 0.02, "momentum": 0.9},
    "workers": {"count": 4, "time": {"base": "fixed", "tau": [1, 1, 1, 1]}},
    "horizon": {"epochs": 3.5}, "eval_interval": 1000,
    "target": {"metric": "accuracy", "value": 0.88},
    "methods": [{"label": "BSP", "algorithm": "bsp"}]})");
  const json s = run(raw, "sim", scratch("cnn"), 0);
  BOOST_TEST_MESSAGE("LeNet-5, BSP, 4 workers, 3.5 epochs: accuracy " << s["final"]["accuracy"] << " in "
                                                                      << s["wall_seconds"] << " s");
  BOOST_TEST(s["final"]["accuracy"].get<double>() >= 0.88);
}

BOOST_AUTO_TEST_CASE(the_transformer_falls_below_the_unigram_baseline) {
  const json s = run(text(), "sim", scratch("lm"), 0);
  const double unigram = s["data"]["unigram_bits_per_byte"].get<double>();
  const double bits = s["final"]["bits_per_byte"].get<double>();
  BOOST_TEST_MESSAGE("transformer, 300 BSP updates: " << bits << " bits per byte, unigram " << unigram << ", "
                                                      << s["wall_seconds"] << " s");
  BOOST_TEST(bits < unigram);
  BOOST_TEST(std::abs(s["final"]["loss"].get<double>() / std::log(2.0) - bits) < 1e-12);
}

BOOST_AUTO_TEST_SUITE_END()
