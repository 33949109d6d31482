// heterograd-run's checks of a configuration between its keys and against the machine
// (config_detail.hpp: resolve() calls check_cross, then check_bounds). Each error names the key
// to change, its value and the rule.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "config_detail.hpp"
#include "described.hpp"
#include "elastic_checks.hpp"
#include "experiment.hpp"
#include "registry.hpp"
#include "heterograd/algorithms/sync/biased.hpp"
#include "heterograd/runtime/pacing.hpp"
#include "heterograd/runtime/placement.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace hgrun {

namespace {

using config_detail::fmt;
using config_detail::row_of;
using config_detail::shown;

// data.precision float64: the synthetic problems (the MLP is float32), on the simulator (the
// real runtimes' transports carry float32), under server methods whose policy is built in
// both precisions (the round methods and local learning are float32).
void check_precision(const json& c) {
  if (c["data"]["precision"] != "float64") return;
  const std::string rule = "expected \"float32\" with ";
  const json& d = c["data"]["dataset"];
  if (d == "fashion_mnist" || d == "text")
    throw config_error("data.precision", rule + "data.dataset " + d.dump() + ": float64 is offered for the synthetic "
                                                "problems (scalar_quadratics, worst_case_quadratic)");
  if (c["runtime"] != "sim")
    throw config_error("data.precision", rule + "runtime " + c["runtime"].dump() +
                                             ": float64 runs on runtime \"sim\" (the real runtimes carry float32)");
  for (std::size_t i = 0; i < c["methods"].size(); ++i) {
    const std::string a = c["methods"][i]["algorithm"];
    const algorithm_row* r = row_of(a);
    if (!r || r->kind != family::server || !r->float64)
      throw config_error("data.precision", rule + "methods[" + std::to_string(i) + "].algorithm \"" + a +
                                               "\": float64 runs the asynchronous server methods built in both "
                                               "precisions; this one runs in float32");
  }
}

// model with data: which models take which dataset, and the shapes they need.
void check_model(const json& c) {
  const model_settings m = from_json(c["model"], model_settings{});
  const std::string d = c["data"]["dataset"];
  const bool torch = m.kind == model_kind::torch;
  const bool text_model = torch && m.preset == torch_preset::transformer;
  if (d == "text" && !text_model)
    throw config_error(torch ? "model.preset" : "model.kind",
                       "expected model.kind \"torch\" with model.preset \"transformer\" for data.dataset \"text\" "
                       "(a byte-level language model), got " + c["model"][torch ? "preset" : "kind"].dump());
  if (d != "text" && text_model)
    throw config_error("model.preset", "expected an image preset (lenet5, resnet8) for data.dataset " +
                                           c["data"]["dataset"].dump() + ": \"transformer\" takes data.dataset \"text\"");
  if (d == "text" && c["data"]["partition"] != "iid")
    throw config_error("data.partition", "expected \"iid\" for data.dataset \"text\" (its samples have no labels), got " +
                                             c["data"]["partition"].dump());
  if (!torch) return;
  if (text_model) {
    if (m.width % m.heads != 0)
      throw config_error("model.width", "expected a multiple of model.heads = " + std::to_string(m.heads) + ", got " +
                                            std::to_string(m.width));
    return;
  }
  if (m.input.size() != 3)
    throw config_error("model.input", "expected [channels, height, width], got " + c["model"]["input"].dump());
  const std::size_t features = m.input[0] * m.input[1] * m.input[2];
  if (d == "fashion_mnist" && features != 784)
    throw config_error("model.input", "expected channels x height x width = 784 (Fashion-MNIST's 28 x 28 pixels), got " +
                                          c["model"]["input"].dump() + " = " + std::to_string(features));
}

// Fashion-MNIST's training and test sets (Xiao et al. 2017): data.train_samples and
// test_samples count up to them (0: all), so a larger count is refused rather than taken as all.
constexpr std::size_t fashion_mnist_train = 60000, fashion_mnist_test = 10000;

void check_samples(const json& d) {
  if (d["dataset"] != "fashion_mnist") return;
  const std::pair<const char*, std::size_t> sets[] = {{"train_samples", fashion_mnist_train},
                                                      {"test_samples", fashion_mnist_test}};
  for (const auto& [key, size] : sets)
    if (d[key].get<double>() > static_cast<double>(size))
      throw config_error(std::string("data.") + key,
                         "expected at most " + std::to_string(size) + " (Fashion-MNIST's " +
                             (size == fashion_mnist_train ? "training" : "test") + " set; 0: all of it), got " +
                             d[key].dump());
}

// Outages on clock "real" with real_scale: a job an outage stops waits for its end, so the
// outage's length x real_scale is a paced job's wall time; past the pacer's bound
// (runtime/pacing.hpp) the run would fail in the middle, naming the pacer.
void check_paced_outages(const json& c) {
  if (c["clock"] != "real" || !c.contains("real_scale")) return;
  const double scale = c["real_scale"].get<double>();
  const double most = heterograd::runtime::job_pacer::max_job_seconds;
  const json& ws = c["workers"]["time"]["outages"];
  for (std::size_t i = 0; i < ws.size(); ++i) {
    const double begin = ws[i]["begin"].get<double>(), end = ws[i]["end"].get<double>();
    if (!((end - begin) * scale <= most))
      throw config_error("workers.time.outages[" + std::to_string(i) + "].end",
                         "expected (end - begin) x real_scale of at most " + fmt(most) +
                             " wall seconds with clock \"real\" (a job the outage stops is paced until its end, and "
                             "a paced job lasts at most that), got (" + fmt(end) + " - " + fmt(begin) + ") x " +
                             fmt(scale) + " = " + fmt((end - begin) * scale) + "; lower the end or real_scale");
  }
}

// workers.server_placement: a cpulist this process may run on, for a server on real threads.
void check_server_placement(const json& c) {
  const std::string s = c["workers"]["server_placement"].get<std::string>();
  if (s.empty()) return;
  const char* key = "workers.server_placement";
  if (c["clock"] != "real" || c["runtime"] != "threads")
    throw config_error(key, "expected \"\" unless clock is \"real\" and runtime \"threads\" (an MPI run's server "
                            "is rank 0's process: bind it with the launcher), got \"" + s + "\"");
  try {
    heterograd::runtime::require_available(heterograd::runtime::parse_core_set(s, key), key);
  } catch (const std::invalid_argument& e) {
    throw config_error(key, e.what());
  }
}

// clock and workers.placement: real time needs real workers; a placement lists one set of
// cores this process may run on per worker. (real_scale is read by real-clock runs only, so
// that one configuration runs both ways: --set clock=virtual is its simulated prediction.)
void check_real_clock(const json& c, std::size_t n) {
  const bool real = c["clock"] == "real";
  if (real && c["runtime"] == "sim")
    throw config_error("clock", "expected \"virtual\" with runtime \"sim\" (the simulated cluster has no "
                                "wall clock), got \"real\"; real time needs runtime \"threads\" or \"mpi\"");
  if (real)
    for (std::size_t i = 0; i < c["methods"].size(); ++i) {
      const std::string a = c["methods"][i]["algorithm"];
      if (a == "local_learning")
        throw config_error("methods[" + std::to_string(i) + "].algorithm",
                           "expected a server or round method with clock \"real\", got \"" + a +
                               "\": its real-clock runtime is not in heterograd-run yet (clock \"virtual\" runs it "
                               "on threads and MPI in the simulator's order)");
      if (a == "eager" && c["checkpoint_every"].get<std::uint64_t>() > 0)
        throw config_error("checkpoint_every", "expected 0 with methods[" + std::to_string(i) +
                                                   "] (eager) on clock \"real\": its ranks' rounds are not "
                                                   "checkpointed on the wall clock (clock \"virtual\" or runtime "
                                                   "\"sim\" checkpoint it)");
    }
  check_server_placement(c);
  const json& pl = c["workers"]["placement"];
  if (pl.empty()) return;
  if (!real)
    throw config_error("workers.placement", "expected [] with clock \"virtual\": core placement makes real "
                                            "speeds differ, which only a real-clock run sees");
  if (pl.size() != n)
    throw config_error("workers.placement", "expected one cpulist per worker (workers.count = " +
                                                std::to_string(n) + "), got " + std::to_string(pl.size()));
  std::vector<std::string> sets;
  for (const auto& x : pl) sets.push_back(x.get<std::string>());
  try {
    heterograd::runtime::placement_config::parse(sets, "workers.placement").validate(n, "workers.placement");
  } catch (const std::invalid_argument& e) {
    throw config_error("workers.placement", e.what());
  }
}

// Outages and slowdowns: a worker of the run, and an end after the begin.
void check_windows(const json& t, std::size_t n) {
  for (const char* key : {"outages", "slowdowns"}) {
    const json& ws = t[key];
    for (std::size_t i = 0; i < ws.size(); ++i) {
      const std::string p = std::string("workers.time.") + key + "[" + std::to_string(i) + "]";
      if (ws[i]["worker"].get<std::size_t>() >= n)
        throw config_error(p + ".worker", "expected a worker index < workers.count = " + std::to_string(n) +
                                              ", got " + ws[i]["worker"].dump());
      if (!(ws[i]["end"].get<double>() > ws[i]["begin"].get<double>()))
        throw config_error(p + ".end", "expected a time > begin (" + ws[i]["begin"].dump() + "), got " +
                                           ws[i]["end"].dump());
    }
  }
}

// The worker-time model's keys against the workers: one tau per worker, a valid trace,
// class counts, the OmniLearn presets' sizes, windows inside the run's workers.
void check_time_model(const json& c, std::size_t n) {
  const json& t = c["workers"]["time"];
  const std::string base = t["base"];
  if (base == "fixed" && t["tau"].size() != n)
    throw config_error("workers.time.tau", "expected " + std::to_string(n) +
                                               " times (one per worker), got " + std::to_string(t["tau"].size()));
  if (base == "trace") {
    std::vector<heterograd::sim::trace_row> rows;
    for (const auto& r : t["trace"])
      rows.push_back({static_cast<heterograd::sim::worker_id>(std::min<std::size_t>(r["worker"].get<std::size_t>(), UINT32_MAX)),
                      r["start"].get<double>(), r["duration"].get<double>()});
    try {
      (void)heterograd::sim::trace_replay(std::move(rows), n, heterograd::sim::replay_mode::start_time);
    } catch (const std::invalid_argument& e) {
      throw config_error("workers.time.trace", e.what());
    }
  }
  if (base == "speed_classes") {
    std::size_t total = 0;
    for (const auto& k : t["classes"]) total += k["count"].get<std::size_t>();
    if (total != n)
      throw config_error("workers.time.classes", "expected class counts summing to workers.count = " +
                                                     std::to_string(n) + ", got " + std::to_string(total));
  }
  if (base == "omnilearn") {
    const std::size_t want = t["mode"] == "bsp" ? 4 : 5;
    if (n != want)
      throw config_error("workers.count", "expected " + std::to_string(want) + " for the OmniLearn " +
                                              t["mode"].get<std::string>() + " presets, got " + std::to_string(n));
    if (t["levels"].empty()) throw config_error("workers.time.levels", "expected at least one level");
  }
  if (t["subset_delay"]["count"].get<std::size_t>() > n)
    throw config_error("workers.time.subset_delay.count", "expected at most workers.count = " + std::to_string(n));
  check_windows(t, n);
}

// name: the default output folder out/<name>, one path component; output: each folder name
// within what file systems take (NAME_MAX, 255 bytes), so that a long one is this error and
// not one from the file system in the middle of a run.
void check_names(const json& c) {
  const std::string name = c["name"];
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.size() > max_slug_bytes)
    throw config_error("name", "expected a name usable as a folder name (non-empty, no '/', not . or .., at most " +
                                   std::to_string(max_slug_bytes) + " bytes), got " + shown(c["name"]));
  const std::string out = c["output"];
  std::size_t begin = 0;
  while (begin <= out.size()) {
    const auto end = std::min(out.find('/', begin), out.size());
    if (end - begin > 255)
      throw config_error("output", "expected folder names of at most 255 bytes, got one of " +
                                       std::to_string(end - begin));
    begin = end + 1;
  }
}

