// The comm suite: inproc allreduce (sum of floats, 1K..16M, 2 and 4 ranks) and its
// alternatives, the partial (solo) allreduce with a delayed rank, the in-place update
// bandwidth that the memory bound of the owner-computes reduction is taken against, and the
// two-thread handoff that bounds a small allreduce from below on this machine.
//
// Method (the same in the MPI peers, bench/compare/comm_mpi_harness.hpp): before every call
// each rank rewrites its whole buffer, as a backward pass would (back-to-back calls on a
// cache-resident buffer flatter small sizes); rank 0 times the call itself (manual time).
// Counters: algbw = bytes / time, busbw = 2(n-1)/n * bytes / time (NCCL's convention).
//
// Variants: 0 native (inproc's choice per size: staged copy for small buffers, single-pass
// owner-computes for large), 1 reduce_scatter + allgather through the transport, 2 ring
// schedule over inproc messages, 3 recursive halving/doubling schedule.
//
// Named arguments (bench/bench_args.hpp): `ranks` (default 2, 4: 4 ranks on 2 cores is one of
// the cases, so the default is not the machine's thread range; --ranks=LIST), `floats`
// (default 1K, 64K, 1M, 16M; the two-thread references 1K; --floats=LIST, each a multiple of
// every rank count), `variant` (above), `threads` (BM_update_reference's OpenMP threads:
// default thread_counts(), 1, 2, 4, ... up to the cores; --threads=LIST). Results read
// BM_inproc_allreduce/ranks:2/floats:1024/variant:0/..., BM_update_reference/threads:2/...
// BM_inproc_partial_solo_delayed runs the pairs (ranks, floats) (2, 64K), (4, 64K), (2, 1M),
// or the product of --ranks and --floats when either is given.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "bench_args.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/comm/inproc_partial.hpp"

