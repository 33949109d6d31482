// The models suite's LibTorch part (built into hg-bench-models with the torch component): a
// training step of the LibTorch presets inside heterograd against the same model in a plain
// LibTorch loop on the same threads, and heterograd's local SGD in samples per second (which
// bench/compare/torch_ddp.py measures for PyTorch's DistributedDataParallel on Gloo).
//
//   BM_torch_plain_step/preset:P/ranks:R        R threads, each its own replica: forward,
//                                               cross-entropy, backward, torch::optim::SGD
//                                               (momentum 0.9) -- no averaging
//   BM_torch_local_sgd_step/preset:P/ranks:R/period:H
//                                               R inproc ranks (threads), each a flat_module
//                                               laid over its replica and the sync layer's
//                                               local_sgd_worker (heterograd's momentum kernel,
//                                               the replicas averaged every H steps)
//   BM_torch_async_step/preset:P                one thread: an asynchronous worker's job (the
//                                               server's parameters copied to the worker, its
//                                               gradient, model_server::apply)
//   BM_torch_overhead/preset:P/kind:K           the overhead targets, the two loops side by
//                                               side (kind 0 async vs plain on 1 thread, 1
//                                               local SGD H=8 vs plain on 2 threads): counter
//                                               ratio = heterograd's speed / the plain loop's
//
//   BM_torch_pipeline/schedule:K/stages:S/micro_batches:M
//                                               ResNet-8 split into S LibTorch stages
//                                               (torch/stages.hpp; S = 2: stem layer1 |
//                                               layer2 ..., S = 3: | layer2 | layer3 ...), one
//                                               inproc thread a stage (run_pipeline_over,
//                                               synchronous, K 0 GPipe, 1 1F1B), 8 steps of a
//                                               32-image batch in M micro-batches, beside the
//                                               same 8 steps of sequential_step on one thread;
//                                               counters: step_ms and sequential_step_ms,
//                                               speedup, bubble (measured idle / (busy + idle))
//                                               bubble_theory ((S - 1) / (M + S - 1)) and
//                                               bubble_theory_measured_stages (the same for
//                                               the stages' measured busy times)
//
// preset 0 is LeNet-5, 1 ResNet-8 (batch 32 per rank of standardised Fashion-MNIST), 2 the
// byte-level transformer (8 sequences of 128 bytes per rank); one LibTorch (OpenMP) thread and
// one OpenBLAS thread per rank. An iteration is 32 steps of every rank; counters:
// samples_per_second (images or sequences, all ranks), step_ms (one rank's step).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "heterograd/algorithms/async/server.hpp"
#include "heterograd/algorithms/pipeline.hpp"
#include "heterograd/algorithms/sync/workers.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/torch/module.hpp"
#include "heterograd/torch/stages.hpp"
#include "torch_presets.hpp"

