#pragma once
// MPI test support: MPI_Init_thread(MPI_THREAD_MULTIPLE) once per process (Boost.Test global
// fixture), and a communicator over MPI_COMM_WORLD.

#include <mpi.h>

#include <boost/test/unit_test.hpp>

#include "heterograd/comm/mpi.hpp"

namespace mpi_test {

struct mpi_session {
  mpi_session() {
    int provided = 0;
    MPI_Init_thread(&boost::unit_test::framework::master_test_suite().argc,
                    &boost::unit_test::framework::master_test_suite().argv, MPI_THREAD_MULTIPLE,
                    &provided);
  }
  ~mpi_session() { MPI_Finalize(); }
};

inline heterograd::comm::mpi::communicator& world() {
  static heterograd::comm::mpi::communicator c(MPI_COMM_WORLD);
  return c;
}

}  // namespace mpi_test
