#pragma once
// A model with an embedding table for the hybrid-aggregation tests (inproc and MPI): a bag of
// embeddings followed by a linear read-out, y_hat = v . sum_t E[t] + b, squared loss. Each
// rank draws its own batches from (seed, rank, step). The same steps are run twice over one
// transport: all-dense (E replicated, its dense gradient allreduced) and hybrid (E in the
// sharded parameter server, dense variables allreduced).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "heterograd/algorithms/sparse/hybrid.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/sparse/row_sparse.hpp"

namespace hybrid_model {

namespace hg = heterograd;
namespace hc = heterograd::comm;
namespace hps = heterograd::algorithms::sparse;
namespace hs = heterograd::sparse;

struct config {
  std::size_t rows = 2000, width = 8, batch = 8, tokens = 5, steps = 10;
  float lr = 0.1f;
  std::uint64_t seed = 1;
  double max_sparse_density = -1.0;  // hybrid_config
};

struct result {
  std::vector<float> table, dense;  // E (rows x width), then v (width) and b
  std::vector<hps::route> routes;   // of the hybrid's last step
  hps::traffic traffic{};
};

inline std::vector<float> initial_table(const config& c) {
  const hg::counter_rng rng(c.seed, 77);
  std::vector<float> e(c.rows * c.width);
  for (std::size_t i = 0; i < e.size(); ++i) e[i] = static_cast<float>(rng.uniform(i, -0.1, 0.1));
  return e;
}

// Token ids of sample s of `rank` at `step` (duplicates happen), and its target.
inline hs::index_t token(const config& c, int rank, std::size_t step, std::size_t s, std::size_t t) {
  const hg::counter_rng rng(c.seed, 1000 + static_cast<std::uint64_t>(rank));
  return static_cast<hs::index_t>(rng.below((step * c.batch + s) * c.tokens + t, c.rows));
}
inline float target(const config& c, int rank, std::size_t step, std::size_t s) {
  const hg::counter_rng rng(c.seed, 5000 + static_cast<std::uint64_t>(rank));
  return static_cast<float>(rng.uniform(step * c.batch + s, -1.0, 1.0));
}

// Gradients of one batch given the rows it reads (rows[k] = E[ids[k]]): dense = (dv, db).
inline void gradients(const config& c, int rank, std::size_t step, const std::vector<hs::index_t>& ids,
                      const std::vector<float>& rows, const std::vector<float>& dense,
                      hs::row_sparse<float>& g, std::vector<float>& dgrad) {
  const std::size_t w = c.width;
  dgrad.assign(w + 1, 0.0f);
  g = hs::row_sparse<float>(c.rows, w);
  const float scale = 1.0f / static_cast<float>(c.batch);
  std::vector<float> h(w), row(w);
  for (std::size_t s = 0; s < c.batch; ++s) {
    std::fill(h.begin(), h.end(), 0.0f);
    for (std::size_t t = 0; t < c.tokens; ++t)
      for (std::size_t j = 0; j < w; ++j) h[j] += rows[(s * c.tokens + t) * w + j];
    float y = dense[w];
    for (std::size_t j = 0; j < w; ++j) y += dense[j] * h[j];
    const float err = (y - target(c, rank, step, s)) * scale;
    for (std::size_t j = 0; j < w; ++j) dgrad[j] += err * h[j];
    dgrad[w] += err;
    for (std::size_t j = 0; j < w; ++j) row[j] = err * dense[j];
    for (std::size_t t = 0; t < c.tokens; ++t) g.push_row(ids[s * c.tokens + t], hg::span<const float>(row));
  }
}

template <class Transport>
result run_dense(const Transport& tr, const config& c) {
  result r;
  r.table = initial_table(c);
  r.dense.assign(c.width + 1, 0.05f);
  std::vector<float> grad_table(c.rows * c.width), dgrad, rows;
  std::vector<hs::index_t> ids;
  hs::row_sparse<float> g;
  for (std::size_t step = 0; step < c.steps; ++step) {
    ids.clear();
    for (std::size_t s = 0; s < c.batch; ++s)
      for (std::size_t t = 0; t < c.tokens; ++t) ids.push_back(token(c, tr.rank(), step, s, t));
    rows.resize(ids.size() * c.width);
    hs::gather_rows(thrust::cpp::par, hg::span<const float>(r.table), c.width,
                    hg::span<const hs::index_t>(ids), hg::span<float>(rows));
    gradients(c, tr.rank(), step, ids, rows, r.dense, g, dgrad);
    hs::to_dense(thrust::cpp::par, g, hg::span<float>(grad_table));
    tr.allreduce(hg::span<float>(grad_table), hc::allreduce_options{.op = hc::reduce_op::avg}).wait();
    tr.allreduce(hg::span<float>(dgrad), hc::allreduce_options{.op = hc::reduce_op::avg}).wait();
    for (std::size_t i = 0; i < r.table.size(); ++i) r.table[i] -= c.lr * grad_table[i];
    for (std::size_t i = 0; i < r.dense.size(); ++i) r.dense[i] -= c.lr * dgrad[i];
  }
  return r;
}

template <class Transport>
result run_hybrid(const Transport& tr, const config& c) {
  result r;
  hps::hybrid_aggregator<Transport> agg(
      tr, hps::hybrid_config{.max_sparse_density = c.max_sparse_density});
  const auto init = initial_table(c);
  agg.add_table(c.rows, c.width, hg::span<const float>(init));
  r.dense.assign(c.width + 1, 0.05f);
  std::vector<float> dgrad, rows;
  std::vector<hs::index_t> ids;
  std::vector<hs::row_sparse<float>> g(1);
  const float lr = c.lr;
  for (std::size_t step = 0; step < c.steps; ++step) {
    ids.clear();
    for (std::size_t s = 0; s < c.batch; ++s)
      for (std::size_t t = 0; t < c.tokens; ++t) ids.push_back(token(c, tr.rank(), step, s, t));
    rows.resize(ids.size() * c.width);
    agg.pull(0, hg::span<const hs::index_t>(ids), hg::span<float>(rows));
    gradients(c, tr.rank(), step, ids, rows, r.dense, g[0], dgrad);
    const hg::span<float> dense_grads[] = {hg::span<float>(dgrad)};
    r.routes = agg.step(std::span<const hg::span<float>>(dense_grads),
                        std::span<const hs::row_sparse<float>>(g),
                        [lr](std::size_t, hs::index_t, hg::span<float> p, hg::span<const float> gr) {
                          for (std::size_t j = 0; j < p.size(); ++j) p[j] -= lr * gr[j];
                        });
    for (std::size_t i = 0; i < r.dense.size(); ++i) r.dense[i] -= c.lr * dgrad[i];
  }
  r.table.resize(c.rows * c.width);
  agg.table(0).gather_table(hg::span<float>(r.table));
  r.traffic = agg.traffic();
  return r;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = a.size() == b.size() ? 0.0 : 1e30;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

}  // namespace hybrid_model
