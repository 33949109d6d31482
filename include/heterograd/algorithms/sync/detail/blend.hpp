#pragma once
// The averaging arithmetic of the sync family, kept in one place so that moving it onto the
// fused kernels of heterograd/kernels/blend.hpp (kernels::weighted_sum, kernels::axpby) is one
// edit. WIRING(kernels): replace the loops below by those kernels once the kernels layer is on
// main; keep the summation order (inputs in list order), which is what makes the sim and
// threads runtimes agree bit for bit.
//
// Order and rounding. weighted_sum computes out = s_0 x_0, then out += s_k x_k for k = 1..K-1
// with s_k = T(w_k): exactly what the inproc transport's weighted allreduce does (its staged
// and owner-computes paths both scale rank 0's buffer, then add the other ranks in rank
// order), so a sim average and a threads allreduce of the same buffers give the same bits.

#include <cstddef>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::algorithms::sync::detail {

/// out <- sum_k T(w[k]) xs[k] in list order. out may alias xs[0] only.
/// Bytes per element: (K + 1) * sizeof(T) (K reads, one write; out stays in cache per element).
template <class T>
void weighted_sum(span<T> out, const std::vector<span<const T>>& xs,
                  const std::vector<double>& w) {
  require(!xs.empty(), "weighted_sum.inputs (count)", xs.size(), "must be >= 1");
  require_same_size("weighted_sum.weights", w.size(), "weighted_sum.inputs", xs.size());
  for (const auto& x : xs)
    require_same_size("weighted_sum.inputs[k]", x.size(), "weighted_sum.out", out.size());
  const std::size_t n = out.size();
  const T s0 = static_cast<T>(w[0]);
  const T* x0 = xs[0].data();
  T* o = out.data();
  for (std::size_t i = 0; i < n; ++i) o[i] = s0 * x0[i];
  for (std::size_t k = 1; k < xs.size(); ++k) {
    const T s = static_cast<T>(w[k]);
    const T* x = xs[k].data();
    for (std::size_t i = 0; i < n; ++i) o[i] += s * x[i];  // 3 * sizeof(T) per element
  }
}

/// y <- y + a x. Bytes per element: 3 * sizeof(T).
template <class T>
void axpy(T a, span<const T> x, span<T> y) {
  require_same_size("axpy.x", x.size(), "axpy.y", y.size());
  for (std::size_t i = 0; i < y.size(); ++i) y[i] += a * x[i];
}

/// dst <- src. Bytes per element: 2 * sizeof(T).
template <class T>
void copy(span<const T> src, span<T> dst) {
  require_same_size("copy.src", src.size(), "copy.dst", dst.size());
  for (std::size_t i = 0; i < dst.size(); ++i) dst[i] = src[i];
}

}  // namespace heterograd::algorithms::sync::detail
