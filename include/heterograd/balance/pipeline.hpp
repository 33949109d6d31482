#pragma once
// Contiguous pipeline-stage partitioning, the core of DAPPLE's planner (Fan et al., "DAPPLE:
// A Pipelined Data Parallel Approach for Training Large Models", PPoPP 2021, #3 in
// docs/references.md), for workers of different speeds.
//
// Layers 0..L−1 with profiled times τ_l (on a reference worker) go to K stages in order;
// stage k runs on a worker of relative speed v_k and takes Σ_{l in stage} τ_l / v_k. The
// steady-state step of a pipeline is set by its slowest stage, so the partition minimises
//     max_k (Σ_{l = b_k}^{b_{k+1}−1} τ_l) / v_k,      0 = b_0 < b_1 < … < b_K = L,
// by dynamic programming over (stages, layers): best[k][j] = min_i max(best[k−1][i],
// (P_j − P_i)/v_k) with prefix sums P, O(K·L²). Every stage gets at least one layer.
// Placement (which worker is stage k) is the caller's: stage_speeds is in pipeline order.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "heterograd/core/error.hpp"

namespace heterograd::balance {

namespace detail {
inline void validate_stages(std::span<const double> layer_times,
                            std::span<const double> stage_speeds) {
  require(!layer_times.empty(), "layer_times", layer_times.size(), "must hold at least one layer");
  require(!stage_speeds.empty(), "stage_speeds", stage_speeds.size(),
          "must hold at least one stage");
  require(stage_speeds.size() <= layer_times.size(), "stage_speeds", stage_speeds.size(),
          "must not exceed the number of layers (" + std::to_string(layer_times.size()) + ")");
  for (std::size_t i = 0; i < layer_times.size(); ++i) {
    require(std::isfinite(layer_times[i]) && layer_times[i] >= 0,
            "layer_times[" + std::to_string(i) + "]", layer_times[i], "must be finite and >= 0");
  }
  for (std::size_t i = 0; i < stage_speeds.size(); ++i) {
    require(std::isfinite(stage_speeds[i]) && stage_speeds[i] > 0,
            "stage_speeds[" + std::to_string(i) + "]", stage_speeds[i], "must be finite and > 0");
  }
}
}  // namespace detail

/// Time of every stage of a partition given by its K+1 boundaries.
inline std::vector<double> stage_times(std::span<const double> layer_times,
                                       std::span<const double> stage_speeds,
                                       std::span<const std::size_t> boundaries) {
  detail::validate_stages(layer_times, stage_speeds);
  const std::size_t k = stage_speeds.size();
  require(boundaries.size() == k + 1, "boundaries", boundaries.size(),
          "must hold one more entry than there are stages (" + std::to_string(k + 1) + ")");
  require(boundaries.front() == 0 && boundaries.back() == layer_times.size(), "boundaries",
          boundaries.back(), "must start at 0 and end at the number of layers");
  std::vector<double> t(k);
  for (std::size_t s = 0; s < k; ++s) {
    require(boundaries[s] < boundaries[s + 1], "boundaries", boundaries[s + 1],
            "must increase strictly (every stage holds a layer)");
    double sum = 0;
    for (std::size_t l = boundaries[s]; l < boundaries[s + 1]; ++l) sum += layer_times[l];
    t[s] = sum / stage_speeds[s];
  }
  return t;
}

/// The slowest stage's time: the pipeline's steady-state time per micro-batch.
inline double bottleneck_seconds(std::span<const double> layer_times,
                                 std::span<const double> stage_speeds,
                                 std::span<const std::size_t> boundaries) {
  const auto t = stage_times(layer_times, stage_speeds, boundaries);
  return *std::max_element(t.begin(), t.end());
}

/// Splits the layers into stage_speeds.size() contiguous, non-empty stages minimising the
/// slowest stage's time. Returns the K+1 boundaries: stage k holds layers
/// [b_k, b_{k+1}). Ties go to the partition found first (earliest cut for each stage).
inline std::vector<std::size_t> partition_stages(std::span<const double> layer_times,
                                                 std::span<const double> stage_speeds) {
  detail::validate_stages(layer_times, stage_speeds);
  const std::size_t n = layer_times.size(), k = stage_speeds.size();
  std::vector<double> prefix(n + 1, 0.0);
  for (std::size_t l = 0; l < n; ++l) prefix[l + 1] = prefix[l] + layer_times[l];
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][j]: least bottleneck of the first s stages over layers [0, j).
  std::vector<std::vector<double>> best(k + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<std::size_t>> cut(k + 1, std::vector<std::size_t>(n + 1, 0));
  best[0][0] = 0;
  for (std::size_t s = 1; s <= k; ++s) {
    // Stage s−1 (0-based) ends at j; the stages before it need s−1 layers, those after k−s.
    for (std::size_t j = s; j + (k - s) <= n; ++j) {
      for (std::size_t i = s - 1; i < j; ++i) {
        if (best[s - 1][i] == inf) continue;
        const double v = std::max(best[s - 1][i], (prefix[j] - prefix[i]) / stage_speeds[s - 1]);
        if (v < best[s][j]) {
          best[s][j] = v;
          cut[s][j] = i;
        }
      }
    }
  }
  std::vector<std::size_t> b(k + 1);
  b[k] = n;
  for (std::size_t s = k; s > 0; --s) b[s - 1] = cut[s][b[s]];
  return b;
}

}  // namespace heterograd::balance
