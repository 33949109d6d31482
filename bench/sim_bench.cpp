// Events per second of the bare discrete-event engine (issue 5): every delivered job_finished
// immediately starts the worker's next job, so one "event" = one heap pop (sift-down over
// log4(n) levels of 16-byte entries) + one push (sift-up) + the trace-hash update. Jobs are
// trivial: durations come from a table (tau_i = 1 + sqrt(i), permuted), so the figure is the
// engine's own cost. Target: >= 2M events/s on one core at 10 000 workers, and a cost per
// event growing at most like log(workers). Timed in CPU time (one thread), so other
// processes on a shared machine do not inflate the figures.
//
// BM_engine_ringmaster_model adds the cost of the Ringmaster/Ringleader timing model (one
// Philox4x32-10 block and a Box-Muller normal per job) for reference.
//
// Argument `workers` (results read BM_engine/workers:10000/...): defaults 10, 1000, 10000,
// 100000 (the ringmaster model 10, 10000); --workers=LIST replaces both.
#include <cstddef>
#include <cstdint>

#include <benchmark/benchmark.h>

#include "bench_args.hpp"
#include "heterograd/sim/engine.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace sim = heterograd::sim;

namespace {

constexpr std::int64_t kEventsPerIteration = 4096;

template <class Model>
void drive(benchmark::State& state, const Model& model) {
  const auto n = static_cast<std::size_t>(state.range(0));
  sim::engine e(n);
  for (sim::worker_id w = 0; w < n; ++w) e.start(w, model, 0);
  sim::event ev;
  std::uint64_t version = 0;
  // Warm up past the initial synchronised wave so the heap holds a steady mix of times.
  for (std::size_t i = 0; i < 4 * n; ++i) {
    e.next(ev);
    e.start(ev.worker, model, ++version);
  }
  for (auto _ : state) {
    for (std::int64_t i = 0; i < kEventsPerIteration; ++i) {
      e.next(ev);
      e.start(ev.worker, model, ++version);
    }
    benchmark::DoNotOptimize(e.trace_hash());
  }
  state.SetItemsProcessed(state.iterations() * kEventsPerIteration);
  state.counters["workers"] = static_cast<double>(n);
}

void BM_engine(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  drive(state, sim::sqrt_times(n, 1));
}

void BM_engine_ringmaster_model(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  drive(state, sim::plus(sim::sqrt_times(n, 1), sim::half_normal_noise(1)));
}

}  // namespace

int main(int argc, char** argv) {
  const hg_bench::flags f(
      argc, argv,
      {{"workers", "simulated workers (the engine's heap size)", std::int64_t{1} << 24}});
  hg_bench::register_product("BM_engine", BM_engine, {"workers"},
                             {f.get("workers", {10, 1000, 10000, 100000})})
      ->MinTime(0.5);
  hg_bench::register_product("BM_engine_ringmaster_model", BM_engine_ringmaster_model, {"workers"},
                             {f.get("workers", {10, 10000})})
      ->MinTime(0.5);
  return hg_bench::run(argc, argv);
}
