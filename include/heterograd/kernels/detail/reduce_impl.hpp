#pragma once
// The deterministic reduction scheme shared by every reduction kernel.
//
// The input [0, n) is cut into fixed chunks of `reduce_chunk` elements (the last may be
// shorter). A chunk is reduced by one thread, sequentially, into 8 lanes (element i of the
// chunk goes to lane i mod 8) that are then combined as ((0+1)+(2+3))+((4+5)+(6+7)). The
// chunk results land in an array in chunk order and are combined by a fixed pairwise tree
// (split at ceil(count/2)). Nothing depends on how many threads run or which thread takes
// which chunk, so the result is bitwise the same for 1, 2 or 64 OpenMP threads and for the
// cpp backend. Accumulation is in double for float and double inputs.

#include <cstddef>
#include <vector>

#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform.h>

#include "heterograd/core/config.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/kernels/launch.hpp"
#include "heterograd/kernels/scratch.hpp"

namespace heterograd::kernels::detail {

inline constexpr std::size_t reduce_chunk = 8192;
inline constexpr std::size_t reduce_lanes = 8;

inline std::size_t chunk_count(std::size_t n) {
  return (n + reduce_chunk - 1) / reduce_chunk;
}

// A reduction R provides: `using acc_type`, `acc_type identity() const`,
// `acc_type map(std::size_t i) const` (may also write element i: LAMB's first pass does),
// and `static acc_type combine(acc_type, acc_type)`.
template <class R>
HG_HOST_DEVICE typename R::acc_type reduce_range(const R& r, std::size_t lo, std::size_t hi) {
  using A = typename R::acc_type;
  A lane[reduce_lanes];
  for (std::size_t l = 0; l < reduce_lanes; ++l) lane[l] = r.identity();
  std::size_t i = lo;
  for (; i + reduce_lanes <= hi; i += reduce_lanes) {
    for (std::size_t l = 0; l < reduce_lanes; ++l) lane[l] = R::combine(lane[l], r.map(i + l));
  }
  for (std::size_t l = 0; i < hi; ++i, ++l) lane[l] = R::combine(lane[l], r.map(i));
  return R::combine(R::combine(R::combine(lane[0], lane[1]), R::combine(lane[2], lane[3])),
                    R::combine(R::combine(lane[4], lane[5]), R::combine(lane[6], lane[7])));
}

template <class R>
struct chunk_reducer {
  R r;
  std::size_t n;
  HG_HOST_DEVICE typename R::acc_type operator()(std::size_t c) const {
    const std::size_t lo = c * reduce_chunk;
    const std::size_t hi = lo + reduce_chunk < n ? lo + reduce_chunk : n;
    return reduce_range(r, lo, hi);
  }
};

/// Fixed pairwise tree over v[0, count): split at ceil(count/2).
template <class R>
typename R::acc_type tree(const typename R::acc_type* v, std::size_t count) {
  if (count == 1) return v[0];
  const std::size_t left = (count + 1) / 2;
  return R::combine(tree<R>(v, left), tree<R>(v + left, count - left));
}

/// The results of R's chunks of [0, n), in chunk order, on the policy's backend.
template <class Policy, class R>
std::vector<typename R::acc_type> reduce_partials(const Policy& policy, std::size_t n, const R& r) {
  using A = typename R::acc_type;
  if (n == 0) return {};
  const std::size_t chunks = chunk_count(n);
  const chunk_reducer<R> body{r, n};
  std::vector<A> partial(chunks);
  if constexpr (exec::backend_of_v<Policy> == exec::backend::cpp) {
    (void)policy;
    for (std::size_t c = 0; c < chunks; ++c) partial[c] = body(c);
  } else if constexpr (exec::backend_of_v<Policy> == exec::backend::omp) {
    (void)policy;
    A* out = partial.data();
    const long long cc = static_cast<long long>(chunks);
    HG_PRAGMA_PARALLEL_FOR
    for (long long c = 0; c < cc; ++c) out[c] = body(static_cast<std::size_t>(c));
  } else {
    // One device thread per chunk, same chunk arithmetic as the CPU; the tree runs on the
    // host over the copied partials.
    scratch<A, Policy> dev(policy, chunks);
    thrust::transform(policy, thrust::counting_iterator<std::size_t>(0),
                      thrust::counting_iterator<std::size_t>(chunks), dev.data(), body);
    copy_to_host(policy, dev.data(), chunks, partial.data());
  }
  return partial;
}

/// The chunked, fixed-tree reduction of R over [0, n) on the policy's backend.
template <class Policy, class R>
typename R::acc_type reduce_fixed_tree(const Policy& policy, std::size_t n, const R& r) {
  if (n == 0) return r.identity();
  const auto partial = reduce_partials(policy, n, r);
  return tree<R>(partial.data(), partial.size());
}

}  // namespace heterograd::kernels::detail
