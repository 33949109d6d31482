// Server updates per second of the asynchronous servers (issue 6) on a 1M-parameter float
// model, and the bytes each update moves.
//
//   BM_server_apply          the bare update step (model_server::apply -> optim::sgd's fused
//                            kernel) cycling over 16 gradients: 12 B/parameter (read p, g;
//                            write p). The reference.
//   BM_sim_asgd              vanilla ASGD driven by the simulator (runtime::async_runtime, 16
//                            equally fast workers): the runtime's own cost on top of the
//                            update is one event (heap pop + push) per update.
//   BM_sim_ringleader        Ringleader ASGD: every arrival folds the gradient into a
//                            table's running mean and its sum (20 B/parameter); every step
//                            scales the sum by 1/n (8 B) before the SGD kernel (12 B).
// Gradients are produced once per worker and reused (the computation is not what is
// measured). Items = applied updates; bytes = the update's memory traffic.
//
//   BM_threads_asgd          vanilla ASGD under the threads runtime: the server thread and 4
//                            worker threads over the inproc transport, real-time order. Per
//                            update the gradient crosses once (rendezvous copy, 8 B/param),
//                            the model is copied into the worker's outbox (8 B) and from
//                            there to the worker (8 B), plus the SGD step (12 B): 36 B.
//                            Each iteration is one run of 256 updates (thread start-up and
//                            shutdown included).
// The MPI runtime's push/pull round trip is measured under mpirun by
// bench/compare/async_peers.sh (bench/compare/async_mpi_roundtrip.cpp).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include <benchmark/benchmark.h>

#include "heterograd/algorithms/async.hpp"
#include "heterograd/runtime/sim.hpp"
#include "heterograd/sim/worker_time.hpp"
#include "heterograd/runtime/async_threads.hpp"

namespace async = heterograd::algorithms::async;
namespace sim = heterograd::sim;
namespace hr = heterograd::runtime;

namespace {

constexpr std::size_t kParams = std::size_t{1} << 20;
constexpr std::size_t kWorkers = 16;
constexpr std::int64_t kUpdatesPerIteration = 64;

async::model_server<float> server() {
  return async::model_server<float>(std::vector<float>(kParams, 0.5f), async::plain_sgd(1e-6));
}

// One gradient per worker, as the runtimes keep them (16 x 4 MiB: they stream from memory,
// as in the runtimes, rather than staying in cache).
void BM_server_apply(benchmark::State& state) {
  auto s = server();
  std::vector<std::vector<float>> g;
  for (std::size_t w = 0; w < kWorkers; ++w) g.emplace_back(kParams, 1e-3f * static_cast<float>(w + 1));
  std::size_t next = 0;
  for (auto _ : state) {
    for (std::int64_t i = 0; i < kUpdatesPerIteration; ++i, next = (next + 1) % kWorkers)
      s.apply(heterograd::span<const float>(g[next]));
    benchmark::DoNotOptimize(s.params().data());
  }
  const auto updates = state.iterations() * kUpdatesPerIteration;
  state.SetItemsProcessed(updates);
  state.SetBytesProcessed(updates * static_cast<std::int64_t>(12 * kParams));
  state.counters["bytes_per_update"] = 12.0 * kParams;
}

// Bytes per parameter: `per_arrival` for every gradient handed to the policy, `per_update`
// for every step.
template <class Policy>
void drive_sim(benchmark::State& state, Policy& p, double per_arrival, double per_update) {
  // Equal speeds: arrivals cycle over the workers' gradients in the same order as
  // BM_server_apply, so the two touch memory alike and the difference is the runtime's.
  hr::async_runtime<std::vector<float>, sim::fixed_times> rt(
      kWorkers, sim::fixed_times(std::vector<double>(kWorkers, 1.0)));
  // Each worker's gradient is written once; later jobs reuse it.
  auto compute = [](sim::worker_id w, std::uint64_t, std::uint64_t, std::vector<float>& g) {
    if (g.size() != kParams) g.assign(kParams, 1e-3f * static_cast<float>(w + 1));
  };
  hr::run_options warm;
  warm.max_events = 4 * kWorkers;  // past the first wave (and Ringleader's first gather)
  rt.run(p, compute, warm);
  const std::uint64_t v0 = p.version();
  hr::run_options opt;
  opt.max_events = kUpdatesPerIteration;  // arrivals
  for (auto _ : state) {
    rt.run(p, compute, opt);
    benchmark::DoNotOptimize(p.params().data());
  }
  const auto updates = static_cast<double>(p.version() - v0);
  const auto arrivals = static_cast<double>(state.iterations() * kUpdatesPerIteration);
  const double bytes = (per_arrival * arrivals + per_update * updates) * kParams;
  state.SetItemsProcessed(static_cast<std::int64_t>(updates));
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  state.counters["bytes_per_update"] = bytes / updates;
  state.counters["arrivals_per_update"] = arrivals / updates;
}

void BM_sim_asgd(benchmark::State& state) {
  async::asgd p(kWorkers, server());
  drive_sim(state, p, 0.0, 12.0);
}

void BM_sim_ringleader(benchmark::State& state) {
  async::ringleader_asgd p(kWorkers, server());
  drive_sim(state, p, 20.0, 20.0);
}

void BM_threads_asgd(benchmark::State& state) {
  constexpr std::size_t workers = 4;
  constexpr std::uint64_t updates = 256;
  async::asgd p(workers, server());
  auto compute = [](async::worker_id w, std::uint64_t, std::uint64_t,
                    heterograd::span<const float>, std::vector<float>& g) {
    if (g.size() != kParams) g.assign(kParams, 1e-3f * static_cast<float>(w + 1));
  };
  std::uint64_t done = 0;
  for (auto _ : state) {
    const std::uint64_t v0 = p.version();
    hr::run_threads<float>(p, compute, {.max_updates = v0 + updates});
    done += p.version() - v0;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(done));
  state.SetBytesProcessed(static_cast<std::int64_t>(done * 36 * kParams));
  state.counters["bytes_per_update"] = 36.0 * kParams;
}

}  // namespace

BENCHMARK(BM_threads_asgd)->UseRealTime()->MinTime(0.5);
BENCHMARK(BM_server_apply)->UseRealTime()->MinTime(0.5);
BENCHMARK(BM_sim_asgd)->UseRealTime()->MinTime(0.5);
BENCHMARK(BM_sim_ringleader)->UseRealTime()->MinTime(0.5);

// OpenMP threads that spin after a parallel region starve the threads runtime's worker
// threads on a small machine (5 threads on 2 cores here), so the suite runs with passive
// waiting (as a user of the threads runtime should) unless the environment says otherwise.
int main(int argc, char** argv) {
  setenv("OMP_WAIT_POLICY", "passive", 0);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
