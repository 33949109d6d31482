#pragma once
// What the node and the MPI library do to a rank that waits: whether its ranks
// outnumber its cores, and whether MPI yields the core inside its own polls.

#include <mpi.h>

#include <algorithm>
#include <thread>

namespace heterograd::comm::mpi {

namespace detail {

/// The ranks on this node outnumber its cores.
inline bool oversubscribed(int local_ranks) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<unsigned>(local_ranks) > hw;
}

/// Whether the MPI library itself yields the core while it waits for messages: OpenMPI's
/// `mpi_yield_when_idle`, which mpirun turns on when it places more ranks than slots
/// (--oversubscribe), read through the MPI tool interface. Every MPI_Test then calls
/// sched_yield when it found nothing to do, so a wait that yields too gives the core away
/// twice per poll. False when the library has no such variable (other MPI libraries) or the
/// tool interface is unavailable.
inline bool library_yields_when_idle() {
  // OpenMPI 4.1's MPI_T_init_thread overwrites the level MPI_Query_thread reports with the
  // one it is given: ask for the level MPI granted.
  int level = MPI_THREAD_SINGLE, provided = 0;
  MPI_Query_thread(&level);
  if (MPI_T_init_thread(level, &provided) != MPI_SUCCESS) return false;
  bool yields = false;
  int index = -1;
  if (MPI_T_cvar_get_index("mpi_yield_when_idle", &index) == MPI_SUCCESS) {
    char name[128];
    char desc[8];
    int name_len = sizeof(name), desc_len = sizeof(desc), verbosity = 0, bind = 0, scope = 0;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_T_enum enumtype;
    MPI_T_cvar_handle h;
    int count = 0;
    if (MPI_T_cvar_get_info(index, name, &name_len, &verbosity, &type, &enumtype, desc, &desc_len, &bind,
                            &scope) == MPI_SUCCESS &&
        MPI_T_cvar_handle_alloc(index, nullptr, &h, &count) == MPI_SUCCESS) {
      // OpenMPI declares it as a C bool; an int is read as an int.
      int size = 0;
      if (count == 1 && MPI_Type_size(type, &size) == MPI_SUCCESS && size >= 1 && size <= 8) {
        unsigned char value[8] = {};
        if (MPI_T_cvar_read(h, value) == MPI_SUCCESS)
          for (int i = 0; i < size; ++i) yields = yields || value[i] != 0;
      }
      MPI_T_cvar_handle_free(&h);
    }
  }
  MPI_T_finalize();
  return yields;
}

}  // namespace detail

}  // namespace heterograd::comm::mpi
