// Kernel benchmarks: 16M-element float buffers, each OpenMP thread count of --threads (default
// bench/bench_args.hpp's thread_counts(): 1, 2, 4, ... up to the cores; results read
// BM_sgd/threads:2/...); the cpp (sequential) backend's benchmarks run with 1. Each kernel is
// reported in GB/s counting the bytes it must move (read + written, no write-allocate), next
// to references measured in the same benchmark, interleaved with it call by call (the
// machines are shared and noisy; interleaving exposes kernel and reference to the same load):
//   update   the in-place update a += s*b (12 B/element), the ceiling of in-place optimizer
//            steps (bench/memory_bench.cpp explains why);
//   copy     STREAM-like copy b = a (8 B/element), in BM_references;
//   loop     a hand-written `#pragma omp parallel for simd` loop over the same arithmetic
//            (the 1-thread run is the reference of the cpp backend).
// See measure() for the counters; the benchmark's own time is the kernel's.
// bench/targets/kernels.py turns them into the target ratios.
//
// Bytes per element (float): sgd 12, momentum 20, adam 28 (mixed precision with bf16 params
// and grads, and capturable: 28), weighted sum of 8 buffers 36, l2 norm 4, multi-tensor adam 28.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>
#if defined(_OPENMP)
#include <omp.h>
#endif
#include <thrust/system/cpp/execution_policy.h>
#include <thrust/system/omp/execution_policy.h>

#include "bench_args.hpp"
#include "heterograd/kernels.hpp"

namespace hk = heterograd::kernels;
namespace hg = heterograd;

namespace {

constexpr std::size_t kN = std::size_t{16} << 20;
constexpr std::size_t kInputs = 8;

// 64-byte aligned, as PyTorch's CPU allocator gives: misaligned buffers cost every
// hand-written loop (not the kernels, which peel to alignment) a third of its bandwidth with
// 64-byte vectors (see kernels/launch.hpp).
struct free_deleter {
  void operator()(float* p) const { std::free(p); }
};

struct buffers {
  std::vector<std::unique_ptr<float[], free_deleter>> b;
  buffers() {
    for (std::size_t k = 0; k < 4 + kInputs + 1; ++k)
      b.emplace_back(static_cast<float*>(std::aligned_alloc(64, kN * sizeof(float))));
    // First touch in parallel with a static schedule, as the kernels will run.
    for (std::size_t k = 0; k < b.size(); ++k) {
      float* p = b[k].get();
      const float v = k == 3 ? 1e-4f : 0.5f + 0.01f * static_cast<float>(k);
#pragma omp parallel for schedule(static)
      for (std::size_t i = 0; i < kN; ++i) p[i] = v;
    }
  }
  float* p() {
    return b[0].get();
  }
  float* g() {
    return b[1].get();
  }
  float* m() {
    return b[2].get();
  }
  float* v() {
    return b[3].get();
  }
  float* in(std::size_t k) {
    return b[4 + k].get();
  }
  float* out() {
    return b[4 + kInputs].get();
  }
};

buffers& data() {
  static buffers d;
  return d;
}

hg::span<float> sp(float* p, std::size_t n = kN) {
  return {p, n};
}
hg::span<const float> csp(const float* p, std::size_t n = kN) {
  return {p, n};
}

void set_threads(benchmark::State& state) {
  data();  // allocate and first-touch outside the timed calls
#if defined(_OPENMP)
  omp_set_num_threads(static_cast<int>(state.range(0)));
#endif
  state.counters["threads"] = static_cast<double>(state.range(0));
  state.counters["elements"] = static_cast<double>(kN);
}

void finish(benchmark::State& state, std::size_t bytes_per_element) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(kN * bytes_per_element));
}

// Alternating signs keep values bounded over many iterations.
hk::sgd_config<> sgd_args(int it) {
  return {it % 2 ? 1e-3 : -1e-3, 0.0};
}

struct variant {
  std::string name;
  std::size_t bytes_per_element;
  std::function<void()> run;
};

