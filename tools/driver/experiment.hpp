#pragma once
// The experiment-level settings of a resolved configuration as typed values, read from the
// document once (experiment_of) after resolve() has checked it and filled every default: the
// runners, the preflight and main read these, not the JSON. The methods stay JSON rows (each
// algorithm's registry row reads its own keys); config.cpp's schema is the one place a
// document is checked, and its keys for run_settings, model_settings and network_settings are
// made from their descriptions here (the other sections' keys are still written there).

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "config.hpp"
#include "described.hpp"
#include "elastic.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace hgrun {

/// workers.time: the worker-time model's settings (sim/worker_time.hpp).
struct worker_time_settings {
  std::string base;  ///< fixed, linear, sqrt, speed_classes, omnilearn
  bool permute = true;
  std::vector<double> tau;                                ///< fixed
  std::vector<heterograd::sim::trace_row> trace;          ///< trace
  std::vector<heterograd::sim::speed_class> classes;      ///< speed_classes, in worker order
  std::vector<heterograd::sim::heterogeneity_level> levels;  ///< omnilearn, one per phase
  heterograd::sim::omnilearn_mode mode = heterograd::sim::omnilearn_mode::bsp;
  double phase_length = 0;
  heterograd::sim::phase_unit phase_unit = heterograd::sim::phase_unit::jobs;
  double scale = 1;
  bool batch_scaling = false;
  std::size_t reference_batch = 0;  ///< resolve() replaced 0 by data.batch
  bool half_normal_noise = false;
  double noise_scale = 0;
  heterograd::sim::noise_growth noise_growth = heterograd::sim::noise_growth::variance_linear;
  std::size_t delayed = 0;  ///< subset_delay.count: workers delayed per step
  double delay = 0;         ///< subset_delay.delay
  std::vector<heterograd::sim::time_window> outages, slowdowns;
};

/// workers: the cluster.
struct workers_settings {
  std::size_t count = 0;
  worker_time_settings time;
  /// Real-time runs: one cpulist per worker (runtime/placement.hpp), or none.
  std::vector<std::string> placement;
  /// Real-time server methods on threads: the server thread's cpulist, or "" (not pinned).
  std::string server_placement;
};

/// network.kind: how a synchronisation is timed.
enum class network_kind { none, fixed, ring, tree, ps };
inline constexpr heterograd::choice<network_kind> network_kinds[] = {
    {"none", network_kind::none}, {"fixed", network_kind::fixed}, {"ring", network_kind::ring},
    {"tree", network_kind::tree}, {"ps", network_kind::ps}};

/// network: the cost of one synchronisation (sim/network.hpp), described once: the schema's
/// network keys (config.cpp) are made from this description.
struct network_settings {
  network_kind kind = network_kind::none;
  double time = 0;        ///< fixed
  double latency = 1e-5;  ///< alpha
  double bandwidth = 1e9;  ///< beta

  static constexpr auto description() {
    using heterograd::describe_field;
    return heterograd::describe(
        "network",
        describe_field("kind", &network_settings::kind,
                       "none, a fixed time per sync, or a collective's alpha-beta cost", network_kinds),
        describe_field("time", &network_settings::time, "fixed: seconds per synchronisation",
                       heterograd::at_least(0)),
        describe_field("latency", &network_settings::latency, "alpha: seconds per message",
                       heterograd::at_least(0)),
        describe_field("bandwidth", &network_settings::bandwidth, "beta: bytes per second",
                       heterograd::above(0)));
  }
};

/// horizon: exactly one of the three is set.
struct horizon_settings {
  std::optional<double> time, epochs;
  std::optional<std::uint64_t> updates;
};

/// target: what "reached" means in the tables, and for how long it must hold. A run's time to
/// target is runtime::target_times' sustained time: the first evaluation t that reaches the
/// target such that the evaluations from t up to the first one at or after t + window all
/// reach it (a run that ends inside the window has none); its first crossing (window 0) is
/// reported beside it (summary.json's first_crossing).
struct target_settings {
  std::string metric;
  double value = 0;
  bool below = false;
  double window = 0;  ///< model units (the evaluations' time axis: epochs for local_learning)

  /// target.window where the configuration gives none, in evaluation intervals (resolve()
  /// writes default_window_intervals x eval_interval into the resolved configuration). Two:
  /// three evaluations in a row must reach the target. On a curve hovering at it (each
  /// evaluation reaching it with probability 1/2, say) three given evaluations all reach it by
  /// chance 1 time in 8, one alone (the first crossing) 1 time in 2; a curve that crossed for
  /// good is still dated where it crossed (known two intervals later). In intervals, so that it
  /// follows each experiment's grid (virtual time, epochs or model units of the wall clock).
  static constexpr double default_window_intervals = 2;
};