// Each method writes into <output>/<slug(label)>: labels are unique, and so are their folders.
void check_labels(const json& c) {
  std::set<std::string> labels;
  std::map<std::string, std::size_t> slugs;  // a method's folder name -> its index
  for (std::size_t i = 0; i < c["methods"].size(); ++i) {
    const json& m = c["methods"][i];
    const std::string p = "methods[" + std::to_string(i) + "]";
    const std::string label = m["label"];
    const std::string folder = slug(label);
    if (label.empty() || folder.empty())
      throw config_error(p + ".label", "expected a non-empty label with a letter or digit");
    if (!labels.insert(label).second)
      throw config_error(p + ".label", "expected a unique label, got a second \"" + label + "\"");
    if (folder.size() > max_slug_bytes)
      throw config_error(p + ".label", "expected a label whose folder name (" + shown(json(folder)) + ", " +
                                           std::to_string(folder.size()) + " bytes) has at most " +
                                           std::to_string(max_slug_bytes) + " bytes");
    if (const auto [it, fresh] = slugs.emplace(folder, i); !fresh) {
      const std::string other = "methods[" + std::to_string(it->second) + "].label";
      throw config_error(p + ".label", "expected a label whose folder name differs from every other method's: " +
                                           shown(m["label"]) + " and " + other + " " +
                                           shown(c["methods"][it->second]["label"]) + " both write to \"" + folder +
                                           "\"");
    }
  }
}

