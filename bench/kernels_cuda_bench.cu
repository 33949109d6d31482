// The kernels suite on a GPU (./hg gpu-check): the same kernels as bench/kernels_bench.cpp
// with thrust::cuda::par over 256M floats, timed with CUDA events, each interleaved call by
// call with the device copy b = a (8 B/element), the issue's reference for GPU kernels
// (target: at least 85% of it). Counters: kernel_GBps and copy_GBps (best call of each),
// fraction_of_copy = their ratio. Bytes per element as on the CPU: sgd 12, momentum 20,
// adam 28 (mixed precision with bf16 params and grads, and capturable: 28), multi-tensor adam
// 28, weighted sum of 8 36, l2 norm 4.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>
#include <thrust/copy.h>
#include <thrust/device_vector.h>

#include "heterograd/kernels.hpp"

namespace hk = heterograd::kernels;
namespace hg = heterograd;

namespace {

constexpr std::size_t kN = std::size_t{256} << 20;
constexpr std::size_t kInputs = 8;

struct buffers {
  std::vector<thrust::device_vector<float>> b;
  buffers() {
    for (std::size_t k = 0; k < 4 + kInputs + 1; ++k)
      b.emplace_back(kN, k == 3 ? 1e-4f : 0.5f + 0.01f * static_cast<float>(k));
  }
  float* at(std::size_t k) { return thrust::raw_pointer_cast(b[k].data()); }
};

buffers& data() {
  static buffers d;
  return d;
}

using dspan = hg::span<float, hg::device_space>;
using cdspan = hg::span<const float, hg::device_space>;

struct variant {
  std::string name;
  std::size_t bytes_per_element;
  std::function<void()> run;
};

void measure(benchmark::State& state, std::size_t bytes, std::function<void()> kernel) {
  data();
  const std::vector<variant> vs = {{"kernel", bytes, std::move(kernel)},
                                   {"copy", 8, [] {
                                      thrust::copy(thrust::cuda::par, data().b[1].begin(),
                                                   data().b[1].end(),
                                                   data().b[4 + kInputs].begin());
                                    }}};
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (const auto& v : vs) v.run();  // warm-up
  cudaDeviceSynchronize();
  std::vector<double> best(vs.size(), std::numeric_limits<double>::infinity());
  for (auto _ : state) {
    double first = 0;
    for (std::size_t k = 0; k < vs.size(); ++k) {
      cudaEventRecord(start);
      vs[k].run();
      cudaEventRecord(stop);
      cudaEventSynchronize(stop);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      best[k] = std::min(best[k], static_cast<double>(ms) / 1e3);
      if (k == 0) first = ms / 1e3;
    }
    state.SetIterationTime(first);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  const double kg = static_cast<double>(kN * vs[0].bytes_per_element) / best[0] / 1e9;
  const double cg = static_cast<double>(kN * 8) / best[1] / 1e9;
  state.counters["kernel_GBps"] = kg;
  state.counters["copy_GBps"] = cg;
  state.counters["fraction_of_copy"] = kg / cg;
  state.counters["elements"] = static_cast<double>(kN);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(kN * bytes));
}

void BM_device_sgd(benchmark::State& state) {
  measure(state, 12, [s = 1e-3]() mutable {
    hk::sgd(thrust::cuda::par, dspan(data().at(0), kN), cdspan(data().at(1), kN), {s, 0.0});
    s = -s;
  });
}

void BM_device_momentum(benchmark::State& state) {
  measure(state, 20, [s = 1e-3]() mutable {
    hk::momentum(thrust::cuda::par, dspan(data().at(0), kN), cdspan(data().at(1), kN),
                 dspan(data().at(2), kN), {s, 0.5, 0.0, 0.0});
    s = -s;
  });
}

void BM_device_adam(benchmark::State& state) {
  measure(state, 28, [t = std::int64_t{1}]() mutable {
    hk::adam_config<> a;
    a.lr = 1e-4;
    hk::adam(thrust::cuda::par, dspan(data().at(0), kN), cdspan(data().at(1), kN),
             dspan(data().at(2), kN), dspan(data().at(3), kN), a, {.step = t++});
  });
}

// Mixed precision: bf16 params and grads (the first halves of buffers 5 and 6), fp32 master
// (buffer 7), m, v. 28 B/element.
void BM_device_adam_mixed(benchmark::State& state) {
  using bspan = hg::span<hk::bf16, hg::device_space>;
  measure(state, 28, [t = std::int64_t{1}]() mutable {
    hk::adam_config<> a;
    a.lr = 1e-4;
    hk::adam_mixed(thrust::cuda::par, bspan(reinterpret_cast<hk::bf16*>(data().at(5)), kN),
                   hg::span<const hk::bf16, hg::device_space>(
                       reinterpret_cast<const hk::bf16*>(data().at(6)), kN),
                   dspan(data().at(7), kN), dspan(data().at(2), kN), dspan(data().at(3), kN), a,
                   {.step = t++});
  });
}

// Capturable: a one-thread prologue computes the coefficients into device memory, the body
// reads them. 28 B/element plus the prologue's launch.
void BM_device_adam_capturable(benchmark::State& state) {
  static thrust::device_vector<float> words(hk::capturable_words<float>, 0.0f);
  measure(state, 28, [] {
    hk::adam_config<> a;
    a.lr = 1e-4;
    hk::adam_capturable(thrust::cuda::par, dspan(data().at(0), kN), cdspan(data().at(1), kN),
                        dspan(data().at(2), kN), dspan(data().at(3), kN),
                        dspan(thrust::raw_pointer_cast(words.data()), words.size()), a);
  });
}

void BM_device_multi_tensor_adam(benchmark::State& state) {
  // 200 tensors of mixed sizes summing to 256M (less the gaps): aligned:0 packs them back to
  // back (a flat buffer, most starting inside a cache line), aligned:1 starts each on a
  // 256-byte boundary (separate cudaMalloc allocations).
  const bool aligned = state.range(0) != 0;
  std::vector<hk::adam_tensor<float, hg::device_space>> list;
  std::uint64_t x = 12345;
  std::size_t off = 0;
  data();
  for (int k = 0; k < 200; ++k) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    std::size_t n = k < 199 ? 16000 + (x >> 33) % 2560000 : kN - off - (aligned ? 64 * 200 : 0);
    list.push_back({dspan(data().at(0) + off, n), cdspan(data().at(1) + off, n),
                    dspan(data().at(2) + off, n), dspan(data().at(3) + off, n)});
    off += n;
    if (aligned) off = (off + 63) / 64 * 64;
  }
  measure(state, 28, [list, t = std::int64_t{1}]() mutable {
    hk::adam_config<> a;
    a.lr = 1e-4;
    hk::multi_tensor_adam(thrust::cuda::par,
                          std::span<const hk::adam_tensor<float, hg::device_space>>(list), a,
                          {.step = t++});
  });
}

void BM_device_weighted_sum8(benchmark::State& state) {
  data();
  std::vector<cdspan> in;
  for (std::size_t k = 0; k < kInputs; ++k) in.push_back(cdspan(data().at(4 + k), kN));
  const std::vector<float> w(kInputs, 1.0f / kInputs);
  measure(state, 4 * (kInputs + 1), [in, w] {
    hk::weighted_sum(thrust::cuda::par, dspan(data().at(4 + kInputs), kN), in,
                     std::span<const float>(w));
  });
}

void BM_device_l2_norm(benchmark::State& state) {
  measure(state, 4, [] {
    benchmark::DoNotOptimize(hk::l2_norm(thrust::cuda::par, cdspan(data().at(1), kN)));
  });
}

}  // namespace

BENCHMARK(BM_device_sgd)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_device_momentum)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_device_adam)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_device_adam_mixed)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_device_adam_capturable)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.2);
BENCHMARK(BM_device_multi_tensor_adam)
    ->ArgName("aligned")
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.2);
BENCHMARK(BM_device_weighted_sum8)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_device_l2_norm)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);

BENCHMARK_MAIN();
