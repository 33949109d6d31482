// The averaging pass of the sync family (heterograd/algorithms/sync/detail/blend.hpp, i.e.
// kernels::weighted_sum on the sequential backend): out = sum_k w_k x_k over K buffers of n
// floats in one pass for K <= 8, (K + 1) * 4 bytes per element (K reads, one write); counter
// bytes_per_second uses that count. Arguments `floats` (n; default 4M, --floats=LIST) and
// `inputs` (K = 4, 8): BM_weighted_sum/floats:4194304/inputs:8/...
//
// BM_bsp_round: one simulated BSP round (4 workers, softmax regression 784 x 10, b = 32) with
// sample-weighted gradient aggregation, driven directly (no runtime): the policy's overhead
// on top of the model's gradients. BM_bsp_round_threads: the same rounds on the threads
// runtime (4 threads over the inproc transport, 100 rounds per run_threads call, thread
// start-up included), per round.
//
// BM_local_sgd_step/memory:M: local_sgd_worker's local step (the non-finite screen, 4 B/param,
// then Adam, 28 B/param: 32 B) on 1M floats, one rank over inproc, no synchronisation in the
// timed steps. memory:0 keeps the rank's state in host vectors with every kernel on
// thrust::omp::par (kernels::host_memory_on); memory:1 in Thrust device vectors of the build's
// device system (kernels::thrust_memory(thrust::device): OpenMP on the CPU), the code path a
// GPU rank runs, whose screen is a finiteness reduction read back as one flag.
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>
#include <thrust/execution_policy.h>

#include "bench_args.hpp"
#include "heterograd/algorithms/sync/bsp.hpp"
#include "heterograd/algorithms/sync/detail/blend.hpp"
#include "heterograd/algorithms/sync/workers.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/kernels/gemm.hpp"
#include "heterograd/kernels/memory.hpp"
#include "heterograd/kernels/thrust_memory.hpp"
#include "heterograd/nn/mlp.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/runtime/round_threads.hpp"

namespace hg = heterograd;
namespace hs = heterograd::algorithms::sync;

namespace {

void BM_weighted_sum(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto k = static_cast<std::size_t>(state.range(1));
  std::vector<std::vector<float>> xs(k, std::vector<float>(n, 1.0f));
  std::vector<hg::span<const float>> in;
  for (auto& x : xs) in.emplace_back(x);
  std::vector<double> w(k, 1.0 / static_cast<double>(k));
  std::vector<float> out(n);
  for (auto _ : state) {
    hs::detail::weighted_sum(hg::span<float>(out), in, w);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>((k + 1) * n * 4));
}

struct bsp_problem {
  static constexpr std::size_t dim = 784, classes = 10, rows = 512;
  std::vector<float> x;
  std::vector<std::int32_t> y;
  std::vector<hg::nn::mlp<float>> ms;
  std::vector<float> p0;
  bsp_problem() : x(rows * dim), y(rows), ms(4, hg::nn::softmax_regression<float>(dim, classes)) {
    const hg::counter_rng rng(1);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(rng.uniform(i));
    for (std::size_t i = 0; i < rows; ++i) y[i] = static_cast<std::int32_t>(i % classes);
    p0.resize(ms[0].num_params());
    ms[0].init(p0, 1);
  }
  // Worker w's own model: the threads runtime calls workers at once.
  auto oracle() {
    return [this](std::size_t w, std::uint64_t s, std::size_t b, hg::span<const float> p,
                  hg::span<float> g) {
      const std::size_t first = (s * 32 + w * 128) % (rows - b);
      return ms[w].loss_and_gradient(
          p, {hg::span<const float>(x.data() + first * dim, b * dim),
              hg::span<const std::int32_t>(y.data() + first, b)}, g);
    };
  }
};

void BM_bsp_round(benchmark::State& state) {
  hg::kernels::set_blas_threads(1);
  bsp_problem pr;
  auto oracle = pr.oracle();
  hs::bsp<float, hg::optim::sgd, decltype(oracle)> bsp(4, pr.p0, hg::optim::sgd({.lr = 0.01}),
                                                       oracle, {32, 32, 32, 32});
  for (auto _ : state) bsp.step();
  state.SetItemsProcessed(state.iterations() * 128);  // samples per round
}

void BM_bsp_round_threads(benchmark::State& state) {
  hg::kernels::set_blas_threads(1);
  bsp_problem pr;
  auto oracle = pr.oracle();
  hs::bsp<float, hg::optim::sgd, decltype(oracle)> bsp(4, pr.p0, hg::optim::sgd({.lr = 0.01}),
                                                       oracle, {32, 32, 32, 32});
  constexpr std::uint64_t rounds = 100;
  for (auto _ : state) heterograd::runtime::run_threads(bsp, rounds);
  state.SetItemsProcessed(state.iterations() * 128 * static_cast<std::int64_t>(rounds));
  state.counters["us_per_round"] = benchmark::Counter(
      static_cast<double>(rounds) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

template <class Memory>
void local_sgd_steps(benchmark::State& state, const Memory& mem) {
  constexpr std::size_t n = std::size_t{1} << 20;
  using C = heterograd::comm::inproc::communicator;
  heterograd::comm::inproc::spawn(1, [&](C c) {
    auto p = mem.template make<float>(n, 0.5f);
    const auto g = mem.template make<float>(n, 1e-4f);
    const auto ps = heterograd::kernels::view(mem, p);
    hs::local_sgd_config cfg;
    cfg.period = std::size_t{1} << 30;  // no synchronisation in the timed steps
    hs::local_sgd_worker<float, hg::optim::adam, C, hs::no_outer, hs::identity_transform, Memory> w(
        c, hg::optim::adam({.lr = 1e-4}), ps, {1}, cfg, {}, {}, {}, mem);
    for (auto _ : state) w.step(ps, heterograd::kernels::cview(mem, g));
  });
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(32 * n));
}

void BM_local_sgd_step(benchmark::State& state) {
  if (state.range(0) == 0)
    local_sgd_steps(state, hg::kernels::host_memory_on<std::remove_cvref_t<decltype(thrust::omp::par)>>{});
  else
    local_sgd_steps(state, hg::kernels::thrust_memory(thrust::device));
}
}  // namespace

int main(int argc, char** argv) {
  const hg_bench::flags f(argc, argv, {hg_bench::floats_dimension("floats per buffer")});
  hg_bench::register_product("BM_weighted_sum", BM_weighted_sum, {"floats", "inputs"},
                             {f.get("floats", {1 << 22}), {4, 8}})
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_bsp_round", BM_bsp_round)->UseRealTime();
  hg_bench::register_product("BM_local_sgd_step", BM_local_sgd_step, {"memory"}, {{0, 1}})
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_bsp_round_threads", BM_bsp_round_threads)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  return hg_bench::run(argc, argv);
}