// Runs every variant once per iteration, timing each call; the order rotates from one
// iteration to the next so that no variant always follows the same one (caches, clocks).
// Counters: <v>_GBps from each variant's best call, <v>_mean_GBps from the mean, and
// kernel_over_<v> = the median over iterations of the bandwidth ratio of the first variant
// (the kernel) to variant v, both timed in the same iteration: the figure the targets use,
// robust to the load changing during the run.
void measure(benchmark::State& state, const std::vector<variant>& vs) {
  const std::size_t nv = vs.size();
  std::vector<double> best(nv, std::numeric_limits<double>::infinity()), total(nv, 0.0),
      last(nv, 0.0);
  std::vector<std::vector<double>> ratios(nv);
  std::size_t rot = 0;
  for (auto _ : state) {
    for (std::size_t j = 0; j < nv; ++j) {
      const std::size_t k = (j + rot) % nv;
      const auto a = std::chrono::steady_clock::now();
      vs[k].run();
      benchmark::ClobberMemory();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
      best[k] = std::min(best[k], s);
      total[k] += s;
      last[k] = s;
    }
    ++rot;
    for (std::size_t k = 1; k < nv; ++k)
      ratios[k].push_back((static_cast<double>(vs[0].bytes_per_element) / last[0]) /
                          (static_cast<double>(vs[k].bytes_per_element) / last[k]));
    state.SetIterationTime(last[0]);
  }
  const double iters = static_cast<double>(state.iterations());
  for (std::size_t k = 0; k < nv; ++k) {
    const double bytes = static_cast<double>(kN * vs[k].bytes_per_element);
    state.counters[vs[k].name + "_GBps"] = bytes / best[k] / 1e9;
    state.counters[vs[k].name + "_mean_GBps"] = bytes * iters / total[k] / 1e9;
    state.counters[vs[k].name + "_best_ms"] = best[k] * 1e3;
    if (k > 0 && !ratios[k].empty()) {
      auto& r = ratios[k];
      std::nth_element(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(r.size() / 2), r.end());
      state.counters["kernel_over_" + vs[k].name] = r[r.size() / 2];
    }
  }
  finish(state, vs[0].bytes_per_element);
}

struct counter {
  int it = 0;
  int next() { return it++; }
};

variant update_ref() {
  return {"update", 12, [s = 1e-3f]() mutable {
            float* __restrict a = data().out();
            const float* __restrict b = data().g();
#pragma omp parallel for schedule(static)
            for (std::size_t i = 0; i < kN; ++i) a[i] += s * b[i];
            s = -s;
          }};
}

variant copy_ref() {
  return {"copy", 8, [] {
            const float* __restrict a = data().g();
            float* __restrict b = data().out();
#pragma omp parallel for schedule(static)
            for (std::size_t i = 0; i < kN; ++i) b[i] = a[i];
          }};
}

void BM_references(benchmark::State& state) {
  set_threads(state);
  measure(state, {update_ref(), copy_ref()});
}

// ---- SGD: 12 B/element ----------------------------------------------------------------------

template <class Policy>
variant sgd_kernel(const Policy& pol) {
  return {"kernel", 12, [pol, c = counter{}]() mutable {
            hk::sgd(pol, sp(data().p()), csp(data().g()), sgd_args(c.next()));
          }};
}

variant sgd_loop() {
  return {"loop", 12, [c = counter{}]() mutable {
            float* __restrict p = data().p();
            const float* __restrict g = data().g();
            const auto a = sgd_args(c.next());
            const float lr = static_cast<float>(a.lr), wd = static_cast<float>(a.weight_decay);
#pragma omp parallel for simd schedule(static)
            for (std::size_t i = 0; i < kN; ++i) p[i] -= lr * (g[i] + wd * p[i]);
          }};
}

void BM_sgd(benchmark::State& state) {
  set_threads(state);
  measure(state, {sgd_kernel(thrust::omp::par), sgd_loop(), update_ref()});
}

void BM_sgd_cpp(benchmark::State& state) {
  set_threads(state);
  measure(state, {sgd_kernel(thrust::cpp::par), sgd_loop(), update_ref()});
}

// ---- momentum: 20 B/element -------------------------------------------------------------

hk::momentum_config<> mom_args(int it) {
  return {it % 2 ? 1e-3 : -1e-3, 0.5, 0.0, 0.0};
}

template <class Policy>
variant momentum_kernel(const Policy& pol) {
  return {"kernel", 20, [pol, c = counter{}]() mutable {
            hk::momentum(pol, sp(data().p()), csp(data().g()), sp(data().m()), mom_args(c.next()));
          }};
}

variant momentum_loop() {
  return {"loop", 20, [c = counter{}]() mutable {
            float* __restrict p = data().p();
            const float* __restrict g = data().g();
            float* __restrict v = data().m();
            const auto a = mom_args(c.next());
            const float lr = static_cast<float>(a.lr), mu = static_cast<float>(a.momentum),
                        d1 = static_cast<float>(1.0 - a.dampening),
                        wd = static_cast<float>(a.weight_decay);
#pragma omp parallel for simd schedule(static)
            for (std::size_t i = 0; i < kN; ++i) {
              const float d = g[i] + wd * p[i];
              const float vi = mu * v[i] + d1 * d;
              v[i] = vi;
              p[i] -= lr * vi;
            }
          }};
}

