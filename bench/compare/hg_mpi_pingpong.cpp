// heterograd's mpi transport: send/recv ping-pong of floats between rank pairs (r, r^1),
// interleaved call by call with the same ping-pong over MPI_Send/MPI_Recv in one process (see
// comm_mpi_harness.hpp). One call = a message each way. Context for the point-to-point path
// (parameter servers, pipelines): printed as raw_mpi_pingpong and hg_mpi_pingpong.
//   environment: HG_COMM_SIZES (comma-separated floats); needs an even number of ranks.
#include <mpi.h>

#include <vector>

#include "comm_mpi_harness.hpp"
#include "heterograd/comm/mpi.hpp"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  namespace hc = heterograd::comm;
  {
    hc::mpi::communicator c(MPI_COMM_WORLD);
    if (c.size() % 2 != 0) {
      if (c.rank() == 0) std::fprintf(stderr, "hg_mpi_pingpong: needs an even number of ranks, got %d\n", c.size());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int peer = c.rank() ^ 1;
    const bool first = (c.rank() & 1) == 0;  // sends first
    comm_peers::run({{"raw_mpi_pingpong",
                      [&](std::vector<float>& b) {
                        const int n = static_cast<int>(b.size());
                        if (first) MPI_Send(b.data(), n, MPI_FLOAT, peer, 3, MPI_COMM_WORLD);
                        MPI_Recv(b.data(), n, MPI_FLOAT, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                        if (!first) MPI_Send(b.data(), n, MPI_FLOAT, peer, 3, MPI_COMM_WORLD);
                      }},
                     {"hg_mpi_pingpong", [&](std::vector<float>& b) {
                        const heterograd::span<const float> out(b.data(), b.size());
                        if (first) c.send(out, peer, 3).wait();
                        c.recv(heterograd::span<float>(b), peer, 3).wait();
                        if (!first) c.send(out, peer, 3).wait();
                      }}});
  }
  MPI_Finalize();
  return 0;
}
