// Server updates per second of the asynchronous servers (issue 6) on a 1M-parameter float
// model, and the bytes each update moves.
//
//   BM_server_apply          the bare update step (model_server::apply -> optim::sgd's fused
//                            kernel) cycling over 16 gradients: 12 B/parameter (read p, g;
//                            write p). The reference.
//   BM_asgd_step             ASGD's work per update without a runtime: model_server::screen
//                            (the non-finite check, 4 B/param) + apply (12 B), 16 B.
//   BM_asgd_step_device      BM_asgd_step on a server whose parameters, scratch and
//                            gradients are Thrust device vectors of the build's device system
//                            (kernels::thrust_memory(thrust::device): OpenMP on the CPU), the
//                            code path a GPU server runs; the screen is then a finiteness
//                            reduction read back as one flag. Same bytes as BM_asgd_step.
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
//                            update the gradient crosses once (rendezvous copy, 8 B/param), the
//                            server screens it for non-finite values (4 B) and steps (SGD,
//                            12 B), and the worker copies the new model straight from the
//                            server's parameters (8 B; server.hpp's send_job): 32 B. The
//                            fraction of the machine's update bandwidth is these bytes/s over
//                            BM_server_apply's. Each iteration is one run of 1024 updates
//                            (thread start-up and shutdown, ~30 ms, included: 2 % of it).
//   BM_threads_roundtrip     one worker's pull + push through runtime::worker_client against a
//                            raw inproc send/recv ping-pong of the same payload each way, in
//                            the same two threads, one run after the other in each iteration.
//                            hg_us - update_us (the policy's on_arrival, timed around the call)
//                            is what the runtime's protocol costs beside the two copies.
//   BM_bookkeeping_*         the real-mode bookkeeping per job, ns/job: work()'s timestamps and
//                            worker_report sums (the statements it runs around pull, compute
//                            and push), job_pacer start/finish of a zero-length job, and the
//                            server's per-arrival clock read and recorder::record_update.
//
// Named arguments: BM_threads_asgd/updates:1024 (updates per run), BM_threads_roundtrip/
// floats:N (the payload each way; default 1K and 1M, --floats=LIST).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <type_traits>
#include <utility>
#include <vector>

#include <unistd.h>

#include <chrono>
#include <optional>

#include <benchmark/benchmark.h>

#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>

#include "heterograd/algorithms/async.hpp"
#include "heterograd/kernels/thrust_memory.hpp"
#include "heterograd/runtime/sim.hpp"
#include "heterograd/sim/worker_time.hpp"
#include "heterograd/runtime/async_threads.hpp"
#include "heterograd/runtime/pacing.hpp"
#include "heterograd/sim/recorder.hpp"
#include "bench_args.hpp"
#include "timed_policy.hpp"

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

// What ASGD's on_arrival does per update, without a runtime: the non-finite screen of the
// gradient (model_server::screen, 4 B/param) and the step (12 B), cycling over one gradient
// per worker (Vector: the buffer type of the server's memory).
template <class Vector, class Server>
void asgd_step(benchmark::State& state, Server& s) {
  std::vector<Vector> g;
  for (std::size_t w = 0; w < kWorkers; ++w) g.emplace_back(kParams, 1e-3f * static_cast<float>(w + 1));
  std::size_t next = 0;
  for (auto _ : state) {
    for (std::int64_t i = 0; i < kUpdatesPerIteration; ++i, next = (next + 1) % kWorkers) {
      const auto use = s.screen(heterograd::make_span(std::as_const(g[next])), 0, "asgd");
      s.apply(*use);
    }
    benchmark::DoNotOptimize(s.params().data());
  }
  const auto updates = state.iterations() * kUpdatesPerIteration;
  state.SetItemsProcessed(updates);
  state.SetBytesProcessed(updates * static_cast<std::int64_t>(16 * kParams));
  state.counters["bytes_per_update"] = 16.0 * kParams;
}

