// The MPI runtime's push/pull round trip (issue 6), run under mpirun -np 2 by
// bench/compare/async_peers.sh: rank 0 serves vanilla ASGD on m floats, rank 1 pushes a
// constant gradient and pulls the model back, through runtime::worker_client over heterograd's
// mpi transport. One round trip = push (header + m floats) + the server's SGD update + pull
// (header + m floats). Reference: a raw MPI_Send / MPI_Recv ping-pong of m floats each way.
// Prints {"name", "floats", "seconds"} JSON lines (seconds per round trip) from rank 0.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "heterograd/algorithms/async.hpp"
#include "heterograd/comm/mpi.hpp"
#include "heterograd/runtime/server.hpp"

namespace async = heterograd::algorithms::async;
namespace hr = heterograd::runtime;

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  {
    heterograd::comm::mpi::communicator c(MPI_COMM_WORLD);
    for (std::size_t m : {std::size_t{1} << 10, std::size_t{1} << 16, std::size_t{1} << 20}) {
      const std::uint64_t updates = m >= (std::size_t{1} << 20) ? 200 : 2000;
      // heterograd: server + worker helper.
      async::asgd p(1, async::model_server<float>(std::vector<float>(m, 0.0f), async::plain_sgd(1e-6)));
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = std::chrono::steady_clock::now();
      hr::run_remote<float>(p, c, [m](async::worker_id, std::uint64_t, std::uint64_t,
                                         heterograd::span<const float>, std::vector<float>& g) {
        if (g.size() != m) g.assign(m, 1.0f);
      }, {.max_updates = updates});
      const double hg = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // Raw ping-pong of the same payloads.
      std::vector<float> buf(m, 1.0f);
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t1 = std::chrono::steady_clock::now();
      for (std::uint64_t i = 0; i < updates; ++i) {
        if (c.rank() == 0) {
          MPI_Recv(buf.data(), static_cast<int>(m), MPI_FLOAT, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(buf.data(), static_cast<int>(m), MPI_FLOAT, 1, 8, MPI_COMM_WORLD);
        } else if (c.rank() == 1) {
          MPI_Send(buf.data(), static_cast<int>(m), MPI_FLOAT, 0, 7, MPI_COMM_WORLD);
          MPI_Recv(buf.data(), static_cast<int>(m), MPI_FLOAT, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
      }
      const double raw = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      if (c.rank() == 0) {
        std::printf("{\"name\": \"hg_async\", \"floats\": %zu, \"seconds\": %.9g}\n", m, hg / double(updates));
        std::printf("{\"name\": \"raw_pingpong\", \"floats\": %zu, \"seconds\": %.9g}\n", m, raw / double(updates));
        std::fflush(stdout);
      }
    }
  }
  MPI_Finalize();
}
