#pragma once
// The thread support MPI granted this process.

#include <mpi.h>

#include <ostream>

namespace heterograd::comm::mpi {

/// The thread support MPI granted (MPI_Query_thread).
enum class thread_level { single, funneled, serialized, multiple };

inline const char* thread_level_name(thread_level t) {
  switch (t) {
    case thread_level::single: return "MPI_THREAD_SINGLE";
    case thread_level::funneled: return "MPI_THREAD_FUNNELED";
    case thread_level::serialized: return "MPI_THREAD_SERIALIZED";
    case thread_level::multiple: return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

inline std::ostream& operator<<(std::ostream& os, thread_level t) { return os << thread_level_name(t); }

/// The thread level of this process's MPI (MPI must be initialised).
inline thread_level query_thread_level() {
  int p = MPI_THREAD_SINGLE;
  MPI_Query_thread(&p);
  if (p == MPI_THREAD_MULTIPLE) return thread_level::multiple;
  if (p == MPI_THREAD_SERIALIZED) return thread_level::serialized;
  if (p == MPI_THREAD_FUNNELED) return thread_level::funneled;
  return thread_level::single;
}

}  // namespace heterograd::comm::mpi
