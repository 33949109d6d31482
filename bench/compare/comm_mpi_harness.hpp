#pragma once
// The timing harness shared by the MPI peer programs (raw MPI_Allreduce and heterograd's mpi
// transport), so both are measured the same way as the inproc benchmark: before every call
// each rank rewrites its whole buffer (as a backward pass would), then every rank times the
// call; a call counts the slowest rank's time. Prints one JSON object per program and size from
// rank 0.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace comm_peers {

inline int iterations_for(std::size_t floats) {
  if (floats >= (std::size_t{1} << 24)) return 10;
  if (floats >= (std::size_t{1} << 20)) return 100;
  if (floats >= (std::size_t{1} << 16)) return 2000;
  return 20000;
}

/// One timed program: its name in the output and the call (on a buffer of floats).
struct entry {
  std::string name;
  std::function<void(std::vector<float>&)> call;
};

/// Runs every entry's call for 1K, 64K, 1M, 16M floats (or the sizes in the environment variable
/// HG_COMM_SIZES, comma-separated) and prints {"name", "run" (the names of the run's entries,
/// joined by '+'), "ranks", "floats", "seconds", "mean_seconds", "p10_seconds", "p90_seconds"}
/// lines from rank 0, one per entry and size. Several entries are interleaved
/// call by call in one process, in an order that rotates every iteration, so that all of them
/// see the same load and scheduling (this machine's speed changes from second to second;
/// separate programs compare different periods). A call's time is the slowest rank's;
/// "seconds" is the median over the calls (robust to the other processes of a shared
/// machine), "mean_seconds" the mean.
inline void run(const std::vector<entry>& entries) {
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
  const std::size_t k = entries.size();
  std::string together;  // the entries of this run, "a+b+..."
  for (const auto& e : entries) together += (together.empty() ? "" : "+") + e.name;
  for (std::size_t m : sizes) {
    std::vector<float> buf(m);
    const int iters = iterations_for(m);
    std::vector<double> t(static_cast<std::size_t>(iters) * k), worst(t.size());
    for (int it = -2; it < iters; ++it) {
      for (std::size_t j = 0; j < k; ++j) {
        const std::size_t e = (j + static_cast<std::size_t>(it + 2)) % k;  // rotating order
        const float v = static_cast<float>((it + rank) & 7);
        for (std::size_t i = 0; i < m; ++i) buf[i] = v;  // the rewrite: m*4 bytes written
        const auto t0 = std::chrono::steady_clock::now();
        entries[e].call(buf);
        const auto t1 = std::chrono::steady_clock::now();
        if (it >= 0) t[e * iters + static_cast<std::size_t>(it)] = std::chrono::duration<double>(t1 - t0).count();
      }
    }
    MPI_Reduce(t.data(), worst.data(), static_cast<int>(t.size()), MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      for (std::size_t e = 0; e < k; ++e) {
        auto first = worst.begin() + static_cast<std::ptrdiff_t>(e * iters), last = first + iters;
        double mean = 0;
        for (auto x = first; x != last; ++x) mean += *x / iters;
        std::sort(first, last);
        std::printf("{\"name\": \"%s\", \"run\": \"%s\", \"ranks\": %d, \"floats\": %zu, \"seconds\": %.9g, "
                    "\"mean_seconds\": %.9g, \"p10_seconds\": %.9g, \"p90_seconds\": %.9g}\n",
                    entries[e].name.c_str(), together.c_str(), n, m, *(first + iters / 2), mean,
                    *(first + iters / 10), *(first + iters * 9 / 10));
      }
    }
    std::fflush(stdout);
  }
}

}  // namespace comm_peers
