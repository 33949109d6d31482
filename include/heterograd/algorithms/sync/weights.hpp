#pragma once
// Aggregation weights of the synchronous family.
//
//   sample weights       w_i = b_i / B, B = sum_j b_j: the weighted sum of per-worker mean
//                        gradients is exactly the mean gradient of the global batch (OmniLearn,
//                        #7; Cephalo, #20), where "average by world size" is not when the
//                        b_i differ.
//   uniform              w_i = 1 / n (FedAvg over clients; biased local SGD's deliberate bias
//                        towards slow workers, #1).
//   FedNova              (Wang, Liu, Liang, Joshi, Poor, NeurIPS 2020) with plain local SGD:
//                        client i ran tau_i steps and moved d_i = x_anchor - x_i; the server
//                        applies x <- x_anchor - tau_eff sum_i p_i d_i / tau_i with
//                        tau_eff = sum_i p_i tau_i. As an affine combination of the models:
//                        x = c_anchor x_anchor + sum_i c_i x_i, c_i = p_i tau_eff / tau_i,
//                        c_anchor = 1 - sum_i c_i. With equal tau_i it is the p-weighted mean.
//   mixing matrix        gossip averaging (NFSGD of #18): x_j <- sum_l W_jl x_l with W doubly
//                        stochastic (non-negative, every row and column sums to 1), so the
//                        network average is preserved.

#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::algorithms::sync {

/// How a synchronisation weighs the workers' models or gradients.
enum class averaging { uniform, sample_weighted, fednova };

/// The names configurations give the weightings (core/describe.hpp). A synchronous step takes
/// the first two (FedNova normalises local steps): step_averagings.
inline constexpr choice<averaging> averagings[] = {{"uniform", averaging::uniform},
                                                   {"sample_weighted", averaging::sample_weighted},
                                                   {"fednova", averaging::fednova}};
inline constexpr std::span<const choice<averaging>> step_averagings = std::span(averagings).first(2);

/// w_i = b_i / sum_j b_j. Throws if there is no worker or the batch sizes sum to 0.
inline std::vector<double> sample_weights(const std::vector<std::size_t>& batches) {
  require(!batches.empty(), "batches (count)", batches.size(), "must name at least one worker");
  std::size_t total = 0;
  for (auto b : batches) total += b;
  require(total > 0, "batches (sum)", total, "must be > 0 (the global batch is empty)");
  std::vector<double> w(batches.size());
  for (std::size_t i = 0; i < batches.size(); ++i)
    w[i] = static_cast<double>(batches[i]) / static_cast<double>(total);
  return w;
}

/// w_i = 1 / n.
inline std::vector<double> uniform_weights(std::size_t n) {
  require_positive("workers", n);
  return std::vector<double>(n, 1.0 / static_cast<double>(n));
}

/// An affine combination of an anchor and the workers' models.
struct affine_weights {
  std::vector<double> workers;  ///< c_i
  double anchor = 0.0;          ///< c_anchor = 1 - sum_i c_i
};

/// FedNova's coefficients from data weights p (summing to 1) and local step counts tau_i >= 1.
inline affine_weights fednova_weights(const std::vector<double>& p,
                                      const std::vector<std::size_t>& steps) {
  require_same_size("fednova.steps", steps.size(), "fednova.weights", p.size());
  double tau_eff = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    require(steps[i] >= 1, "fednova.steps[" + std::to_string(i) + "]", steps[i],
            "must be >= 1 (a worker in the average ran no local step)");
    tau_eff += p[i] * static_cast<double>(steps[i]);
  }
  affine_weights a;
  a.workers.resize(p.size());
  double sum = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    a.workers[i] = p[i] * tau_eff / static_cast<double>(steps[i]);
    sum += a.workers[i];
  }
  a.anchor = 1.0 - sum;
  return a;
}

/// A doubly stochastic n x n mixing matrix for gossip averaging (row-major).
class mixing_matrix {
 public:
  mixing_matrix() = default;
  /// Throws unless W is n x n, non-negative, finite, and every row and column sums to 1
  /// within `tolerance`.
  mixing_matrix(std::size_t n, std::vector<double> w, double tolerance = 1e-9)
      : n_(n), w_(std::move(w)) {
    require_positive("mixing_matrix.n", n);
    require_same_size("mixing_matrix.values", w_.size(), "n * n", n * n);
    for (std::size_t k = 0; k < w_.size(); ++k)
      require(std::isfinite(w_[k]) && w_[k] >= 0,
              "mixing_matrix[" + std::to_string(k / n) + "][" + std::to_string(k % n) + "]",
              w_[k], "must be finite and >= 0");
    for (std::size_t i = 0; i < n; ++i) {
      double row = 0, col = 0;
      for (std::size_t j = 0; j < n; ++j) {
        row += w_[i * n + j];
        col += w_[j * n + i];
      }
      require(std::fabs(row - 1.0) <= tolerance, "mixing_matrix.row_sum[" + std::to_string(i) + "]",
              row, "must be 1 (the matrix must be doubly stochastic)");
      require(std::fabs(col - 1.0) <= tolerance,
              "mixing_matrix.column_sum[" + std::to_string(i) + "]", col,
              "must be 1 (the matrix must be doubly stochastic)");
    }
  }
  /// Ring gossip: each node keeps `self` and gives (1 - self)/2 to each neighbour (n >= 3);
  /// n = 2 mixes (self, 1 - self); n = 1 is the identity.
  static mixing_matrix ring(std::size_t n, double self = 1.0 / 3.0) {
    require_positive("mixing_matrix.ring.n", n);
    require(self >= 0 && self <= 1, "mixing_matrix.ring.self", self, "must be in [0, 1]");
    std::vector<double> w(n * n, 0.0);
    if (n == 1) {
      w[0] = 1;
    } else if (n == 2) {
      w = {self, 1 - self, 1 - self, self};
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        w[i * n + i] = self;
        w[i * n + (i + 1) % n] += (1 - self) / 2;
        w[i * n + (i + n - 1) % n] += (1 - self) / 2;
      }
    }
    return mixing_matrix(n, std::move(w));
  }
  /// Everyone averages with everyone: W = 11^T / n (gossip equals the global mean).
  static mixing_matrix complete(std::size_t n) {
    require_positive("mixing_matrix.complete.n", n);
    return mixing_matrix(n, std::vector<double>(n * n, 1.0 / static_cast<double>(n)));
  }

  std::size_t size() const { return n_; }
  double operator()(std::size_t i, std::size_t j) const { return w_[i * n_ + j]; }
  /// Row i: the weights node i gives its neighbours' models.
  std::vector<double> row(std::size_t i) const {
    return std::vector<double>(w_.begin() + static_cast<std::ptrdiff_t>(i * n_),
                               w_.begin() + static_cast<std::ptrdiff_t>((i + 1) * n_));
  }
  friend bool operator==(const mixing_matrix&, const mixing_matrix&) = default;

 private:
  std::size_t n_ = 0;
  std::vector<double> w_;
};

}  // namespace heterograd::algorithms::sync