namespace {

namespace hg = heterograd;
namespace hc = heterograd::comm;
namespace hi = heterograd::comm::inproc;

using clk = std::chrono::steady_clock;

void rewrite(std::vector<float>& b, int rank, long it) {
  const float v = static_cast<float>((it + rank) & 7);
  std::fill(b.begin(), b.end(), v);  // m*4 bytes written
}

void call(int variant, const hi::communicator& c, std::vector<float>& buf, std::vector<float>& tmp) {
  hg::span<float> s(buf);
  switch (variant) {
    case 0: c.allreduce(s).wait(); break;
    case 1:
      c.reduce_scatter(hg::span<const float>(buf), hg::span<float>(tmp)).wait();
      c.allgather(hg::span<const float>(tmp), s).wait();
      break;
    default: {
      hc::allreduce_options o;
      o.algo = variant == 2 ? hc::algorithm::ring : hc::algorithm::recursive_halving_doubling;
      c.allreduce(s, o).wait();
    }
  }
}

/// Median and 10th percentile of per-call times, in microseconds (the mean, Google
/// Benchmark's figure, is dominated by descheduled calls on a shared machine).
void set_quantiles(benchmark::State& state, std::vector<double> t) {
  if (t.empty()) return;
  std::sort(t.begin(), t.end());
  state.counters["median_us"] = t[t.size() / 2] * 1e6;
  state.counters["p10_us"] = t[t.size() / 10] * 1e6;
}

void set_counters(benchmark::State& state, int n, std::size_t m, double seconds, long iters) {
  const double bytes = static_cast<double>(m) * sizeof(float);
  const double t = seconds / static_cast<double>(std::max(1L, iters));
  state.counters["ranks"] = n;
  state.counters["floats"] = static_cast<double>(m);
  state.counters["algbw_GBps"] = bytes / t / 1e9;
  state.counters["busbw_GBps"] = 2.0 * (n - 1) / n * bytes / t / 1e9;
}

void BM_inproc_allreduce(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto m = static_cast<std::size_t>(state.range(1));
  const int variant = static_cast<int>(state.range(2));
  hi::world w(n);
  std::vector<std::thread> helpers;
  for (int r = 1; r < n; ++r) {
    helpers.emplace_back([&, r] {
      auto c = w.rank(r);
      std::vector<float> buf(m), tmp(m / static_cast<std::size_t>(n));
      for (long it = 0;; ++it) {
        rewrite(buf, r, it);
        call(variant, c, buf, tmp);
        if (std::isnan(buf[0])) break;  // rank 0's last call carries a NaN: stop
      }
    });
  }
  auto c = w.rank(0);
  std::vector<float> buf(m), tmp(m / static_cast<std::size_t>(n));
  double total = 0;
  long it = 0;
  std::vector<double> times;
  for (auto _ : state) {
    rewrite(buf, 0, it++);
    const auto t0 = clk::now();
    call(variant, c, buf, tmp);
    const double dt = std::chrono::duration<double>(clk::now() - t0).count();
    state.SetIterationTime(dt);
    total += dt;
    times.push_back(dt);
  }
  set_quantiles(state, std::move(times));
  rewrite(buf, 0, it);
  buf[0] = std::numeric_limits<float>::quiet_NaN();
  call(variant, c, buf, tmp);  // the helpers' last call
  for (auto& h : helpers) h.join();
  set_counters(state, n, m, total, it);
  state.SetBytesProcessed(static_cast<std::int64_t>(it) * static_cast<std::int64_t>(m * sizeof(float)));
}

/// Solo partial allreduce with rank n-1 arriving 10 ms late every round: rank 0's latency.
void BM_inproc_partial_solo_delayed(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto m = static_cast<std::size_t>(state.range(1));
  hi::world w(n);
  std::vector<std::thread> helpers;
  auto body = [&](int r, benchmark::State* st) {
    auto c = w.rank(r);
    hi::partial_allreduce<float> pa(c, m, hc::partial_policy::solo());
    std::vector<float> buf(m);
    double total = 0;
    long it = 0;
    hc::allreduce_options at_most;
    at_most.op = hc::reduce_op::max;
    for (;;) {
      // Untimed: every round starts together, and rank 0's decision to stop travels with the
      // start (a flag read after a barrier could already belong to the next round).
      int stop = (st && !st->KeepRunning()) ? 1 : 0;
      c.allreduce(hg::span<int>(&stop, 1), at_most).wait();
      if (stop) break;
      rewrite(buf, r, it++);
      if (r == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      const auto t0 = clk::now();
      pa.allreduce(hg::span<float>(buf)).wait();
      const double dt = std::chrono::duration<double>(clk::now() - t0).count();
      if (st) {
        st->SetIterationTime(dt);
        total += dt;
      }
    }
    // A last round that everyone joins leaves no one waiting.
    pa.flush(hg::span<float>(buf)).wait();
    if (st) set_counters(*st, n, m, total, it);
  };
  for (int r = 1; r < n; ++r) helpers.emplace_back(body, r, nullptr);
  body(0, &state);
  for (auto& h : helpers) h.join();
}

/// The in-place update a += s*b over 64M floats with `threads` OpenMP threads: 12 bytes per
/// element, the ceiling of the owner-computes allreduce (2*N*S bytes at this rate; the
/// 2-rank targets use the 2-thread figure).
void BM_update_reference(benchmark::State& state) {
  constexpr std::size_t k = std::size_t{64} << 20;
  std::unique_ptr<float[]> a(new float[k]), b(new float[k]);
#if defined(_OPENMP)
  omp_set_num_threads(static_cast<int>(state.range(0)));
#endif
  float* pa = a.get();
  float* pb = b.get();
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < k; ++i) {
    pa[i] = 1.0f;
    pb[i] = 2.0f;
  }
  float s = 1e-3f;
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < k; ++i) pa[i] += s * pb[i];
    s = -s;
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(k * 12));
}

struct alignas(64) round_flag {
  std::atomic<long> v{0};
};

/// Spins until f reaches round `it`, yielding every 64 polls (when the scheduler puts both
/// threads on one core, a pure spin would wait out a whole time slice). False when the
/// benchmark stopped before round `it` (stop holds the last round, or -1 while running).
bool spin_until(const round_flag& f, long it, const std::atomic<long>& stop) {
  for (int polls = 1; f.v.load(std::memory_order_acquire) < it; ++polls) {
    if (stop.load(std::memory_order_relaxed) >= 0 && stop.load() < it) return false;
    if (polls % 64 == 0) std::this_thread::yield(); else hc::detail::cpu_relax();
  }
  return true;
}

/// Runs round(me, it) for it = 1, 2, ... on this thread (me = 0, timed: round returns its
/// seconds) and a helper thread (me = 1), then records thread 0's quantiles.
template <class Round>
void run_two_threads(benchmark::State& state, std::atomic<long>& stop, Round round) {
  std::thread helper([&] {
    for (long it = 1; stop.load() < 0 || it <= stop.load(); ++it) round(1, it);
  });
  long it = 0;
  std::vector<double> times;
  for (auto _ : state) {
    times.push_back(round(0, ++it));
    state.SetIterationTime(times.back());
  }
  stop.store(it);
  set_quantiles(state, std::move(times));
  helper.join();
  state.counters["floats"] = static_cast<double>(state.range(0));
}

