#pragma once
// How an elementwise kernel runs on each backend. A kernel is an "indexed body": a trivially
// copyable object with `void operator()(std::size_t i) const` that touches element i of its
// buffers only. The arithmetic lives in that one object for every backend:
//   cpp   a plain loop marked `omp simd`;
//   omp   one `omp parallel` region; each thread runs an `omp simd` loop over an equal
//         contiguous share (aligned to 64 bytes, see launch());
//   cuda  thrust::for_each_n over a counting iterator (any other Thrust system too).
// Why not thrust::for_each_n on the CPU systems as well: the direct loop controls what
// decides speed here, the alignment of the vector loop and the threads' shares (see
// launch()). On std::vector buffers (16 bytes off a 64-byte line) Thrust's for_each took
// 11.2 ms for a 16M-element Adam step on one core against 9.0 ms for an `omp simd` loop; on
// aligned buffers the benchmark (BM_adam, thrust_for_each) measures it within 5% of the
// kernel. Bodies write element i only, so
// `simd` is valid even when an output buffer is also an input (exact aliasing).

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "heterograd/core/config.hpp"
#include "heterograd/core/execution.hpp"

#if defined(_OPENMP)
#include <omp.h>
#define HG_PRAGMA_SIMD _Pragma("omp simd")
#define HG_PRAGMA_PARALLEL_FOR_SIMD _Pragma("omp parallel for simd schedule(static)")
#define HG_PRAGMA_PARALLEL_FOR _Pragma("omp parallel for schedule(static)")
#define HG_PRAGMA_PARALLEL _Pragma("omp parallel")
#else
#define HG_PRAGMA_SIMD
#define HG_PRAGMA_PARALLEL_FOR_SIMD
#define HG_PRAGMA_PARALLEL_FOR
#define HG_PRAGMA_PARALLEL
#endif

namespace heterograd::kernels {

template <class Policy>
inline constexpr exec::backend backend_v = exec::backend_of_v<Policy>;

/// Bytes of the widest vector registers the CPU paths align their main loop to.
inline constexpr std::size_t vector_bytes = 64;

/// Elements to handle before `p` reaches a vector_bytes boundary (0 when it is there already,
/// or cannot get there because it is not even element-aligned).
template <class A>
std::size_t peel_count(const A* p, std::size_t n) {
  if (p == nullptr) return 0;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  if (a % sizeof(A) != 0 || vector_bytes % sizeof(A) != 0) return 0;
  const std::size_t mis = a % vector_bytes;
  if (mis == 0) return 0;
  const std::size_t k = (vector_bytes - mis) / sizeof(A);
  return k < n ? k : n;
}

namespace detail {
/// The calling thread's index in its OpenMP team and the team's size ({0, 1} without OpenMP),
/// from which the omp paths cut each thread's share.
struct team_place {
  std::size_t index;
  std::size_t count;
};
inline team_place this_thread_place() {
#if defined(_OPENMP)
  return {static_cast<std::size_t>(omp_get_thread_num()),
          static_cast<std::size_t>(omp_get_num_threads())};
#else
  return {0, 1};
#endif
}
}  // namespace detail

/// Runs body(i) for i in [0, n) on the policy's backend.
///
/// `align_to` names the buffer the omp path aligns its threads' shares to (the one the body
/// writes, usually): thread 0's share runs up to a 64-byte boundary of it, and the shares of
/// the other threads start on 64-byte boundaries. Buffers from malloc/std::vector sit 16
/// bytes off such a boundary; with 64-byte vectors every access would then straddle two
/// cache lines, which measured 41 GB/s instead of 72 GB/s for SGD on one core of the
/// development machine. Other buffers with the same offset are aligned by the same peel.
/// The cpp path is one `simd` loop from 0, whose alignment the vectoriser peels itself (as in
/// the omp path's thread 0): a separate scalar peel before it measured 0.90-0.94 of a plain
/// loop for momentum on one thread, the single loop 1.00 (BM_momentum_cpp).
template <class Policy, class Body, class A = unsigned char>
void launch(const Policy& policy, std::size_t n, const Body& body, const A* align_to = nullptr) {
  static_assert(std::is_trivially_copyable_v<Body>, "kernel bodies are passed by value");
  if (n == 0) return;
  if constexpr (backend_v<Policy> == exec::backend::cpp) {
    (void)policy;
    (void)align_to;
    const Body b = body;
    HG_PRAGMA_SIMD
    for (std::size_t i = 0; i < n; ++i) b(i);
  } else if constexpr (backend_v<Policy> == exec::backend::omp) {
    (void)policy;
    const Body b = body;
    const std::size_t peel = peel_count(align_to, n);
    const std::size_t unit =
        align_to != nullptr && vector_bytes % sizeof(A) == 0 ? vector_bytes / sizeof(A) : 16;
    const std::size_t blocks = (n - peel) / unit;
    HG_PRAGMA_PARALLEL {
      const detail::team_place me = detail::this_thread_place();
      const std::size_t nt = me.count, t = me.index;
      // Equal shares of whole 64-byte blocks; thread 0 adds the peel, the last the tail.
      const std::size_t lo = t == 0 ? 0 : peel + blocks * t / nt * unit;
      const std::size_t hi = t + 1 == nt ? n : peel + blocks * (t + 1) / nt * unit;
      HG_PRAGMA_SIMD
      for (std::size_t i = lo; i < hi; ++i) b(i);
    }
  } else {
    (void)align_to;
    thrust::for_each_n(policy, thrust::counting_iterator<std::size_t>(0), n, body);
  }
}

/// Like launch() without `simd`: for bodies with loops and branches (selection heaps).
template <class Policy, class Body>
void launch_plain(const Policy& policy, std::size_t n, const Body& body) {
  if (n == 0) return;
  if constexpr (backend_v<Policy> == exec::backend::cpp) {
    (void)policy;
    for (std::size_t i = 0; i < n; ++i) body(i);
  } else if constexpr (backend_v<Policy> == exec::backend::omp) {
    (void)policy;
    const long long nn = static_cast<long long>(n);
    HG_PRAGMA_PARALLEL_FOR
    for (long long i = 0; i < nn; ++i) body(static_cast<std::size_t>(i));
  } else {
    thrust::for_each_n(policy, thrust::counting_iterator<std::size_t>(0), n, body);
  }
}

/// The same body run through thrust::for_each_n whatever the backend (benchmarks compare it
/// with launch()).
template <class Policy, class Body>
void launch_thrust(const Policy& policy, std::size_t n, const Body& body) {
  if (n == 0) return;
  thrust::for_each_n(policy, thrust::counting_iterator<std::size_t>(0), n, body);
}

/// Number of threads an omp policy will use (1 for other backends).
template <class Policy>
int host_threads(const Policy&) {
#if defined(_OPENMP)
  if constexpr (backend_v<Policy> == exec::backend::omp) return omp_get_max_threads();
#endif
  return 1;
}

}  // namespace heterograd::kernels
