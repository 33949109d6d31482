#pragma once
// The rounds' pacing and measurement on the wall clock (runtime::run's round methods,
// real_rounds.hpp, and eager-SGD, real_partial.hpp): worker_options' begin_round and
// end_compute. Worker w's round k lasts model.duration(w, k, its start in model units,
// batch(w)) x real_scale when paced (what the simulated round runtime gives its job), and its
// compute, paced sleep and collectives are timed. Each worker's slots are touched by its own
// thread only; the runner reads them between rounds.

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/algorithms/sync/exchange.hpp"
#include "heterograd/core/archive.hpp"
#include "heterograd/runtime/live.hpp"
#include "heterograd/runtime/pacing.hpp"
#include "heterograd/runtime/server_types.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace heterograd::runtime::detail {

template <class Model>
class round_clock {
 public:
  using clock = live_run::clock;
  /// real_scale > 0 paces every round to `model` (a worker-time model; no_time_model: never
  /// paced); `origin`: model time 0 (read at every round: a resumed run moves it); `pin(w)`
  /// places worker w's thread at its round's start.
  round_clock(std::size_t n, double real_scale, const Model& model, std::function<std::size_t(std::size_t)> batch,
              const clock::time_point& origin, std::function<void(std::size_t)> pin = {})
      : model_(model), batch_(std::move(batch)), pin_(std::move(pin)), n_(n), scale_(real_scale), reports_(n),
        k_(n, 0), start_(n), comm_from_(n), busy_(n, 0.0), rows_(n), origin_(origin) {
    if constexpr (!std::same_as<Model, no_time_model>)
      if (real_scale > 0)
        for (std::size_t w = 0; w < n_; ++w) pacers_.emplace_back(real_scale, origin);
  }
  algorithms::sync::worker_options options(algorithms::sync::worker_options o) {
    o.begin_round = [this](std::size_t w) { begin(w); };
    o.end_compute = [this](std::size_t w) { end(w); };
    return o;
  }
  /// Worker w's compute and paced seconds so far, in model units (OmniLearn's measured time).
  double busy(std::size_t w) const { return busy_.at(w); }
  const std::vector<double>& busy() const { return busy_; }
  /// Under a process group each rank measures its own worker: the others' come from the agreement.
  void set_busy(std::size_t w, double b) { busy_.at(w) = b; }
  /// Each round measured, per gradient (`steps(w, r)` gradients in worker w's round r; under
  /// a process group this rank's worker only): its start and, with `whole`, its whole time to
  /// the worker's next round (a synchronous round's collectives and barrier wait: replayed as
  /// job times, the simulated round, the slowest worker's, lasts the real round), else its
  /// compute (eager-SGD, whose waits for a round to fire the simulator makes itself).
  template <class Steps>
  std::vector<sim::trace_row> jobs(Steps steps, bool whole) const {
    std::vector<sim::trace_row> out;
    for (std::size_t w = 0; w < n_; ++w)
      for (const auto& x : rows_[w]) {
        const double h = std::max<double>(1.0, static_cast<double>(steps(w, x.round)));
        out.push_back({static_cast<sim::worker_id>(w), x.start, (whole ? x.cycle : x.duration) / h});
      }
    return out;
  }
  std::vector<worker_report> reports() const {
    auto r = reports_;
    for (std::size_t w = 0; w < pacers_.size(); ++w) {
      r[w].violations += pacers_[w].violations();
      r[w].overrun_seconds += pacers_[w].overrun_seconds();
    }
    return r;
  }
  /// Checkpoints: each worker's job index, busy time and report so far.
  template <class Archive>
  void serialize(Archive& ar) {
    if constexpr (std::is_same_v<Archive, archive_writer>) {
      const auto r = reports();
      for (const auto& x : r) ar(x.jobs, x.compute_seconds, x.paced_seconds, x.push_seconds, x.violations, x.overrun_seconds);
    } else {
      for (auto& x : reports_) ar(x.jobs, x.compute_seconds, x.paced_seconds, x.push_seconds, x.violations, x.overrun_seconds);
    }
    ar(k_, busy_);
  }

 private:
  void begin(std::size_t w) {
    if (pin_) pin_(w);
    const auto now = clock::now();
    if (comm_from_[w]) reports_[w].push_seconds += std::chrono::duration<double>(now - *comm_from_[w]).count();
    // The worker's previous round ends here: its whole time, collectives and waits included.
    if (!rows_[w].empty()) rows_[w].back().cycle = std::chrono::duration<double>(now - start_[w]).count() / unit();
    start_[w] = now;
    if (!pacers_.empty()) pacers_[w].start();
  }
  void end(std::size_t w) {
    auto& r = reports_[w];
    if constexpr (!std::same_as<Model, no_time_model>) {
      if (!pacers_.empty()) {
        const double t0 = std::chrono::duration<double>(start_[w] - origin_).count() / scale_;
        const auto j = pacers_[w].finish(model_.duration(static_cast<sim::worker_id>(w), k_[w], t0, batch_(w)));
        r.compute_seconds += j.compute;
        r.paced_seconds += j.wall - j.compute;
        busy_[w] += j.wall / scale_;
        rows_[w].push_back({k_[w], t0, j.wall / scale_, j.wall / scale_});
        return ended(w);
      }
    }
    const double c = std::chrono::duration<double>(clock::now() - start_[w]).count();
    r.compute_seconds += c;
    busy_[w] += c;
    rows_[w].push_back({k_[w], std::chrono::duration<double>(start_[w] - origin_).count(), c, c});
    ended(w);
  }
  void ended(std::size_t w) {
    ++k_[w];
    ++reports_[w].jobs;
    comm_from_[w] = clock::now();
  }
  double unit() const { return scale_ > 0 ? scale_ : 1.0; }

  struct measured {
    std::uint64_t round;
    double start, duration;  // model units: the compute (and paced sleep)
    double cycle;            // to the worker's next round (its last: the compute)
  };
  const Model& model_;
  std::function<std::size_t(std::size_t)> batch_;
  std::function<void(std::size_t)> pin_;
  std::size_t n_;
  double scale_;
  std::vector<job_pacer> pacers_;
  std::vector<worker_report> reports_;
  std::vector<std::uint64_t> k_;
  std::vector<clock::time_point> start_;
  std::vector<std::optional<clock::time_point>> comm_from_;
  std::vector<double> busy_;
  std::vector<std::vector<measured>> rows_;
  const clock::time_point& origin_;
};

}  // namespace heterograd::runtime::detail
