// Issue 11 benchmarks: bytes moved by the hybrid aggregator against an all-dense allreduce
// (embedding with 1% of rows touched per step), codec encode throughput and wire sizes, the
// LSH-sparse softmax layer's training samples/s against the dense layer (BLAS), and the
// composite transport's allreduce against the flat inproc one.
//
// Named arguments: `width` (the embedding's floats per row; default 16, 64, --width=LIST),
// `threads` (the LSH layer's; default bench/bench_args.hpp's thread_counts(), --threads=LIST),
// `rails` (the 4-rank allreduce: 0 the flat one, 1 or 2 the composite's rails). Results read
// BM_hybrid_step/width:16/..., BM_lsh_layer_train/threads:1/..., BM_allreduce_4_ranks/rails:0/...

#include <benchmark/benchmark.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "bench_args.hpp"
#include "heterograd/algorithms/sparse/hybrid.hpp"
#include "heterograd/comm/composite.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/compress/codecs.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/kernels/gemm.hpp"
#include "heterograd/nn/lsh_layer.hpp"
#include "heterograd/nn/mlp.hpp"

namespace hg = heterograd;
namespace hc = heterograd::comm;
namespace hps = heterograd::algorithms::sparse;
namespace hi = heterograd::comm::inproc;
namespace hs = heterograd::sparse;
namespace nn = heterograd::nn;
namespace cz = heterograd::compress;

