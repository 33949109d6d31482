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
//
// preset 0 is LeNet-5, 1 ResNet-8; batch 32 per rank of standardised Fashion-MNIST; one
// LibTorch (OpenMP) thread and one OpenBLAS thread per rank. An iteration is 32 steps of every
// rank; counters: samples_per_second (all ranks), step_ms (one rank's step).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "heterograd/algorithms/async/server.hpp"
#include "heterograd/algorithms/sync/workers.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/torch/module.hpp"
#include "torch_presets.hpp"

namespace hg_bench_torch {

namespace {

namespace hg = heterograd;
namespace lt = heterograd::libtorch;
namespace sync_api = heterograd::algorithms::sync;

constexpr std::size_t steps = 32;  // per rank and benchmark iteration

void counters(benchmark::State& state, std::size_t ranks) {
  const double per_iteration = static_cast<double>(steps * ranks * batch);
  state.counters["samples_per_second"] =
      benchmark::Counter(per_iteration, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["step_ms"] = benchmark::Counter(static_cast<double>(steps) / 1e3,
                                                 benchmark::Counter::kIsIterationInvariantRate |
                                                     benchmark::Counter::kInvert);
}

void BM_torch_plain_step(benchmark::State& state) {
  const auto preset = state.range(0);
  const auto R = static_cast<std::size_t>(state.range(1));
  (void)train();
  std::vector<torch::nn::Sequential> nets;
  std::vector<std::unique_ptr<torch::optim::SGD>> opts;
  for (std::size_t r = 0; r < R; ++r) {
    nets.push_back(make(preset));
    opts.push_back(std::make_unique<torch::optim::SGD>(nets.back()->parameters(),
                                                       torch::optim::SGDOptions(lr).momentum(momentum)));
  }
  std::size_t s0 = 0;
  for (auto _ : state) {
    std::vector<std::thread> th;
    for (std::size_t r = 0; r < R; ++r)
      th.emplace_back([&, r] {
        one_thread();
        for (std::size_t s = s0; s < s0 + steps; ++s) {
          const auto [x, y] = batch_of(s, r, R);
          opts[r]->zero_grad();
          loss_of(*nets[r], x, y).backward();
          opts[r]->step();
        }
      });
    for (auto& t : th) t.join();
    s0 += steps;
  }
  counters(state, R);
}

void BM_torch_local_sgd_step(benchmark::State& state) {
  const auto preset = state.range(0);
  const auto R = static_cast<int>(state.range(1));
  const auto H = static_cast<std::size_t>(state.range(2));
  (void)train();
  std::vector<std::unique_ptr<lt::flat_module>> models;
  for (int r = 0; r < R; ++r) models.push_back(std::make_unique<lt::flat_module>(make(preset).ptr()));
  std::size_t s0 = 0;
  for (auto _ : state) {
    hg::comm::inproc::spawn(R, [&](hg::comm::inproc::communicator c) {
      one_thread();
      const auto r = static_cast<std::size_t>(c.rank());
      lt::flat_module& m = *models[r];
      sync_api::local_sgd_config cfg;
      cfg.period = H;
      sync_api::local_sgd_worker<float, hg::optim::momentum, hg::comm::inproc::communicator> w(
          c, hg::optim::momentum({.lr = lr, .momentum = momentum}), m.params(),
          std::vector<std::size_t>(static_cast<std::size_t>(R), static_cast<std::size_t>(batch)), cfg);
      auto& net = dynamic_cast<torch::nn::SequentialImpl&>(m.module());
      for (std::size_t s = s0; s < s0 + steps; ++s) {
        const auto [x, y] = batch_of(s, r, static_cast<std::size_t>(R));
        m.zero_grad();
        loss_of(net, x, y).backward();
        (void)w.step(m.params(), m.grads());
      }
    });
    s0 += steps;
  }
  counters(state, static_cast<std::size_t>(R));
}

void BM_torch_async_step(benchmark::State& state) {
  const auto preset = state.range(0);
  (void)train();
  one_thread();
  lt::flat_module worker(make(preset).ptr());
  const std::vector<float> p0(worker.params().begin(), worker.params().end());
  hg::algorithms::async::model_server<float, hg::optim::momentum> server(
      p0, hg::optim::momentum({.lr = lr, .momentum = momentum}));
  auto& net = dynamic_cast<torch::nn::SequentialImpl&>(worker.module());
  std::size_t s0 = 0;
  for (auto _ : state) {
    for (std::size_t s = s0; s < s0 + steps; ++s) {
      const auto x = server.params();  // the job: the server's parameters at the worker
      std::copy(x.begin(), x.end(), worker.params().begin());
      const auto [xb, yb] = batch_of(s, 0, 1);
      worker.zero_grad();
      loss_of(net, xb, yb).backward();
      server.apply(worker.grads());
    }
    s0 += steps;
  }
  counters(state, 1);
}

}  // namespace

void register_benchmarks() {
  for (std::int64_t preset : {0, 1}) {
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
  }
}

}  // namespace hg_bench_torch
