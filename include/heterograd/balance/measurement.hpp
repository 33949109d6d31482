#pragma once
// What a load-balancing policy observes about one worker: samples processed, iterations run,
// compute time spent on them and the peak memory they needed. Runtimes (sim, threads, mpi)
// and framework loops report these; policies turn them into per-worker decisions.

#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "heterograd/core/clock.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::balance {

/// One report of a worker's progress (one iteration, or a whole epoch summed).
struct worker_measurement {
  std::size_t samples = 0;     ///< samples whose gradients were computed
  std::size_t iterations = 1;  ///< iterations (mini-batches) those samples came in
  seconds compute_time{0};     ///< compute time only (forward + backward), not communication
  double memory_bytes = 0;     ///< peak memory used by these iterations (0 when unknown)
};

namespace detail {

/// Throws unless `m` is a measurement a policy can use.
inline void validate_measurement(const worker_measurement& m) {
  const double t = m.compute_time.count();
  require(std::isfinite(t) && t >= 0, "worker_measurement.compute_time", t,
          "must be finite and >= 0 seconds");
  require(std::isfinite(m.memory_bytes) && m.memory_bytes >= 0,
          "worker_measurement.memory_bytes", m.memory_bytes, "must be finite and >= 0");
  require(m.iterations > 0 || m.samples == 0, "worker_measurement.iterations", m.iterations,
          "must be > 0 when samples were processed");
}

/// Per-worker sums of the measurements of one observation window (an epoch for OmniLearn).
/// The mean per-iteration compute time is time/iterations (the paper's t_i) and the
/// throughput is samples/time (its X_i = b_i/t_i).
class measurement_window {
 public:
  measurement_window() = default;
  explicit measurement_window(std::size_t workers) : sums_(workers) {}

  std::size_t workers() const { return sums_.size(); }

  /// Adds `m` to worker `w`'s sums (validated first; nothing changes on a throw).
  void add(std::size_t w, const worker_measurement& m) {
    require(w < sums_.size(), "worker", w, "must be < the number of workers");
    validate_measurement(m);
    auto& s = sums_[w];
    s.samples += m.samples;
    s.iterations += m.iterations;
    s.time += m.compute_time.count();
    if (m.memory_bytes > s.peak_memory) s.peak_memory = m.memory_bytes;
  }

  /// Throws unless every worker has samples and positive compute time in this window.
  /// With `absent` (one flag per worker, empty: none), only the members must have reported.
  void require_complete(std::span<const char> absent = {}) const {
    for (std::size_t w = 0; w < sums_.size(); ++w) {
      if (!absent.empty() && absent[w]) continue;
      require(sums_[w].samples > 0, "measurements.samples", sums_[w].samples,
              "every worker must report samples before a rebalance");
      require(sums_[w].time > 0, "measurements.compute_time", sums_[w].time,
              "every worker must report positive compute time before a rebalance");
    }
  }

  double throughput(std::size_t w) const { return sums_[w].samples / sums_[w].time; }
  double iteration_rate(std::size_t w) const {
    return static_cast<double>(sums_[w].iterations) / sums_[w].time;
  }
  double iteration_time(std::size_t w) const {
    return sums_[w].time / static_cast<double>(sums_[w].iterations);
  }
  double peak_memory(std::size_t w) const { return sums_[w].peak_memory; }
  std::size_t samples(std::size_t w) const { return sums_[w].samples; }

  void clear() {
    for (auto& s : sums_) s = sums{};
  }

  friend bool operator==(const measurement_window&, const measurement_window&) = default;

  /// Checkpointing (core/archive.hpp): the per-worker sums of the open window.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(sums_);
  }

 private:
  struct sums {
    std::size_t samples = 0;
    std::size_t iterations = 0;
    double time = 0;
    double peak_memory = 0;
    friend bool operator==(const sums&, const sums&) = default;
  };
  std::vector<sums> sums_;
};

}  // namespace detail
}  // namespace heterograd::balance
