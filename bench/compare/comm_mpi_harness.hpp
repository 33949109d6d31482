#pragma once
// The timing harness shared by the MPI peer programs (raw MPI_Allreduce and heterograd's mpi
// transport), so both are measured the same way as the inproc benchmark: before every call
// each rank rewrites its whole buffer (as a backward pass would), then rank 0 times the call.
// Prints one JSON object per size on stdout from rank 0.

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace comm_peers {

inline int iterations_for(std::size_t floats) {
  if (floats >= (std::size_t{1} << 24)) return 6;
  if (floats >= (std::size_t{1} << 20)) return 40;
  if (floats >= (std::size_t{1} << 16)) return 400;
  return 4000;
}

/// Runs `call(buffer)` for 1K, 64K, 1M, 16M floats and prints
/// {"name": ..., "ranks": n, "floats": m, "seconds": t} lines from rank 0.
template <class Call>
void run(const char* name, Call&& call) {
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  for (std::size_t m : {std::size_t{1} << 10, std::size_t{1} << 16, std::size_t{1} << 20, std::size_t{1} << 24}) {
    std::vector<float> buf(m);
    const int iters = iterations_for(m);
    double total = 0;
    for (int it = -2; it < iters; ++it) {
      const float v = static_cast<float>((it + rank) & 7);
      for (std::size_t i = 0; i < m; ++i) buf[i] = v;  // the rewrite: m*4 bytes written
      const auto t0 = std::chrono::steady_clock::now();
      call(buf);
      const auto t1 = std::chrono::steady_clock::now();
      if (it >= 0) total += std::chrono::duration<double>(t1 - t0).count();
    }
    // The slowest rank's mean is the collective's time.
    double mean = total / iters, worst = 0;
    MPI_Reduce(&mean, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
      std::printf("{\"name\": \"%s\", \"ranks\": %d, \"floats\": %zu, \"seconds\": %.9g}\n", name, n, m, worst);
    std::fflush(stdout);
  }
}

}  // namespace comm_peers
