// Decoupled local learning (DGL / InfoPro style) with PGL's periodic global guidance, against
// end-to-end backpropagation (#8; an unnumbered check of docs/references.md): the sequential
// reference of algorithms/decoupled, timed in epochs (there is no cluster to simulate), on the
// MLP or a torch preset (the problem's module_chain).
#include <optional>

#include "heterograd/algorithms/decoupled/local_learning.hpp"
#include "heterograd/algorithms/decoupled/pipeline.hpp"
#include "heterograd/algorithms/decoupled/transport_pipeline.hpp"
#include "described.hpp"
#include "optimizer.hpp"
#include "run.hpp"
#include "runners.hpp"
#include "runtimes.hpp"
#include "mpi_world.hpp"

namespace hgrun {

namespace {

namespace hg = heterograd;
namespace dc = heterograd::algorithms::decoupled;

// The configured optimizer as a module stepper (a copyable value; the optimizer state is
// created on the first step and saved in checkpoints).
// methods[i].nonfinite applies to each module's gradient here, where every module's step
// passes (module k is the "worker" of an error; the step is this stepper's count).
struct stepper {
  dc::optim_stepper<any_optimizer> opt;
  hg::algorithms::nonfinite_policy nonfinite = hg::algorithms::nonfinite_policy::fail;
  std::size_t module = 0;
  std::uint64_t steps = 0;
  std::vector<float> zeroed;
  stepper(const json& cfg, hg::algorithms::nonfinite_policy nf, std::size_t k)
      : opt(make_optimizer(cfg)), nonfinite(nf), module(k) {}
  void step(hg::span<float> p, hg::span<const float> g) {
    using nf = hg::algorithms::nonfinite_policy;
    const std::size_t bad = hg::algorithms::first_nonfinite(g);
    if (bad != g.size()) {
      if (nonfinite == nf::fail)
        throw hg::algorithms::nonfinite_gradient_error("local_learning", module, steps, "the module's step count",
                                                       bad, static_cast<double>(g[bad]));
      ++steps;
      if (nonfinite == nf::skip) return;
      zeroed.assign(g.begin(), g.end());
      for (auto& x : zeroed)
        if (!std::isfinite(x)) x = 0.0f;
      g = hg::span<const float>(zeroed.data(), zeroed.size());
    } else {
      ++steps;
    }
    opt.step(p, g);
  }
  template <class Archive>
  void serialize(Archive& ar) {
    opt.serialize(ar);
  }
  void check(std::size_t n, std::string_view where) const { opt.check(n, where); }
};

}  // namespace

chain_request chain_request_of(const json& config, const json& m) {
  chain_request r;
  const json& ms = config["methods"];
  for (std::size_t i = 0; i < ms.size(); ++i)
    if (ms[i]["label"] == m["label"]) r.key = "methods[" + std::to_string(i) + "]";
  r.modules = m["modules"].get<std::size_t>();
  r.split = m["split"].get<std::vector<std::string>>();
  r.head_hidden = m["head_hidden"].get<std::vector<std::size_t>>();
  return r;
}

// Local learning saves its modules and optimizer states.
bool local_learning_runner::checkpointable() { return true; }

namespace {

using learner = dc::local_learning<stepper, dc::any_chain>;

learner make_learner(context& ctx, dc::local_learning_config& cfg) {
  const json& m = ctx.method;
  // The model split into modules: the MLP at its dense layers, a torch preset at its children
  // (methods[i].split), over the same flat parameters the problem evaluates.
  dc::any_chain chain = ctx.prob.module_chain(chain_request_of(ctx.config, m));
  cfg = from_json(m, dc::local_learning_config{});
  const double epochs = ctx.exp.horizon.epochs.value_or(1.0);
  cfg.pgl.total_epochs = std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(epochs)));
  cfg.seed = ctx.seed;
  return learner(std::move(chain), ctx.prob.initial(), cfg,
                 [&](std::size_t k) { return stepper(m["optimizer"], nonfinite_of(m), k); });
}

// One local-learning run, timed in epochs: advance(t) trains until t x (iterations per epoch).
//
// Runtime "threads": the modules' local steps run as a pipeline, one thread per module
// (decoupled/pipeline.hpp), whose parameters after T batches are the sequential loop's bit for
// bit. PGL's global steps backpropagate through every module, so the pipeline runs the local
// iterations between two global steps and drains; the global step runs here.
//
// Runtime "mpi" (mpirun -np K, K = modules): rank k owns module k (its slice, head and
// optimizers) and runs it in the pipeline over the ranks (decoupled/transport_pipeline.hpp);
// only rank 0 draws batches. A PGL global step needs every slice: rank 0 broadcasts the batch,
// each rank k its slice, and every rank takes the same end-to-end step and keeps its own slice
// (transport_pipeline.hpp's global_step_over). After each advance the slices and heads are
// gathered on rank 0, which evaluates.
class local_run {
 public:
  explicit local_run(context& ctx)
      : ctx_(ctx), b_(ctx.batch()), per_epoch_(std::max<std::size_t>(1, ctx.prob.train_size() / b_)),
        ll_(make_learner(ctx, cfg_)), mpi_(ctx.runtime() == "mpi"), pipelined_(mpi_ || ctx.runtime() == "threads"),
        popt_{.queue_capacity = 4, .timeout = std::chrono::duration<double>(runtime_timeout_s), .max_rows = b_},
        busy_(ll_.modules(), 0.0) {
    // (every batch has at most b rows: a rank refuses a larger one before it sizes anything)
    if (mpi_) world_ = make_world();  // -np = modules: checked by mpi_ranks_needed
  }

