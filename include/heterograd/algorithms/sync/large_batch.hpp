#pragma once
// Large-batch tools (Mikami et al., Sony, arXiv 1811.05233, #2): a global batch that grows
// during training (34K -> 68K) split over heterogeneous workers, and label smoothing.
//
// The batch-size schedule is any callable step -> global batch (optim::batch_size_schedule is
// one). split_global_batch divides a global batch over the workers in proportion to their
// throughput (largest remainder, so the shares sum to the batch exactly); the BSP policy's
// sample weights b_i / B keep the aggregate the global-batch gradient at every size.
// Label smoothing belongs to the model's loss (nn::mlp_config::label_smoothing; the nn layer
// implements Szegedy et al.'s q = (1 - eps) onehot + eps / K): with_label_smoothing sets it
// and validates eps in [0, 1).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <string>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/nn/loss.hpp"
#include "heterograd/nn/mlp.hpp"

namespace heterograd::algorithms::sync {

/// Shares of `global_batch` proportional to `throughput`, summing exactly to it: largest
/// remainder on B t_i / sum t (each within one sample of it), then >= 1 each.
inline std::vector<std::size_t> split_global_batch(std::size_t global_batch,
                                                   const std::vector<double>& throughput) {
  require(!throughput.empty(), "throughput (count)", throughput.size(),
          "must name at least one worker");
  require(global_batch >= throughput.size(), "global_batch", global_batch,
          "must be >= the number of workers (every worker needs a sample)");
  double total = 0;
  for (std::size_t i = 0; i < throughput.size(); ++i) {
    require(std::isfinite(throughput[i]) && throughput[i] > 0,
            "throughput[" + std::to_string(i) + "]", throughput[i], "must be finite and > 0");
    total += throughput[i];
  }
  // Largest remainder on the ideal shares B t_i / sum t (exact sum), then every empty share
  // takes one sample from the largest one (B >= n, so the largest has >= 2).
  std::vector<std::size_t> b(throughput.size(), 0);
  std::vector<std::pair<double, std::size_t>> rem;
  std::size_t given = 0;
  for (std::size_t i = 0; i < throughput.size(); ++i) {
    const double x = static_cast<double>(global_batch) * throughput[i] / total;
    const auto f = std::min(global_batch, static_cast<std::size_t>(std::floor(x)));
    b[i] = f;
    given += f;
    rem.emplace_back(x - static_cast<double>(f), i);
  }
  std::stable_sort(rem.begin(), rem.end(),
                   [](const auto& a, const auto& c) { return a.first > c.first; });
  for (std::size_t k = 0; given < global_batch; ++k, ++given) ++b[rem[k % rem.size()].second];
  while (given > global_batch) {  // rounding of x above: take back from the largest
    --*std::max_element(b.begin(), b.end());
    --given;
  }
  for (auto& v : b) {
    if (v != 0) continue;
    --*std::max_element(b.begin(), b.end());
    v = 1;
  }
  return b;
}

/// Per-worker batches at `step` from a global batch-size schedule.
template <class Schedule>
std::vector<std::size_t> scheduled_batches(const Schedule& global, std::int64_t step,
                                           const std::vector<double>& throughput) {
  return split_global_batch(static_cast<std::size_t>(global(step)), throughput);
}

/// Model options with label smoothing eps (validated: [0, 1)).
inline nn::mlp_config with_label_smoothing(nn::mlp_config o, double eps) {
  nn::validate_label_smoothing(eps);
  o.label_smoothing = eps;
  return o;
}

}  // namespace heterograd::algorithms::sync
