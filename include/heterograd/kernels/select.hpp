#pragma once
// Selection of the k best scores (biased sampling by loss, SLIDE-style active sets).
// Order: higher score first; equal scores by lower index; NaN scores rank last. Both
// functions return the same indices in the same order.
//   top_k          argsort: a stable sort of (score, index) pairs, O(n log n), any k.
//   partial_top_k  argsort-free, for k << n: each fixed chunk of max(4096, 8k) scores keeps
//                  its k best in a bounded heap (O(n log k)), then the chunk candidates
//                  (about n k / chunk of them) are sorted. Bytes: sizeof(T) per score read.
// Both use temporary storage from the policy's system (n pairs for top_k; the candidates for
// partial_top_k).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <thrust/copy.h>
#include <thrust/gather.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include "heterograd/core/config.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/launch.hpp"
#include "heterograd/kernels/scratch.hpp"

namespace heterograd::kernels {

/// top_k's order: true when value sa at index a ranks before sb at index b (larger first,
/// NaN after every number, equal values by the lower index).
template <class T>
HG_HOST_DEVICE inline bool ranks_before(T sa, std::size_t a, T sb, std::size_t b) {
  const bool na = sa != sa, nb = sb != sb;
  if (na != nb) return nb;
  if (!na && sa != sb) return sa > sb;
  return a < b;
}

namespace detail {

template <class T>
struct index_order {
  const T* s;
  HG_HOST_DEVICE bool operator()(std::size_t a, std::size_t b) const {
    return ranks_before(s[a], a, s[b], b);
  }
};

// A min-heap of indices (root = the worst kept candidate) in a chunk's candidate slot.
template <class T>
struct chunk_select_body {
  const T* s;
  std::size_t n, chunk, k;
  std::size_t* cand;                                               // chunks * k
  std::size_t* count;                                              // chunks
  HG_HOST_DEVICE bool worse(std::size_t a, std::size_t b) const {  // a ranks after b
    return ranks_before(s[b], b, s[a], a);
  }
  HG_HOST_DEVICE void sift_down(std::size_t* h, std::size_t len, std::size_t i) const {
    for (;;) {
      std::size_t w = i;
      const std::size_t l = 2 * i + 1, r = l + 1;
      if (l < len && worse(h[l], h[w])) w = l;
      if (r < len && worse(h[r], h[w])) w = r;
      if (w == i) return;
      const std::size_t t = h[i];
      h[i] = h[w];
      h[w] = t;
      i = w;
    }
  }
  HG_HOST_DEVICE void operator()(std::size_t c) const {
    const std::size_t lo = c * chunk;
    const std::size_t hi = lo + chunk < n ? lo + chunk : n;
    std::size_t* h = cand + c * k;
    std::size_t len = 0;
    for (std::size_t i = lo; i < hi; ++i) {
      if (len < k) {
        h[len] = i;  // sift up
        std::size_t j = len++;
        while (j > 0) {
          const std::size_t p = (j - 1) / 2;
          if (!worse(h[j], h[p])) break;
          const std::size_t t = h[j];
          h[j] = h[p];
          h[p] = t;
          j = p;
        }
      } else if (worse(h[0], i)) {
        h[0] = i;
        sift_down(h, len, 0);
      }
    }
    count[c] = len;
  }
};

template <class Policy, class T, class Space>
void check_select(const Policy&, span<const T, Space> scores, span<std::size_t, Space> out) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  require(out.size() <= scores.size(), "top_k.k", out.size(), "must be <= the number of scores");
}

}  // namespace detail

/// Indices of the k = out.size() best scores, best first (argsort-based; any k).
template <class Policy, class T, class Space>
void top_k(const Policy& policy, span<T, Space> scores_in, span<std::size_t, Space> out) {
  using V = std::remove_const_t<T>;
  const span<const V, Space> scores = scores_in;
  detail::check_select(policy, scores, out);
  const std::size_t n = scores.size(), k = out.size();
  if (k == 0) return;
  kernels::scratch<std::size_t, Policy> idx(policy, n);
  thrust::sequence(policy, idx.data(), idx.data() + n);
  thrust::sort(policy, idx.data(), idx.data() + n, detail::index_order<V>{scores.data()});
  thrust::copy(policy, idx.data(), idx.data() + k, out.data());
}

/// Indices of the k = out.size() best scores, best first, without sorting all n scores.
template <class Policy, class T, class Space>
void partial_top_k(const Policy& policy, span<T, Space> scores_in, span<std::size_t, Space> out) {
  using V = std::remove_const_t<T>;
  const span<const V, Space> scores = scores_in;
  detail::check_select(policy, scores, out);
  const std::size_t n = scores.size(), k = out.size();
  if (k == 0) return;
  const std::size_t chunk = std::max<std::size_t>(4096, 8 * k);
  const std::size_t chunks = (n + chunk - 1) / chunk;
  kernels::scratch<std::size_t, Policy> cand(policy, chunks * k);
  kernels::scratch<std::size_t, Policy> count(policy, chunks);
  kernels::launch_plain(
      policy, chunks,
      detail::chunk_select_body<V>{scores.data(), n, chunk, k, cand.data(), count.data()});
  // Gather the candidates on the host and order them (n k / chunk of them: small).
  std::vector<std::size_t> all(chunks * k), counts(chunks);
  kernels::copy_to_host(policy, cand.data(), chunks * k, all.data());
  kernels::copy_to_host(policy, count.data(), chunks, counts.data());
  std::vector<std::size_t> pool;
  pool.reserve(chunks * k);
  for (std::size_t c = 0; c < chunks; ++c)
    pool.insert(pool.end(), all.begin() + static_cast<std::ptrdiff_t>(c * k),
                all.begin() + static_cast<std::ptrdiff_t>(c * k + counts[c]));
  std::vector<V> pool_scores(pool.size());
  if constexpr (exec::backend_of_v<Policy> == exec::backend::cuda) {
    // Gather the candidates' scores on the device, then fetch them.
    kernels::scratch<std::size_t, Policy> dpool(policy, pool.size());
    kernels::scratch<V, Policy> dscore(policy, pool.size());
    kernels::copy_from_host(policy, pool.data(), pool.size(), dpool.data());
    thrust::gather(policy, dpool.data(), dpool.data() + pool.size(), scores.data(), dscore.data());
    kernels::copy_to_host(policy, dscore.data(), pool.size(), pool_scores.data());
  } else {
    for (std::size_t j = 0; j < pool.size(); ++j) pool_scores[j] = scores.data()[pool[j]];
  }
  std::vector<std::size_t> order(pool.size());
  for (std::size_t j = 0; j < order.size(); ++j) order[j] = j;
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](std::size_t a, std::size_t b) {
                      return kernels::ranks_before(pool_scores[a], pool[a], pool_scores[b],
                                                   pool[b]);
                    });
  std::vector<std::size_t> best(k);
  for (std::size_t j = 0; j < k; ++j) best[j] = pool[order[j]];
  kernels::copy_from_host(policy, best.data(), k, out.data());
}

}  // namespace heterograd::kernels