/// The top-level numbers every method's run shares, described once: the schema's keys seed,
/// eval_interval and checkpoint_every (config.cpp) are made from this description.
struct run_settings {
  std::uint64_t seed = 1;
  double eval_interval = 1;  ///< the schema requires it (no default is written)
  std::uint64_t checkpoint_every = 0;

  static constexpr auto description() {
    using heterograd::describe_field;
    return heterograd::describe(
        "experiment",
        describe_field("seed", &run_settings::seed, "seed of every random draw", heterograd::at_least(0)),
        describe_field("eval_interval", &run_settings::eval_interval,
                       "virtual time between evaluations (epochs for local_learning)", heterograd::above(0)),
        describe_field("checkpoint_every", &run_settings::checkpoint_every,
                       "evaluations between checkpoints (0: none)", heterograd::at_least(0)));
  }
};

/// model.kind: a multi-layer perceptron, softmax regression (no hidden layer), or a LibTorch
/// preset (model.preset; heterograd/torch/models.hpp, built with HG_WITH_LIBTORCH).
enum class model_kind { mlp, softmax, torch };
inline constexpr heterograd::choice<model_kind> model_kinds[] = {
    {"mlp", model_kind::mlp}, {"softmax", model_kind::softmax}, {"torch", model_kind::torch}};

/// model.preset (kind torch): a LeNet-5-style CNN or ResNet-8 on images, a byte-level causal
/// transformer on text.
enum class torch_preset { lenet5, resnet8, transformer };
inline constexpr heterograd::choice<torch_preset> torch_presets[] = {
    {"lenet5", torch_preset::lenet5}, {"resnet8", torch_preset::resnet8}, {"transformer", torch_preset::transformer}};

/// model: the network, described once: the schema's model keys (config.cpp) are made from
/// this description.
struct model_settings {
  model_kind kind = model_kind::mlp;
  std::vector<std::size_t> hidden{64};
  double label_smoothing = 0;
  torch_preset preset = torch_preset::lenet5;
  std::vector<std::size_t> input{1, 28, 28};
  std::size_t threads = 0;
  std::size_t context = 128;
  std::size_t layers = 2;
  std::size_t width = 128;
  std::size_t heads = 4;

  static constexpr auto description() {
    using heterograd::describe_field;
    return heterograd::describe(
        "model", describe_field("kind", &model_settings::kind, "model", model_kinds),
        describe_field("hidden", &model_settings::hidden, "hidden layer widths (mlp)", heterograd::at_least(1)),
        describe_field("label_smoothing", &model_settings::label_smoothing, "label smoothing",
                       heterograd::closed_open(0, 1)),
        describe_field("preset", &model_settings::preset, "kind torch: the LibTorch model", torch_presets),
        describe_field("input", &model_settings::input,
                       "kind torch, image presets: an input's channels, height and width (their product is "
                       "the dataset's features)",
                       heterograd::closed(1, 4096)),
        describe_field("threads", &model_settings::threads,
                       "kind torch: LibTorch's intra-op threads per worker, per module for local_learning "
                       "(0: one, whatever the cores and --jobs: results do not depend on them)",
                       heterograd::closed(0, 1024)),
        describe_field("context", &model_settings::context, "preset transformer: bytes a sequence holds",
                       heterograd::closed(1, 4096)),
        describe_field("layers", &model_settings::layers, "preset transformer: attention blocks",
                       heterograd::closed(1, 64)),
        describe_field("width", &model_settings::width, "preset transformer: model dimension (a multiple of heads)",
                       heterograd::closed(1, 4096)),
        describe_field("heads", &model_settings::heads, "preset transformer: attention heads",
                       heterograd::closed(1, 64)));
  }
  /// The hidden layers the network has (none for softmax regression).
  std::vector<std::size_t> hidden_layers() const { return kind == model_kind::mlp ? hidden : std::vector<std::size_t>{}; }
};

/// One resolved experiment's settings (not its methods).
struct experiment {
  std::string name;
  run_settings run;
  model_settings model;
  std::string runtime;  ///< sim, threads, mpi
  /// clock "real" (threads, mpi): workers run on the wall clock; results arrive as they come.
  bool real_clock = false;
  /// Wall seconds per model time unit in a real-clock run: jobs are paced to the worker-time
  /// model's durations (runtime/pacing.hpp). 0: not paced (times are wall seconds).
  double real_scale = 0;
  /// data.precision "float64": the model and its gradients in double (the synthetic problems
  /// under the server methods on the simulator; resolve() refuses the rest).
  bool float64 = false;
  workers_settings workers;
  network_settings network;
  horizon_settings horizon;
  target_settings target;
  membership_settings membership;  ///< elastic runs (elastic.hpp)
  /// Bytes of one parameter as the network carries it.
  std::size_t value_bytes() const { return float64 ? sizeof(double) : sizeof(float); }
};

