#pragma once
// How an elementwise kernel runs on each backend. A kernel is an "indexed body": a trivially
// copyable object with `void operator()(std::size_t i) const` that touches element i of its
// buffers only. The arithmetic lives in that one object for every backend:
//   cpp   a plain loop marked `omp simd`;
//   omp   one `#pragma omp parallel for simd schedule(static)` loop;
//   cuda  thrust::for_each_n over a counting iterator (any other Thrust system too).
// Why not thrust::for_each_n on the CPU systems as well: measured on the 2-core development
// machine (16M floats, Adam body, g++ 12 -O3), Thrust's cpp/omp for_each took 11.2 ms on one
// thread against 9.0 ms for the same body in an `omp simd` loop, because Thrust's loop is
// not marked simd and g++ then versions it for aliasing. With two threads both reached
// parity; the direct loop keeps the 1-thread figure too. Bodies write element i only, so
// `simd` is valid even when an output buffer is also an input (exact aliasing).

#include <cstddef>
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

namespace heterograd::kernels::detail {

template <class Policy>
inline constexpr exec::backend backend_v = exec::backend_of_v<Policy>;

/// Runs body(i) for i in [0, n) on the policy's backend.
template <class Policy, class Body>
void launch(const Policy& policy, std::size_t n, const Body& body) {
  static_assert(std::is_trivially_copyable_v<Body>, "kernel bodies are passed by value");
  if (n == 0) return;
  if constexpr (backend_v<Policy> == exec::backend::cpp) {
    (void)policy;
    const Body b = body;
    HG_PRAGMA_SIMD
    for (std::size_t i = 0; i < n; ++i) b(i);
  } else if constexpr (backend_v<Policy> == exec::backend::omp) {
    (void)policy;
    const Body b = body;
    HG_PRAGMA_PARALLEL_FOR_SIMD
    for (std::size_t i = 0; i < n; ++i) b(i);
  } else {
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

}  // namespace heterograd::kernels::detail
