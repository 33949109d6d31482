#pragma once
// A cost-model planner in the manner of the streaming-parallelism auto-tuner (P. Zhang et
// al., "Optimizing Streaming Parallelism on Heterogeneous Many-Core Architectures", IEEE
// TPDS 2020, #10 in docs/references.md): profile a few configurations, fit a performance
// model, then search the configuration space with the model instead of running every point.
//
// The model is linear in its coefficients, cost(c) ≈ Σ_k w_k · φ_k(c), with user-chosen
// features φ (so it captures 1/P, K, W/K ... terms); w is the least-squares fit
// min_w ‖Φ w − y‖² over the profiled samples, solved by Householder QR (better conditioned
// than the normal equations). With features that contain the true cost function the fit
// recovers its coefficients exactly (up to rounding) from as many samples as features.
// streaming_features gives the features for (partitions, tasks) of a streamed workload; the
// same class chooses H_i and b_i, or the number of pipeline stages, with other features.

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <iterator>
#include <limits>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "heterograd/core/error.hpp"

namespace heterograd::balance {

/// Least squares: the w minimising ‖A w − y‖² for A with `rows` = y.size() rows and `cols`
/// columns (row-major), by Householder QR. Throws unless rows >= cols and A has full column
/// rank (a column whose part orthogonal to the previous ones is below 1e-12 of its norm).
inline std::vector<double> least_squares(std::span<const double> a, std::size_t cols,
                                         std::span<const double> y) {
  require_positive("cols", cols);
  const std::size_t rows = y.size();
  require(rows >= cols, "rows", rows,
          "must be >= the number of features (" + std::to_string(cols) + ")");
  require(a.size() == rows * cols, "a.size()", a.size(),
          "must equal rows * cols (" + std::to_string(rows * cols) + ")");
  for (std::size_t i = 0; i < a.size(); ++i) {
    require(std::isfinite(a[i]), "a[" + std::to_string(i) + "]", a[i], "must be finite");
  }
  for (std::size_t i = 0; i < rows; ++i) {
    require(std::isfinite(y[i]), "y[" + std::to_string(i) + "]", y[i], "must be finite");
  }
  // Column-major working copy: QR works down columns.
  std::vector<double> q(rows * cols), b(y.begin(), y.end());
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) q[c * rows + r] = a[r * cols + c];
  }
  // Rank test per column, relative to the column's own norm (features differ in scale).
  std::vector<double> col_norm(cols, 0.0);
  for (std::size_t c = 0; c < cols; ++c) {
    for (std::size_t r = 0; r < rows; ++r) col_norm[c] = std::hypot(col_norm[c], q[c * rows + r]);
  }
  std::vector<double> diag(cols);
  for (std::size_t k = 0; k < cols; ++k) {
    double* col = &q[k * rows];
    double norm = 0;
    for (std::size_t r = k; r < rows; ++r) norm = std::hypot(norm, col[r]);
    require(norm > 1e-12 * col_norm[k] && norm > 0, "features", k,
            "are linearly dependent on the profiled samples (rank-deficient column)");
    const double alpha = col[k] > 0 ? -norm : norm;  // avoid cancellation in v = x − αe
    col[k] -= alpha;
    const double vnorm2 = [&] {
      double s = 0;
      for (std::size_t r = k; r < rows; ++r) s += col[r] * col[r];
      return s;
    }();
    // Apply H = I − 2 v vᵀ / (vᵀv) to the remaining columns and to b.
    auto reflect = [&](double* x) {
      double dot = 0;
      for (std::size_t r = k; r < rows; ++r) dot += col[r] * x[r];
      const double f = 2 * dot / vnorm2;
      for (std::size_t r = k; r < rows; ++r) x[r] -= f * col[r];
    };
    for (std::size_t j = k + 1; j < cols; ++j) reflect(&q[j * rows]);
    reflect(b.data());
    diag[k] = alpha;
  }
  // Back substitution with R (diag on the diagonal, q above it).
  std::vector<double> w(cols);
  for (std::size_t k = cols; k-- > 0;) {
    double s = b[k];
    for (std::size_t j = k + 1; j < cols; ++j) s -= q[j * rows + k] * w[j];
    w[k] = s / diag[k];
  }
  return w;
}