// The reference of the simulated ASGD (the runtime's own cost is the difference).
void BM_asgd_step(benchmark::State& state) {
  auto s = server();
  asgd_step<std::vector<float>>(state, s);
}

// BM_asgd_step with everything in Thrust device vectors (kernels::thrust_memory).
void BM_asgd_step_device(benchmark::State& state) {
  const auto mem = heterograd::kernels::thrust_memory(thrust::device);
  using M = std::remove_const_t<decltype(mem)>;
  async::model_server<float, heterograd::optim::sgd, M> s(
      std::vector<float>(kParams, 0.5f), async::plain_sgd(1e-6), async::nonfinite_policy::fail, mem);
  asgd_step<thrust::device_vector<float>>(state, s);
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
  drive_sim(state, p, 4.0, 12.0);
}

void BM_sim_ringleader(benchmark::State& state) {
  async::ringleader_asgd p(kWorkers, server());
  drive_sim(state, p, 20.0, 20.0);
}

void BM_threads_asgd(benchmark::State& state) {
  constexpr std::size_t workers = 4;
  const auto updates = static_cast<std::uint64_t>(state.range(0));
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
  state.SetBytesProcessed(static_cast<std::int64_t>(done * 32 * kParams));
  state.counters["bytes_per_update"] = 32.0 * kParams;
  state.counters["workers"] = workers;
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void BM_threads_roundtrip(benchmark::State& state) {
  const auto m = static_cast<std::size_t>(state.range(0));
  const std::uint64_t trips = m >= (std::size_t{1} << 20) ? 200 : 2000;
  async::asgd inner(1, async::model_server<float>(std::vector<float>(m, 0.5f), async::plain_sgd(1e-6)));
  double hg = 0, raw = 0, update = 0;
  std::uint64_t n = 0;
  for (auto _ : state) {
    timed_policy<decltype(inner)> p{inner};
    const std::uint64_t v0 = inner.version();
    double hg_s = 0, raw_s = 0;
    heterograd::comm::inproc::spawn(2, [&](heterograd::comm::inproc::communicator c) {
      const hr::remote_options o{.max_updates = v0 + trips};
      auto t = std::chrono::steady_clock::now();
      if (c.rank() == 0) {
        hr::serve<float>(p, c, o);
        hg_s = since(t);
      } else {
        hr::worker_client<float, heterograd::comm::inproc::communicator> w(c, m, o);
        std::vector<float> x(m), g(m, 1e-3f);
        while (w.pull(heterograd::span<float>(x.data(), m))) w.push(heterograd::span<const float>(g.data(), m));
      }
      c.barrier().wait();
      // Raw: the same payloads, one each way, with inproc's own send / recv, each side
      // receiving into one buffer and sending from another, as the server (gradient in,
      // model out) and the worker (model in, gradient out) do.
      std::vector<float> in(m, 1.0f), out(m, 1.0f);
      const heterograd::span<float> i_(in.data(), m);
      const heterograd::span<const float> o_(out.data(), m);
      t = std::chrono::steady_clock::now();
      for (std::uint64_t i = 0; i < trips; ++i) {
        if (c.rank() == 0) {
          c.recv(i_, 1, 7).wait();
          c.send(o_, 1, 8).wait();
        } else {
          c.send(o_, 0, 7).wait();
          c.recv(i_, 0, 8).wait();
        }
      }
      if (c.rank() == 0) raw_s = since(t);
    });
    hg += hg_s;
    raw += raw_s;
    update += p.seconds;
    n += inner.version() - v0;
  }
  const double k = static_cast<double>(n);
  state.SetItemsProcessed(static_cast<std::int64_t>(n));
  state.counters["hg_us"] = 1e6 * hg / k;
  state.counters["raw_us"] = 1e6 * raw / k;
  state.counters["update_us"] = 1e6 * update / k;
  state.counters["overhead_ratio"] = (hg - update) / raw;
  state.counters["floats"] = static_cast<double>(m);
}

// work()'s statements per job (server.hpp), around a pull, a compute and a push that do
// nothing: three timestamps and three differences, four sums.
void BM_bookkeeping_worker(benchmark::State& state) {
  using clock = std::chrono::steady_clock;
  hr::worker_report r;
  std::optional<hr::job_pacer> pacer;  // not paced, as work() without time_scale
  for (auto _ : state) {
    auto t = clock::now();
    benchmark::ClobberMemory();  // pull
    r.pull_seconds += since(t);
    t = clock::now();
    if (pacer) pacer->start();
    benchmark::ClobberMemory();  // compute
    if (!pacer) r.compute_seconds += since(t);
    t = clock::now();
    benchmark::ClobberMemory();  // push
    r.push_seconds += since(t);
    ++r.jobs;
  }
  benchmark::DoNotOptimize(r);
  state.SetItemsProcessed(state.iterations());
}

// A paced job of zero model time: start, finish (no sleep), the pacer's own sums.
void BM_bookkeeping_pacer(benchmark::State& state) {
  hr::job_pacer pacer(1e-3);
  double sum = 0;
  for (auto _ : state) {
    pacer.start();
    const auto j = pacer.finish(0.0, [] { return false; });
    sum += j.compute;
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations());
}

// The server's per arrival: the real clock read (now_) and the update's record, over 4
// workers and staleness 0..7.
void BM_bookkeeping_server(benchmark::State& state) {
  const heterograd::steady_clock clock;
  sim::recorder log(4);
  double now = 0;
  std::uint64_t i = 0;
  for (auto _ : state) {
    now = clock.now().count();
    log.record_update(static_cast<sim::worker_id>(i & 3), (i >> 2) & 7, sim::update_outcome::applied);
    ++i;
  }
  benchmark::DoNotOptimize(now);
  state.SetItemsProcessed(state.iterations());
}

}  // namespace

