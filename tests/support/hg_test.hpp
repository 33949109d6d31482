#pragma once
// Shared test support: the backends a build has (for typed test cases), a printed random seed,
// poisoning of outputs, and host copies of backend vectors.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>

#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"

namespace hg_test {

namespace hg = heterograd;

/// Sequential Thrust backend over host memory.
struct cpp_backend {
  static constexpr const char* name = "cpp";
  using space = hg::host_space;
  template <class T>
  using vector = thrust::host_vector<T>;
  static const auto& policy() { return thrust::cpp::par; }
};
#if defined(_OPENMP)
/// OpenMP Thrust backend over host memory.
struct omp_backend {
  static constexpr const char* name = "omp";
  using space = hg::host_space;
  template <class T>
  using vector = thrust::host_vector<T>;
  static const auto& policy() { return thrust::omp::par; }
};
#endif
#if defined(__CUDACC__)
/// CUDA Thrust backend over device memory.
struct cuda_backend {
  static constexpr const char* name = "cuda";
  using space = hg::device_space;
  template <class T>
  using vector = thrust::device_vector<T>;
  static const auto& policy() { return thrust::cuda::par; }
};
#endif

/// The backends this build has, for BOOST_AUTO_TEST_CASE_TEMPLATE. A CUDA build tests only
/// cuda (the CPU backends are tested by the CPU build of the same sources).
#if defined(__CUDACC__)
using backends = std::tuple<cuda_backend>;
#elif defined(_OPENMP)
using backends = std::tuple<cpp_backend, omp_backend>;
#else
using backends = std::tuple<cpp_backend>;
#endif

/// The seed for random test inputs: HG_TEST_SEED if set, else fresh; printed once so a
/// failure can be replayed.
inline std::uint64_t seed() {
  static const std::uint64_t s = [] {
    std::uint64_t v = 0;
    if (const char* env = std::getenv("HG_TEST_SEED")) {
      v = std::strtoull(env, nullptr, 10);
    } else {
      v = static_cast<std::uint64_t>(std::random_device{}()) << 32 ^ std::random_device{}();
    }
    std::printf("hg_test: random seed %llu (replay with HG_TEST_SEED=%llu)\n",
                static_cast<unsigned long long>(v), static_cast<unsigned long long>(v));
    std::fflush(stdout);
    return v;
  }();
  return s;
}

/// A value no correct kernel writes: catches elements a kernel forgot.
template <class T>
constexpr T poison() {
  if constexpr (std::numeric_limits<T>::has_signaling_NaN) {
    return std::numeric_limits<T>::signaling_NaN();
  } else {
    return static_cast<T>(0x5a5a5a5a);
  }
}

/// A backend vector holding a copy of host data.
template <class B, class T>
auto to_backend(const std::vector<T>& h) {
  typename B::template vector<T> v(h.size());
  thrust::copy(h.begin(), h.end(), v.begin());
  return v;
}

/// Spans of a backend vector in the backend's memory space.
template <class B, class V>
auto span_of(V& v) {
  using T = typename V::value_type;
  return hg::span<T, typename B::space>(thrust::raw_pointer_cast(v.data()), v.size());
}
template <class B, class V>
auto cspan_of(const V& v) {
  using T = typename V::value_type;
  return hg::span<const T, typename B::space>(thrust::raw_pointer_cast(v.data()), v.size());
}

template <class V>
auto to_host(const V& v) {
  using T = typename V::value_type;
  std::vector<T> out(v.size());
  thrust::copy(v.begin(), v.end(), out.begin());
  return out;
}

}  // namespace hg_test
