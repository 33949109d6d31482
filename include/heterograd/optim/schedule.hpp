#pragma once
// Schedules are values: a learning rate as a function of the step (0-based count of steps
// already applied), and batch-size schedules for large-batch training. A plain number
// converts to a constant schedule, so `adam_config{.lr = 1e-3}` and
// `adam_config{.lr = cosine_decay(1e-3, 10000)}` both work.
//
//   constant(v)                          v
//   linear_warmup(peak, W, init)         init + (peak - init) t / W for t < W, then peak
//   step_decay(base, S, gamma)           base gamma^floor(t / S)
//   cosine_decay(base, D, alpha, W)      linear warm-up 0 -> base over W steps, then
//                                        base (alpha + (1 - alpha)(1 + cos(pi min(t-W, D)/D))/2)
//                                        (Loshchilov & Hutter 2017, SGDR without restarts)
//   inverse_sqrt(base, W)                base t / W for t < W, then base sqrt(W / t)
//                                        (W = 0: base / sqrt(t + 1)) (Vaswani et al. 2017)
//   inverse_time(base, d)                base / (1 + d t)  (Adagrad's lr_decay)

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "heterograd/core/config.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::optim {

struct schedule {
  enum class kind : std::uint8_t {
    constant,
    linear_warmup,
    step_decay,
    cosine_decay,
    inverse_sqrt,
    inverse_time
  };
  kind type = kind::constant;
  double value = 0.0;       ///< the constant, peak or base value
  double init = 0.0;        ///< linear_warmup: the value at step 0
  double factor = 0.0;      ///< step_decay gamma, cosine alpha, inverse_time rate
  std::int64_t warmup = 0;  ///< warm-up steps
  std::int64_t period = 0;  ///< step_decay step size, cosine decay steps

  constexpr schedule() = default;
  /// A constant schedule (implicit so that a number can stand for a schedule).
  constexpr schedule(double v) : value(v) {}  // NOLINT(google-explicit-constructor)

  /// The value at step t (t = number of steps already applied). Host and device (a
  /// capturable step evaluates it on the device from the step count it keeps there).
  HG_HOST_DEVICE double operator()(std::int64_t t) const {
    const double s = static_cast<double>(t < 0 ? 0 : t);
    switch (type) {
      case kind::constant:
        return value;
      case kind::linear_warmup:
        return t < warmup ? init + (value - init) * s / static_cast<double>(warmup) : value;
      case kind::step_decay:
        return value * std::pow(factor, std::floor(s / double(period)));
      case kind::cosine_decay: {
        if (t < warmup) return value * s / static_cast<double>(warmup);
        const double since = s - double(warmup);
        const double p = (since < double(period) ? since : double(period)) / double(period);
        return value * (factor + (1.0 - factor) * 0.5 * (1.0 + std::cos(std::numbers::pi * p)));
      }
      case kind::inverse_sqrt:
        if (warmup == 0) return value / std::sqrt(s + 1.0);
        return t < warmup ? value * s / double(warmup) : value * std::sqrt(double(warmup) / s);
      case kind::inverse_time:
        return value / (1.0 + factor * s);
    }
    return value;
  }

  /// Throws std::invalid_argument naming `field` (e.g. "adam.lr") when a value breaks a rule.
  void validate(std::string_view field) const {
    const std::string f(field);
    require(std::isfinite(value) && value >= 0.0, f, value, "must be finite and >= 0");
    switch (type) {
      case kind::constant:
        break;
      case kind::linear_warmup:
        require(std::isfinite(init) && init >= 0.0, f + ".init", init, "must be finite and >= 0");
        require(warmup >= 1, f + ".warmup", warmup, "must be >= 1");
        break;
      case kind::step_decay:
        require(period >= 1, f + ".step_size", period, "must be >= 1");
        require(factor > 0.0 && factor <= 1.0, f + ".gamma", factor, "must be in (0, 1]");
        break;
      case kind::cosine_decay:
        require(period >= 1, f + ".decay_steps", period, "must be >= 1");
        require(factor >= 0.0 && factor <= 1.0, f + ".alpha", factor, "must be in [0, 1]");
        require(warmup >= 0, f + ".warmup", warmup, "must be >= 0");
        break;
      case kind::inverse_sqrt:
        require(warmup >= 0, f + ".warmup", warmup, "must be >= 0");
        break;
      case kind::inverse_time:
        require(std::isfinite(factor) && factor >= 0.0, f + ".decay", factor,
                "must be finite and >= 0");
        break;
    }
  }
};