/// The floor of a small allreduce between two threads on this machine: per round, each
/// thread rewrites its m floats, raises its flag, spins until the peer's flag is up, and
/// reads the peer's freshly written buffer (m*4 bytes cross cores, plus two flag lines).
/// No allocation, no checks, and a plain wait (spin, yielding every 64 polls): what any
/// shared-memory allreduce pays at least. Thread 0 times the round from raising its flag to
/// the end of its read.
void BM_handoff_reference(benchmark::State& state) {
  const auto m = static_cast<std::size_t>(state.range(0));
  round_flag f[2];
  std::vector<float> buf[2] = {std::vector<float>(m), std::vector<float>(m)};
  std::atomic<long> stop{-1};
  run_two_threads(state, stop, [&](int me, long it) {
    const int peer = 1 - me;
    std::fill(buf[me].begin(), buf[me].end(), static_cast<float>(it & 7));  // m*4 bytes written
    const auto t0 = clk::now();
    f[me].v.store(it, std::memory_order_release);
    if (!spin_until(f[peer], it, stop)) return 0.0;
    float acc = 0;
    for (float x : buf[peer]) acc += x;  // m*4 bytes read from the other core
    benchmark::DoNotOptimize(acc);
    return std::chrono::duration<double>(clk::now() - t0).count();
  });
}

/// The bare two-thread owner-computes allreduce of m floats that inproc's two-rank path
/// implements, with nothing else: an arrival flag, half the sums written into both buffers, a
/// departure flag. No descriptors, agreement checks, requests, deadlines or sleeping. It
/// bounds what the transport can reach on this machine.
void BM_owner_computes_reference(benchmark::State& state) {
  const auto m = static_cast<std::size_t>(state.range(0));
  round_flag arrived[2], finished[2];
  std::vector<float> buf[2] = {std::vector<float>(m), std::vector<float>(m)};
  std::atomic<long> stop{-1};
  run_two_threads(state, stop, [&](int me, long it) {
    const int peer = 1 - me;
    std::fill(buf[me].begin(), buf[me].end(), static_cast<float>((it + me) & 7));
    const auto t0 = clk::now();
    arrived[me].v.store(it, std::memory_order_release);
    if (!spin_until(arrived[peer], it, stop)) return 0.0;
    const std::size_t lo = static_cast<std::size_t>(me) * (m / 2), hi = me == 0 ? m / 2 : m;
    for (std::size_t i = lo; i < hi; ++i) {
      const float x = buf[0][i] + buf[1][i];
      buf[0][i] = x;
      buf[1][i] = x;
    }
    finished[me].v.store(it, std::memory_order_release);
    if (!spin_until(finished[peer], it, stop)) return 0.0;
    return std::chrono::duration<double>(clk::now() - t0).count();
  });
}

}  // namespace

int main(int argc, char** argv) {
  const hg_bench::flags f(argc, argv,
                          {{"ranks", "inproc ranks (one thread each)", 256},
                           hg_bench::floats_dimension("allreduce sizes, in floats"),
                           hg_bench::threads_dimension()});
  const auto ranks = f.get("ranks", {2, 4});
  const auto floats = f.get("floats", {1 << 10, 1 << 16, 1 << 20, 1 << 24});
  const auto small = f.get("floats", {1 << 10});
  // reduce_scatter (variant 1) gives each rank floats / ranks of the buffer.
  for (std::int64_t m : floats)
    for (std::int64_t n : ranks)
      if (m % n != 0)
        hg_bench::usage_error(
            "floats", hg_bench::join(floats),
            std::to_string(m) + " does not split over " + std::to_string(n) + " ranks",
            "each --floats value must be a multiple of every --ranks value (" +
                hg_bench::join(ranks) + ")");
  hg_bench::register_threads("BM_update_reference", BM_update_reference,
                             f.get("threads", hg_bench::thread_counts()))
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(0.5);
  hg_bench::register_product("BM_inproc_allreduce", BM_inproc_allreduce,
                             {"ranks", "floats", "variant"}, {ranks, floats, {0, 1, 2, 3}})
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->MinTime(0.2);
  hg_bench::register_product("BM_owner_computes_reference", BM_owner_computes_reference, {"floats"},
                             {small})
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->MinTime(0.2);
  hg_bench::register_product("BM_handoff_reference", BM_handoff_reference, {"floats"}, {small})
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->MinTime(0.2);
  // The solo partial allreduce: the three cases, or the product of the flags.
  const bool chosen = f.given("ranks") || f.given("floats");
  auto* solo = chosen ? hg_bench::register_product("BM_inproc_partial_solo_delayed",
                                                   BM_inproc_partial_solo_delayed,
                                                   {"ranks", "floats"}, {ranks, floats})
                      : hg_bench::register_cases(
                            "BM_inproc_partial_solo_delayed", BM_inproc_partial_solo_delayed,
                            {"ranks", "floats"}, {{2, 1 << 16}, {4, 1 << 16}, {2, 1 << 20}});
  solo->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(25);
  return hg_bench::run(argc, argv);
}
