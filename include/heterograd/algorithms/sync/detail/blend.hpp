#pragma once
// The averaging arithmetic of the sync family, on the kernels layer: a weighted sum of K
// buffers is kernels::weighted_sum (one implementation for the whole library), optimizer
// states are averaged with optim::average_states (which calls the same kernel).
//
// Order and rounding. kernels::weighted_sum computes out = sum_k T(w_k) x_k with the inputs
// added in list order, one rounding per product and per addition. The inproc transport's
// weighted allreduce (heterograd/comm/inproc.hpp, staged and owner-computes paths alike)
// scales rank 0's buffer by T(w_0) and adds T(w_q) x_q for q = 1, 2, ... in rank order: the
// same operations in the same order, so a simulated average over workers in rank order and
// a threads allreduce of the same buffers give the same bits. (The kernel starts its sum
// from +0, so the two can differ only in the sign of an exact zero, when every term is -0.)

#include <cstddef>
#include <span>
#include <vector>

#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/blend.hpp"

namespace heterograd::algorithms::sync::detail {

/// Host weights in the element type (what the transports' weighted allreduce uses too).
template <class T>
std::vector<T> cast_weights(const std::vector<double>& w) {
  std::vector<T> out(w.size());
  for (std::size_t k = 0; k < w.size(); ++k) out[k] = static_cast<T>(w[k]);
  return out;
}

/// out <- sum_k T(w[k]) xs[k] in list order (kernels::weighted_sum, sequential backend).
/// Bytes per element: (K + 1) * sizeof(T) for K <= 8 inputs.
template <class T>
void weighted_sum(span<T> out, const std::vector<span<const T>>& xs,
                  const std::vector<double>& w) {
  const auto tw = cast_weights<T>(w);
  kernels::weighted_sum(thrust::cpp::par, out, xs, std::span<const T>(tw));
}

/// dst <- src. Bytes per element: 2 * sizeof(T).
}  // namespace heterograd::algorithms::sync::detail