namespace detail {

inline heterograd::sim::heterogeneity_level level_of(const std::string& s) {
  using l = heterograd::sim::heterogeneity_level;
  return s == "HL1" ? l::hl1 : s == "HL2" ? l::hl2 : s == "HL4" ? l::hl4 : l::hl8;
}

inline std::vector<heterograd::sim::time_window> windows_of(const json& list, bool slowdown) {
  std::vector<heterograd::sim::time_window> out;
  for (const auto& o : list)
    out.push_back({o["worker"].get<heterograd::sim::worker_id>(), o["begin"].get<double>(), o["end"].get<double>(),
                   slowdown ? o["factor"].get<double>() : std::numeric_limits<double>::infinity()});
  return out;
}

}  // namespace detail

/// workers.time.trace as the simulator's replay of it, by start time.
inline heterograd::sim::trace_replay trace_model_of(const workers_settings& w) {
  return heterograd::sim::trace_replay(w.time.trace, w.count, heterograd::sim::replay_mode::start_time);
}

/// Reads a document resolve() returned (every key present, every value checked).
inline experiment experiment_of(const json& c) {
  namespace sim = heterograd::sim;
  experiment e;
  e.name = c["name"].get<std::string>();
  e.run = from_json(c, run_settings{});
  e.model = from_json(c["model"], model_settings{});
  e.runtime = c["runtime"].get<std::string>();
  e.real_clock = c["clock"] == "real";
  e.real_scale = c.contains("real_scale") ? c["real_scale"].get<double>() : 0.0;
  e.float64 = c["data"]["precision"] == "float64";
  e.workers.count = c["workers"]["count"].get<std::size_t>();
  e.workers.placement = c["workers"]["placement"].get<std::vector<std::string>>();
  e.workers.server_placement = c["workers"]["server_placement"].get<std::string>();
  const json& t = c["workers"]["time"];
  worker_time_settings& w = e.workers.time;
  w.base = t["base"].get<std::string>();
  w.permute = t["permute"].get<bool>();
  w.tau = t["tau"].get<std::vector<double>>();
  for (const auto& k : t["classes"]) w.classes.push_back({k["count"].get<std::size_t>(), k["time"].get<double>()});
  for (const auto& r : t["trace"])
    w.trace.push_back({static_cast<sim::worker_id>(r["worker"].get<std::size_t>()), r["start"].get<double>(),
                       r["duration"].get<double>()});
  for (const auto& l : t["levels"]) w.levels.push_back(detail::level_of(l.get<std::string>()));
  w.mode = t["mode"] == "bsp" ? sim::omnilearn_mode::bsp : sim::omnilearn_mode::asp;
  w.phase_length = t["phase_length"].get<double>();
  w.phase_unit = t["phase_unit"] == "jobs" ? sim::phase_unit::jobs : sim::phase_unit::time;
  w.scale = t["scale"].get<double>();
  w.batch_scaling = t["batch_scaling"].get<bool>();
  w.reference_batch = t["reference_batch"].get<std::size_t>();
  w.half_normal_noise = t["noise"] == "half_normal";
  w.noise_scale = t["noise_scale"].get<double>();
  const std::string g = t["noise_growth"];
  w.noise_growth = g == "variance_linear" ? sim::noise_growth::variance_linear
                   : g == "stddev_linear" ? sim::noise_growth::stddev_linear
                                          : sim::noise_growth::constant;
  w.delayed = t["subset_delay"]["count"].get<std::size_t>();
  w.delay = t["subset_delay"]["delay"].get<double>();
  w.outages = detail::windows_of(t["outages"], false);
  w.slowdowns = detail::windows_of(t["slowdowns"], true);
  e.network = from_json(c["network"], network_settings{});
  const json& hz = c["horizon"];
  if (hz.contains("time")) e.horizon.time = hz["time"].get<double>();
  if (hz.contains("epochs")) e.horizon.epochs = hz["epochs"].get<double>();
  if (hz.contains("updates")) e.horizon.updates = hz["updates"].get<std::uint64_t>();
  e.membership = membership_of(c);
  e.target = {c["target"]["metric"].get<std::string>(), c["target"]["value"].get<double>(),
              c["target"]["below"].get<bool>(), c["target"].at("window").get<double>()};
  return e;
}

}  // namespace hgrun
