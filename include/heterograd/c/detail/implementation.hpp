#pragma once
// The implementation of heterograd's C API (heterograd/c/heterograd.h). Included by exactly
// one C++ translation unit, through `#define HG_C_API_IMPLEMENTATION` before the C header:
// it and the headers below define the extern "C" functions, one header per concern:
//
//   errors.hpp     statuses and the thread's message; `guarded` runs every function's body
//                  and turns every exception into a status (nothing escapes into C)
//   checks.hpp     pointer arguments: null, alignment, element counts
//   memory.hpp     dtypes, devices, buffers against them, the host execution policy
//   handles.hpp    the registry behind opaque handles (forged or stale ones are reported)
//   optimizer.hpp  hg_optimizer_*: C configs to and from the C++ hyper-parameter structs
//   mpi.hpp        hg_mpi_*, Fortran communicator handles, MPI_Finalize and ownership
//   local_sgd.hpp  hg_local_sgd_*: the sync layer's local_sgd_worker (its only user here)
//   async.hpp      hg_async_*: the async layer's serve and worker_client (their only user)
//
// Arguments are checked first, the library's own validation throws std::invalid_argument
// before it changes anything, and a failed call changes nothing. The functions are defined
// inside heterograd::c_api::detail: a function with C language linkage is the same function
// in every namespace, so they are the ones heterograd.h declares.

#include "heterograd/c/detail/async.hpp"
#include "heterograd/c/detail/checks.hpp"
#include "heterograd/c/detail/errors.hpp"
#include "heterograd/c/detail/local_sgd.hpp"
#include "heterograd/c/detail/mpi.hpp"
#include "heterograd/c/detail/optimizer.hpp"
#include "heterograd/c/heterograd.h"
#include "heterograd/version.hpp"

namespace heterograd::c_api::detail {

extern "C" {

HG_C_EXPORT const char* hg_last_error(void) { return last_error().c_str(); }

HG_C_EXPORT const char* hg_status_name(int status) {
  switch (status) {
    case HG_OK: return "HG_OK";
    case HG_ERROR_NULL_POINTER: return "HG_ERROR_NULL_POINTER";
    case HG_ERROR_SIZE_MISMATCH: return "HG_ERROR_SIZE_MISMATCH";
    case HG_ERROR_UNKNOWN_HANDLE: return "HG_ERROR_UNKNOWN_HANDLE";
    case HG_ERROR_INVALID_ARGUMENT: return "HG_ERROR_INVALID_ARGUMENT";
    case HG_ERROR_UNSUPPORTED: return "HG_ERROR_UNSUPPORTED";
    case HG_ERROR_COMMUNICATION: return "HG_ERROR_COMMUNICATION";
    case HG_ERROR_TIMEOUT: return "HG_ERROR_TIMEOUT";
    case HG_ERROR_OUT_OF_MEMORY: return "HG_ERROR_OUT_OF_MEMORY";
    case HG_ERROR_INTERNAL: return "HG_ERROR_INTERNAL";
  }
  return "unknown";
}

HG_C_EXPORT hg_status hg_version(int* major, int* minor, int* patch) {
  return guarded(__func__, [&] {
    require_optional(major, "major");
    require_optional(minor, "minor");
    require_optional(patch, "patch");
    if (major) *major = HG_VERSION_MAJOR;
    if (minor) *minor = HG_VERSION_MINOR;
    if (patch) *patch = HG_VERSION_PATCH;
  });
}

HG_C_EXPORT int hg_has_cuda(void) {
#if defined(__CUDACC__)
  return 1;
#else
  return 0;
#endif
}

HG_C_EXPORT int hg_has_mpi(void) {
#if defined(HG_HAS_MPI)
  return 1;
#else
  return 0;
#endif
}

}  // extern "C"

}  // namespace heterograd::c_api::detail
