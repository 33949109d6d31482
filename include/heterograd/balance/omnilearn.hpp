#pragma once
// OmniLearn's proportional controller for per-worker batch sizes (Tyagi & Sharma, "OmniLearn:
// A Framework for Distributed Deep Learning over Heterogeneous Clusters", IEEE TPDS 2025,
// #7 in docs/references.md), in its BSP and ASP forms.
//
// Once per epoch every worker's mean per-iteration compute time t_i is gathered and, with
// t̄ = mean_j t_j and X_i = b_i / t_i the worker's throughput, each batch size moves by the
// P-controller
//     Δb_i = −k_p · (b_i / t_i) · (t_i − t̄)      (k_p = 1 in the paper: b_i' = X_i · t̄),
// so that every worker's next iteration takes t̄. A dead-band (0.2) ignores changes smaller
// than that fraction of the new batch size, so measurement noise does not make batches jitter.
//
// BSP: batches are clamped to [b_min, b_max] (the memory bound), the excess of a clamped
// worker goes to the unclamped ones, and the global batch B = Σ b_i is kept: the real
// targets are x_i = clamp(μ·b̂_i, b_min, b_max) with Σ x_i = B (water-filling), rounded by
// largest remainder. Gradients are aggregated with weights b_i / B, which gives exactly the
// gradient of the global batch. The fixed point is b_i = clamp(μ·cores_i) when t_i ∝
// b_i / cores_i: the balanced allocation B·cores_i/Σcores, with the clamps where they bind.
//
// ASP: a parameter server applies each worker's push on its own, so there is no global
// batch to keep: each worker's candidate is clamped and rounded independently, and equal
// iteration times give equal push rates (less staleness). The learning rate of a worker can
// follow its batch (linear scaling, b_i / b_i⁰).
//
// Deviations from the authors' code, on purpose (docs/balance.md): (1) the global batch is
// renormalised by scaling (x_i ∝ b̂_i) rather than shifting every worker by (Σb − B)/W: a
// shift does not keep b_i ∝ X_i and can stall inside the dead-band away from balance;
// (2) the default dead-band tests the largest relative change over the cluster
// (deadband_scope::cluster): when it acts every worker lands on the balanced allocation
// together. deadband_scope::per_worker applies the paper code's per-worker test instead;
// (3) integer batches sum to B exactly (largest remainder) instead of ceil-rounding.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "heterograd/balance/measurement.hpp"
#include "heterograd/balance/proportional.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::balance {

/// Where OmniLearn's dead-band is applied.
enum class deadband_scope {
  cluster,    ///< act only if some worker's batch would change by >= the dead-band; then all move
  per_worker  ///< the paper code's rule: a worker whose change is inside the band keeps b_i
};

/// Hyper-parameters of the OmniLearn controller (defaults: the paper's CNN settings).
struct omnilearn_config {
  std::size_t min_batch = 16;  ///< b_min (GPT-2: 4)
  std::size_t max_batch = 96;  ///< b_max, the memory bound (GPT-2: 64)
  double deadband = 0.2;       ///< relative change ignored (GPT-2: 0.1)
  double gain = 1.0;           ///< k_p in (0, 1]; 1 reaches X_i · t̄ in one step
  deadband_scope scope = deadband_scope::cluster;
  friend bool operator==(const omnilearn_config&, const omnilearn_config&) = default;

  static constexpr auto description() {
    return describe("omnilearn",
                    describe_field("min_batch", &omnilearn_config::min_batch, "b_min", at_least(1)),
                    describe_field("max_batch", &omnilearn_config::max_batch, "b_max (memory bound)",
                                   at_least(1)),
                    describe_field("deadband", &omnilearn_config::deadband, "relative change ignored",
                                   closed_open(0, 1)),
                    describe_field("gain", &omnilearn_config::gain, "P-controller gain k_p",
                                   open_closed(0, 1)));
  }
  void validate() const {
    validate_fields(*this);
    require(min_batch <= max_batch, "omnilearn.min_batch", min_batch,
            "must be <= max_batch (" + std::to_string(max_batch) + ")");
  }
};

namespace detail {

inline std::vector<std::size_t> validated_batches(std::span<const std::size_t> b,
                                                  const omnilearn_config& c) {
  c.validate();
  require(!b.empty(), "initial_batches", b.size(), "must name at least one worker");
  std::size_t sum = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    require(b[i] >= c.min_batch && b[i] <= c.max_batch,
            "initial_batches[" + std::to_string(i) + "]", b[i],
            "must be in [min_batch, max_batch] = [" + std::to_string(c.min_batch) + ", " +
                std::to_string(c.max_batch) + "]");
    sum += b[i];
  }
  require(sum > 0, "initial_batches", sum, "must sum to > 0");
  return {b.begin(), b.end()};
}