constexpr schedule constant(double v) {
  return schedule(v);
}

inline schedule linear_warmup(double peak, std::int64_t warmup_steps, double init = 0.0) {
  schedule s(peak);
  s.type = schedule::kind::linear_warmup;
  s.warmup = warmup_steps;
  s.init = init;
  s.validate("linear_warmup");
  return s;
}

inline schedule step_decay(double base, std::int64_t step_size, double gamma) {
  schedule s(base);
  s.type = schedule::kind::step_decay;
  s.period = step_size;
  s.factor = gamma;
  s.validate("step_decay");
  return s;
}

inline schedule cosine_decay(double base, std::int64_t decay_steps, double alpha = 0.0,
                             std::int64_t warmup_steps = 0) {
  schedule s(base);
  s.type = schedule::kind::cosine_decay;
  s.period = decay_steps;
  s.factor = alpha;
  s.warmup = warmup_steps;
  s.validate("cosine_decay");
  return s;
}

inline schedule inverse_sqrt(double base, std::int64_t warmup_steps = 0) {
  schedule s(base);
  s.type = schedule::kind::inverse_sqrt;
  s.warmup = warmup_steps;
  s.validate("inverse_sqrt");
  return s;
}

inline schedule inverse_time(double base, double decay) {
  schedule s(base);
  s.type = schedule::kind::inverse_time;
  s.factor = decay;
  s.validate("inverse_time");
  return s;
}

/// Batch size as a function of the step: piecewise constant, `stages` = (first step, size)
/// pairs in increasing step order, the first at step 0 (e.g. large-batch training that
/// doubles the batch at fixed epochs; Smith et al. 2018, "Don't decay the learning rate,
/// increase the batch size").
class batch_size_schedule {
 public:
  explicit batch_size_schedule(std::vector<std::pair<std::int64_t, std::size_t>> stages)
      : stages_(std::move(stages)) {
    require(!stages_.empty(), "batch_size_schedule.stages (count)", stages_.size(),
            "must not be empty");
    require(stages_.front().first == 0, "batch_size_schedule.stages[0].step", stages_.front().first,
            "must be 0");
    for (std::size_t i = 0; i < stages_.size(); ++i) {
      require(stages_[i].second >= 1, "batch_size_schedule.stages[i].size", stages_[i].second,
              "must be >= 1");
      if (i > 0)
        require(stages_[i].first > stages_[i - 1].first, "batch_size_schedule.stages[i].step",
                stages_[i].first, "must increase strictly");
    }
  }
  std::size_t operator()(std::int64_t t) const {
    std::size_t b = stages_.front().second;
    for (const auto& [step, size] : stages_)
      if (t >= step) b = size;
    return b;
  }
  friend bool operator==(const batch_size_schedule&, const batch_size_schedule&) = default;

 private:
  std::vector<std::pair<std::int64_t, std::size_t>> stages_;
};

enum class lr_scaling { linear, sqrt };

/// LR scaling by batch ratio: base_lr * (batch / base_batch) (linear rule, Goyal et al. 2017)
/// or base_lr * sqrt(batch / base_batch) (square-root rule, Krizhevsky 2014).
inline double scale_lr_by_batch(double base_lr, std::size_t batch, std::size_t base_batch,
                                lr_scaling rule = lr_scaling::linear) {
  require(base_lr >= 0.0, "scale_lr_by_batch.base_lr", base_lr, "must be >= 0");
  require(batch >= 1, "scale_lr_by_batch.batch", batch, "must be >= 1");
  require(base_batch >= 1, "scale_lr_by_batch.base_batch", base_batch, "must be >= 1");
  const double r = static_cast<double>(batch) / static_cast<double>(base_batch);
  return base_lr * (rule == lr_scaling::linear ? r : std::sqrt(r));
}

}  // namespace heterograd::optim