namespace {

// --- hybrid aggregation -------------------------------------------------------------------------
// 2 inproc ranks, a table of 100k rows of `width` floats, each rank touching 1% of the rows per
// step (pull, then push of its gradient rows); counters: the bytes each rank sent over the
// bytes an all-dense ring allreduce of the table sends.
void BM_hybrid_step(benchmark::State& state) {
  const std::size_t rows = 100000, width = static_cast<std::size_t>(state.range(0));
  const std::size_t touched = rows / 100;
  const int steps = 10;
  std::vector<float> init(rows * width, 0.01f);
  double ratio = 0, sent = 0;
  for (auto _ : state) {
    std::mutex m;
    hi::spawn(2, [&](hi::communicator c) {
      hps::hybrid_aggregator<hi::communicator> agg(c);
      agg.add_table(rows, width, hg::span<const float>(init));
      const hg::counter_rng rng(7, static_cast<std::uint64_t>(c.rank()));
      std::vector<hs::index_t> ids(touched);
      std::vector<float> vals(touched * width), dense_grad(16, 0.1f);
      std::vector<hs::row_sparse<float>> g(1, hs::row_sparse<float>(rows, width));
      for (int s = 0; s < steps; ++s) {
        for (std::size_t k = 0; k < touched; ++k)
          ids[k] = static_cast<hs::index_t>(rng.below(static_cast<std::uint64_t>(s) * touched + k, rows));
        agg.pull(0, hg::span<const hs::index_t>(ids), hg::span<float>(vals));
        g[0].indices = ids;
        g[0].values = vals;
        const hg::span<float> dg[] = {hg::span<float>(dense_grad)};
        agg.step(std::span<const hg::span<float>>(dg), std::span<const hs::row_sparse<float>>(g),
                 [](std::size_t, hs::index_t, hg::span<float> p, hg::span<const float> gr) {
                   for (std::size_t j = 0; j < p.size(); ++j) p[j] -= 0.1f * gr[j];
                 });
      }
      std::lock_guard<std::mutex> l(m);
      if (c.rank() == 0) ratio = agg.traffic().ratio(), sent = agg.traffic().total();
    });
  }
  state.counters["bytes_ratio"] = ratio;
  state.counters["bytes_per_step"] = sent / steps;
  state.counters["steps_per_s"] = benchmark::Counter(static_cast<double>(steps) * state.iterations(),
                                                      benchmark::Counter::kIsRate);
}

// The all-dense alternative: 2 ranks allreduce the densified table gradient every step.
void BM_dense_table_step(benchmark::State& state) {
  const std::size_t rows = 100000, width = static_cast<std::size_t>(state.range(0));
  const int steps = 10;
  for (auto _ : state) {
    hi::spawn(2, [&](hi::communicator c) {
      std::vector<float> grad(rows * width, 0.0f), table(rows * width, 0.01f);
      for (int s = 0; s < steps; ++s) {
        c.allreduce(hg::span<float>(grad), hc::allreduce_options{.op = hc::reduce_op::avg}).wait();
        for (std::size_t i = 0; i < table.size(); ++i) table[i] -= 0.1f * grad[i];
      }
    });
  }
  state.counters["steps_per_s"] = benchmark::Counter(static_cast<double>(steps) * state.iterations(),
                                                      benchmark::Counter::kIsRate);
}

// --- codecs -------------------------------------------------------------------------------------
template <class C>
void codec_bench(benchmark::State& state, C c) {
  const std::size_t n = 1 << 20;
  std::vector<float> x(n);
  const hg::counter_rng rng(3);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(rng.normal(i));
  auto s = c.init(n);
  std::vector<std::uint32_t> msg(c.message_words(n));
  std::vector<float> d(n);
  for (auto _ : state) {
    c.encode(hg::span<const float>(x), s, hg::span<std::uint32_t>(msg));
    c.decode(hg::span<const std::uint32_t>(msg), s, hg::span<float>(d));
    benchmark::DoNotOptimize(d.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * 4));
  state.counters["wire_ratio"] = 4.0 * static_cast<double>(msg.size()) / (4.0 * static_cast<double>(n));
}
void BM_codec_fp16(benchmark::State& s) { codec_bench(s, cz::fp16_codec{}); }
void BM_codec_top_k_1pct(benchmark::State& s) { codec_bench(s, cz::top_k_codec(0.01)); }
void BM_codec_random_k_1pct(benchmark::State& s) { codec_bench(s, cz::random_k_codec(0.01, 1)); }
void BM_codec_sign(benchmark::State& s) { codec_bench(s, cz::sign_codec{}); }
void BM_codec_powersgd_r4(benchmark::State& s) { codec_bench(s, cz::powersgd_codec(4)); }

// --- LSH layer vs dense layer ------------------------------------------------------------------
// 10k classes over 64 features; samples are class prototypes plus noise. LSH: one SGD step per
// sample over the active neurons (K = 8, L = 16); dense: nn::mlp softmax regression, batches of
// 32 through BLAS (single-threaded), the same arithmetic over every neuron.
struct xc_data {
  std::size_t classes = 10000, dim = 64, n = 4096;
  std::vector<float> x;
  std::vector<std::int32_t> y;
  xc_data() {
    const hg::counter_rng rng(11);
    std::vector<float> mu(classes * dim);
    for (std::size_t i = 0; i < mu.size(); ++i) mu[i] = static_cast<float>(rng.normal(i, 0.0, 0.125));
    for (std::size_t s = 0; s < n; ++s) {
      const auto c = rng.below(mu.size() + s, classes);
      y.push_back(static_cast<std::int32_t>(c));
      for (std::size_t i = 0; i < dim; ++i)
        x.push_back(mu[c * dim + i] + static_cast<float>(rng.normal(2 * mu.size() + s * dim + i, 0.0, 0.06)));
    }
  }
};
const xc_data& xc() {
  static const xc_data d;
  return d;
}

void BM_lsh_layer_train(benchmark::State& state) {
  const auto& d = xc();
  const int threads = static_cast<int>(state.range(0));
  nn::lsh_softmax_layer layer(d.dim, d.classes, {.lsh = {.parts = 8, .tables = 16}, .rebuild = {.first = 2000, .growth = 1.3}});
  std::vector<float> p(layer.num_params());
  layer.init(hg::span<float>(p), 1);
  std::vector<std::size_t> order(d.n);
  for (std::size_t i = 0; i < d.n; ++i) order[i] = i;
  nn::lsh_train_report rep;
  for (auto _ : state)
    rep = nn::train_lsh_layer(layer, hg::span<float>(p), hg::span<const float>(d.x), hg::span<const std::int32_t>(d.y),
                              hg::span<const std::size_t>(order), 0.1f, threads);
  state.counters["samples_per_s"] =
      benchmark::Counter(static_cast<double>(d.n) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["active_fraction"] = rep.mean_active_fraction(d.classes);
}

void BM_dense_layer_train(benchmark::State& state) {
  const auto& d = xc();
  hg::kernels::set_blas_threads(1);
  auto net = nn::softmax_regression<float>(d.dim, d.classes);
  std::vector<float> p(net.num_params()), g(net.num_params());
  net.init(p, 1);
  const std::size_t batch = 32;
  for (auto _ : state) {
    for (std::size_t k = 0; k + batch <= d.n; k += batch) {
      net.loss_and_gradient(p, nn::batch<float>{hg::span<const float>(d.x.data() + k * d.dim, batch * d.dim),
                                                hg::span<const std::int32_t>(d.y.data() + k, batch)},
                            g);
      for (std::size_t i = 0; i < p.size(); ++i) p[i] -= 3.2f * g[i];
    }
  }
  state.counters["samples_per_s"] =
      benchmark::Counter(static_cast<double>(d.n / batch * batch) * state.iterations(), benchmark::Counter::kIsRate);
}

// --- composite transport ------------------------------------------------------------------------
// 4 inproc ranks: 2 groups of 2 (composite, 1 or 2 rails) against the flat allreduce of 1M floats.
void BM_allreduce_4_ranks(benchmark::State& state) {
  const bool composite = state.range(0) > 0;
  const int rails = static_cast<int>(std::max<std::int64_t>(state.range(0), 1));
  const std::size_t n = 1 << 20;
  const int reps = 20;
  for (auto _ : state) {
    hi::spawn(4, [&](hi::communicator w) {
      std::vector<float> buf(n, 1.0f);
      if (composite) {
        const auto inner = w.split(w.rank() / 2, w.rank());
        const auto outer = w.split(inner.rank() == 0 ? 0 : -1, w.rank());
        const auto c = hc::composite<hi::communicator, hi::communicator>::create(
            inner, inner.rank() == 0 ? std::optional(outer) : std::nullopt, {.rails = rails});
        for (int r = 0; r < reps; ++r) c.allreduce(hg::span<float>(buf)).wait();
      } else {
        for (int r = 0; r < reps; ++r) w.allreduce(hg::span<float>(buf)).wait();
      }
    });
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * reps * n * 4));
}

}  // namespace