void BM_momentum(benchmark::State& state) {
  set_threads(state);
  measure(state, {momentum_kernel(thrust::omp::par), momentum_loop(), update_ref()});
}

void BM_momentum_cpp(benchmark::State& state) {
  set_threads(state);
  measure(state, {momentum_kernel(thrust::cpp::par), momentum_loop(), update_ref()});
}

// ---- Adam: 28 B/element -----------------------------------------------------------------

const hk::adam_config<> adam_hp{.lr = 1e-4};
hk::adam_options adam_step(int it) { return {.step = 1 + it % 1000}; }

template <class Policy>
variant adam_kernel(const Policy& pol) {
  return {"kernel", 28, [pol, c = counter{}]() mutable {
            hk::adam(pol, sp(data().p()), csp(data().g()), sp(data().m()), sp(data().v()),
                     adam_hp, adam_step(c.next()));
          }};
}

// A hand-written loop with the same arithmetic (square roots vectorise: -fno-math-errno).
variant adam_loop() {
  return {"loop", 28, [c = counter{}]() mutable {
            float* __restrict p = data().p();
            const float* __restrict g = data().g();
            float* __restrict m = data().m();
            float* __restrict v = data().v();
            const auto& a = adam_hp;
            const double t = static_cast<double>(adam_step(c.next()).step);
            const float b1 = static_cast<float>(a.beta1), b2 = static_cast<float>(a.beta2);
            const float step = static_cast<float>(a.lr / (1 - std::pow(a.beta1, t)));
            const float isc2 = static_cast<float>(1 / std::sqrt(1 - std::pow(a.beta2, t)));
            const float eps = static_cast<float>(a.eps);
#pragma omp parallel for simd schedule(static)
            for (std::size_t i = 0; i < kN; ++i) {
              const float gi = g[i];
              const float mi = b1 * m[i] + (1 - b1) * gi;
              const float vi = b2 * v[i] + (1 - b2) * gi * gi;
              m[i] = mi;
              v[i] = vi;
              p[i] -= step * mi / (std::sqrt(vi) * isc2 + eps);
            }
          }};
}

// The same Adam body through thrust::for_each_n on Thrust's own omp backend (for reference:
// the kernels' omp path is a direct `omp parallel for simd` loop, see kernels/launch.hpp).
variant adam_thrust_for_each() {
  return {"thrust_for_each", 28, [c = counter{}]() mutable {
            hk::launch_thrust(
                thrust::omp::par, kN,
                hk::detail::adam_body<float>{
                    data().p(), data().g(), data().m(), data().v(),
                    hk::detail::make_adam_coeffs<float>(adam_hp, adam_step(c.next()))});
          }};
}

void BM_adam(benchmark::State& state) {
  set_threads(state);
  measure(state,
          {adam_kernel(thrust::omp::par), adam_loop(), adam_thrust_for_each(), update_ref()});
}

void BM_adam_cpp(benchmark::State& state) {
  set_threads(state);
  measure(state, {adam_kernel(thrust::cpp::par), adam_loop(), update_ref()});
}

// Mixed precision (bf16 params and grads, fp32 master, m, v) and capturable Adam (count and
// coefficients in memory, computed by a one-thread prologue), both 28 B/element, against the
// fp32 kernel. The bf16 buffers are the first halves of two input buffers.
hg::span<hk::bf16> bf16_span(float* p) {
  return {reinterpret_cast<hk::bf16*>(p), kN};
}

variant adam_mixed_kernel() {
  return {"kernel", 28, [c = counter{}]() mutable {
            hk::adam_mixed(thrust::omp::par, bf16_span(data().in(0)),
                           hg::span<const hk::bf16>(bf16_span(data().in(1))), sp(data().out()),
                           sp(data().m()), sp(data().v()), adam_hp, adam_step(c.next()));
          }};
}

variant adam_capturable_kernel() {
  return {"capturable", 28,
          [words = std::vector<float>(hk::capturable_words<float>, 0.0f)]() mutable {
            hk::adam_capturable(thrust::omp::par, sp(data().p()), csp(data().g()), sp(data().m()),
                                sp(data().v()), hg::span<float>(words), adam_hp);
          }};
}

void BM_adam_mixed(benchmark::State& state) {
  set_threads(state);
  auto fp32 = adam_kernel(thrust::omp::par);
  fp32.name = "fp32";
  measure(state, {adam_mixed_kernel(), fp32, adam_capturable_kernel(), update_ref()});
}