/// The P-controller candidates b̂_i = b_i + k_p (X_i t̄ − b_i), with t_i = b_i / X_i the
/// per-iteration time at the current batch (robust to a short last batch in the window).
/// Workers flagged in `absent` (empty: none; docs/elastic.md) are left out of t̄ and keep
/// their batch (their candidate is b_i).
inline std::vector<double> omnilearn_candidates(const std::vector<std::size_t>& b,
                                                const measurement_window& win,
                                                const omnilearn_config& c,
                                                std::span<const char> absent = {}) {
  const std::size_t n = b.size();
  const auto out = [&](std::size_t i) { return !absent.empty() && absent[i]; };
  std::vector<double> x(n), t(n), cand(n);
  double t_mean = 0;
  std::size_t members = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (out(i)) continue;
    x[i] = win.throughput(i);
    t[i] = static_cast<double>(b[i]) / x[i];
    t_mean += t[i];
    ++members;
  }
  t_mean /= static_cast<double>(members);
  for (std::size_t i = 0; i < n; ++i) {
    const double bi = static_cast<double>(b[i]);
    if (out(i)) {
      cand[i] = bi;
      continue;
    }
    cand[i] = bi + c.gain * (x[i] * t_mean - bi);
    if (c.scope == deadband_scope::per_worker &&
        std::abs(cand[i] - bi) / cand[i] < c.deadband) {
      cand[i] = bi;
    }
  }
  return cand;
}

inline double largest_relative_change(const std::vector<double>& target,
                                      const std::vector<std::size_t>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    worst = std::max(worst, std::abs(target[i] - static_cast<double>(b[i])) / target[i]);
  }
  return worst;
}

/// What both OmniLearn controllers share: the configuration, the batches, the measurement
/// window and one controller step.
class omnilearn_controller {
 public:
  const omnilearn_config& config() const { return config_; }
  std::size_t workers() const { return batches_.size(); }

  /// Records one measurement of worker w (use compute time only, as the paper does).
  void observe(std::size_t w, const worker_measurement& m) { window_.add(w, m); }

  std::size_t assignment(std::size_t w) const { return batches_.at(w); }
  std::size_t batch_size(std::size_t w) const { return batches_.at(w); }
  std::span<const std::size_t> batch_sizes() const { return batches_; }

  friend bool operator==(const omnilearn_controller&, const omnilearn_controller&) = default;

 protected:
  omnilearn_controller(std::span<const std::size_t> initial_batches, omnilearn_config config)
      : config_(config),
        batches_(validated_batches(initial_batches, config)),
        window_(batches_.size()) {}

  /// One step on the window observed since the last: `spread` turns the candidates into
  /// real-valued batches, `round` those into the new batches unless the cluster-wide
  /// deadband keeps the old ones; true if some batch changed. Throws, changing nothing,
  /// unless every worker reported samples and positive compute time.
  template <class Spread, class Round>
  bool step(Spread&& spread, Round&& round, std::span<const char> absent = {}) {
    require(absent.empty() || absent.size() == batches_.size(), "absent.size", absent.size(),
            "must be 0 or the number of workers (" + std::to_string(batches_.size()) + ")");
    window_.require_complete(absent);
    std::vector<double> x = spread(omnilearn_candidates(batches_, window_, config_, absent));
    window_.clear();
    if (config_.scope == deadband_scope::cluster &&
        largest_relative_change(x, batches_) < config_.deadband) {
      return false;
    }
    std::vector<std::size_t> next = round(x);
    const bool changed = next != batches_;
    batches_ = std::move(next);
    return changed;
  }

  omnilearn_config config_;
  std::vector<std::size_t> batches_;
  measurement_window window_;
};

}  // namespace detail

/// OmniLearn's controller for BSP data parallelism: batch sizes with a fixed global batch.
class omnilearn_bsp : public detail::omnilearn_controller {
 public:
  /// Starts from the given per-worker batches; the global batch is their sum.
  omnilearn_bsp(std::span<const std::size_t> initial_batches, omnilearn_config config = {})
      : omnilearn_controller(initial_batches, config),
        targets_(batches_.begin(), batches_.end()),
        global_(std::accumulate(batches_.begin(), batches_.end(), std::size_t{0})) {}