/// A configuration of a streamed workload: the accelerator's cores split into `partitions`
/// streams, the work cut into `tasks` chunks.
struct stream_config {
  std::size_t partitions = 1;
  std::size_t tasks = 1;
  friend bool operator==(const stream_config&, const stream_config&) = default;
};

/// Features of a streamed workload of `work` units:
///   1       fixed cost,
///   W/P     compute spread over P partitions,
///   P       per-partition set-up,
///   K       per-task launch and synchronisation,
///   W/K     one task's transfer that no other task overlaps (pipeline fill and drain).
struct streaming_features {
  double work = 1;
  std::array<double, 5> operator()(const stream_config& c) const {
    const double p = static_cast<double>(c.partitions), k = static_cast<double>(c.tasks);
    return {1.0, work / p, p, k, work / k};
  }
};

/// A linear cost model over features of Config, fitted from profiled samples.
template <class Config, class Features>
  requires std::invocable<const Features&, const Config&>
class cost_model {
 public:
  explicit cost_model(Features features = {}) : features_(std::move(features)) {}

  /// Records one profiled sample: configuration `c` took `seconds`.
  void observe(const Config& c, double seconds) {
    require(std::isfinite(seconds) && seconds >= 0, "seconds", seconds,
            "must be finite and >= 0");
    const auto phi = feature_vector(c);
    require(cols_ == 0 || phi.size() == cols_, "features.size()", phi.size(),
            "must be the same for every configuration (" + std::to_string(cols_) + ")");
    for (double v : phi) require(std::isfinite(v), "feature", v, "must be finite");
    cols_ = phi.size();
    rows_.insert(rows_.end(), phi.begin(), phi.end());
    y_.push_back(seconds);
  }

  std::size_t samples() const { return y_.size(); }

  /// Least-squares fit of the coefficients on every sample observed so far.
  void fit() {
    require(!y_.empty(), "samples", y_.size(), "must be > 0 before fit()");
    coef_ = least_squares(rows_, cols_, y_);
  }

  bool fitted() const { return !coef_.empty(); }
  std::span<const double> coefficients() const { return coef_; }

  /// Predicted cost of `c`.
  double predict(const Config& c) const {
    require(fitted(), "cost_model", samples(), "must be fitted before predict()");
    const auto phi = feature_vector(c);
    double s = 0;
    for (std::size_t k = 0; k < coef_.size(); ++k) s += coef_[k] * phi[k];
    return s;
  }

  /// The configuration of `space` with the least predicted cost (ties: the first).
  template <std::ranges::input_range R>
    requires std::convertible_to<std::ranges::range_reference_t<R>, const Config&>
  Config best(R&& space) const {
    require(fitted(), "cost_model", samples(), "must be fitted before best()");
    std::optional<Config> arg;
    double low = std::numeric_limits<double>::infinity();
    for (const Config& c : space) {
      const double v = predict(c);
      if (!arg || v < low) {
        low = v;
        arg = c;
      }
    }
    require(arg.has_value(), "space", 0, "must hold at least one configuration");
    return *arg;
  }

  friend bool operator==(const cost_model&, const cost_model&) = default;

 private:
  std::vector<double> feature_vector(const Config& c) const {
    const auto phi = features_(c);
    return std::vector<double>(std::begin(phi), std::end(phi));
  }

  Features features_;
  std::size_t cols_ = 0;
  std::vector<double> rows_;  // row-major feature matrix
  std::vector<double> y_;
  std::vector<double> coef_;
};

}  // namespace heterograd::balance
