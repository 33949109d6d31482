#pragma once
// Running one method of an experiment: the problem (data, model, gradient oracle, metrics),
// the simulated cluster (worker-time model, network cost), the evaluation loop with its
// horizon, progress reports and checkpoints, and the summary written next to the recorder's
// tables.

#include <chrono>
#include <cmath>
#include <limits>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "heterograd/core/archive.hpp"
#include "config.hpp"
#include "experiment.hpp"
#include "heterograd/algorithms/decoupled/chain.hpp"
#include "heterograd/algorithms/nonfinite.hpp"
#include "heterograd/runtime/evaluation.hpp"
#include "heterograd/sim/recorder.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace hgrun {

/// What a running method reports to the progress display.
struct progress_info {
  std::string label;
  double virtual_time = 0;
  double fraction = 0;      ///< of the horizon, in [0, 1]
  double best = 0;          ///< best value of the target metric so far
  bool has_best = false;
  std::uint64_t events = 0;
  double wall_seconds = 0;
  bool done = false;
};
using progress_fn = std::function<void(const progress_info&)>;

struct run_request {
  json config;                  ///< resolved (resolve())
  std::size_t method = 0;       ///< index into config["methods"]
  std::uint64_t seed = 1;
  std::filesystem::path dir;    ///< this method's output directory
  bool resume = false;          ///< continue from dir/checkpoint.bin when it exists
  std::uint64_t halt_after = 0; ///< test hook: stop (as if killed) after this many evaluations
  progress_fn progress;
  bool root = true;             ///< false on MPI ranks other than 0 (they write nothing)
};

/// The run stopped at --halt-after (after its checkpoint was written).
struct halted {};

/// Runs one method and writes its files into req.dir; returns its summary (also written as
/// summary.json).
json run_method(const run_request& req);

/// Checks what resolve() cannot (dataset files exist, checkpointing is possible for every
/// method); throws config_error.
void preflight(const json& config);

/// Whether the method's policy state can be saved (a serialize(Archive&) member).
bool algorithm_checkpointable(const std::string& algorithm);

// ---------------------------------------------------------------------------------------------
// Shared by the per-family runners (run_*.cpp).

/// A model's parameters as a method holds them: float32, or float64 (data.precision
/// "float64": the synthetic problems under the server methods on the simulator).
using model_vector = std::variant<std::vector<float>, std::vector<double>>;

/// What local learning asks a problem's model for: the network split into modules (method
/// `key`, "methods[i]", names the keys in errors).
struct chain_request {
  std::string key;
  std::size_t modules = 2;                 ///< methods[i].modules
  std::vector<std::string> split;          ///< methods[i].split (torch models)
  std::vector<std::size_t> head_hidden;    ///< methods[i].head_hidden
};

/// A local_learning method's request (run_local.cpp); `method` is one of config's methods.
chain_request chain_request_of(const json& config, const json& method);

/// The optimisation problem: data and model, a gradient oracle keyed by worker, and metrics.
/// Every problem runs in float32; the synthetic ones in float64 too (the overloads on double,
/// which the others refuse).
class problem {
 public:
  virtual ~problem() = default;
  virtual std::size_t dim() const = 0;
  virtual std::vector<float> initial() const = 0;
  virtual std::vector<double> initial64() const;
  virtual std::vector<std::string> metrics() const = 0;
  virtual std::vector<double> evaluate(std::span<const float> x) = 0;
  virtual std::vector<double> evaluate(std::span<const double> x);
  /// Either precision's model (the evaluation loop's).
  std::vector<double> evaluate(const model_vector& x) {
    return std::visit([this](const auto& v) { return evaluate(std::span(v.data(), v.size())); }, x);
  }
  /// Worker w's next mini-batch gradient of `batch` samples at x (the worker's own sample
  /// stream: deterministic in the order of calls); returns the batch's mean loss. The same
  /// draws in either precision.
  virtual double gradient(std::size_t w, std::size_t batch, std::span<const float> x,
                          std::span<float> g) = 0;
  virtual double gradient(std::size_t w, std::size_t batch, std::span<const double> x,
                          std::span<double> g);
  /// The initial model in the precision T.
  template <class T>
  std::vector<T> initial_as() const {
    if constexpr (std::is_same_v<T, double>) return initial64();
    else return initial();
  }
  /// Gradient on given samples for worker w (its own scratch: workers may call concurrently),
  /// with per-sample losses (biased local SGD's scores).
  virtual double gradient_on(std::size_t w, std::span<const std::size_t> indices, std::span<const float> x,
                             std::span<float> g, std::span<float> per_sample_loss);
  /// Worker w's next mini-batch itself (for methods that run their own model code).
  virtual void next_batch(std::size_t w, std::size_t batch, std::vector<float>& x,
                          std::vector<std::int32_t>& y);
  virtual std::size_t train_size() const = 0;
  /// How much one gradient of a `batch` mini-batch adds to `samples` (the quadratics count
  /// one per gradient).
  virtual std::size_t samples_per_gradient(std::size_t batch) const { return batch; }
  virtual void serialize(heterograd::archive_writer& w) = 0;
  virtual void serialize(heterograd::archive_reader& r) = 0;
  /// Worker w's sample stream as it is after `gradients` gradients that drew `drawn` samples
  /// in all (samples_per_gradient of each batch, summed): a resumed server's workers on MPI
  /// ranks, whose streams the checkpoint (written on the server's rank) does not hold, go on
  /// from there. The same draws follow as in a run that computed those gradients.
  virtual void seek(std::size_t w, std::uint64_t gradients, std::uint64_t drawn) = 0;
  /// What the summary records about the data (summary.json "data"; empty: nothing).
  virtual json facts() const { return json::object(); }
  /// The model as decoupled modules (local_learning); config_error naming r.key when the
  /// problem's model cannot be split.
  virtual heterograd::algorithms::decoupled::any_chain module_chain(const chain_request& r) {
    throw config_error(r.key + ".algorithm", "local_learning needs data.dataset \"fashion_mnist\" (an image classifier)");
  }
  std::uint64_t samples = 0;  ///< samples whose gradients were computed
};

