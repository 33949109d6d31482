// The machine's memory-bandwidth references, measured with hand-written OpenMP loops over
// 64M floats with each thread count of --threads (default bench_args.hpp's thread_counts():
// 1, 2, 4, ... up to the cores; results BM_update/threads:2/...). Every kernel benchmark compares
// against the in-place update `a += s*b`, measured in its own process: optimizer steps update in
// place and pay no write-allocate, so this (not STREAM triad) is their ceiling.
//
// Bytes counted = bytes read + bytes written (write-allocate traffic is not counted):
//   copy    b = a          8 B/element
//   triad   a = b + s*c   12 B/element
//   update  a += s*b      12 B/element
#include <cstddef>
#include <memory>
#include <utility>

#include <benchmark/benchmark.h>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "bench_args.hpp"

namespace {

constexpr std::size_t kElements = std::size_t{64} << 20;

struct buffers {
  std::unique_ptr<float[]> a{new float[kElements]}, b{new float[kElements]},
      c{new float[kElements]};
  // First touch in parallel with the benchmark's static schedule, so pages sit near their
  // threads.
  buffers() {
    float* pa = a.get();
    float* pb = b.get();
    float* pc = c.get();
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < kElements; ++i) {
      pa[i] = 1.0f;
      pb[i] = 2.0f;
      pc[i] = 0.5f;
    }
  }
};

buffers& data() {
  static buffers d;
  return d;
}

void set_threads(benchmark::State& state) {
#if defined(_OPENMP)
  omp_set_num_threads(static_cast<int>(state.range(0)));
#endif
  state.counters["threads"] = static_cast<double>(state.range(0));
  state.counters["elements"] = static_cast<double>(kElements);
}

void finish(benchmark::State& state, std::size_t bytes_per_element) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(kElements * bytes_per_element));
}

void BM_copy(benchmark::State& state) {
  set_threads(state);
  float* __restrict a = data().a.get();
  float* __restrict b = data().b.get();
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < kElements; ++i) b[i] = a[i];
    benchmark::ClobberMemory();
  }
  finish(state, 8);
}

void BM_triad(benchmark::State& state) {
  set_threads(state);
  float* __restrict a = data().a.get();
  const float* __restrict b = data().b.get();
  const float* __restrict c = data().c.get();
  const float s = 0.5f;
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < kElements; ++i) a[i] = b[i] + s * c[i];
    benchmark::ClobberMemory();
  }
  finish(state, 12);
}

void BM_update(benchmark::State& state) {
  set_threads(state);
  float* __restrict a = data().a.get();
  const float* __restrict b = data().b.get();
  // Alternating signs keep the values bounded over many iterations.
  float s = 1e-3f;
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < kElements; ++i) a[i] += s * b[i];
    s = -s;
    benchmark::ClobberMemory();
  }
  finish(state, 12);
}

}  // namespace

int main(int argc, char** argv) {
  const hg_bench::flags f(argc, argv, {hg_bench::threads_dimension()});
  const auto threads = f.get("threads", hg_bench::thread_counts());
  for (auto [name, fn] : {std::pair{"BM_copy", &BM_copy}, std::pair{"BM_triad", &BM_triad},
                          std::pair{"BM_update", &BM_update}})
    hg_bench::register_threads(name, fn, threads)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(0.5);
  return hg_bench::run(argc, argv);
}