// The baseline: a method's label; by default the first BSP method, else the first method.
void settle_baseline(json& c) {
  std::string& b = c["baseline"].get_ref<std::string&>();
  bool known = b.empty();
  for (const auto& m : c["methods"]) known = known || m["label"] == b;
  if (!known) throw config_error("baseline", "expected the label of one of the methods, got \"" + b + "\"");
  if (!b.empty()) return;
  b = c["methods"][0]["label"];
  for (const auto& m : c["methods"])
    if (m["algorithm"] == "bsp") {
      b = m["label"];
      return;
    }
}

// ---------------------------------------------------------------------------------------------
// Bounded work: what a configuration asks of the machine, estimated from the configuration
// alone (the worker-time model's part is preflight()'s, tools/driver/run_common.cpp). Sizes are
// doubles: the keys may hold absurd values whose products overflow 64 bits.

std::string num(double x) {
  std::ostringstream os;
  os.precision(6);
  os << x;
  return os.str();
}

std::string gib(double bytes) {
  std::ostringstream os;
  os.precision(3);
  os << bytes / double(1ull << 30) << " GiB";
  return os.str();
}

// A LibTorch preset's size from its keys, for the memory bound (heterograd/torch/models.hpp
// builds the exact model; these are upper estimates): parameters, and floats of activations
// and their gradients per sample.
struct torch_size {
  double params = 0, per_sample = 0;
};
torch_size torch_estimate(const model_settings& m) {
  if (m.preset == torch_preset::transformer) {
    const double w = static_cast<double>(m.width), l = static_cast<double>(m.layers), t = static_cast<double>(m.context);
    // Per block: attention 4 w^2, feed-forward 2 x 4 w^2, norms; embeddings and the head.
    return {l * (12 * w * w + 13 * w) + (256 + t) * w + 257 * w + 2 * w,
            2 * t * l * (16 * w + static_cast<double>(m.heads) * t) + 4 * t * 256};
  }
  const double ch = m.input.empty() ? 1 : static_cast<double>(m.input[0]);
  double px = 1;
  for (std::size_t i = 1; i < m.input.size(); ++i) px *= static_cast<double>(m.input[i]);
  if (m.preset == torch_preset::lenet5) return {(25 * ch + 1) * 6 + 2416 + (px / 16 + 1) * 16 * 120 + 11014, 2 * 12 * px};
  return {9 * 16 * ch + 80000, 2 * 16 * px * 12};  // resnet8
}

