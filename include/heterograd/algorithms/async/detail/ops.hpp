#pragma once
// The vector operations of the asynchronous servers, in one place: the element-wise blends
// come from heterograd/kernels (fused Thrust kernels, run with the build's host policy); the
// two table updates that also maintain the table's sum are fused here, because composing
// them from the public kernels would take three passes instead of one.

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>

#include <thrust/system/cpp/execution_policy.h>
#if defined(_OPENMP)
#include <thrust/system/omp/execution_policy.h>
#endif

#include "heterograd/core/span.hpp"
#include "heterograd/kernels/blend.hpp"

namespace heterograd::algorithms::async::detail::ops {

/// Below this many elements an update runs on one thread: a parallel region costs more than
/// it saves (and far more on a loaded machine), and scalar / small models are the common case
/// of the simulator's experiments.
inline constexpr std::size_t parallel_threshold = std::size_t{1} << 15;

/// Calls f with the host execution policy for a buffer of n elements: OpenMP when the build
/// has it and n is large, else sequential. Every operation here is element-wise, so both
/// give bitwise the same result.
template <class F>
decltype(auto) with_host_policy(std::size_t n, F&& f) {
#if defined(_OPENMP)
  if (n >= parallel_threshold) return f(thrust::omp::par);
#endif
  (void)n;
  return f(thrust::cpp::par);
}

/// y <- y + a x.  3 sizeof(T) per element (kernels::axpby with b = 1: a x + 1 y is y + a x).
template <class T>
void axpy(T a, span<const T> x, span<T> y) {
  with_host_policy(y.size(), [&](const auto& p) { kernels::axpby(p, a, x, T(1), y); });
}

/// out <- a x.  2 sizeof(T) per element (kernels::weighted_sum of one input).
template <class T>
void scale_into(T a, span<const T> x, span<T> out) {
  const std::array<span<const T>, 1> in{x};
  const std::array<T, 1> w{a};
  with_host_policy(out.size(),
                   [&](const auto& p) { kernels::weighted_sum(p, out, in, std::span<const T>(w)); });
}

/// x <- 0.  1 sizeof(T) per element.
template <class T>
void zero(span<T> x) {
  std::fill(x.begin(), x.end(), T(0));
}

/// Replaces one entry of a table whose sum is kept: sum <- sum + fresh - entry;
/// entry <- fresh (IA^2SGD's table, Maranjyan & Richtarik ICLR'26 baseline).
/// 5 sizeof(T) per element (read fresh, entry, sum; write entry, sum).
template <class T>
void replace_entry(span<const T> fresh, span<T> entry, span<T> sum) {
  const std::size_t n = sum.size();
  T* s = sum.data();
  T* e = entry.data();
  const T* f = fresh.data();
#if defined(_OPENMP)
#pragma omp parallel for simd schedule(static) if (n >= parallel_threshold)
#endif
  for (std::size_t j = 0; j < n; ++j) {
    s[j] += f[j] - e[j];
    e[j] = f[j];
  }
}

/// Adds the count-th sample to a running mean whose sum over entries is kept:
/// d = (fresh - mean) / count; mean <- mean + d; sum <- sum + d (Ringleader / Malenia tables).
/// 5 sizeof(T) per element.
template <class T>
void running_mean_add(span<const T> fresh, span<T> mean, span<T> sum, std::size_t count) {
  const T inv = T(1) / static_cast<T>(count);
  const std::size_t n = mean.size();
  T* m = mean.data();
  T* s = sum.data();
  const T* f = fresh.data();
#if defined(_OPENMP)
#pragma omp parallel for simd schedule(static) if (n >= parallel_threshold)
#endif
  for (std::size_t j = 0; j < n; ++j) {
    const T d = (f[j] - m[j]) * inv;
    m[j] += d;
    s[j] += d;
  }
}

}  // namespace heterograd::algorithms::async::detail::ops
