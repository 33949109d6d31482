#pragma once
// The timing harness shared by the MPI peer programs (raw MPI_Allreduce and heterograd's mpi
// transport), so both are measured the same way as the inproc benchmark: before every call
// each rank rewrites its whole buffer (as a backward pass would), then every rank times the
// call; a call counts the slowest rank's time. Prints one JSON object per size from rank 0.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace comm_peers {

inline int iterations_for(std::size_t floats) {
  if (floats >= (std::size_t{1} << 24)) return 10;
  if (floats >= (std::size_t{1} << 20)) return 100;
  if (floats >= (std::size_t{1} << 16)) return 2000;
  return 20000;
}

/// Runs `call(buffer)` for 1K, 64K, 1M, 16M floats (or the sizes in the environment variable
/// HG_COMM_SIZES, comma-separated) and prints {"name", "ranks", "floats", "seconds",
/// "mean_seconds"} lines from rank 0. A call's time is the slowest rank's; "seconds" is the
/// median over the calls (robust to the other processes of a shared machine), "mean_seconds"
/// the mean.
template <class Call>
void run(const char* name, Call&& call) {
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  std::vector<std::size_t> sizes{std::size_t{1} << 10, std::size_t{1} << 16, std::size_t{1} << 20,
                                 std::size_t{1} << 24};
  if (const char* env = std::getenv("HG_COMM_SIZES")) {
    sizes.clear();
    for (const char* p = env; *p;) {
      char* end = nullptr;
      sizes.push_back(std::strtoull(p, &end, 10));
      p = *end ? end + 1 : end;
    }
  }
  for (std::size_t m : sizes) {
    std::vector<float> buf(m);
    const int iters = iterations_for(m);
    std::vector<double> t(static_cast<std::size_t>(iters)), worst(t.size());
    for (int it = -2; it < iters; ++it) {
      const float v = static_cast<float>((it + rank) & 7);
      for (std::size_t i = 0; i < m; ++i) buf[i] = v;  // the rewrite: m*4 bytes written
      const auto t0 = std::chrono::steady_clock::now();
      call(buf);
      const auto t1 = std::chrono::steady_clock::now();
      if (it >= 0) t[static_cast<std::size_t>(it)] = std::chrono::duration<double>(t1 - t0).count();
    }
    MPI_Reduce(t.data(), worst.data(), iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      double mean = 0;
      for (double x : worst) mean += x / iters;
      std::nth_element(worst.begin(), worst.begin() + iters / 2, worst.end());
      std::printf("{\"name\": \"%s\", \"ranks\": %d, \"floats\": %zu, \"seconds\": %.9g, \"mean_seconds\": %.9g}\n",
                  name, n, m, worst[static_cast<std::size_t>(iters / 2)], mean);
    }
    std::fflush(stdout);
  }
}

}  // namespace comm_peers