/// The configured problem (`config`'s data and model keys, split over e's workers).
std::unique_ptr<problem> make_problem(const experiment& e, const json& config, std::uint64_t seed);

/// The configured worker-time model (type-erased: chosen at run time).
heterograd::sim::any_time_model make_time_model(const experiment& e, std::uint64_t seed,
                                                std::size_t batch);
/// Mean job time of each worker under the base model (for H_i and Rescaled's known tau).
std::vector<double> mean_job_times(const experiment& e, std::uint64_t seed, std::size_t batch);
/// Virtual seconds of one synchronisation of `params` floats over the configured network.
double sync_time(const experiment& e, std::size_t params);
/// Virtual seconds a server method's job pays to communicate: one exchange with the parameter
/// server, the model pulled and the gradient pushed (`params` floats each way, one worker on
/// the link: 2 (alpha + 4 params / beta) for kinds ps, ring and tree; `time` for fixed; 0 for
/// none). 0 as well on the real clock without real_scale, where jobs take their real time.
double exchange_time(const experiment& e, std::size_t params);
/// `model` with exchange_time() added to every job (the model itself when it is 0).
heterograd::sim::any_time_model with_exchange(heterograd::sim::any_time_model model, double exchange);

/// methods[i].nonfinite (the schema allows "fail", "skip", "zero"; default fail).
inline heterograd::algorithms::nonfinite_policy nonfinite_of(const json& method) {
  namespace ha = heterograd::algorithms;
  const auto* p = heterograd::value_of(ha::nonfinite_policies, method.value("nonfinite", std::string("fail")));
  return p ? *p : ha::nonfinite_policy::fail;
}

/// Everything a runner needs and what it produces.
struct context {
  const json& config;
  const json& method;
  std::uint64_t seed;
  std::filesystem::path dir;
  problem& prob;
  bool resume;
  std::uint64_t halt_after;
  progress_fn progress;
  std::chrono::steady_clock::time_point wall_start = std::chrono::steady_clock::now();
  double wall_before = 0;       ///< wall seconds of the run before a resume
  json extra = json::object();  ///< method-specific numbers for the summary
  /// False on MPI ranks other than 0: they run the method's loop without evaluating and
  /// write nothing.
  bool root = true;

  /// The configuration's experiment-level settings, read once per run.
  const experiment exp = experiment_of(config);

  std::size_t workers() const { return exp.workers.count; }
  const std::string& runtime() const { return exp.runtime; }
  std::size_t batch() const { return method["batch"].get<std::size_t>(); }
};

/// The exact stopping rule of horizon.updates and horizon.epochs, which every runtime applies
/// event by event: the run stops right after the first event at which the model version
/// (applied updates; rounds for the round methods) reaches `updates`, or at which the samples
/// processed reach `epochs` passes over the training set. A sample counts as processed when
/// the result of its gradient arrives (servers: every delivered job, applied, buffered or
/// discarded; interrupted jobs never arrive) or its round ends (round methods: every worker's
/// batch x local steps). So the update count equals horizon.updates exactly (one event applies
/// at most one update or ends one round), and the samples processed reach epochs x
/// training-set size and exceed it by less than one event's: one job's batch for a server,
/// one round's samples for the round methods.
struct stop_rule {
  std::uint64_t updates = std::numeric_limits<std::uint64_t>::max();
  double epochs = std::numeric_limits<double>::infinity();
  bool active() const { return updates != std::numeric_limits<std::uint64_t>::max() || std::isfinite(epochs); }
  bool reached(std::uint64_t u, double e) const { return u >= updates || e >= epochs; }
};
stop_rule stop_rule_of(const context& ctx);

