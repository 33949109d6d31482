#pragma once
// Softmax cross-entropy with label smoothing (Szegedy et al. 2016; used at scale by #2):
// target q = (1 - eps) onehot(y) + eps / K, loss = -sum_k q_k log softmax(z)_k. Its gradient
// with respect to the logits is softmax(z) - q.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "heterograd/core/error.hpp"

namespace heterograd::nn {

/// For one row of K logits: returns the loss, writes d(loss)/d(logits) * scale into `dlogits`
/// (may alias nothing), and sets `argmax`.
template <class T>
T softmax_cross_entropy_row(const T* logits, std::size_t K, std::int32_t label, T smoothing,
                            T scale, T* dlogits, std::size_t& argmax) {
  T zmax = logits[0];
  argmax = 0;
  for (std::size_t k = 1; k < K; ++k)
    if (logits[k] > zmax) zmax = logits[k], argmax = k;
  T sum = 0;
  for (std::size_t k = 0; k < K; ++k) sum += std::exp(logits[k] - zmax);
  const T log_sum = std::log(sum);
  const T off = smoothing / static_cast<T>(K);
  const T on = T(1) - smoothing + off;
  T loss = 0;
  for (std::size_t k = 0; k < K; ++k) {
    const T q = static_cast<std::int32_t>(k) == label ? on : off;
    const T log_p = logits[k] - zmax - log_sum;
    loss -= q * log_p;
    if (dlogits != nullptr) dlogits[k] = scale * (std::exp(log_p) - q);
  }
  return loss;
}

inline void validate_label_smoothing(double eps) {
  require_in_range_co("label_smoothing", eps, 0.0, 1.0);
}

}  // namespace heterograd::nn
