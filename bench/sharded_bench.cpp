// Cephalo runs (heterograd/algorithms/sharded/cephalo_run.hpp) over the inproc transport, three
// threads with injected compute time: worker d sleeps o + m · s_d after each micro-batch of m
// samples (s = 0.5, 1, 2 ms per sample, o = 1 ms per micro-batch), on top of the real MLP
// (64-256-256-10, sgd) step. Global batch B = 48.
//
// BM_cephalo_step/plan:P: one step of every rank (10 steps per thread start), items = samples.
//   plan:0  even split: m = 16, a = 1, f = 1/3 on every worker: the step waits for the slowest,
//           o + 16 · 2 ms = 33 ms of injected time.
//   plan:1  profiled, then planned: one step at m = 4, a = 4 and one at m = 16, a = 1 on every
//           worker (real time: its injected sleep and its MLP compute), each worker's (o_d, s_d)
//           fitted (balance::fit_device_profile), balance::plan_cephalo (max micro-batch 16,
//           memory ample): samples roughly in proportion to speed (B / Σ(1/s_d) = 48 / 3.5 per
//           ms ≈ 14 ms, plus the o's and integer rounding).
// Counters: predicted_ms, the plan's step_seconds (plan:1: the planner's model over the fitted
// profiles; plan:0: the injected time);
// ms_per_step, measured; m<d> and a<d>, the plan. Measured on the 2-core development machine
// (docs/sharded.md): even 34.7 ms, profiled and planned 17.4 ms per step (2.0x samples/s).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <thrust/system/cpp/execution_policy.h>

#include "bench_args.hpp"
#include "heterograd/algorithms/sharded/cephalo_run.hpp"
#include "heterograd/balance/cephalo.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/kernels/gemm.hpp"
#include "heterograd/nn/mlp.hpp"
#include "heterograd/optim/optimizers.hpp"

namespace {

namespace hg = heterograd;
namespace hb = heterograd::balance;
namespace hs = heterograd::algorithms::sharded;

constexpr std::size_t kGlobal = 48;
constexpr int kSteps = 10;
const std::vector<double> kSecondsPerSample = {0.5e-3, 1e-3, 2e-3};
constexpr double kSecondsPerMicroBatch = 1e-3;

hb::cephalo_plan even_plan(std::size_t m, std::size_t a) {
  hb::cephalo_plan p;
  for (int d = 0; d < 3; ++d) {
    hb::device_plan x;
    x.micro_batch = m;
    x.accumulation = a;
    x.shard_fraction = 1.0 / 3;
    x.compute_seconds = static_cast<double>(a) *
                        (kSecondsPerMicroBatch +
                         static_cast<double>(m) * kSecondsPerSample[static_cast<std::size_t>(d)]);
    p.step_seconds = std::max(p.step_seconds, x.compute_seconds);
    p.devices.push_back(x);
  }
  return p;
}

struct bench_setup {
  hg::nn::mlp<float> model{{64, 256, 256, 10}};
  std::vector<float> init, x;
  std::vector<std::int32_t> y;
  hs::cephalo_options o;
  bench_setup() {
    init.resize(model.num_params());
    model.init(hg::span<float>(init.data(), init.size()), 1);
    const hg::counter_rng rng(2, 3);
    x.resize(kGlobal * model.input_dim());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(rng.uniform(i, -1.0, 1.0));
    for (std::size_t j = 0; j < kGlobal; ++j) y.push_back(static_cast<std::int32_t>(j % 10));
    o.after_micro_batch = [](int r, std::size_t m) {
      const double s = kSecondsPerMicroBatch +
                       static_cast<double>(m) * kSecondsPerSample[static_cast<std::size_t>(r)];
      std::this_thread::sleep_for(std::chrono::duration<double>(s));
    };
  }
  /// `steps` steps of `plan` on 3 threads; each rank's last measurement.
  std::vector<hb::worker_measurement> run(const hb::cephalo_plan& plan, int steps) const {
    std::vector<hb::worker_measurement> seen(3);
    hg::comm::inproc::spawn(3, [&](hg::comm::inproc::communicator c) {
      hs::cephalo_worker<hg::optim::sgd> w(model, hg::optim::sgd({.lr = 0.01}), plan, kGlobal,
                                           c.rank(), init, o);
      const auto [b, e] = w.samples();
      const hg::nn::batch<float> mine{
          hg::span<const float>(x.data() + b * model.input_dim(), (e - b) * model.input_dim()),
          hg::span<const std::int32_t>(y.data() + b, e - b)};
      for (int t = 0; t < steps; ++t) w.step(thrust::cpp::par, c, mine);
      seen[static_cast<std::size_t>(c.rank())] = w.last_measurement();
    });
    return seen;
  }
};

/// Profile (one step at m = 4, a = 4 and one at m = 16, a = 1 on every worker, real time),
/// fit each worker's (o_d, s_d), plan.
hb::cephalo_plan measured_plan(const bench_setup& setup) {
  const auto a = setup.run(even_plan(4, 4), 1), b = setup.run(even_plan(16, 1), 1);
  std::vector<hb::device_profile> devices;
  for (std::size_t d = 0; d < 3; ++d) {
    const std::vector<hb::worker_measurement> seen = {a[d], b[d]};
    devices.push_back(hb::fit_device_profile(seen, 1e12));
  }
  const hb::training_memory_model mem{1e3, 1e6};
  return *hb::plan_cephalo(devices, mem, {.global_batch = kGlobal, .max_micro_batch = 16});
}

void BM_cephalo_step(benchmark::State& state) {
  hg::kernels::set_blas_threads(1);
  const bench_setup setup;
  const auto plan = state.range(0) == 1 ? measured_plan(setup) : even_plan(16, 1);
  for (auto _ : state) setup.run(plan, kSteps);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kGlobal * kSteps));
  state.counters["ms_per_step"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * kSteps / 1e3,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["predicted_ms"] = plan.step_seconds * 1e3;
  for (std::size_t d = 0; d < 3; ++d) {
    state.counters["m" + std::to_string(d)] = static_cast<double>(plan.devices[d].micro_batch);
    state.counters["a" + std::to_string(d)] = static_cast<double>(plan.devices[d].accumulation);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const hg_bench::flags f(argc, argv, {});
  hg_bench::register_product("BM_cephalo_step", BM_cephalo_step, {"plan"}, {{0, 1}})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  return hg_bench::run(argc, argv);
}
