#pragma once
// The element-wise loops of every host-side reduction (inproc's shared-memory collectives and
// the schedule executor). Each is one pass over flat buffers; the comment next to each loop
// counts the bytes it moves. Order of combination is fixed by the caller, so results are
// deterministic.

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "heterograd/comm/types.hpp"

namespace heterograd::comm::detail {

/// acc[i] = acc[i] (op) src[i]: reads 2n, writes n elements. avg accumulates like sum.
template <class T>
void combine(reduce_op op, T* __restrict acc, const T* __restrict src, std::size_t n) {
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg:
      for (std::size_t i = 0; i < n; ++i) acc[i] += src[i];
      break;
    case reduce_op::min:
      for (std::size_t i = 0; i < n; ++i) acc[i] = std::min(acc[i], src[i]);
      break;
    case reduce_op::max:
      for (std::size_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], src[i]);
      break;
  }
}

/// acc[i] = w * src[i]: reads n, writes n.
template <class T>
void scaled_copy(T* __restrict acc, const T* __restrict src, double w, std::size_t n) {
  const T s = static_cast<T>(w);
  for (std::size_t i = 0; i < n; ++i) acc[i] = s * src[i];
}

/// x[i] = w * x[i] in place: reads n, writes n (scaled_copy's pointers may not alias).
template <class T>
void scale(T* x, double w, std::size_t n) {
  const T s = static_cast<T>(w);
  for (std::size_t i = 0; i < n; ++i) x[i] = s * x[i];
}

/// acc[i] += w * src[i]: reads 2n, writes n.
template <class T>
void scaled_add(T* __restrict acc, const T* __restrict src, double w, std::size_t n) {
  const T s = static_cast<T>(w);
  for (std::size_t i = 0; i < n; ++i) acc[i] += s * src[i];
}

/// x[i] = x[i] / d: reads n, writes n. Division (not multiplication by 1/d) so every path
/// that averages the same sum gives the same bits.
template <class T>
void divide(T* x, double d, std::size_t n) {
  const T s = static_cast<T>(d);
  for (std::size_t i = 0; i < n; ++i) x[i] = x[i] / s;
}

/// The divisor of an average: the number of ranks, or the sum of the weights.
inline double average_divisor(bool weighted, double weight_sum, int ranks) {
  return weighted ? weight_sum : static_cast<double>(ranks);
}

}  // namespace heterograd::comm::detail
