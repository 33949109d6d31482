#pragma once
// The evaluation grid every runtime shares, and the time to a target read off it.
//
//   evaluation_grid   evaluation e at model time min(e * interval, horizon.time); the method
//                     runs up to each first; the updates and epochs rules end the run where
//                     they hold (evaluated there), the horizon's evaluation is the last
//   target_rule       a metric reaching a value (at or above it, or at or below with below)
//   target_times      the first evaluation that reaches it (the first crossing), and the first
//                     after which it stays reached for `window` model units (the sustained
//                     time: robust to one lucky evaluation of a noisy curve)

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "heterograd/core/error.hpp"

namespace heterograd::runtime {

/// Whichever comes first ends a run: model time, server updates (rounds for round methods),
/// passes over the training set.
struct horizon_rule {
  double time = std::numeric_limits<double>::infinity();
  std::uint64_t updates = std::numeric_limits<std::uint64_t>::max();
  double epochs = std::numeric_limits<double>::infinity();

  void validate() const {
    require(!std::isnan(time) && time >= 0, "horizon.time", time, "must be >= 0");
    require(updates > 0, "horizon.updates", updates, "must be > 0");
    require(!std::isnan(epochs) && epochs > 0, "horizon.epochs", epochs, "must be > 0");
    require(std::isfinite(time) || updates != std::numeric_limits<std::uint64_t>::max() || std::isfinite(epochs),
            "horizon", "unbounded", "needs a time, an updates or an epochs rule");
  }
};

/// What the grid asks of a running method.
struct grid_hooks {
  /// Runs (or waits for) the method up to model time t; false: it ended before t by no rule
  /// (nothing left to evaluate).
  std::function<bool(double t)> advance;
  std::function<std::uint64_t()> updates;
  std::function<double()> epochs;
  /// The method's model time now (where an updates or epochs rule held inside advance); none: t.
  std::function<double()> now;
};

/// One point of the grid: evaluation `index` at model time `time`; `last`: the run ends here.
struct grid_point {
  std::uint64_t index = 0;
  double time = 0;
  bool last = false;
};

/// Evaluation e happens at model time min(e * interval, horizon.time), starting from `first`
/// (a resumed run's next index); the method runs up to it first. An evaluation at t sees every
/// event at or before t and none after (sim::run's rule); one where an updates or epochs rule
/// held inside advance is dated where it held, never before the evaluation before it (on the
/// real clock the method's time of its last update can trail the grid's clock by the time a
/// result takes to arrive: the rule then held after that evaluation, dated a little earlier;
/// in the simulator it holds after it anyway). `at(point)` evaluates; it returns false to end
/// the run there. interval 0: evaluations at 0 and at the end only.
inline void evaluation_grid(const horizon_rule& hz, double interval, std::uint64_t first, const grid_hooks& h,
                            const std::function<bool(const grid_point&)>& at) {
  const double t_end = hz.time;
  auto time_of = [&](std::uint64_t e) {
    if (interval <= 0) return e == 0 ? 0.0 : t_end;
    return std::min(static_cast<double>(e) * interval, t_end);
  };
  for (std::uint64_t e = first;; ++e) {
    const double t = time_of(e);
    double te = t;
    if (e > 0) {
      if (t <= time_of(e - 1)) return;  // the horizon was evaluated already
      if (!h.advance(t)) return;
      if (h.now && (h.updates() >= hz.updates || h.epochs() >= hz.epochs))
        te = std::max(time_of(e - 1), std::min(t, h.now()));
    }
    const bool last = t >= t_end || h.epochs() >= hz.epochs || h.updates() >= hz.updates;
    if (!at(grid_point{e, te, last}) || last) return;
  }
}

/// A metric reaching a value: at or above it (at or below with `below`), and held for at least
/// `window` model units for the robust time (0: the first crossing).
struct target_rule {
  std::size_t metric = 0;  ///< index of the metric among the evaluation's values
  double value = 0;
  bool below = false;
  double window = 0;

  void validate() const {
    require(std::isfinite(value), "target.value", value, "must be finite");
    require(std::isfinite(window) && window >= 0, "target.window", window, "must be finite and >= 0");
  }
  bool reached(double v) const { return below ? v <= value : v >= value; }
};

/// Times to a target, read off the evaluations in time order:
///   first      the first evaluation that reaches the target (the raw first crossing);
///   sustained  the first evaluation t that reaches it such that every evaluation from t up to
///              and including the first one at or after t + window reaches it too: the curve
///              is seen reached over a span of at least `window` model units. Evaluations are
///              the only knowledge of the curve, so a window between grid points is rounded up
///              to the next one (interval I, window 2I: t, t + I and t + 2I all reach it). A
///              run whose evaluations end before t + window has no sustained time for t; a
///              NaN never reaches the target. window 0: sustained = first.
/// Grid times are products e * interval: a span is compared with the window up to a relative
/// 1e-9 (0.8 - 6 x 0.1 is 0.19999999999999996, two intervals of 0.1 all the same). Fed
/// evaluation by evaluation (observe), so that a checkpoint can carry it.
struct target_times {
  std::optional<double> first, sustained;
  std::optional<double> best;
  std::optional<double> candidate;  ///< the start of the current run of reaching evaluations

  void observe(const target_rule& r, double time, double v) {
    if (!std::isnan(v)) best = !best ? v : (r.below ? std::min(*best, v) : std::max(*best, v));
    if (std::isnan(v) || !r.reached(v)) {
      candidate.reset();
      return;
    }
    if (!first) first = time;
    if (!candidate) candidate = time;
    const double slack = 1e-9 * std::max({std::fabs(time), std::fabs(*candidate), r.window});
    if (!sustained && time - *candidate >= r.window - slack) sustained = *candidate;
  }
  template <class Archive>
  void serialize(Archive& ar) {
    ar(first, sustained, best, candidate);
  }
};

}  // namespace heterograd::runtime