// The network's parameters (float) without local learning's heads, and the heads of the
// local-learning method with the most (each method runs alone): their count and the method's
// index (-1: none).
struct param_count {
  double network = 0, heads = 0;
  long heads_of = -1;
  double total() const { return network + heads; }
};
param_count count_params(const json& c) {
  const std::string d = c["data"]["dataset"];
  if (d == "scalar_quadratics") return {1};
  if (d == "worst_case_quadratic") return {c["data"]["dim"].get<double>()};
  const model_settings model = from_json(c["model"], model_settings{});
  const bool torch = model.kind == model_kind::torch;
  param_count r;
  double widest = 0, per_weight = 1;
  if (torch) {
    // A torch head's hidden layers are 3x3 convolutions over at most the widest map (ResNet-8:
    // 64; LeNet-5's widest output is fc1's 120), its last layer reads a 2 x 2 pooled map.
    r.network = torch_estimate(model).params;
    widest = model.preset == torch_preset::lenet5 ? 120 : 64;
    per_weight = 9;
  } else {
    std::vector<double> w{784};
    for (const std::size_t h : model.hidden_layers()) w.push_back(static_cast<double>(h));
    w.push_back(10);
    for (std::size_t i = 0; i + 1 < w.size(); ++i) r.network += (w[i] + 1) * w[i + 1];
    for (double x : w) widest = std::max(widest, x);
  }
  for (std::size_t i = 0; i < c["methods"].size(); ++i) {
    const json& m = c["methods"][i];
    if (m["algorithm"] != "local_learning") continue;
    double head = 0, in = widest;
    for (const auto& h : m["head_hidden"]) {
      head += (per_weight * in + 1) * h.get<double>();
      in = h.get<double>();
    }
    head += ((torch ? 4 : 1) * in + 1) * 10;
    head *= m["modules"].get<double>();
    if (head > r.heads) {
      r.heads = head;
      r.heads_of = static_cast<long>(i);
    }
  }
  return r;
}

