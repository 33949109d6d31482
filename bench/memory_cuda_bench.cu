// Device memory bandwidth references for GPU kernel benchmarks: copy (8 B/element) and the
// in-place update a += s*b (12 B/element), over 256M floats, timed with CUDA events.
#include <cstddef>

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/transform.h>

namespace {

constexpr std::size_t kElements = std::size_t{256} << 20;

struct axpy {
  float s;
  __host__ __device__ float operator()(float a, float b) const { return a + s * b; }
};

template <class F>
void timed(benchmark::State& state, std::size_t bytes_per_element, F&& body) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  body();  // warm-up
  cudaDeviceSynchronize();
  for (auto _ : state) {
    cudaEventRecord(start);
    body();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    state.SetIterationTime(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(kElements * bytes_per_element));
  state.counters["elements"] = static_cast<double>(kElements);
}

void BM_device_copy(benchmark::State& state) {
  thrust::device_vector<float> a(kElements, 1.0f), b(kElements, 0.0f);
  timed(state, 8, [&] { thrust::copy(thrust::cuda::par, a.begin(), a.end(), b.begin()); });
}

void BM_device_update(benchmark::State& state) {
  thrust::device_vector<float> a(kElements, 1.0f), b(kElements, 2.0f);
  timed(state, 12, [&] {
    thrust::transform(thrust::cuda::par, a.begin(), a.end(), b.begin(), a.begin(), axpy{1e-3f});
  });
}

}  // namespace

BENCHMARK(BM_device_copy)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);
BENCHMARK(BM_device_update)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.2);

BENCHMARK_MAIN();