int main(int argc, char** argv) {
  const hg_bench::flags f(
      argc, argv,
      {{"width", "embedding row widths, in floats", 1024}, hg_bench::threads_dimension()});
  const auto width = f.get("width", {16, 64});
  const auto threads = f.get("threads", hg_bench::thread_counts());
  hg_bench::register_product("BM_hybrid_step", BM_hybrid_step, {"width"}, {width})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(0.5);
  hg_bench::register_product("BM_dense_table_step", BM_dense_table_step, {"width"}, {width})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(0.5);
  for (auto [name, fn] : {std::pair{"BM_codec_fp16", &BM_codec_fp16},
                          std::pair{"BM_codec_top_k_1pct", &BM_codec_top_k_1pct},
                          std::pair{"BM_codec_random_k_1pct", &BM_codec_random_k_1pct},
                          std::pair{"BM_codec_sign", &BM_codec_sign},
                          std::pair{"BM_codec_powersgd_r4", &BM_codec_powersgd_r4}})
    benchmark::RegisterBenchmark(name, fn)->Unit(benchmark::kMillisecond)->UseRealTime();
  hg_bench::register_threads("BM_lsh_layer_train", BM_lsh_layer_train, threads)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(1.0);
  benchmark::RegisterBenchmark("BM_dense_layer_train", BM_dense_layer_train)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(1.0);
  hg_bench::register_cases("BM_allreduce_4_ranks", BM_allreduce_4_ranks, {"rails"}, {{0}, {1}, {2}})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(0.5);
  return hg_bench::run(argc, argv);
}