/// The evaluation loop every runner shares. `advance(t)` runs the method up to virtual time t
/// (returns false when nothing is left to run), `params()` the model to evaluate, `updates()`
/// the model version, `save/load` the method's state for checkpoints.
struct loop_hooks {
  std::function<bool(double)> advance;
  std::function<model_vector()> params;
  std::function<std::uint64_t()> updates;
  std::function<std::uint64_t()> events;
  std::function<void(heterograd::archive_writer&)> save;
  std::function<void(heterograd::archive_reader&)> load;
  /// Passes over the training set so far (default: samples / training-set size).
  std::function<double()> epochs_done;
  /// Virtual time the method has reached. Runners that apply stop_rule_of(ctx) inside
  /// advance() set it: when the rule stops a run before the evaluation time t, the final
  /// evaluation is recorded at now() (< t), the time the horizon was reached. Without it the
  /// horizon is checked at evaluation times only.
  std::function<double()> now;
  /// Real-clock runs: wall seconds since the run's start (evaluations.csv's wall_seconds).
  std::function<double()> wall;
  /// Real-clock runs: stops the method at a consistent cut for a checkpoint (save() runs
  /// while it is held); returns what lets it go on.
  std::function<std::function<void()>()> hold;
};
/// The evaluation loop's parts that a runtime::run client uses too: the columns of
/// evaluations.csv (the problem's metrics, then epochs, samples, updates) and one row of them;
/// the client's part of a checkpoint (its identity first: another run's checkpoint is refused
/// naming the keys that differ, before anything of it is used; the wall seconds so far, the
/// summary's extra numbers, the problem's sample streams); the checkpoint to resume from
/// (checksums checked) and the write of one; a progress report.
std::vector<std::string> evaluation_columns(const context& ctx);
std::vector<double> evaluation_row(context& ctx, const model_vector& x, double passes, std::uint64_t updates);
double wall_so_far(const context& ctx);
void save_client(context& ctx, heterograd::archive_writer& w);
void load_client(context& ctx, heterograd::archive_reader& r);
std::optional<std::vector<std::byte>> checkpoint_to_resume(const context& ctx);
void write_checkpoint(const context& ctx, const std::vector<std::byte>& payload);
struct progress_point {
  double time = 0, epochs = 0;
  std::uint64_t updates = 0, events = 0;
  std::optional<double> best;
  bool done = false;
};
void report_progress(context& ctx, const progress_point& at);
/// The experiment's target as the library's rule on the problem's metric column (none: the
/// problem reports no such metric), and the summary's numbers from a run's times to it:
/// time_to_target, the sustained time (target.window); first_crossing; best.
std::optional<heterograd::runtime::target_rule> target_rule_of(const context& ctx);
void record_target(context& ctx, const heterograd::runtime::target_times& t);

/// Runs the loop; fills `rec` (evaluations) and returns the final parameters.
model_vector evaluation_loop(context& ctx, heterograd::sim::recorder& rec, const loop_hooks& h,
                                   bool time_is_epochs = false);

/// 0x and 16 hex digits (the summary's hashes).
std::string hex_of(std::uint64_t x);
/// The summary's params_hash of a model (FNV-1a of its bytes, as 0x + 16 hex digits).
std::string params_hash(std::span<const float> x);
std::string params_hash(std::span<const double> x);
std::string params_hash(const model_vector& x);

/// Writes the recorder's tables; returns the summary (null off the root), which run_method()
/// writes once the runner has added its own numbers.
json finish(context& ctx, const heterograd::sim::recorder& rec, const model_vector& params);

/// Sets this thread's OpenMP team to one thread (once per thread): real workers and servers
/// run their kernels single-threaded, as the simulated run does.
void single_threaded_here();


/// The MPI ranks `mpirun -np` must start for `config`'s methods under runtime "mpi" (workers
/// + 1 for the asynchronous family, whose rank 0 serves; workers for the round family);
/// throws config_error when the methods need different counts.
int mpi_ranks_needed(const json& config);
/// The error when mpirun started `got` ranks and the methods need mpi_ranks_needed(): it names
/// the key that sets the count (methods[i].modules for local learning, else runtime with
/// workers.count in the text) and the -np to use.
config_error mpi_ranks_mismatch(const json& config, int got);


}  // namespace hgrun