  /// Starts from an even split of `global_batch` over `workers` (b = 32 each in the paper).
  omnilearn_bsp(std::size_t workers, std::size_t global_batch, omnilearn_config config = {})
      : omnilearn_bsp(even_split(workers, global_batch, config), config) {}

  std::size_t global_batch() const { return global_; }

  /// Runs the controller on the window observed since the last call (once per epoch): the
  /// global batch water-filled over the candidates, rounded by largest remainder; true if
  /// some batch size changed.
  bool rebalance() {
    return step(
        [&](const std::vector<double>& cand) {
          return detail::water_fill(static_cast<double>(global_), cand,
                                    static_cast<double>(config_.min_batch),
                                    static_cast<double>(config_.max_batch));
        },
        [&](std::vector<double>& x) {
          auto next = detail::largest_remainder(x, global_, config_.min_batch, config_.max_batch);
          targets_ = std::move(x);
          return next;
        });
  }

  /// The real-valued batch sizes of the last change, before integer rounding.
  std::span<const double> targets() const { return targets_; }
  /// Gradient weight b_i / B: Σ_i (b_i/B)·g_i is the mean gradient over the global batch.
  double weight(std::size_t w) const {
    return static_cast<double>(batches_.at(w)) / static_cast<double>(global_);
  }

  friend bool operator==(const omnilearn_bsp&, const omnilearn_bsp&) = default;

  /// Checkpointing (core/archive.hpp): the batches, the last real-valued targets and the open
  /// measurement window, in a fixed order; `ar(...)` writes or reads them. The configuration
  /// and the global batch are rebuilt by the caller.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(batches_, targets_, window_);
  }

 private:
  static std::vector<std::size_t> even_split(std::size_t workers, std::size_t global_batch,
                                             const omnilearn_config& c) {
    c.validate();
    require(workers > 0, "workers", workers, "must be > 0");
    require(global_batch >= workers * c.min_batch && global_batch <= workers * c.max_batch,
            "global_batch", global_batch,
            "must be in [workers * min_batch, workers * max_batch] = [" +
                std::to_string(workers * c.min_batch) + ", " +
                std::to_string(workers * c.max_batch) + "]");
    const std::vector<double> even(workers, 1.0);
    return proportional_split(global_batch, even, c.min_batch, c.max_batch);
  }

  std::vector<double> targets_;
  std::size_t global_;
};

/// OmniLearn's controller for an ASP parameter server: per-worker batches equalising
/// iteration times, with no global batch to keep.
class omnilearn_asp : public detail::omnilearn_controller {
 public:
  omnilearn_asp(std::span<const std::size_t> initial_batches, omnilearn_config config = {})
      : omnilearn_controller(initial_batches, config), initial_(batches_) {}

  /// Runs the controller (once per epoch, on the server): each candidate clamped to the
  /// batch bounds and rounded half up; true if some batch changed. With `absent` (one flag
  /// per worker), over the members only: t̄ is their mean, an absent worker keeps its batch.
  bool rebalance(std::span<const char> absent = {}) {
    return step(
        [&](const std::vector<double>& cand) {
          std::vector<double> x(cand.size());
          for (std::size_t i = 0; i < x.size(); ++i) {
            x[i] = std::clamp(cand[i], static_cast<double>(config_.min_batch),
                              static_cast<double>(config_.max_batch));
          }
          return x;
        },
        [](const std::vector<double>& x) {
          std::vector<std::size_t> next(x.size());
          for (std::size_t i = 0; i < x.size(); ++i) {
            // Round half up; the clamp bounds are integers, so the result stays inside them.
            next[i] = static_cast<std::size_t>(std::floor(x[i] + 0.5));
          }
          return next;
        },
        absent);
  }

  /// The server applies each push on its own: every contribution has weight 1.
  double weight(std::size_t w) const {
    require(w < workers(), "worker", w, "must be < the number of workers");
    return 1.0;
  }
  /// Linear learning-rate scaling with the batch: b_i / b_i at the start.
  double learning_rate_scale(std::size_t w) const {
    return static_cast<double>(batches_.at(w)) / static_cast<double>(initial_.at(w));
  }

  friend bool operator==(const omnilearn_asp&, const omnilearn_asp&) = default;

  /// Checkpointing (core/archive.hpp): the batches and the open measurement window; the
  /// configuration and the initial batches are rebuilt by the caller.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(batches_, window_);
  }

 private:
  std::vector<std::size_t> initial_;
};

}  // namespace heterograd::balance