namespace hg_bench_torch {

namespace {

namespace hg = heterograd;
namespace lt = heterograd::libtorch;
namespace sync_api = heterograd::algorithms::sync;

constexpr std::size_t steps = 32;  // per rank and benchmark iteration

void counters(benchmark::State& state, std::size_t ranks) {
  const double per_iteration = static_cast<double>(steps * ranks) * static_cast<double>(batch_of_preset(state.range(0)));
  state.counters["samples_per_second"] =
      benchmark::Counter(per_iteration, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["step_ms"] = benchmark::Counter(static_cast<double>(steps) / 1e3,
                                                 benchmark::Counter::kIsIterationInvariantRate |
                                                     benchmark::Counter::kInvert);
}

// 32 steps of every rank of a plain LibTorch loop: R threads, each its own replica.
struct plain_runner {
  std::int64_t preset;
  std::size_t R;
  std::vector<torch::nn::Sequential> nets;
  std::vector<std::unique_ptr<torch::optim::SGD>> opts;
  plain_runner(std::int64_t p, std::size_t ranks) : preset(p), R(ranks) {
    for (std::size_t r = 0; r < R; ++r) {
      nets.push_back(make(preset));
      opts.push_back(std::make_unique<torch::optim::SGD>(nets.back()->parameters(),
                                                         torch::optim::SGDOptions(lr).momentum(momentum)));
    }
  }
  void block(std::size_t s0, std::size_t n = steps) {
    std::vector<std::thread> th;
    for (std::size_t r = 0; r < R; ++r)
      th.emplace_back([&, r] {
        one_thread();
        for (std::size_t s = s0; s < s0 + n; ++s) {
          const auto [x, y] = batch_of(preset, s, r, R);
          opts[r]->zero_grad();
          loss_of(*nets[r], x, y).backward();
          opts[r]->step();
        }
      });
    for (auto& t : th) t.join();
  }
};

// 32 steps of every rank of heterograd's local SGD over R inproc ranks.
struct local_sgd_runner {
  std::int64_t preset;
  int R;
  std::size_t H;
  std::vector<std::unique_ptr<lt::flat_module>> models;
  local_sgd_runner(std::int64_t p, int ranks, std::size_t period) : preset(p), R(ranks), H(period) {
    for (int r = 0; r < R; ++r) models.push_back(std::make_unique<lt::flat_module>(make(preset).ptr()));
  }
  void block(std::size_t s0, std::size_t n = steps) {
    hg::comm::inproc::spawn(R, [&](hg::comm::inproc::communicator c) {
      one_thread();
      const auto r = static_cast<std::size_t>(c.rank());
      lt::flat_module& m = *models[r];
      sync_api::local_sgd_config cfg;
      cfg.period = H;
      sync_api::local_sgd_worker<float, hg::optim::momentum, hg::comm::inproc::communicator> w(
          c, hg::optim::momentum({.lr = lr, .momentum = momentum}), m.params(),
          std::vector<std::size_t>(static_cast<std::size_t>(R), static_cast<std::size_t>(batch_of_preset(preset))), cfg);
      auto& net = dynamic_cast<torch::nn::SequentialImpl&>(m.module());
      for (std::size_t s = s0; s < s0 + n; ++s) {
        const auto [x, y] = batch_of(preset, s, r, static_cast<std::size_t>(R));
        m.zero_grad();
        loss_of(net, x, y).backward();
        (void)w.step(m.params(), m.grads());
      }
    });
  }
};

// 32 jobs of an asynchronous worker on this thread: the server's parameters copied to the
// worker, its gradient, model_server::apply.
struct async_runner {
  std::int64_t preset;
  lt::flat_module worker;
  hg::algorithms::async::model_server<float, hg::optim::momentum> server;
  explicit async_runner(std::int64_t p)
      : preset(p), worker(make(preset).ptr()),
        server(std::vector<float>(worker.params().begin(), worker.params().end()),
               hg::optim::momentum({.lr = lr, .momentum = momentum})) {}
  void block(std::size_t s0, std::size_t n = steps) {
    one_thread();
    auto& net = dynamic_cast<torch::nn::SequentialImpl&>(worker.module());
    for (std::size_t s = s0; s < s0 + n; ++s) {
      const auto x = server.params();  // the job: the server's parameters at the worker
      std::copy(x.begin(), x.end(), worker.params().begin());
      const auto [xb, yb] = batch_of(preset, s, 0, 1);
      worker.zero_grad();
      loss_of(net, xb, yb).backward();
      server.apply(worker.grads());
    }
  }
};

template <class Runner>
void timed(benchmark::State& state, Runner& run, std::size_t ranks) {
  (void)train();
  std::size_t s0 = 0;
  for (auto _ : state) {
    run.block(s0);
    s0 += steps;
  }
  counters(state, ranks);
}

void BM_torch_plain_step(benchmark::State& state) {
  plain_runner run(state.range(0), static_cast<std::size_t>(state.range(1)));
  timed(state, run, run.R);
}

void BM_torch_local_sgd_step(benchmark::State& state) {
  local_sgd_runner run(state.range(0), static_cast<int>(state.range(1)), static_cast<std::size_t>(state.range(2)));
  timed(state, run, static_cast<std::size_t>(run.R));
}

void BM_torch_async_step(benchmark::State& state) {
  async_runner run(state.range(0));
  timed(state, run, 1);
}

// The overhead targets, measured side by side: each iteration runs a block of the plain loop
// and a block of heterograd's (in alternating order), so that the machine's drift from second
// to second (+-7% between separate runs here) falls on both. kind 0: the asynchronous worker
// against the plain loop on 1 thread; kind 1: local SGD H = 8 over 2 inproc ranks against the
// plain loop on 2 threads. Counter ratio: heterograd's samples per second over the plain
// loop's.
void BM_torch_overhead(benchmark::State& state) {
  const auto preset = state.range(0);
  const bool rounds = state.range(1) == 1;
  (void)train();
  plain_runner plain(preset, rounds ? 2 : 1);
  std::unique_ptr<async_runner> async;
  std::unique_ptr<local_sgd_runner> local;
  if (rounds) local = std::make_unique<local_sgd_runner>(preset, 2, 8);
  else async = std::make_unique<async_runner>(preset);
  // Steps a block: 32 (4 rounds of H = 8), so that the local SGD world's start in each block
  // (threads, the worker's anchor) is amortised as in the other benchmarks; blocks of 8 put
  // 13% of fixed cost on LeNet-5's 2 ms steps.
  constexpr std::size_t n = steps;
  auto ours = [&](std::size_t s0) { rounds ? local->block(s0, n) : async->block(s0, n); };
  double t_plain = 0, t_ours = 0;
  std::size_t s0 = 0, i = 0;
  using clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto t0 = clock::now();
    if (i % 2 == 0) plain.block(s0, n);
    else ours(s0);
    const auto t1 = clock::now();
    if (i % 2 == 0) ours(s0);
    else plain.block(s0, n);
    const auto t2 = clock::now();
    const double a = std::chrono::duration<double>(t1 - t0).count(), b = std::chrono::duration<double>(t2 - t1).count();
    t_plain += i % 2 == 0 ? a : b;
    t_ours += i % 2 == 0 ? b : a;
    state.SetIterationTime(a + b);
    s0 += n;
    ++i;
  }
  state.counters["ratio"] = t_ours > 0 ? t_plain / t_ours : 0.0;
  state.counters["plain_seconds"] = t_plain;
  state.counters["heterograd_seconds"] = t_ours;
}

// ResNet-8 in S LibTorch stages on S inproc threads against sequential_step on one thread,
// side by side in each iteration (8 steps each; synthetic 28 x 28 images: only time counts).
namespace pl = heterograd::algorithms::pipeline;
struct plain_sgd {
  void step(hg::span<float> p, hg::span<const float> g) {
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= static_cast<float>(lr) * g[i];
  }
};
lt::sequential_stages resnet8_stages(std::size_t S) {
  torch::manual_seed(1);
  const std::vector<std::string> split =
      S == 2 ? std::vector<std::string>{"layer2"} : std::vector<std::string>{"layer2", "layer3"};
  lt::stages_options o{.split = split, .input = {1, 28, 28}, .threads = 1};
  return lt::sequential_stages(lt::resnet8(), o);
}
// The bubble of a pipeline whose stage s takes b_s / M per micro-batch (b_s: its measured busy
// time, forward and backward): the last micro-batch leaves after sum_s b_s / M + (M - 1) max_s
// b_s / M, and the stages idle for the rest, 1 - sum_s b_s / (S x that). Equal stages give
// (S - 1) / (M + S - 1).
double unequal_stage_bubble(const std::vector<double>& busy, std::size_t M) {
  double sum = 0, most = 0;
  for (const double b : busy) {
    sum += b;
    most = std::max(most, b);
  }
  const double span = (sum + static_cast<double>(M - 1) * most) / static_cast<double>(M);
  return span > 0 ? 1.0 - sum / (static_cast<double>(busy.size()) * span) : 0.0;
}

void BM_torch_pipeline(benchmark::State& state) {
  const std::size_t S = static_cast<std::size_t>(state.range(1)), n = 8;
  const pl::pipeline_config cfg{.schedule = state.range(0) == 0 ? pl::pipeline_schedule_kind::gpipe
                                                                : pl::pipeline_schedule_kind::one_f_one_b,
                                .micro_batches = static_cast<std::size_t>(state.range(2))};
  const pl::batch_source source = [](std::size_t t) {
    const auto x = torch::randn({batch, 28 * 28}, at::detail::createCPUGenerator(t + 1));
    pl::batch_data b{std::vector<float>(x.data_ptr<float>(), x.data_ptr<float>() + x.numel()), {}};
    for (std::int64_t r = 0; r < batch; ++r) b.y.push_back(static_cast<std::int32_t>((t + r) % 10));
    return b;
  };
  std::vector<lt::sequential_stages> ranks;
  for (std::size_t s = 0; s < S; ++s) ranks.push_back(resnet8_stages(S));
  lt::sequential_stages seq_model = resnet8_stages(S);
  torch::manual_seed(1);
  const lt::flat_module init(lt::resnet8().ptr());  // LibTorch's initialisation, the stages' layout
  std::vector<float> p0(init.params().begin(), init.params().end()), seq = p0;
  std::vector<plain_sgd> seq_opt(S);
  std::vector<std::vector<float>> params(S, p0);
  double t_pipe = 0, t_seq = 0, bubble = 0;
  std::vector<double> busy(S, 0.0);  // each stage's measured busy seconds over the run
  std::size_t iterations = 0, t0 = 0;
  using clock = std::chrono::steady_clock;
  one_thread();
  for (auto _ : state) {
    const auto a = clock::now();
    hg::comm::inproc::spawn(static_cast<int>(S), [&](const hg::comm::inproc::communicator& c) {
      one_thread();
      const auto s = static_cast<std::size_t>(c.rank());
      const auto shifted = [&](std::size_t t) { return source(t0 + t); };
      const auto r = pl::run_pipeline_over(c, ranks[s], params[s], [](std::size_t) { return plain_sgd{}; }, cfg,
                                           shifted, n);
      if (s != 0) return;
      bubble += r.measured_bubble;
      for (std::size_t k = 0; k < S; ++k) busy[k] += r.stages[k].busy_s;
    });
    const auto b = clock::now();
    for (std::size_t t = t0; t < t0 + n; ++t)
      (void)pl::sequential_step(seq_model, hg::span<float>(seq), seq_opt,
                                pl::split_micro_batches(source(t), 28 * 28, cfg.micro_batches));
    const auto e = clock::now();
    t_pipe += std::chrono::duration<double>(b - a).count();
    t_seq += std::chrono::duration<double>(e - b).count();
    state.SetIterationTime(std::chrono::duration<double>(e - a).count());
    t0 += n;
    ++iterations;
  }
  const double steps_run = static_cast<double>(iterations * n);
  state.counters["step_ms"] = steps_run > 0 ? 1e3 * t_pipe / steps_run : 0.0;
  state.counters["sequential_step_ms"] = steps_run > 0 ? 1e3 * t_seq / steps_run : 0.0;
  state.counters["speedup"] = t_pipe > 0 ? t_seq / t_pipe : 0.0;
  state.counters["bubble"] = iterations > 0 ? bubble / static_cast<double>(iterations) : 0.0;
  state.counters["bubble_theory"] = pl::theoretical_bubble(cfg, S, 1);
  state.counters["bubble_theory_measured_stages"] = unequal_stage_bubble(busy, cfg.micro_batches);
}

}  // namespace

void register_benchmarks() {
  for (std::int64_t preset : {0, 1, 2}) {
    for (std::int64_t ranks : {1, 2})
      benchmark::RegisterBenchmark("BM_torch_plain_step", BM_torch_plain_step)
          ->ArgNames({"preset", "ranks"})
          ->Args({preset, ranks})
          ->UseRealTime()
          ->MinTime(2.0)
          ->Unit(benchmark::kMillisecond);
    for (std::int64_t period : {1, 8})
      benchmark::RegisterBenchmark("BM_torch_local_sgd_step", BM_torch_local_sgd_step)
          ->ArgNames({"preset", "ranks", "period"})
          ->Args({preset, 2, period})
          ->UseRealTime()
          ->MinTime(2.0)
          ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("BM_torch_async_step", BM_torch_async_step)
        ->ArgNames({"preset"})
        ->Args({preset})
        ->UseRealTime()
        ->MinTime(2.0)
        ->Unit(benchmark::kMillisecond);
    for (std::int64_t kind : {0, 1})
      benchmark::RegisterBenchmark("BM_torch_overhead", BM_torch_overhead)
          ->ArgNames({"preset", "kind"})
          ->Args({preset, kind})
          ->UseManualTime()
          ->MinTime(15.0)
          ->Unit(benchmark::kMillisecond);
  }
  for (std::int64_t kind : {0, 1})
    for (std::int64_t S : {2, 3})
      for (std::int64_t M : {1, 4, 8})
        benchmark::RegisterBenchmark("BM_torch_pipeline", BM_torch_pipeline)
            ->ArgNames({"schedule", "stages", "micro_batches"})
            ->Args({kind, S, M})
            ->UseManualTime()
            ->MinTime(2.0)
            ->Unit(benchmark::kMillisecond);
}

}  // namespace hg_bench_torch