// Multi-tensor Adam over 200 tensors of mixed sizes (sum = 16M), against one buffer of the
// same total size.
std::vector<std::size_t> mixed_sizes() {
  std::vector<std::size_t> s;
  std::uint64_t x = 12345;
  std::size_t total = 0;
  for (int k = 0; k < 199; ++k) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const std::size_t n = 1000 + (x >> 33) % 160000;  // 1K .. 161K elements
    s.push_back(n);
    total += n;
  }
  s.push_back(kN - total);  // one big tensor takes the rest
  return s;
}

void BM_multi_tensor_adam(benchmark::State& state) {
  set_threads(state);
  const auto sizes = mixed_sizes();
  std::vector<hk::adam_tensor<float>> list;
  std::size_t off = 0;
  for (std::size_t n : sizes) {
    list.push_back({sp(data().p() + off, n), csp(data().g() + off, n), sp(data().m() + off, n),
                    sp(data().v() + off, n)});
    off += n;
  }
  variant multi{"kernel", 28, [list, c = counter{}]() mutable {
                  hk::multi_tensor_adam(thrust::omp::par,
                                        std::span<const hk::adam_tensor<float>>(list), adam_hp,
                                        adam_step(c.next()));
                }};
  auto single = adam_kernel(thrust::omp::par);
  single.name = "single";
  measure(state, {multi, single, update_ref()});
  state.counters["tensors"] = static_cast<double>(sizes.size());
}

// ---- weighted average of 8 buffers: 36 B/element ---------------------------------------

void BM_weighted_sum8(benchmark::State& state) {
  set_threads(state);
  std::vector<hg::span<const float>> in;
  for (std::size_t k = 0; k < kInputs; ++k) in.push_back(csp(data().in(k)));
  const std::vector<float> w(kInputs, 1.0f / kInputs);
  variant kernel{"kernel", 4 * (kInputs + 1), [in, w] {
                   hk::weighted_sum(thrust::omp::par, sp(data().out()), in,
                                    std::span<const float>(w));
                 }};
  variant loop{"loop", 4 * (kInputs + 1), [] {
                 const float* x[kInputs];
                 for (std::size_t k = 0; k < kInputs; ++k) x[k] = data().in(k);
                 float* __restrict out = data().out();
                 const float wk = 1.0f / kInputs;
#pragma omp parallel for simd schedule(static)
                 for (std::size_t i = 0; i < kN; ++i) {
                   float s = 0;
                   for (std::size_t k = 0; k < kInputs; ++k) s += wk * x[k][i];
                   out[i] = s;
                 }
               }};
  measure(state, {kernel, loop, update_ref()});
}

// ---- L2 norm: 4 B/element -------------------------------------------------------------------

void BM_l2_norm(benchmark::State& state) {
  set_threads(state);
  variant kernel{"kernel", 4,
                 [] { benchmark::DoNotOptimize(hk::l2_norm(thrust::omp::par, csp(data().g()))); }};
  // OpenMP's reduction clause: not deterministic across thread counts; for comparison only.
  variant loop{"loop", 4, [] {
                 const float* __restrict g = data().g();
                 double s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s)
                 for (std::size_t i = 0; i < kN; ++i) s += static_cast<double>(g[i]) * g[i];
                 benchmark::DoNotOptimize(std::sqrt(s));
               }};
  measure(state, {kernel, loop, update_ref()});
}

}  // namespace

int main(int argc, char** argv) {
  const hg_bench::flags f(argc, argv, {hg_bench::threads_dimension()});
  const auto threads = f.get("threads", hg_bench::thread_counts());
  // The cpp backend is sequential: its benchmarks (and their loop references) run 1 thread.
  const hg_bench::values one{1};
  const std::pair<const char*, void (*)(benchmark::State&)> order[] = {
      {"BM_references", BM_references},
      {"BM_sgd", BM_sgd},
      {"BM_sgd_cpp", BM_sgd_cpp},
      {"BM_momentum", BM_momentum},
      {"BM_momentum_cpp", BM_momentum_cpp},
      {"BM_adam", BM_adam},
      {"BM_adam_cpp", BM_adam_cpp},
      {"BM_adam_mixed", BM_adam_mixed},
      {"BM_multi_tensor_adam", BM_multi_tensor_adam},
      {"BM_weighted_sum8", BM_weighted_sum8},
      {"BM_l2_norm", BM_l2_norm},
  };
  for (const auto& [name, fn] : order) {
    const bool cpp = std::string_view(name).ends_with("_cpp");
    hg_bench::register_threads(name, fn, cpp ? one : threads)
        ->Unit(benchmark::kMillisecond)
        ->UseManualTime()
        ->MinTime(1.0);
  }
  return hg_bench::run(argc, argv);
}
