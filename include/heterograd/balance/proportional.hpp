#pragma once
// Static throughput-proportional allocation: per-worker batch sizes b_i ∝ X_i (samples/s) or
// local steps H_i ∝ r_i (steps/s), so that every worker needs the same compute time per
// step or per round. The throughput-proportional split behind OmniLearn's static batching
// (#7), biased local SGD's H_gpu / H_cpu (#1) and Cephalo's compute distribution (#20).
//
// Integer shares sum exactly to the total: the real shares x_i = clamp(μ·w_i, lo, hi) with
// Σ x_i = total (water-filling, so the excess of a clamped worker goes to the unclamped ones
// in proportion to their weights) are rounded by the largest-remainder rule (ties to the
// lower index), which moves each share by less than one unit.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "heterograd/balance/measurement.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::balance {

namespace detail {

inline void require_weights(std::span<const double> weights, const char* name) {
  require(!weights.empty(), name, weights.size(), "must name at least one worker");
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const std::string n = std::string(name) + "[" + std::to_string(i) + "]";
    require(std::isfinite(weights[i]) && weights[i] > 0, n, weights[i],
            "must be finite and > 0");
  }
}

inline void require_feasible_split(std::size_t total, std::size_t workers, std::size_t lo,
                                   std::size_t hi) {
  require(lo <= hi, "min_share", lo, "must be <= max_share (" + std::to_string(hi) + ")");
  require(total >= workers * lo, "total", total,
          "must be >= workers * min_share (" + std::to_string(workers * lo) + ")");
  require(total <= workers * hi, "total", total,
          "must be <= workers * max_share (" + std::to_string(workers * hi) + ")");
}

/// The real shares x_i = clamp(μ·w_i, lo, hi) with Σ x_i = total (exists when
/// W·lo <= total <= W·hi). S(μ) = Σ clamp(μ·w_i, lo, hi) is continuous, non-decreasing and
/// linear between the breakpoints lo/w_i and hi/w_i, so one sorted sweep finds μ exactly.
inline std::vector<double> water_fill(double total, std::span<const double> w, double lo,
                                      double hi) {
  const std::size_t n = w.size();
  std::vector<double> x(n);
  if (total <= n * lo) {
    std::fill(x.begin(), x.end(), lo);
    return x;
  }
  if (total >= n * hi) {
    std::fill(x.begin(), x.end(), hi);
    return x;
  }
  struct event {
    double mu;
    std::size_t i;
    bool enters;  // lo -> free at mu = lo/w_i; free -> hi at mu = hi/w_i
  };
  std::vector<event> ev;
  ev.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    ev.push_back({lo / w[i], i, true});
    ev.push_back({hi / w[i], i, false});
  }
  std::sort(ev.begin(), ev.end(), [](const event& a, const event& b) {
    return a.mu < b.mu || (a.mu == b.mu && a.enters && !b.enters);
  });
  double fixed = n * lo;  // sum of the clamped shares
  double free_w = 0;      // sum of the weights of the unclamped workers
  double mu = ev.back().mu;
  for (const auto& e : ev) {
    if (free_w > 0 && fixed + e.mu * free_w >= total) {
      mu = (total - fixed) / free_w;
      break;
    }
    if (e.enters) {
      fixed -= lo;
      free_w += w[e.i];
    } else {
      fixed += hi;
      free_w -= w[e.i];
    }
  }
  for (std::size_t i = 0; i < n; ++i) x[i] = std::clamp(mu * w[i], lo, hi);
  return x;
}

/// Rounds real shares in [lo, hi] whose sum is `total` to integers in [lo, hi] that sum to
/// `total` exactly: floors first, then the missing units to the largest fractional parts
/// (ties to the lower index). Floating-point error in Σx is absorbed the same way.
inline std::vector<std::size_t> largest_remainder(const std::vector<double>& x,
                                                  std::size_t total, std::size_t lo,
                                                  std::size_t hi) {
  const std::size_t n = x.size();
  std::vector<std::size_t> out(n);
  std::vector<double> frac(n);
  std::size_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double f = std::floor(x[i]);
    std::size_t v = f <= 0 ? 0 : static_cast<std::size_t>(f);
    v = std::clamp(v, lo, hi);
    out[i] = v;
    frac[i] = x[i] - static_cast<double>(v);
    sum += v;
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return frac[a] > frac[b]; });
  // Feasibility (W·lo <= total <= W·hi) guarantees the loops below terminate.
  while (sum < total) {
    for (std::size_t i : order) {
      if (sum == total) break;
      if (out[i] < hi) {
        ++out[i];
        ++sum;
      }
    }
  }
  while (sum > total) {
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      if (sum == total) break;
      if (out[*it] > lo) {
        --out[*it];
        --sum;
      }
    }
  }
  return out;
}

}  // namespace detail

/// Splits `total` units (samples of a global batch, or local steps of a round) over workers
/// in proportion to `weights` (their throughputs), each share in [min_share, max_share]
/// (max_share 0 means no upper bound). The shares sum to `total` exactly.
inline std::vector<std::size_t> proportional_split(std::size_t total,
                                                   std::span<const double> weights,
                                                   std::size_t min_share = 0,
                                                   std::size_t max_share = 0) {
  require_positive("total", total);
  detail::require_weights(weights, "weights");
  const std::size_t hi = max_share == 0 ? total : max_share;
  detail::require_feasible_split(total, weights.size(), min_share, hi);
  const auto x = detail::water_fill(static_cast<double>(total), weights,
                                    static_cast<double>(min_share), static_cast<double>(hi));
  return detail::largest_remainder(x, total, min_share, hi);
}

