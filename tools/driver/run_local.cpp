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
#ifdef HG_HAS_MPI
#include "heterograd/comm/mpi.hpp"
#endif

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

// run_local_learning saves its modules and optimizer states.
bool local_learning_checkpointable() { return true; }

json run_local_learning(context& ctx) {
  const json& m = ctx.method;
  // The model split into modules: the MLP at its dense layers, a torch preset at its children
  // (methods[i].split), over the same flat parameters the problem evaluates.
  dc::any_chain chain = ctx.prob.module_chain(chain_request_of(ctx.config, m));
  const std::size_t b = ctx.batch();
  const std::size_t per_epoch = std::max<std::size_t>(1, ctx.prob.train_size() / b);
  const double epochs = ctx.exp.horizon.epochs.value_or(1.0);
  auto cfg = from_json(m, dc::local_learning_config{});
  cfg.pgl.total_epochs = std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(epochs)));
  cfg.seed = ctx.seed;
  dc::local_learning<stepper, dc::any_chain> ll(std::move(chain), ctx.prob.initial(), cfg, [&](std::size_t k) {
    return stepper(m["optimizer"], nonfinite_of(m), k);
  });
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
  //
  // Runtime "mpi" (mpirun -np K, K = modules): rank k owns module k (its slice, head and
  // optimizers) and runs it in the pipeline over the ranks (decoupled/transport_pipeline.hpp);
  // only rank 0 draws batches. A PGL global step needs every slice: rank 0 broadcasts the
  // batch, each rank k its slice, and every rank takes the same end-to-end step and keeps its
  // own slice (decoupled/transport_pipeline.hpp's global_step_over).
  // After each advance the slices and heads are gathered on rank 0, which evaluates.
  const bool threads = ctx.runtime() == "threads", mpi = ctx.runtime() == "mpi";
  const bool pipelined = threads || mpi;
  // Every batch has at most b rows: a rank refuses a larger one before it sizes anything.
  const dc::pipeline_options popt{.queue_capacity = 4, .timeout = std::chrono::duration<double>(runtime_timeout_s),
                                  .max_rows = b};
#ifdef HG_HAS_MPI
  std::optional<hg::comm::mpi::communicator> comm;
  if (mpi) comm.emplace(MPI_COMM_WORLD);  // -np = modules: checked by mpi_ranks_needed
  auto global_step_mpi = [&] {
    if (comm->rank() == 0) ctx.prob.next_batch(0, b, x, y);
    dc::global_step_over(*comm, ll, x, y, popt);
  };
#else
  if (mpi) rt_detail::no_mpi();
  auto global_step_mpi = [] {};
#endif
  std::vector<double> busy(ll.modules(), 0.0);  // pipeline: real seconds per module
  auto global = [&](std::uint64_t i) { return cfg.pgl.global(i, i / per_epoch); };
  // Virtual time is epochs here: advance(t) trains until t * (iterations per epoch).
  h.advance = [&](double t) {
    const auto until = static_cast<std::uint64_t>(std::llround(t * static_cast<double>(per_epoch)));
    while (it < until) {
      if (mpi && global(it)) {
        ++global_steps;
        global_step_mpi();
        ++it;
        continue;
      }
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
      auto draw = [&, first](std::size_t k) {
        single_threaded_here();  // module 0's thread (rank 0) draws the batches, in order
        ctx.prob.next_batch(0, b, x, y);
        return dc::activation_message{static_cast<std::size_t>(first + k), x, y};
      };
      const auto n = static_cast<std::size_t>(end - it);
#ifdef HG_HAS_MPI
      const auto rep = mpi ? dc::run_pipeline_over(*comm, ll, draw, n, popt) : dc::run_pipeline(ll, draw, n, popt);
#else
      const auto rep = dc::run_pipeline(ll, draw, n, popt);
#endif
      for (std::size_t k = 0; k < busy.size(); ++k) busy[k] += rep.busy_seconds[k];
      it = end;
    }
#ifdef HG_HAS_MPI
    if (mpi) dc::gather_modules(*comm, ll, popt);  // rank 0 evaluates the whole network
#endif
    return true;
  };
  h.params = [&] { return ll.params(); };
  h.updates = [&] { return it; };
  h.events = [&] { return it; };
  h.epochs_done = [&] { return static_cast<double>(it) / static_cast<double>(per_epoch); };
  // The modules' parameters, heads and optimizer states, and the loop's counters (the batch
  // sampler's position is the problem's, saved by the evaluation loop).
  h.save = [&](heterograd::archive_writer& w) {
    ll.serialize(w);
    w(it, global_steps);
  };
  h.load = [&](heterograd::archive_reader& r) {
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
#ifdef HG_HAS_MPI
    if (mpi) {  // rank k timed module k only
      std::vector<double> all(ll.modules(), 0.0);
      const double mine = busy[static_cast<std::size_t>(comm->rank())];
      comm->allgather(hg::span<const double>(&mine, 1), hg::span<double>(all),
                      {.timeout = popt.timeout}).wait();
      busy = all;
    }
#endif
    ctx.extra["pipeline_busy_seconds"] = busy;
  }
  return finish(ctx, rec, params);
}

}  // namespace hgrun
