// The algorithms on device buffers (issue 22), on a GPU (./hg gpu-check): each step of an
// algorithm whose state lives in device memory (kernels::thrust_memory on a CUDA stream),
// timed with CUDA events and interleaved call by call with a device copy of the same number
// of floats (b = a, 8 B/element), the reference: fraction_of_copy = the step's bandwidth for
// the bytes it must move over the copy's (best calls of each; target >= 0.8).
//
//   BM_device_asgd_step/params:N          ASGD's arrival (model_server: the finiteness check
//                                         4 B, one flag read back; SGD 12 B): 16 B/param
//   BM_device_ringleader_step/params:N    Ringleader's arrival: screen 4 B, the table's
//                                         running mean and sum 20 B, the 1/n scaling 8 B, SGD
//                                         12 B: 44 B/param
//   BM_device_local_sgd_step/params:N     local_sgd_worker's local step with Adam (screen
//                                         4 B, Adam 28 B): 32 B/param; one rank on NCCL, no
//                                         synchronisation in the timed steps
//   BM_device_captured_adam/params:N      one capturable Adam step launched as it is against
//                                         the same step replayed from a CUDA graph: per-step
//                                         times (launched_us, replayed_us) and their
//                                         difference, the launch overhead a graph saves
//   BM_device_local_sgd_rounds/params:N   local SGD with H = 1 (every step a round: local
//                                         step, NCCL weighted allreduce of the model, anchor
//                                         copy) on every GPU of the machine, one thread per
//                                         GPU: round_ms, and busbw_GBps = 2 (G - 1) / G x 4N
//                                         bytes per round (NCCL's bus bandwidth convention)
//
// N: 1M and 100M floats (--params=LIST overrides, bench_args.hpp). Built by the cuda preset only
// (bench/async.cmake); never run on a machine without a GPU.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>
#include <thrust/copy.h>
#include <thrust/device_vector.h>

#include "bench_args.hpp"
#include "heterograd/algorithms/async.hpp"
#include "heterograd/algorithms/sync.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/kernels/capturable.hpp"
#include "heterograd/kernels/thrust_memory.hpp"
#include "heterograd/optim.hpp"
#include "heterograd/runtime/concepts.hpp"
#include "heterograd/testing/runtime_archetypes.hpp"
#if defined(HG_HAS_NCCL)
#include "heterograd/comm/nccl.cuh"
#endif

namespace hg = heterograd;
namespace hk = heterograd::kernels;
namespace ho = heterograd::optim;
namespace ha = heterograd::algorithms::async;
namespace hs = heterograd::algorithms::sync;