  json run() {
    heterograd::sim::recorder rec(1);
    rec.set_seed(ctx_.seed);
    const auto params = evaluation_loop(ctx_, rec, hooks(), /*time_is_epochs=*/true);
    ctx_.extra["time_unit"] = "epochs";
    ctx_.extra["iterations"] = it_;
    ctx_.extra["global_steps"] = global_steps_;
    ctx_.extra["modules"] = ll_.modules();
    if (pipelined_) {
      ctx_.extra["runtime"] = ctx_.runtime();
      ctx_.extra["pipeline_busy_seconds"] = all_busy();
    }
    return finish(ctx_, rec, params);
  }

 private:
  bool global(std::uint64_t i) const { return cfg_.pgl.global(i, i / per_epoch_); }

  loop_hooks hooks() {
    loop_hooks h;
    h.advance = [this](double t) { return advance(t); };
    h.params = [this] { return model_vector(ll_.params()); };
    h.updates = [this] { return it_; };
    h.events = [this] { return it_; };
    h.epochs_done = [this] { return static_cast<double>(it_) / static_cast<double>(per_epoch_); };
    // The modules' parameters, heads and optimizer states, and the loop's counters (the batch
    // sampler's position is the problem's, saved by the evaluation loop).
    h.save = [this](heterograd::archive_writer& w) {
      ll_.serialize(w);
      w(it_, global_steps_);
    };
    h.load = [this](heterograd::archive_reader& r) {
      ll_.serialize(r);
      r(it_, global_steps_);
    };
    return h;
  }

  bool advance(double t) {
    const auto until = static_cast<std::uint64_t>(std::llround(t * static_cast<double>(per_epoch_)));
    while (it_ < until) {
      if (mpi_ && global(it_)) {
        ++global_steps_;
        global_step_mpi();
        ++it_;
      } else if (!pipelined_ || global(it_)) {
        ctx_.prob.next_batch(0, b_, x_, y_);
        if (global(it_)) ++global_steps_;
        ll_.step(hg::nn::batch<float>{x_, y_}, it_, it_ / per_epoch_);
        ++it_;
      } else {
        std::uint64_t end = it_ + 1;  // the local iterations [it, end) before the next global one
        while (end < until && !global(end)) ++end;
        run_segment(end);
      }
    }
    if (mpi_)  // rank 0 evaluates the whole network
      with_world<void>(world_, [&](const auto& c) { dc::gather_modules(c, ll_, popt_); });
    return true;
  }

  // Iterations [it, end) through the pipeline (threads, or the ranks under mpi).
  void run_segment(std::uint64_t end) {
    const std::uint64_t first = it_;
    auto draw = [this, first](std::size_t k) {
      single_threaded_here();  // module 0's thread (rank 0) draws the batches, in order
      ctx_.prob.next_batch(0, b_, x_, y_);
      return dc::activation_message{static_cast<std::size_t>(first + k), x_, y_};
    };
    const auto n = static_cast<std::size_t>(end - it_);
    using report = decltype(dc::run_pipeline(ll_, draw, n, popt_));
    const auto rep = mpi_ ? with_world<report>(world_, [&](const auto& c) { return dc::run_pipeline_over(c, ll_, draw, n, popt_); })
                          : dc::run_pipeline(ll_, draw, n, popt_);
    for (std::size_t k = 0; k < busy_.size(); ++k) busy_[k] += rep.busy_seconds[k];
    it_ = end;
  }

  void global_step_mpi() {
    with_world<void>(world_, [&](const auto& c) {
      if (c.rank() == 0) ctx_.prob.next_batch(0, b_, x_, y_);
      dc::global_step_over(c, ll_, x_, y_, popt_);
    });
  }

  // Real seconds per module; under mpi rank k timed module k only.
  std::vector<double> all_busy() {
    if (mpi_)
      return with_world<std::vector<double>>(world_, [&](const auto& c) {
        std::vector<double> all(ll_.modules(), 0.0);
        const double mine = busy_[static_cast<std::size_t>(c.rank())];
        c.allgather(hg::span<const double>(&mine, 1), hg::span<double>(all), {.timeout = popt_.timeout}).wait();
        return all;
      });
    return busy_;
  }

  context& ctx_;
  std::size_t b_, per_epoch_;
  dc::local_learning_config cfg_;
  learner ll_;
  bool mpi_, pipelined_;
  dc::pipeline_options popt_;
  std::vector<double> busy_;
  std::uint64_t it_ = 0;
  std::size_t global_steps_ = 0;
  std::vector<float> x_;
  std::vector<std::int32_t> y_;
  world_handle world_;  // runtime "mpi": MPI_COMM_WORLD
};

}  // namespace

json local_learning_runner::run(context& ctx) { return local_run(ctx).run(); }

}  // namespace hgrun
