#pragma once
// Pre- and post-aggregation parameter transforms (#16, Karilanova, Dey, Ozcelikkale, arXiv
// 2605.15355): clients that sample time at different resolutions dt_i learn LIF decays
// beta_i = exp(-dt_i / tau_m) that do not average meaningfully. Averaging in a
// resolution-free form fixes it: before aggregation client i maps its decays to the
// reference resolution, beta_ref = beta_i^(dt_ref / dt_i), and after it maps the average
// back, beta_i = beta_ref^(dt_i / dt_ref). [The concrete method is inferred
// from the paper's abstract; docs/references.md.]
//
// A transform is any object with to_common(worker, span<T>) and from_common(worker, span<T>)
// (identity_transform in common.hpp is the default); the local SGD and BSP policies apply it
// to every model they average and to every model they hand back.

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::algorithms::sync {

/// Re-times LIF decays stored at `decay_indices` of every worker's parameters.
class lif_decay_transform {
 public:
  lif_decay_transform(std::vector<double> dt, double dt_ref, std::vector<std::size_t> decay_indices)
      : dt_(std::move(dt)), ref_(dt_ref), idx_(std::move(decay_indices)) {
    require(!dt_.empty(), "lif_decay.dt (count)", dt_.size(), "must name at least one worker");
    for (std::size_t i = 0; i < dt_.size(); ++i)
      require(std::isfinite(dt_[i]) && dt_[i] > 0, "lif_decay.dt[" + std::to_string(i) + "]", dt_[i],
              "must be finite and > 0");
    require(std::isfinite(ref_) && ref_ > 0, "lif_decay.dt_ref", ref_, "must be finite and > 0");
  }
  template <class T>
  void to_common(std::size_t w, span<T> x) const {
    apply(x, ref_ / dt_.at(w));
  }
  template <class T>
  void from_common(std::size_t w, span<T> x) const {
    apply(x, dt_.at(w) / ref_);
  }

 private:
  template <class T>
  void apply(span<T> x, double power) const {
    for (auto i : idx_) {
      require(i < x.size(), "lif_decay.decay_indices", i, "must be < the number of parameters");
      x[i] = static_cast<T>(std::pow(static_cast<double>(x[i]), power));
    }
  }
  std::vector<double> dt_;
  double ref_;
  std::vector<std::size_t> idx_;
};

}  // namespace heterograd::algorithms::sync