namespace {

using dvec = thrust::device_vector<float>;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// Times `step` (moving `bytes` per call) against a device copy of n floats, call by call.
void measure(benchmark::State& state, std::size_t n, double bytes, const std::function<void()>& step) {
  dvec a(n, 1.0f), b(n, 0.0f);
  const std::function<void()> copy = [&] { thrust::copy(thrust::cuda::par, a.begin(), a.end(), b.begin()); };
  const std::function<void()>* calls[] = {&step, &copy};
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  step();  // warm-up (first-touch, one-time initialisation)
  copy();
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  double best[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  for (auto _ : state) {
    double first = 0;
    for (int k = 0; k < 2; ++k) {
      cudaEventRecord(start);
      (*calls[k])();
      cudaEventRecord(stop);
      cudaEventSynchronize(stop);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      best[k] = std::min(best[k], ms / 1e3);
      if (k == 0) first = ms / 1e3;
    }
    state.SetIterationTime(first);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  const double sg = bytes / best[0] / 1e9, cg = 8.0 * static_cast<double>(n) / best[1] / 1e9;
  state.counters["step_GBps"] = sg;
  state.counters["copy_GBps"] = cg;
  state.counters["fraction_of_copy"] = sg / cg;
  state.counters["bytes_per_param"] = bytes / static_cast<double>(n);
}


auto memory(cudaStream_t s) { return hk::thrust_memory(thrust::cuda::par.on(s)); }
using memory_t = decltype(memory(nullptr));

template <class Policy>
void arrivals(benchmark::State& state, Policy p, double bytes_per_param) {
  const auto n = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t workers = 4;
  std::vector<dvec> g;
  for (std::size_t w = 0; w < workers; ++w) g.emplace_back(n, 1e-4f * static_cast<float>(w + 1));
  heterograd::testing::async_control_archetype c;  // steers nothing: steps timed alone
  std::size_t k = 0;
  measure(state, n, bytes_per_param * static_cast<double>(n), [&] {
    const auto w = static_cast<hg::sim::worker_id>(k % workers);
    p.on_arrival(c, hg::runtime::arrival{w, p.version(), k, 0.0, 1.0},
                 hg::span<const float, hg::device_space>(hg::make_span(std::as_const(g[w]))));
    ++k;
  });
}

ha::model_server<float, ho::sgd, memory_t> sgd_server(std::size_t n) {
  return ha::model_server<float, ho::sgd, memory_t>(std::vector<float>(n, 0.5f), ha::plain_sgd(1e-3),
                                                    ha::nonfinite_policy::fail, memory(nullptr));
}

void BM_device_asgd_step(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  arrivals(state, ha::asgd(4, sgd_server(n)), 16);
}

void BM_device_ringleader_step(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  arrivals(state, ha::ringleader_asgd(4, sgd_server(n)), 44);
}

#if defined(HG_HAS_NCCL)
using nccl_comm = hg::comm::nccl::communicator;

/// One NCCL communicator per rank of an inproc world of `gpus` threads, rank r on device r;
/// f(rank, comm) runs on rank r's thread.
template <class F>
void on_every_gpu(int gpus, F&& f) {
  hg::comm::inproc::spawn(gpus, [&](hg::comm::inproc::communicator c) {
    check(cudaSetDevice(c.rank()), "cudaSetDevice");
    f(c.rank(), nccl_comm::create(c, c.rank()));
  });
}

void BM_device_local_sgd_step(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  on_every_gpu(1, [&](int, nccl_comm comm) {
    dvec p(n, 0.5f), g(n, 1e-4f);
    const hg::span<float, hg::device_space> ps = hg::make_span(p);
    hs::local_sgd_config cfg;
    cfg.period = std::size_t{1} << 30;  // no synchronisation in the timed steps
    hs::local_sgd_worker<float, ho::adam, nccl_comm, hs::no_outer, hs::identity_transform, memory_t> w(
        comm, ho::adam({.lr = 1e-4}), ps, {1}, cfg, {}, {}, {}, memory(nullptr));
    measure(state, n, 32.0 * static_cast<double>(n),
            [&] { w.step(ps, hg::span<const float, hg::device_space>(hg::make_span(std::as_const(g)))); });
  });
}

void BM_device_local_sgd_rounds(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  int gpus = 0;
  check(cudaGetDeviceCount(&gpus), "cudaGetDeviceCount");
  constexpr int rounds = 20;
  std::vector<double> seconds;
  for (auto _ : state) {
    double wall = 0;
    on_every_gpu(gpus, [&](int r, nccl_comm comm) {
      dvec p(n, 0.5f), g(n, 1e-4f * static_cast<float>(r + 1));
      const hg::span<float, hg::device_space> ps = hg::make_span(p);
      hs::local_sgd_config cfg;
      cfg.period = 1;
      hs::local_sgd_worker<float, ho::sgd, nccl_comm, hs::no_outer, hs::identity_transform, memory_t> w(
          comm, ho::sgd({.lr = 1e-4}), ps, std::vector<std::size_t>(static_cast<std::size_t>(gpus), 1), cfg,
          {}, {}, {}, memory(nullptr));
      const hg::span<const float, hg::device_space> gs = hg::make_span(std::as_const(g));
      w.step(ps, gs);  // warm-up round
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      const auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < rounds; ++k) w.step(ps, gs);
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      if (r == 0) wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
    state.SetIterationTime(wall / rounds);
    seconds.push_back(wall / rounds);
  }
  const double best = *std::min_element(seconds.begin(), seconds.end());
  state.counters["gpus"] = gpus;
  state.counters["round_ms"] = best * 1e3;
  state.counters["busbw_GBps"] =
      gpus > 1 ? 2.0 * (gpus - 1) / gpus * 4.0 * static_cast<double>(n) / best / 1e9 : 0.0;
}
#endif

void BM_device_captured_adam(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  cudaStream_t s = nullptr;
  check(cudaStreamCreate(&s), "cudaStreamCreate");
  const auto pol = thrust::cuda::par_nosync.on(s);
  const auto opt = ho::capturable(ho::adam({.lr = 1e-4}));
  dvec x(n, 0.5f), g(n, 1e-4f);
  auto st = opt.init(pol, x);
  opt.update(pol, g, st, x);  // one-time initialisation outside the capture
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  opt.update(pol, g, st, x);
  check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  constexpr int steps = 100;
  auto per_step = [&](auto&& one) {
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < steps; ++k) one();
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  };
  double launched = std::numeric_limits<double>::infinity(), replayed = launched;
  for (auto _ : state) {
    const double a = per_step([&] { opt.update(pol, g, st, x); });
    const double b = per_step([&] { check(cudaGraphLaunch(exec, s), "cudaGraphLaunch"); });
    launched = std::min(launched, a);
    replayed = std::min(replayed, b);
    state.SetIterationTime(a + b);
  }
  state.counters["launched_us"] = launched * 1e6;
  state.counters["replayed_us"] = replayed * 1e6;
  state.counters["saved_us"] = (launched - replayed) * 1e6;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

}  // namespace

int main(int argc, char** argv) {
  const hg_bench::flags f(argc, argv,
                          {{"params", "parameters of the model, in floats", std::int64_t{1} << 34}});
  const auto params = f.get("params", {std::int64_t{1} << 20, std::int64_t{100} << 20});
  auto each = [&](const char* name, void (*fn)(benchmark::State&)) {
    hg_bench::register_product(name, fn, {"params"}, {params})
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.2);
  };
  each("BM_device_asgd_step", BM_device_asgd_step);
  each("BM_device_ringleader_step", BM_device_ringleader_step);
  each("BM_device_captured_adam", BM_device_captured_adam);
#if defined(HG_HAS_NCCL)
  each("BM_device_local_sgd_step", BM_device_local_sgd_step);
  each("BM_device_local_sgd_rounds", BM_device_local_sgd_rounds);
#endif
  return hg_bench::run(argc, argv);
}