// Model parameters (float), the largest local-learning heads included.
double model_params(const json& c) { return count_params(c).total(); }

// Gradient computations one model update (one round of the round methods) needs at least,
// and the key that sets it: the algorithm's row says (registry.hpp's work_rule).
std::pair<double, std::string> gradients_per_update(const json& c, std::size_t i, double n) {
  const json& m = c["methods"][i];
  const algorithm_row* row = row_of(m["algorithm"].get<std::string>());
  const std::string p = "methods[" + std::to_string(i) + "]";
  return row ? row->gradients_per_update(m, p, n) : one_gradient(m, p, n);
}

// Evaluations per run, gradients per update and per run, workers against the data and threads.
void check_work(const json& c, double n) {
  const json& hz = c["horizon"];
  const double dt = c["eval_interval"].get<double>();
  // Evaluations: at 0, dt, 2 dt, ... up to the horizon (virtual time, or epochs for local
  // learning, whose virtual time is epochs).
  bool local_learning = false;
  for (const auto& m : c["methods"]) local_learning = local_learning || m["algorithm"] == "local_learning";
  for (const char* k : {"time", "epochs"}) {
    if (!hz.contains(k) || (std::string(k) == "epochs" && !local_learning)) continue;
    const double evals = hz[k].get<double>() / dt;
    if (!(evals <= max_evaluations))
      throw config_error("eval_interval", "expected at most " + num(max_evaluations) +
                                              " evaluations per run, got horizon." + k + " / eval_interval = " +
                                              num(hz[k].get<double>()) + " / " + num(dt) + " = " + num(evals));
  }
  // Work per update, and per run for an updates horizon.
  for (std::size_t i = 0; i < c["methods"].size(); ++i) {
    const auto [g, key] = gradients_per_update(c, i, n);
    if (!(g <= max_gradients))
      throw config_error(key, "expected at most " + num(max_gradients) + " gradient computations per model update (" +
                                  c["methods"][i]["algorithm"].get<std::string>() + "), got " + num(g));
    if (hz.contains("updates") && !(g * hz["updates"].get<double>() <= max_gradients))
      throw config_error("horizon.updates", "expected at most " + num(max_gradients) +
                                                " gradient computations per run, got " + num(hz["updates"].get<double>()) +
                                                " updates x " + num(g) + " (" + key + ") = " +
                                                num(g * hz["updates"].get<double>()));
  }
  const double train = c["data"]["train_samples"].get<double>();
  if ((c["data"]["dataset"] == "fashion_mnist" || c["data"]["dataset"] == "text") && train > 0 && n > train)
    throw config_error("workers.count", "expected at most data.train_samples = " + num(train) +
                                            " workers (every worker needs a sample), got " + num(n));
  if (c["runtime"] == "threads" && n > static_cast<double>(max_thread_workers))
    throw config_error("workers.count", "expected at most " + std::to_string(max_thread_workers) +
                                            " workers with runtime \"threads\" (one thread each), got " + num(n));
}

// The largest mini-batch any method holds per worker (and the key that sets it), and the most
// rounds of parameters eager-SGD keeps (its staleness bound B).
struct batch_need {
  double batch = 0, eager_rounds = 0;
  std::string batch_key = "data.batch";
};