// OpenMP threads that spin after a parallel region starve the threads runtime's worker
// threads on a small machine (5 threads on 2 cores here), so the suite runs with passive
// waiting (as a user of the threads runtime should) unless the environment says otherwise.
// libgomp reads its environment when it loads, before main: the suite sets the policy and
// runs itself again (once: the variable is then set).
int main(int argc, char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then run with the default
  }
  const hg_bench::flags f(
      argc, argv, {hg_bench::floats_dimension("BM_threads_roundtrip's payloads, in floats")});
  hg_bench::register_cases("BM_threads_asgd", BM_threads_asgd, {"updates"}, {{1024}})
      ->UseRealTime()
      ->MinTime(0.5);
  benchmark::RegisterBenchmark("BM_server_apply", BM_server_apply)->UseRealTime()->MinTime(0.5);
  benchmark::RegisterBenchmark("BM_asgd_step", BM_asgd_step)->UseRealTime()->MinTime(0.5);
  benchmark::RegisterBenchmark("BM_asgd_step_device", BM_asgd_step_device)->UseRealTime()->MinTime(0.5);
  hg_bench::register_product("BM_threads_roundtrip", BM_threads_roundtrip, {"floats"},
                             {f.get("floats", {1 << 10, 1 << 20})})
      ->UseRealTime()
      ->MinTime(0.5);
  benchmark::RegisterBenchmark("BM_sim_asgd", BM_sim_asgd)->UseRealTime()->MinTime(0.5);
  benchmark::RegisterBenchmark("BM_sim_ringleader", BM_sim_ringleader)->UseRealTime()->MinTime(0.5);
  benchmark::RegisterBenchmark("BM_bookkeeping_worker", BM_bookkeeping_worker)->MinTime(0.2);
  benchmark::RegisterBenchmark("BM_bookkeeping_pacer", BM_bookkeeping_pacer)->MinTime(0.2);
  benchmark::RegisterBenchmark("BM_bookkeeping_server", BM_bookkeeping_server)->MinTime(0.2);
  return hg_bench::run(argc, argv);
}
