#pragma once
// Starting and finishing MPI from the Python module (heterograd.distributed): MPI is started
// by the first session made in a process that mpirun started, and finalized at exit by the
// module that started it. Shared by the parameter server (dist.cpp) and local SGD
// (local_sgd.cpp).

#include <nanobind/nanobind.h>

#include <cstdlib>
#include <stdexcept>

#include "heterograd/comm/mpi.hpp"

namespace hgpy::distpy {

namespace nb = nanobind;

/// Whether this module called MPI_Init_thread (and so finalizes at exit).
inline bool& we_initialised() {
  static bool v = false;
  return v;
}

/// mpirun (OpenMPI, MPICH/Hydra, PMIx launchers) leaves its mark in the environment.
inline bool started_by_mpirun() {
  for (const char* k : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(k)) return true;
  return false;
}

inline void init_mpi() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (fin)
    throw std::runtime_error(
        "heterograd.distributed: MPI was finalized in this process; it cannot start again");
  if (init) return;
  if (!started_by_mpirun())
    throw std::runtime_error(
        "heterograd.distributed: this process was not started by mpirun (no OMPI_COMM_WORLD_SIZE, "
        "PMI_SIZE or "
        "PMIX_RANK in its environment): launch it as `mpirun -np N python script.py` (N >= 2)");
  int provided = 0;
  {
    nb::gil_scoped_release unlocked;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  }
  we_initialised() = true;
}

inline void finalize_mpi() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (we_initialised() && init && !fin) MPI_Finalize();
}

}  // namespace hgpy::distpy