/// Local steps per round in proportion to each worker's step rate, the fastest worker doing
/// `max_steps`: H_i = max(1, round(max_steps · r_i / max_j r_j)). Biased local SGD (#1) runs
/// H_gpu = 32 on GPUs and H_cpu = 1 on CPUs 32× slower, so all finish a round together.
inline std::vector<std::size_t> proportional_local_steps(std::size_t max_steps,
                                                         std::span<const double> step_rates) {
  require_positive("max_steps", max_steps);
  detail::require_weights(step_rates, "step_rates");
  const double r_max = *std::max_element(step_rates.begin(), step_rates.end());
  std::vector<std::size_t> h(step_rates.size());
  for (std::size_t i = 0; i < h.size(); ++i) {
    const double v = std::round(static_cast<double>(max_steps) * step_rates[i] / r_max);
    h[i] = v < 1 ? 1 : static_cast<std::size_t>(v);
  }
  return h;
}

/// What a static_proportional policy splits.
enum class share_unit {
  samples,     ///< samples of a global batch, ∝ measured samples/s
  local_steps  ///< local steps of a round, ∝ measured iterations/s
};

/// Hyper-parameters of static_proportional.
struct static_proportional_config {
  std::size_t total = 0;      ///< global batch B (samples) or total local steps per round
  std::size_t min_share = 1;  ///< smallest per-worker share
  std::size_t max_share = 0;  ///< largest per-worker share (0: no bound)
  share_unit unit = share_unit::samples;
  friend bool operator==(const static_proportional_config&,
                         const static_proportional_config&) = default;
};

/// Static throughput-proportional allocation. Built from known speeds it is fixed from the
/// start; built from a worker count it splits evenly, profiles during the first window and
/// fixes the split at the first rebalance() (later rebalances change nothing: that is what
/// makes it static, unlike the OmniLearn controller). Weights are share_i / total (the
/// sample-weighted aggregation that gives the exact global-batch gradient).
class static_proportional {
 public:
  /// Even split, fixed at the first rebalance() from the measured throughputs.
  static_proportional(std::size_t workers, static_proportional_config config)
      : config_(validated(config, workers)), window_(workers) {
    const std::vector<double> even(workers, 1.0);
    shares_ = proportional_split(config_.total, even, config_.min_share, max_share());
  }

  /// Split from known relative speeds (e.g. cores per worker), fixed from the start.
  static_proportional(std::span<const double> speeds, static_proportional_config config)
      : config_(validated(config, speeds.size())), window_(speeds.size()) {
    shares_ = proportional_split(config_.total, speeds, config_.min_share, max_share());
    fixed_ = true;
  }

  const static_proportional_config& config() const { return config_; }
  std::size_t workers() const { return shares_.size(); }
  bool fixed() const { return fixed_; }

  void observe(std::size_t w, const worker_measurement& m) {
    if (fixed_) {
      // Still validate, so a caller's bad measurement is reported whatever the state.
      require(w < workers(), "worker", w, "must be < the number of workers");
      detail::validate_measurement(m);
      return;
    }
    window_.add(w, m);
  }

  /// The first call fixes the split from the profiled throughputs; true if it changed.
  bool rebalance() {
    if (fixed_) return false;
    window_.require_complete();
    std::vector<double> rate(workers());
    for (std::size_t w = 0; w < workers(); ++w) {
      rate[w] = config_.unit == share_unit::samples ? window_.throughput(w)
                                                    : window_.iteration_rate(w);
    }
    auto next = proportional_split(config_.total, rate, config_.min_share, max_share());
    const bool changed = next != shares_;
    shares_ = std::move(next);
    fixed_ = true;
    window_.clear();
    return changed;
  }

  std::size_t assignment(std::size_t w) const { return shares_.at(w); }
  std::span<const std::size_t> assignments() const { return shares_; }
  double weight(std::size_t w) const {
    return static_cast<double>(shares_.at(w)) / static_cast<double>(config_.total);
  }

  friend bool operator==(const static_proportional&, const static_proportional&) = default;

 private:
  std::size_t max_share() const {
    return config_.max_share == 0 ? config_.total : config_.max_share;
  }
  static static_proportional_config validated(const static_proportional_config& c,
                                              std::size_t workers) {
    require(workers > 0, "workers", workers, "must be > 0");
    require_positive("static_proportional.total", c.total);
    const std::size_t hi = c.max_share == 0 ? c.total : c.max_share;
    require(c.min_share <= hi, "static_proportional.min_share", c.min_share,
            "must be <= max_share (" + std::to_string(hi) + ")");
    require(c.total >= workers * c.min_share, "static_proportional.total", c.total,
            "must be >= workers * min_share (" + std::to_string(workers * c.min_share) + ")");
    require(c.total <= workers * hi, "static_proportional.total", c.total,
            "must be <= workers * max_share (" + std::to_string(workers * hi) + ")");
    return c;
  }

  static_proportional_config config_;
  detail::measurement_window window_;
  std::vector<std::size_t> shares_;
  bool fixed_ = false;
};

}  // namespace heterograd::balance
