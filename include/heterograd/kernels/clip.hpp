#pragma once
// Clip by global norm (Pascanu et al. 2013): with N = sqrt(sum over buffers of ||g||^2),
// every buffer is scaled by max_norm / N when N > max_norm. Bytes per element: sizeof(T) to
// measure, plus 2*sizeof(T) to scale when clipping happens.

#include <cstddef>
#include <ranges>
#include <type_traits>

#include "heterograd/core/error.hpp"
#include "heterograd/kernels/blend.hpp"
#include "heterograd/kernels/reduce.hpp"

namespace heterograd::kernels {

/// Scales the buffers of `list` (a range of mutable spans) so that their global norm is at
/// most max_norm. Returns the global norm before clipping. A non-finite norm leaves the
/// buffers untouched (the caller's non-finite policy decides what to do).
template <class Policy, std::ranges::input_range List>
double clip_by_global_norm(const Policy& policy, const List& list, double max_norm) {
  require(max_norm > 0.0, "clip_by_global_norm.max_norm", max_norm, "must be > 0");
  const double norm = global_norm(policy, list);
  if (norm > max_norm && norm - norm == 0.0) {
    const double factor = max_norm / norm;
    for (const auto& s : list) {
      using T = std::remove_cvref_t<decltype(s.data()[0])>;
      scale(policy, static_cast<T>(factor), s);
    }
  }
  return norm;
}

}  // namespace heterograd::kernels
