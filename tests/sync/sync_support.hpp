#pragma once
// Shared pieces of the sync tests: the optimizers they use (optim's), a random classification
// set with a per-worker mini-batch oracle, and bitwise comparison.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "heterograd/core/rng.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/nn/mlp.hpp"
#include "heterograd/optim/optimizers.hpp"

namespace sync_test {

namespace hg = heterograd;

/// p <- p - lr g.
inline hg::optim::sgd sgd(double lr) { return hg::optim::sgd({.lr = lr}); }

/// Heavy ball: v <- mu v + g; p <- p - lr v (lr 0.05, mu 0.9).
inline hg::optim::momentum heavy_ball(double lr = 0.05, double mu = 0.9) {
  return hg::optim::momentum({.lr = lr, .momentum = mu});
}

// A random classification set for softmax regression / a small MLP.
struct class_data {
  std::size_t dim = 10, classes = 4, n = 0;
  std::vector<float> x;
  std::vector<std::int32_t> y;
  class_data(std::size_t samples, std::uint64_t seed) : n(samples) {
    const hg::counter_rng rng(seed, 7);
    x.resize(n * dim);
    y.resize(n);
    for (std::size_t k = 0; k < x.size(); ++k) x[k] = static_cast<float>(rng.normal(k));
    for (std::size_t i = 0; i < n; ++i)
      y[i] = static_cast<std::int32_t>(rng.substream(1).below(i, classes));
  }
  hg::nn::batch<float> rows(std::size_t first, std::size_t count) const {
    return {hg::span<const float>(x.data() + first * dim, count * dim),
            hg::span<const std::int32_t>(y.data() + first, count)};
  }
};

// Worker w's batch at step s: b_w consecutive rows starting at a (w, s)-keyed offset. Each
// worker needs its own model (scratch buffers): the threads runtime calls workers at once.
struct mlp_oracle {
  const class_data* d;
  hg::nn::mlp<float>* model;
  std::uint64_t seed;
  double operator()(std::size_t w, std::uint64_t s, std::size_t b, hg::span<const float> p,
                    hg::span<float> g) const {
    const std::size_t first =
        hg::counter_rng(seed, 11 + w).below(s, d->n - b + 1);
    return model->loss_and_gradient(p, d->rows(first, b), g);
  }
};

template <class T>
bool bitwise_equal(hg::span<const T> a, hg::span<const T> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace sync_test
