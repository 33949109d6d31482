// Peer: raw MPI_Allreduce (sum, in place) of floats, timed like heterograd's benchmarks.
#include <mpi.h>

#include <vector>

#include "comm_mpi_harness.hpp"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  comm_peers::run({{"raw_mpi", [](std::vector<float>& b) {
    MPI_Allreduce(MPI_IN_PLACE, b.data(), static_cast<int>(b.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }}});
  MPI_Finalize();
  return 0;
}
