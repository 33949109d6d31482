// The averaging pass of the sync family (heterograd/algorithms/sync/detail/blend.hpp): out =
// sum_k w_k x_k over K buffers of n floats, (K + 1) * 4 bytes per element when out stays in
// cache per element, which it does not here: the loop makes K passes over out, so it moves
// (3K - 1) * 4 bytes per element (K reads of x_k, K writes and K - 1 re-reads of out). Counter
// bytes_per_second uses that count. WIRING(kernels): kernels::weighted_sum does one pass for
// K <= 8; compare once it lands.
//
// BM_bsp_round: one simulated BSP round (4 workers, softmax regression 784 x 10, b = 32) with
// sample-weighted gradient aggregation, driven directly (no runtime): the policy's overhead
// on top of the model's gradients.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>

#include "heterograd/algorithms/sync/bsp.hpp"
#include "heterograd/algorithms/sync/detail/blend.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/nn/mlp.hpp"

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
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>((3 * k - 1) * n * 4));
}
BENCHMARK(BM_weighted_sum)->Args({1 << 22, 4})->Args({1 << 22, 8})->UseRealTime();

struct sgd {
  template <class Policy, class T>
  int init(const Policy&, hg::span<T>) const { return 0; }
  template <class Policy, class T>
  void update(const Policy&, hg::span<const T> g, int&, hg::span<T> p) const {
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= 0.01f * g[i];
  }
};

void BM_bsp_round(benchmark::State& state) {
  const std::size_t dim = 784, classes = 10, rows = 512;
  std::vector<float> x(rows * dim);
  std::vector<std::int32_t> y(rows);
  const hg::counter_rng rng(1);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(rng.uniform(i));
  for (std::size_t i = 0; i < rows; ++i) y[i] = static_cast<std::int32_t>(i % classes);
  std::vector<hg::nn::mlp<float>> ms(4, hg::nn::softmax_regression<float>(dim, classes));
  std::vector<float> p0(ms[0].num_params());
  ms[0].init(p0, 1);
  auto oracle = [&](std::size_t w, std::uint64_t s, std::size_t b, hg::span<const float> p,
                    hg::span<float> g) {
    const std::size_t first = (s * 32 + w * 128) % (rows - b);
    return ms[w].loss_and_gradient(
        p, {hg::span<const float>(x.data() + first * dim, b * dim),
            hg::span<const std::int32_t>(y.data() + first, b)}, g);
  };
  hs::bsp<float, sgd, decltype(oracle)> bsp(4, p0, sgd{}, oracle, {32, 32, 32, 32});
  for (auto _ : state) bsp.step();
  state.SetItemsProcessed(state.iterations() * 128);  // samples per round
}
BENCHMARK(BM_bsp_round)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
