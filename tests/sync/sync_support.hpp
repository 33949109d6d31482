#pragma once
// Shared pieces of the sync tests: the optimizers they use (optim's) and bitwise comparison.

#include <cstddef>
#include <cstring>

#include "heterograd/core/span.hpp"
#include "heterograd/optim/optimizers.hpp"

namespace sync_test {

namespace hg = heterograd;

/// p <- p - lr g.
inline hg::optim::sgd sgd(double lr) { return hg::optim::sgd({.lr = lr}); }

/// Heavy ball: v <- mu v + g; p <- p - lr v (lr 0.05, mu 0.9).
inline hg::optim::momentum heavy_ball(double lr = 0.05, double mu = 0.9) {
  return hg::optim::momentum({.lr = lr, .momentum = mu});
}

template <class T>
bool bitwise_equal(hg::span<const T> a, hg::span<const T> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace sync_test