batch_need largest_batches(const json& c, bool images) {
  batch_need need;
  for (std::size_t i = 0; i < c["methods"].size(); ++i) {
    const json& m = c["methods"][i];
    const std::string p = "methods[" + std::to_string(i) + "]";
    const bool own = m["batch"] != c["data"]["batch"];  // else data.batch filled it in
    std::pair<double, std::string> b{m["batch"].get<double>(), own ? p + ".batch" : "data.batch"};
    const double train = c["data"]["train_samples"].get<double>();
    if ((images || c["data"]["dataset"] == "text") && train > 0 && b.first > train)
      throw config_error(b.second, "expected a mini-batch of at most data.train_samples = " + num(train) +
                                       " (the training set), got " + num(b.first));
    // OmniLearn (BSP and ASP) starts every worker at the method's batch: it must lie in the
    // controller's bounds (refused here, before any method runs, not by the library after the
    // others ran).
    const bool omnilearn = m["algorithm"] == "omnilearn" || m["algorithm"] == "omnilearn_asgd";
    if (omnilearn && (m["batch"] < m["min_batch"] || m["batch"] > m["max_batch"]))
      throw config_error(b.second, "expected a batch in [min_batch, max_batch] = [" + m["min_batch"].dump() + ", " +
                                       m["max_batch"].dump() + "] (" + p + ": OmniLearn's initial batch), got " +
                                       m["batch"].dump() + " (set " + p + ".batch or the bounds)");
    if (omnilearn) b = {m["max_batch"].get<double>(), p + ".max_batch"};
    if (m["algorithm"] == "biased_local_sgd" && images) {
      // Each redraw hands every worker shuffle_rounds x H_i x batch samples, the slow workers
      // disjoint ones: both must fit the training set (biased_config::validate, checked here
      // with the keys). speed_proportional H_i are at most the largest configured one.
      const double samples = train > 0 ? train : static_cast<double>(fashion_mnist_train);
      const auto& h = m["local_steps"];
      heterograd::algorithms::sync::biased_config plan;  // the library's redraw period
      plan.batch = m["batch"].get<std::size_t>();
      plan.shuffle_rounds = m["shuffle_rounds"].get<std::size_t>();
      double h_max = 0;
      for (const auto& x : h) {
        h_max = std::max(h_max, x.get<double>());
        plan.local_steps.push_back(x.get<std::size_t>());
      }
      const double redraw = static_cast<double>(plan.rounds_per_redraw(static_cast<std::size_t>(samples)));
      const double per_step = redraw * m["batch"].get<double>();
      double slow = 0, most = 0;
      for (const auto& w : m["slow_workers"]) {
        const std::size_t k = w.get<std::size_t>();
        slow += per_step * (m["speed_proportional"].get<bool>() || k >= h.size() ? h_max : h[k].get<double>());
      }
      most = per_step * h_max;
      if (slow > samples || most > samples)
        throw config_error(p + ".local_steps", "expected shuffle_rounds x H_i x batch (" + p +
                                                   ".batch) at most data.train_samples = " + num(samples) +
                                                   " for every worker and summed over the slow workers, got " +
                                                   num(std::max(slow, most)) + " samples per redraw");
    }
    if (m["algorithm"] == "biased_local_sgd") b = {b.first * m["ratio"].get<double>(), p + ".ratio"};
    if (m["algorithm"] == "eager") need.eager_rounds = std::max(need.eager_rounds, m["staleness_bound"].get<double>());
    if (b.first > need.batch) {
      need.batch = b.first;
      need.batch_key = b.second;
    }
  }
  return need;
}

