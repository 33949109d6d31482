#pragma once
// Execution policies. Every kernel takes a Thrust execution policy first, so one source runs
// sequentially (thrust::cpp::par), on all cores (thrust::omp::par) and on a GPU
// (thrust::cuda::par.on(stream)). This header names the backends and "the one this build
// targets": CUDA under nvcc, else OpenMP when compiled with it, else sequential.

#include <string_view>
#include <type_traits>

// Only the policy objects (par) and their tags: the public <thrust/system/*/execution_policy.h>
// also includes every algorithm of the system, which a header naming policies does not need
// (a kernel's Thrust algorithm header brings the implementations of every system it can
// dispatch to). This keeps core cheap to include alone.
#include <thrust/system/cpp/detail/execution_policy.h>
#include <thrust/system/cpp/detail/par.h>
#if defined(_OPENMP)
#include <thrust/system/omp/detail/execution_policy.h>
#include <thrust/system/omp/detail/par.h>
#endif
#if defined(__CUDACC__)
#include <thrust/system/cuda/execution_policy.h>
#endif

#include "heterograd/core/span.hpp"

namespace heterograd::exec {

enum class backend { cpp, omp, cuda };

constexpr std::string_view backend_name(backend b) {
  switch (b) {
    case backend::cpp: return "cpp";
    case backend::omp: return "omp";
    case backend::cuda: return "cuda";
  }
  return "unknown";
}

namespace detail {
// Overload resolution picks the most derived system: omp policies also convert to cpp ones.
template <class D>
constexpr backend detect(const thrust::system::cpp::execution_policy<D>*) {
  return backend::cpp;
}
#if defined(_OPENMP)
template <class D>
constexpr backend detect(const thrust::system::omp::execution_policy<D>*) {
  return backend::omp;
}
#endif
#if defined(__CUDACC__)
template <class D>
constexpr backend detect(const thrust::cuda_cub::execution_policy<D>*) {
  return backend::cuda;
}
#endif
}  // namespace detail

/// The backend an execution policy runs on.
template <class Policy>
inline constexpr backend backend_of_v =
    detail::detect(static_cast<const std::remove_cvref_t<Policy>*>(nullptr));

/// The memory space a policy's algorithms can dereference.
template <class Policy>
using memory_space_of_t =
    std::conditional_t<backend_of_v<Policy> == backend::cuda, device_space, host_space>;

/// True when a kernel run with `Policy` may read and write a span of space `Space`.
template <class Policy, class Space>
inline constexpr bool accessible_v = std::is_same_v<memory_space_of_t<Policy>, Space>;

inline constexpr const auto& cpp = thrust::cpp::par;
#if defined(_OPENMP)
inline constexpr const auto& omp = thrust::omp::par;
#endif
#if defined(__CUDACC__)
inline constexpr const auto& cuda = thrust::cuda::par;
#endif

#if defined(__CUDACC__)
inline constexpr backend default_backend = backend::cuda;
#elif defined(_OPENMP)
inline constexpr backend default_backend = backend::omp;
#else
inline constexpr backend default_backend = backend::cpp;
#endif

/// The execution policy of the backend this build targets.
inline const auto& default_policy() {
#if defined(__CUDACC__)
  return thrust::cuda::par;
#elif defined(_OPENMP)
  return thrust::omp::par;
#else
  return thrust::cpp::par;
#endif
}

}  // namespace heterograd::exec
