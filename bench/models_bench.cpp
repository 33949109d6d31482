// Training-step cost of the reference models on Fashion-MNIST: a 784-256-128-10 MLP and softmax
// regression, batch 64, forward + backward (BLAS GEMM) + fused Adam, with each thread count of
// --threads (OpenMP and OpenBLAS set alike; default bench/bench_args.hpp's thread_counts(): 1,
// 2, 4, ... up to the cores; results read BM_softmax_regression_adam_step/threads:2/...). Reports seconds per epoch (60000 / 64 steps) next to
// PyTorch's figure for the same model measured by bench/compare/torch_mlp.py. With the torch
// component, models_torch.cpp adds the LibTorch presets' steps (heterograd against a plain
// LibTorch loop and, in samples per second, PyTorch's DDP: bench/compare/torch_ddp.py).
#include <cstddef>
#include <vector>

#include <benchmark/benchmark.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "bench_args.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/data/idx.hpp"
#include "heterograd/data/partition.hpp"
#include "heterograd/data/sampler.hpp"
#include "heterograd/kernels/gemm.hpp"
#include "heterograd/nn/mlp.hpp"
#include "heterograd/optim/optimizers.hpp"

namespace hg = heterograd;
namespace nn = heterograd::nn;
namespace hd = heterograd::data;

namespace {

const hd::dataset& train() {
  static const hd::dataset d = hd::load_fashion_mnist().train;
  return d;
}

void run(benchmark::State& state, std::vector<std::size_t> sizes) {
  const int threads = static_cast<int>(state.range(0));
#if defined(_OPENMP)
  omp_set_num_threads(threads);
#endif
  hg::kernels::set_blas_threads(threads);
  const std::size_t batch = 64;
  nn::mlp<float> net(std::move(sizes));
  std::vector<float> p(net.num_params()), g(net.num_params());
  net.init(p, 1);
  const hg::optim::adam adam({.lr = 1e-3});
  auto st = adam.init(hg::exec::default_policy(), hg::span<float>(p));
  hd::batch_sampler sampler(hd::partition_iid(train().size(), 1, 1)[0], 1, 0);
  std::vector<float> x;
  std::vector<std::int32_t> y;
  for (auto _ : state) {
    hd::gather(train(), sampler.next(batch), x, y);
    net.loss_and_gradient(p, nn::batch<float>{x, y}, g);
    adam.update(hg::exec::default_policy(), hg::span<const float>(g), st, hg::span<float>(p));
  }
  const double steps_per_epoch = static_cast<double>(train().size() / batch);
  // time per step x steps per epoch = elapsed / (iterations / steps per epoch)
  state.counters["epoch_seconds"] = benchmark::Counter(
      static_cast<double>(state.iterations()) / steps_per_epoch,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["threads"] = threads;
  state.counters["params"] = static_cast<double>(net.num_params());
}

void BM_mlp_784_256_128_10_adam_step(benchmark::State& state) { run(state, {784, 256, 128, 10}); }
void BM_softmax_regression_adam_step(benchmark::State& state) { run(state, {784, 10}); }

}  // namespace

#if defined(HG_HAS_TORCH)
namespace hg_bench_torch {
void register_benchmarks();  // models_torch.cpp: the LibTorch presets
}
#endif

int main(int argc, char** argv) {
  const hg_bench::flags f(argc, argv, {hg_bench::threads_dimension()});
#if defined(HG_HAS_TORCH)
  hg_bench_torch::register_benchmarks();
#endif
  const auto threads = f.get("threads", hg_bench::thread_counts());
  hg_bench::register_threads("BM_mlp_784_256_128_10_adam_step", BM_mlp_784_256_128_10_adam_step,
                             threads)
      ->UseRealTime()
      ->MinTime(2.0)
      ->Unit(benchmark::kMillisecond);
  hg_bench::register_threads("BM_softmax_regression_adam_step", BM_softmax_regression_adam_step,
                             threads)
      ->UseRealTime()
      ->MinTime(1.0)
      ->Unit(benchmark::kMillisecond);
  return hg_bench::run(argc, argv);
}