// Memory: the run's estimate against this machine's.
void check_memory(const json& c, double n) {
  // Memory: each worker holds parameters, a gradient, optimizer state and double scratch of
  // the model's size (32 bytes a parameter), and mini-batch scratch (inputs, activations and
  // their gradients: 12 bytes a unit, per sample); eager-SGD keeps B rounds of parameters.
  const double P = model_params(c);
  const bool images = c["data"]["dataset"] == "fashion_mnist";
  const model_settings model = from_json(c["model"], model_settings{});
  const bool torch = model.kind == model_kind::torch && (images || c["data"]["dataset"] == "text");
  double units = 784 + 10;
  for (const std::size_t h : model.hidden_layers()) units += static_cast<double>(h);
  // Floats per sample (units x 3 in the formula below).
  if (torch) units = torch_estimate(model).per_sample / 3;
  const auto [batch, eager_rounds, batch_key] = largest_batches(c, images);
  const double limit = physical_memory_bytes();
  const double model_bytes = 32 * P * 4 + 4 * P * eager_rounds;
  const double worker_bytes = 32 * P * n;
  const double batch_bytes = images || torch ? 12 * units * batch * n : 0;
  const double need = model_bytes + worker_bytes + batch_bytes;
  if (!(need <= limit)) {
    const std::string what = "about " + gib(need) + " (" + num(n) + " workers x " + num(P) + " parameters" +
                             (images || torch ? ", mini-batches of " + num(batch) : std::string()) +
                             "), this machine has " + gib(limit);
    // The key to change: the model when it alone is too large, else eager-SGD's rounds when
    // they are, else the larger of the per-worker parts.
    std::string key = images && model.kind == model_kind::mlp ? "model.hidden"
                      : torch && model.preset == torch_preset::transformer ? "model.width"
                      : torch ? "model.input"
                      : images ? "model.kind"
                               : "data.dim";
    if (c["data"]["dataset"] == "scalar_quadratics") key = "workers.count";
    if (32 * P * 4 > limit / 2) {
      // the model's key, or the heads' when local learning's heads are the larger part
      const param_count pc = count_params(c);
      if (pc.heads > pc.network) key = "methods[" + std::to_string(pc.heads_of) + "].head_hidden";
    } else if (eager_rounds * 4 * P > limit / 2) {
      for (std::size_t i = 0; i < c["methods"].size(); ++i)
        if (c["methods"][i]["algorithm"] == "eager" && c["methods"][i]["staleness_bound"].get<double>() == eager_rounds)
          key = "methods[" + std::to_string(i) + "].staleness_bound";
    } else {
      key = worker_bytes >= batch_bytes ? "workers.count" : batch_key;
    }
    throw config_error(key, "expected a configuration that fits in memory: it needs " + what);
  }
}

}  // namespace

// The rules between keys (after each key's own): the time model against the workers, one
// horizon, the model and data, names and labels, each method's own rules (its row's check),
// precision, the real clock and checkpoints; then the defaults that depend on other keys.
void config_detail::check_cross(json& c) {
  const std::size_t n = c["workers"]["count"].get<std::size_t>();
  check_time_model(c, n);
  const json& h = c["horizon"];
  const int set = h.contains("time") + h.contains("epochs") + h.contains("updates");
  if (set != 1)
    throw config_error("horizon", "expected exactly one of time, epochs, updates; got " + std::to_string(set));
  const json& d = c["data"];
  check_model(c);
  check_samples(d);
  if (d["dataset"] == "scalar_quadratics" && d["centers"].size() != n)
    throw config_error("data.centers", "expected " + std::to_string(n) + " centers (one per worker), got " +
                                           std::to_string(d["centers"].size()));
  check_names(c);
  check_labels(c);
  for (std::size_t i = 0; i < c["methods"].size(); ++i) {
    json& m = c["methods"][i];
    if (const algorithm_row* r = row_of(m["algorithm"].get<std::string>()); r && r->check)
      r->check(m, c, "methods[" + std::to_string(i) + "]");
    if (m["batch"].get<std::size_t>() == 0) m["batch"] = d["batch"];
  }
  check_precision(c);
  check_real_clock(c, n);
  check_membership(c);
  check_paced_outages(c);
  if (c["runtime"] != "sim" && c["clock"] != "real" && c["checkpoint_every"].get<std::uint64_t>() > 0)
    throw config_error("checkpoint_every", "expected 0 with runtime " + c["runtime"].dump() + " and clock " +
                                               c["clock"].dump() +
                                               ": checkpoints (and --resume from one) need runtime \"sim\", or "
                                               "runtime \"threads\" or \"mpi\" with clock \"real\" (a consistent "
                                               "cut of the real run; the replayed order's messages in flight are not "
                                               "saved)");
  settle_baseline(c);
  if (c["output"].get<std::string>().empty()) c["output"] = "out/" + c["name"].get<std::string>();
  if (c["workers"]["time"]["reference_batch"].get<std::size_t>() == 0)
    c["workers"]["time"]["reference_batch"] = d["batch"];
  if (!c["target"].contains("window"))
    c["target"]["window"] = target_settings::default_window_intervals * c["eval_interval"].get<double>();
}

// The bounds on the complete document (check_cross has made it one).
void config_detail::check_bounds(const json& c) {
  const double n = static_cast<double>(experiment_of(c).workers.count);
  check_work(c, n);
  check_memory(c, n);
}
}  // namespace hgrun
