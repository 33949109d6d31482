#pragma once
// Injected time in real runs: a worker-time model applied on the wall clock. A job the model
// gives d model units lasts d * real_scale wall seconds: after the real compute the worker
// sleeps for the remainder, polling `stop` every millisecond so that an interrupted job ends
// early. A compute that alone took longer than the model's time violates the model: the pacer
// counts it, with the seconds it ran over, so that a report can say the model was not obeyed
// (with a unit long against the real compute, violations are rare, and the simulator's
// prediction in model units times real_scale is the wall-clock time to expect).
//
// model_now() is the wall time since the pacer's origin in model units: what a worker-time
// model's outages and slow-downs (sim/worker_time.hpp) read as the job's start time, so that
// they happen on the wall clock.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <thread>

#include "heterograd/core/error.hpp"

namespace heterograd::runtime {

/// One paced job: its compute, the model's target and the wall time it lasted (seconds).
struct job_timing {
  double compute = 0;
  double target = 0;
  double wall = 0;
  bool violated = false;  ///< compute > target
};

class job_pacer {
 public:
  using clock = std::chrono::steady_clock;
  /// The longest paced job (11.6 days): beyond it finish() refuses the duration.
  static constexpr double max_job_seconds = 1e6;

  /// real_scale: wall seconds per model unit (finite, > 0); origin: model time 0.
  explicit job_pacer(double real_scale, clock::time_point origin = clock::now())
      : scale_(real_scale), origin_(origin) {
    require(std::isfinite(real_scale) && real_scale > 0, "real_scale", real_scale,
            "must be finite and > 0 (wall seconds per model time unit)");
  }

  double real_scale() const { return scale_; }
  /// Wall time since the origin, in model units.
  double model_now() const { return seconds_since(origin_) / scale_; }

  /// A job starts (its compute follows).
  void start() { t0_ = clock::now(); }
  /// The job's compute is over; it lasts model_units * real_scale wall seconds in all: sleeps
  /// for the remainder unless stop() turns true first (checked every millisecond).
  template <class Stop>
  job_timing finish(double model_units, Stop&& stop) {
    require(std::isfinite(model_units) && model_units >= 0, "job_pacer.model_units", model_units,
            "must be finite and >= 0 (the worker-time model's duration)");
    job_timing j;
    j.compute = seconds_since(t0_);
    j.target = model_units * scale_;
    // A wall time past the clock's range (or a pacing of years) is a model or scale error.
    require(j.target <= max_job_seconds, "job_pacer.model_units", model_units,
            "times real_scale must be at most 1e6 wall seconds a job");
    j.violated = j.compute > j.target;
    const auto until = t0_ + std::chrono::duration_cast<clock::duration>(
                                 std::chrono::duration<double>(j.target));
    for (auto now = clock::now(); now < until && !stop(); now = clock::now())
      std::this_thread::sleep_for(std::min<clock::duration>(std::chrono::milliseconds(1), until - now));
    j.wall = seconds_since(t0_);
    ++jobs_;
    compute_ += j.compute;
    slept_ += j.wall - j.compute;
    if (j.violated) {
      ++violations_;
      overrun_ += j.compute - j.target;
    }
    return j;
  }
  job_timing finish(double model_units) {
    return finish(model_units, [] { return false; });
  }

  std::uint64_t jobs() const { return jobs_; }
  /// Jobs whose compute alone exceeded the model's time, and by how many seconds in all.
  std::uint64_t violations() const { return violations_; }
  double overrun_seconds() const { return overrun_; }
  double compute_seconds() const { return compute_; }
  double slept_seconds() const { return slept_; }

 private:
  static double seconds_since(clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  }

  double scale_;
  clock::time_point origin_;
  clock::time_point t0_ = clock::now();
  std::uint64_t jobs_ = 0, violations_ = 0;
  double compute_ = 0, slept_ = 0, overrun_ = 0;
};

}  // namespace heterograd::runtime
