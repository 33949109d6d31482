#pragma once
// The C API's buffers: element types (hg_dtype), memory spaces (hg_device) and the checks
// of a buffer against them; the execution policy of host steps.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <thrust/system/cpp/execution_policy.h>
#if defined(_OPENMP)
#include <thrust/system/omp/execution_policy.h>
#endif
#if defined(__CUDACC__)
#include <cuda_runtime_api.h>
#endif

#include "heterograd/c/detail/checks.hpp"
#include "heterograd/c/detail/errors.hpp"
#include "heterograd/c/heterograd.h"
#include "heterograd/core/error.hpp"

namespace heterograd::c_api::detail {

inline std::size_t dtype_bytes(std::int32_t dtype) { return dtype == HG_FLOAT64 ? 8 : 4; }

inline void require_dtype(std::int32_t dtype) {
  require(dtype == HG_FLOAT32 || dtype == HG_FLOAT64, "dtype", dtype,
          "must be HG_FLOAT32 (0) or HG_FLOAT64 (1)");
}

/// f(std::type_identity<T>{}) for the element type T of a checked dtype.
template <class F>
decltype(auto) with_dtype(std::int32_t dtype, F&& f) {
  if (dtype == HG_FLOAT64) return f(std::type_identity<double>{});
  return f(std::type_identity<float>{});
}

/// A buffer of `dtype` elements: not null, and aligned to alignof(float) or alignof(double).
inline void require_buffer(const void* p, std::int32_t dtype, const char* parameter) {
  require_pointer(p, parameter);
  require_aligned(p, dtype == HG_FLOAT64 ? alignof(double) : alignof(float), parameter,
                  dtype == HG_FLOAT64 ? "double" : "float");
}

/// The one check of the element count every handle is created with (optimizers of every
/// kind, the MPI objects): at least 1, and its byte count must fit in ptrdiff_t, the largest
/// object there can be. So SIZE_MAX, or a count whose bytes overflow size_t, is the same
/// HG_ERROR_INVALID_ARGUMENT for SGD (which allocates no state) as for Adam (which would
/// have failed in its allocation), and no later size * dtype_bytes can overflow.
inline void require_count(std::size_t size, std::int32_t dtype) {
  const std::size_t bytes = dtype_bytes(dtype);
  const std::size_t most = static_cast<std::size_t>(PTRDIFF_MAX) / bytes;
  require(size >= 1 && size <= most, "size", size,
          "must be in [1, " + std::to_string(most) + "]: its byte count (size x " +
              std::to_string(bytes) + ") must fit in ptrdiff_t");
}

/// An hg_device value.
inline void require_device(std::int32_t device) {
  require(device == HG_DEVICE_HOST || device == HG_DEVICE_CUDA, "device", device,
          "must be HG_DEVICE_HOST (0) or HG_DEVICE_CUDA (1)");
}

/// A device this build can step on: CUDA memory needs the implementation compiled by nvcc.
inline void require_device_supported(std::int32_t device) {
  require_device(device);
#if !defined(__CUDACC__)
  if (device == HG_DEVICE_CUDA)
    throw api_error(HG_ERROR_UNSUPPORTED,
                    "heterograd: HG_DEVICE_CUDA needs the C API implementation compiled by nvcc "
                    "(this one was compiled for the CPU only)");
#endif
}

/// Host memory only: `what` (an MPI object) moves its buffers through the MPI transport.
inline void require_host_only(std::int32_t device, const char* what) {
  require_device(device);
  if (device != HG_DEVICE_HOST)
    throw api_error(HG_ERROR_UNSUPPORTED,
                    std::string("heterograd: ") + what +
                        " works on host buffers (the MPI transport moves host memory)");
}

/// Checks that `p` lies in the memory `device` names, where the CUDA runtime can tell.
inline void require_memory(const void* p, std::int32_t device, const char* parameter) {
#if defined(__CUDACC__)
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not a CUDA-known pointer: plain host memory
    if (device == HG_DEVICE_CUDA)
      throw std::invalid_argument(invalid_argument_message(
          parameter, "host pointer", "must be CUDA device memory (device = HG_DEVICE_CUDA)"));
    return;
  }
  const bool on_device = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  const bool on_host = a.type != cudaMemoryTypeDevice;
  if (device == HG_DEVICE_CUDA && !on_device)
    throw std::invalid_argument(invalid_argument_message(
        parameter, "host pointer", "must be CUDA device memory (device = HG_DEVICE_CUDA)"));
  if (device == HG_DEVICE_HOST && !on_host)
    throw std::invalid_argument(invalid_argument_message(
        parameter, "device pointer", "must be host memory (device = HG_DEVICE_HOST)"));
#else
  (void)p;
  (void)device;
  (void)parameter;
#endif
}

/// Params and grads may be the same buffer, or disjoint; a partial overlap would make the
/// fused kernels read values they already wrote.
inline void require_no_partial_overlap(const void* a, const void* b, std::size_t bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  const bool overlap = x <= y ? y - x < bytes : x - y < bytes;  // no address + bytes overflow
  require(!overlap || x == y, "grads", "overlapping params",
          "must be the params buffer itself or not overlap it");
}

/// The CPU policy: the calling thread's OpenMP team when compiled with OpenMP.
inline const auto& host_policy() {
#if defined(_OPENMP)
  return thrust::omp::par;
#else
  return thrust::cpp::par;
#endif
}

}  // namespace heterograd::c_api::detail
