// Heterogeneous worker times from the counter-based RNG: tau_i = 1 + sqrt(i) (randomly
// permuted) plus half-normal per-job noise |N(0, i+1)|, the model of the Ringmaster and
// Ringleader experiments. Counts how many gradients synchronous rounds and fully asynchronous
// workers finish by a time horizon: the gap is what the asynchronous policies exploit.
//
//   hg-worker-times [workers=16] [horizon=1000] [seed=1]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <heterograd/heterograd.hpp>

namespace hg = heterograd;

int main(int argc, char** argv) {
  try {
    const long workers = argc > 1 ? std::stol(argv[1]) : 16;
    const double horizon = argc > 2 ? std::stod(argv[2]) : 1000.0;
    const std::uint64_t seed = argc > 3 ? std::stoull(argv[3]) : 1;
    hg::require_positive("workers", workers);
    hg::require_positive("horizon", horizon);
    const auto n = static_cast<std::size_t>(workers);

    const hg::counter_rng rng(seed);
    std::vector<std::size_t> perm(n);
    rng.substream(0).permutation(perm.begin(), perm.end());
    std::vector<double> tau(n);
    for (std::size_t i = 0; i < n; ++i) tau[perm[i]] = 1.0 + std::sqrt(static_cast<double>(i));

    // Job j of worker w takes tau_w + |N(0, w+1)|, drawn from stream w at counter j.
    auto job_time = [&](std::size_t w, std::uint64_t j) {
      return tau[w] + rng.substream(w + 1).half_normal(j, std::sqrt(static_cast<double>(w + 1)));
    };

    // Asynchronous: every worker computes back to back.
    std::vector<std::uint64_t> done(n, 0);
    std::uint64_t async_total = 0;
    for (std::size_t w = 0; w < n; ++w) {
      double t = 0;
      for (std::uint64_t j = 0;; ++j) {
        t += job_time(w, j);
        if (t > horizon) break;
        ++done[w];
      }
      async_total += done[w];
    }
    // Synchronous: a round ends when its slowest worker does.
    double t = 0;
    std::uint64_t rounds = 0;
    for (;; ++rounds) {
      double slowest = 0;
      for (std::size_t w = 0; w < n; ++w) slowest = std::max(slowest, job_time(w, rounds));
      if (t + slowest > horizon) break;
      t += slowest;
    }

    std::printf("heterograd %d.%d.%d, backend %s\n", hg::version_major, hg::version_minor,
                hg::version_patch, hg::exec::backend_name(hg::exec::default_backend).data());
    std::printf("%zu workers, tau_i = 1+sqrt(i) permuted (seed %llu) + |N(0, i+1)| noise, "
                "horizon %.0f\n", n, static_cast<unsigned long long>(seed), horizon);
    std::printf("%8s %8s %12s\n", "worker", "tau", "async jobs");
    for (std::size_t w = 0; w < n; ++w)
      std::printf("%8zu %8.3f %12llu\n", w, tau[w], static_cast<unsigned long long>(done[w]));
    std::printf("synchronous: %llu rounds = %llu gradients\n",
                static_cast<unsigned long long>(rounds),
                static_cast<unsigned long long>(rounds * n));
    std::printf("asynchronous: %llu gradients (%.2fx the synchronous count)\n",
                static_cast<unsigned long long>(async_total),
                static_cast<double>(async_total) / static_cast<double>(std::max<std::uint64_t>(1, rounds * n)));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hg-worker-times: %s\n", e.what());
    return 2;
  }
}
