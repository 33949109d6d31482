// Decoupled local learning (DGL / InfoPro style) with PGL's periodic global guidance, against
// end-to-end backpropagation (#8, papers.md "further optional checks"): the sequential
// reference of algorithms/decoupled, timed in epochs (there is no cluster to simulate).
#include <optional>

#include "heterograd/algorithms/decoupled/local_learning.hpp"
#include "heterograd/algorithms/decoupled/pipeline.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "run.hpp"

namespace hgrun {

namespace {

namespace hg = heterograd;
namespace dc = heterograd::algorithms::decoupled;

// The configured optimizer as a module stepper (a copyable value; the optimizer state is
// created on the first step and saved in checkpoints).
struct stepper {
  std::optional<dc::optim_stepper<hg::optim::sgd>> sgd;
  std::optional<dc::optim_stepper<hg::optim::momentum>> mom;
  explicit stepper(const json& cfg) {
    const double lr = cfg["lr"].get<double>(), wd = cfg["weight_decay"].get<double>();
    if (cfg["kind"] == "sgd") sgd.emplace(hg::optim::sgd({.lr = lr, .weight_decay = wd}));
    else mom.emplace(hg::optim::momentum({.lr = lr, .momentum = cfg["momentum"].get<double>(), .weight_decay = wd}));
  }
  void step(hg::span<float> p, hg::span<const float> g) {
    if (sgd) sgd->step(p, g);
    else mom->step(p, g);
  }
  template <class Archive>
  void serialize(Archive& ar) {
    if (sgd) sgd->serialize(ar);
    else mom->serialize(ar);
  }
};

}  // namespace

json run_local_learning(context& ctx) {
  const json& m = ctx.method;
  std::vector<std::size_t> sizes{784};
  for (const auto& h : ctx.config["model"]["hidden"]) sizes.push_back(h.get<std::size_t>());
  sizes.push_back(10);
  const hg::nn::mlp<float> net(sizes, {.label_smoothing = ctx.config["model"]["label_smoothing"].get<double>()});
  const std::size_t b = ctx.batch();
  const std::size_t per_epoch = std::max<std::size_t>(1, ctx.prob.train_size() / b);
  const double epochs = ctx.config["horizon"].contains("epochs") ? ctx.config["horizon"]["epochs"].get<double>() : 1.0;
  dc::local_learning_config cfg;
  cfg.modules = m["modules"].get<std::size_t>();
  cfg.head_hidden = m["head_hidden"].get<std::vector<std::size_t>>();
  cfg.pgl.period = m["pgl_period"].get<std::size_t>();
  cfg.pgl.epoch_fraction = m["pgl_epoch_fraction"].get<double>();
  cfg.pgl.total_epochs = std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(epochs)));
  cfg.seed = ctx.seed;
  dc::local_learning<stepper> ll(net, ctx.prob.initial(), cfg,
                                 [&](std::size_t) { return stepper(m["optimizer"]); });
  heterograd::sim::recorder rec(1);
  rec.set_seed(ctx.seed);
  std::uint64_t it = 0;
  std::vector<float> x;
  std::vector<std::int32_t> y;
  std::size_t global_steps = 0;
  loop_hooks h;
  // Runtime "threads": the modules' local steps run as a pipeline, one thread per module
  // (decoupled/pipeline.hpp), whose parameters after T batches are the sequential loop's bit
  // for bit. PGL's global steps backpropagate through every module, so the pipeline runs the
  // local iterations between two global steps and drains; the global step runs here.
  const bool pipelined = ctx.runtime() == "threads";
  std::vector<double> busy(ll.modules(), 0.0);  // pipeline: real seconds per module
  auto global = [&](std::uint64_t i) { return cfg.pgl.global(i, i / per_epoch); };
  // Virtual time is epochs here: advance(t) trains until t * (iterations per epoch).
  h.advance = [&](double t) {
    const auto until = static_cast<std::uint64_t>(std::llround(t * static_cast<double>(per_epoch)));
    while (it < until) {
      if (!pipelined || global(it)) {
        ctx.prob.next_batch(0, b, x, y);
        const std::size_t epoch = it / per_epoch;
        if (global(it)) ++global_steps;
        ll.step(hg::nn::batch<float>{x, y}, it, epoch);
        ++it;
        continue;
      }
      std::uint64_t end = it + 1;  // the local iterations [it, end) before the next global one
      while (end < until && !global(end)) ++end;
      const std::uint64_t first = it;
      const auto rep = dc::run_pipeline(
          ll,
          [&, first](std::size_t k) {
            single_threaded_here();  // module 0's thread draws the batches, in order
            ctx.prob.next_batch(0, b, x, y);
            return dc::activation_message{static_cast<std::size_t>(first + k), x, y};
          },
          static_cast<std::size_t>(end - it), {.queue_capacity = 4, .timeout = std::chrono::duration<double>(300.0)});
      for (std::size_t k = 0; k < busy.size(); ++k) busy[k] += rep.busy_seconds[k];
      it = end;
    }
    return true;
  };
  h.params = [&] { return ll.params(); };
  h.updates = [&] { return it; };
  h.events = [&] { return it; };
  h.epochs_done = [&] { return static_cast<double>(it) / static_cast<double>(per_epoch); };
  // The modules' parameters, heads and optimizer states, and the loop's counters (the batch
  // sampler's position is the problem's, saved by the evaluation loop).
  h.save = [&](writer& w) {
    ll.serialize(w);
    w(it, global_steps);
  };
  h.load = [&](reader& r) {
    ll.serialize(r);
    r(it, global_steps);
  };
  const auto params = evaluation_loop(ctx, rec, h, /*time_is_epochs=*/true);
  ctx.extra["time_unit"] = "epochs";
  ctx.extra["iterations"] = it;
  ctx.extra["global_steps"] = global_steps;
  ctx.extra["modules"] = ll.modules();
  if (pipelined) {
    ctx.extra["runtime"] = ctx.runtime();
    ctx.extra["pipeline_busy_seconds"] = busy;
  }
  return finish(ctx, rec, params);
}

}  // namespace hgrun
