#pragma once
// MPI for the C API: communicators passed as Fortran handles, the lifetime of what the MPI
// objects hold across MPI_Finalize, and hg_mpi_init / hg_mpi_finalize / hg_mpi_world. In a
// build without MPI (no HG_HAS_MPI) the functions report HG_ERROR_UNSUPPORTED.

#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "heterograd/c/detail/checks.hpp"
#include "heterograd/c/detail/errors.hpp"
#include "heterograd/c/heterograd.h"
#include "heterograd/core/clock.hpp"
#include "heterograd/core/error.hpp"

#if defined(HG_HAS_MPI)
#include <mpi.h>
#include <thrust/system/cpp/execution_policy.h>
#if defined(_OPENMP)
#include <thrust/system/omp/execution_policy.h>
#endif

#include "heterograd/comm/mpi.hpp"
#include "heterograd/kernels/memory.hpp"
#endif

namespace heterograd::c_api::detail {

/// A deadline in seconds from a C config: the MPI objects' collectives and receives.
inline seconds timeout_of(double s, const char* field) {
  require(std::isfinite(s) && s > 0, field, s, "must be finite and > 0 seconds");
  return seconds(s);
}

#if defined(HG_HAS_MPI)
/// The communicator of a Fortran handle; MPI must be running.
inline MPI_Comm mpi_comm_of(std::int64_t f) {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (!up || down)
    throw api_error(HG_ERROR_INVALID_ARGUMENT,
                    "heterograd: MPI is not running: call MPI_Init_thread (or hg_mpi_init) "
                    "first, and nothing after MPI_Finalize");
  const MPI_Comm c = MPI_Comm_f2c(static_cast<MPI_Fint>(f));
  // OpenMPI answers an unknown handle with a null pointer, not MPI_COMM_NULL.
  require(c != MPI_COMM_NULL && c != MPI_Comm{}, "mpi_comm", f,
          "must be the Fortran handle of a live communicator");
  return c;
}

inline int mpi_rank(MPI_Comm c) {
  int r = 0;
  MPI_Comm_rank(c, &r);
  return r;
}

inline int mpi_size(MPI_Comm c) {
  int n = 0;
  MPI_Comm_size(c, &n);
  return n;
}

inline bool mpi_finalized() {
  int down = 0;
  MPI_Finalized(&down);
  return down != 0;
}

/// Owns a distributed helper; after MPI_Finalize its communicator can no longer be freed,
/// so it is then left to the process's end rather than freed into a dead MPI.
template <class H>
struct mpi_owned {
  std::unique_ptr<H> h;
  mpi_owned() = default;
  mpi_owned(const mpi_owned&) = delete;
  mpi_owned& operator=(const mpi_owned&) = delete;
  ~mpi_owned() {
    if (h && mpi_finalized()) (void)h.release();
  }
};

#if defined(_OPENMP)
/// One process per rank: each steps on its process's OpenMP team.
using mpi_exec = std::remove_cvref_t<decltype(thrust::omp::par)>;
#else
using mpi_exec = std::remove_cvref_t<decltype(thrust::cpp::par)>;
#endif
/// The memory of a rank's helper: host vectors, every kernel on mpi_exec.
using mpi_memory = kernels::host_memory_on<mpi_exec>;
#endif

// ---- the C functions (C linkage: see optimizer.hpp) -----------------------------------------

extern "C" {

HG_C_EXPORT hg_status hg_mpi_init(int* provided) {
  return guarded(__func__, [&] {
    require_optional(provided, "provided");
#if defined(HG_HAS_MPI)
    int up = 0, level = 0;
    MPI_Initialized(&up);
    if (!up && MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &level) != MPI_SUCCESS)
      throw api_error(HG_ERROR_COMMUNICATION, "heterograd: MPI_Init_thread failed");
    if (up) MPI_Query_thread(&level);
    if (provided) *provided = level;
#else
    (void)provided;
    mpi_unsupported();
#endif
  });
}

HG_C_EXPORT hg_status hg_mpi_finalize(void) {
  return guarded(__func__, [&] {
#if defined(HG_HAS_MPI)
    int up = 0;
    MPI_Initialized(&up);
    if (up && !mpi_finalized()) MPI_Finalize();
#else
    mpi_unsupported();
#endif
  });
}

HG_C_EXPORT hg_status hg_mpi_world(int64_t* comm, int* rank, int* size) {
  return guarded(__func__, [&] {
    require_optional(comm, "comm");
    require_optional(rank, "rank");
    require_optional(size, "size");
#if defined(HG_HAS_MPI)
    const MPI_Comm w = mpi_comm_of(MPI_Comm_c2f(MPI_COMM_WORLD));
    if (comm) *comm = static_cast<int64_t>(MPI_Comm_c2f(w));
    if (rank) MPI_Comm_rank(w, rank);
    if (size) MPI_Comm_size(w, size);
#else
    (void)comm;
    (void)rank;
    (void)size;
    mpi_unsupported();
#endif
  });
}

}  // extern "C"

}  // namespace heterograd::c_api::detail
