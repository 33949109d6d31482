#pragma once
// Portability macros shared by every layer: host/device annotations and a debug-only assert.

#include <cstdio>
#include <cstdlib>

#if defined(__CUDACC__)
#define HG_HOST_DEVICE __host__ __device__
#define HG_DEVICE __device__
#else
#define HG_HOST_DEVICE
#define HG_DEVICE
#endif

#if defined(__CUDA_ARCH__)
#define HG_ON_DEVICE 1
#else
#define HG_ON_DEVICE 0
#endif

// HG_ASSERT checks invariants in debug builds only (NDEBUG unset, or HG_ENABLE_ASSERTS set).
// It is for the library's own invariants; argument validation throws instead (see error.hpp).
#if !defined(NDEBUG) || defined(HG_ENABLE_ASSERTS)
#define HG_ASSERT(cond) \
  ((cond) ? static_cast<void>(0) : ::heterograd::detail::assert_fail(#cond, __FILE__, __LINE__))
#else
#define HG_ASSERT(cond) static_cast<void>(0)
#endif

namespace heterograd::detail {

HG_HOST_DEVICE inline void assert_fail(const char* expr, const char* file, int line) {
#if HG_ON_DEVICE
  printf("heterograd assertion failed: %s (%s:%d)\n", expr, file, line);
  __trap();
#else
  std::fprintf(stderr, "heterograd assertion failed: %s (%s:%d)\n", expr, file, line);
  std::abort();
#endif
}

}  // namespace heterograd::detail
