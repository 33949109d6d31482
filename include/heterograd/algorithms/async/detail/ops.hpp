#pragma once
// The few vector loops the asynchronous servers run on the host, in one place.
//
// INTERIM: kernels/blend.hpp (issue 3, branch `kernels`) provides these as fused Thrust
// kernels (axpby, scale, running_mean_update, weighted_sum). Until it lands on main the
// servers call the host loops below; the names and argument order follow the kernels so
// that switching is an edit of this file only.

#include <cstddef>

#include "heterograd/core/span.hpp"

namespace heterograd::algorithms::async::detail::ops {

/// y <- y + a x.  3 sizeof(T) per element (read x, y; write y).
template <class T>
void axpy(T a, span<const T> x, span<T> y) {
  for (std::size_t j = 0; j < y.size(); ++j) y[j] += a * x[j];
}

/// out <- a x.  2 sizeof(T) per element.
template <class T>
void scale_into(T a, span<const T> x, span<T> out) {
  for (std::size_t j = 0; j < out.size(); ++j) out[j] = a * x[j];
}

/// out <- x.  2 sizeof(T) per element.
template <class T>
void copy(span<const T> x, span<T> out) {
  for (std::size_t j = 0; j < out.size(); ++j) out[j] = x[j];
}

/// x <- 0.  1 sizeof(T) per element.
template <class T>
void zero(span<T> x) {
  for (std::size_t j = 0; j < x.size(); ++j) x[j] = T(0);
}

/// Replaces one entry of a table whose sum is kept: sum <- sum + fresh - entry;
/// entry <- fresh (IA^2SGD's table, Maranjyan & Richtarik ICLR'26 baseline).
/// 5 sizeof(T) per element (read fresh, entry, sum; write entry, sum).
template <class T>
void replace_entry(span<const T> fresh, span<T> entry, span<T> sum) {
  for (std::size_t j = 0; j < sum.size(); ++j) {
    sum[j] += fresh[j] - entry[j];
    entry[j] = fresh[j];
  }
}

/// Adds the count-th sample to a running mean whose sum over entries is kept:
/// d = (fresh - mean) / count; mean <- mean + d; sum <- sum + d (Ringleader / Malenia tables).
/// 5 sizeof(T) per element.
template <class T>
void running_mean_add(span<const T> fresh, span<T> mean, span<T> sum, std::size_t count) {
  const T inv = T(1) / static_cast<T>(count);
  for (std::size_t j = 0; j < mean.size(); ++j) {
    const T d = (fresh[j] - mean[j]) * inv;
    mean[j] += d;
    sum[j] += d;
  }
}

/// Running mean without a sum: mean <- mean + (fresh - mean) / count. 3 sizeof(T) per element.
template <class T>
void running_mean_add(span<const T> fresh, span<T> mean, std::size_t count) {
  const T inv = T(1) / static_cast<T>(count);
  for (std::size_t j = 0; j < mean.size(); ++j) mean[j] += (fresh[j] - mean[j]) * inv;
}

}  // namespace heterograd::algorithms::async::detail::ops
