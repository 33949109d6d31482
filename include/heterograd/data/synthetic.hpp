#pragma once
// Synthetic optimisation problems with exact gradients (double precision), for theory-checked
// tests and the asynchronous-SGD experiments:
//   worst_case_quadratic   f(x) = 1/2 x^T A x - b^T x, A = (L/4) tridiag(-1, 2, -1),
//                          b = -(L/4) e_1 (Ringmaster, ICML'25; Nesterov's worst case);
//   quadratic_mixture      worker i owns f_i(x) = a_i/2 ||x - c_i||^2; the optimum of the
//                          average is sum a_i c_i / sum a_i (E1, docs/references.md);
//   least_squares          f(x) = 1/(2m) ||A x - y||^2 on a seeded random instance;
//   logistic_regression    mean log-loss + l2/2 ||x||^2 on seeded separable-ish data.
// Stochastic gradients add N(0, sigma^2) noise from counter_rng coordinates (worker, job).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::data {

/// Adds N(0, sigma^2) noise to g from stream `stream`, draws [counter*d, counter*d + d).
inline void add_gaussian_noise(span<double> g, double sigma, const counter_rng& rng,
                               std::uint64_t counter) {
  if (sigma == 0.0) return;
  for (std::size_t j = 0; j < g.size(); ++j) g[j] += sigma * rng.normal(counter * g.size() + j);
}

struct worst_case_quadratic {
  /// The dimension of the authors' experiments (Tyurin et al.'s Ringmaster ASGD), and every
  /// client's default (heterograd-run's data.dim).
  static constexpr std::size_t default_dim = 1729;
  std::size_t dim = default_dim;
  double L = 1.0;

  worst_case_quadratic(std::size_t d = default_dim, double l = 1.0) : dim(d), L(l) {
    require_positive("worst_case_quadratic.dim", dim);
    require_positive("worst_case_quadratic.L", L);
  }
  /// g = A x - b.
  void gradient(span<const double> x, span<double> g) const {
    require_same_size("worst_case_quadratic.x", x.size(), "dim", dim);
    require_same_size("worst_case_quadratic.g", g.size(), "dim", dim);
    const double s = L / 4;
    for (std::size_t j = 0; j < dim; ++j) {
      double ax = 2 * x[j];
      if (j > 0) ax -= x[j - 1];
      if (j + 1 < dim) ax -= x[j + 1];
      g[j] = s * ax + (j == 0 ? s : 0.0);  // - b_j with b = -(L/4) e_1
    }
  }
  double loss(span<const double> x) const {
    std::vector<double> g(dim);
    gradient(x, g);
    // f = 1/2 x^T A x - b^T x = 1/2 x^T (g + b) - b^T x = 1/2 x^T g - 1/2 b^T x.
    double f = 0;
    for (std::size_t j = 0; j < dim; ++j) f += 0.5 * x[j] * g[j];
    return f + 0.5 * (L / 4) * x[0];
  }
  /// The minimiser solves A x = b: x_j = -(1 - (j+1)/(d+1)) for this b (linear profile).
  std::vector<double> solution() const {
    std::vector<double> x(dim);
    for (std::size_t j = 0; j < dim; ++j)
      x[j] = -(1.0 - static_cast<double>(j + 1) / static_cast<double>(dim + 1));
    return x;
  }
  double grad_norm_sq(span<const double> x) const {
    std::vector<double> g(dim);
    gradient(x, g);
    double s = 0;
    for (double v : g) s += v * v;
    return s;
  }
};

struct quadratic_mixture {
  std::vector<std::vector<double>> centres;  // per worker
  std::vector<double> curvature;             // a_i > 0 per worker

  quadratic_mixture(std::vector<std::vector<double>> c, std::vector<double> a = {})
      : centres(std::move(c)), curvature(std::move(a)) {
    require_positive("quadratic_mixture.centres.size", centres.size());
    if (curvature.empty()) curvature.assign(centres.size(), 1.0);
    require_same_size("quadratic_mixture.curvature", curvature.size(), "centres",
                      centres.size());
    for (std::size_t i = 0; i < centres.size(); ++i) {
      require_same_size("quadratic_mixture.centres[i]", centres[i].size(), "centres[0]",
                        centres[0].size());
      require_positive("quadratic_mixture.curvature[i]", curvature[i]);
    }
  }
  /// Scalar centres, unit curvature: E1's f_i(x) = 1/2 (x - c_i)^2.
  static quadratic_mixture scalars(const std::vector<double>& c) {
    std::vector<std::vector<double>> cs;
    for (double v : c) cs.push_back({v});
    return quadratic_mixture(std::move(cs));
  }
  std::size_t dim() const { return centres[0].size(); }
  std::size_t workers() const { return centres.size(); }
  void worker_gradient(std::size_t i, span<const double> x, span<double> g) const {
    require(i < workers(), "quadratic_mixture.worker", i, "must be < workers");
    for (std::size_t j = 0; j < dim(); ++j) g[j] = curvature[i] * (x[j] - centres[i][j]);
  }
  /// Minimiser of (1/n) sum_i f_i, optionally weighted per worker (w_i >= 0):
  /// sum w_i a_i c_i / sum w_i a_i.
  std::vector<double> weighted_optimum(const std::vector<double>& w = {}) const {
    std::vector<double> x(dim(), 0.0);
    double den = 0;
    for (std::size_t i = 0; i < workers(); ++i) {
      const double wi = (w.empty() ? 1.0 : w[i]) * curvature[i];
      den += wi;
      for (std::size_t j = 0; j < dim(); ++j) x[j] += wi * centres[i][j];
    }
    for (auto& v : x) v /= den;
    return x;
  }
};

/// Finite-sum problem data: rows of A (m x d) and targets y.
struct least_squares {
  std::size_t rows = 0, dim = 0;
  std::vector<double> A, y;

  /// A ~ N(0,1), y = A x* + noise with x* ~ N(0,1).
  static least_squares random(std::size_t m, std::size_t d, double noise, std::uint64_t seed) {
    require_positive("least_squares.rows", m);
    require_positive("least_squares.dim", d);
    const counter_rng rng(seed, 0x15);
    least_squares p;
    p.rows = m;
    p.dim = d;
    p.A.resize(m * d);
    p.y.resize(m);
    for (std::size_t k = 0; k < m * d; ++k) p.A[k] = rng.normal(k);
    for (std::size_t i = 0; i < m; ++i) {
      double v = 0;
      for (std::size_t j = 0; j < d; ++j) v += p.A[i * d + j] * rng.substream(1).normal(j);
      p.y[i] = v + noise * rng.substream(2).normal(i);
    }
    return p;
  }
  /// Mean loss and gradient over `indices` (all rows when empty).
  double loss_and_gradient(span<const double> x, span<const std::size_t> indices,
                           span<double> g) const {
    require_same_size("least_squares.x", x.size(), "dim", dim);
    require_same_size("least_squares.g", g.size(), "dim", dim);
    std::fill(g.begin(), g.end(), 0.0);
    const std::size_t m = indices.empty() ? rows : indices.size();
    double f = 0;
    for (std::size_t k = 0; k < m; ++k) {
      const std::size_t i = indices.empty() ? k : indices[k];
      double r = -y[i];
      for (std::size_t j = 0; j < dim; ++j) r += A[i * dim + j] * x[j];
      f += 0.5 * r * r;
      for (std::size_t j = 0; j < dim; ++j) g[j] += r * A[i * dim + j];
    }
    for (auto& v : g) v /= static_cast<double>(m);
    return f / static_cast<double>(m);
  }
};

struct logistic_regression {
  std::size_t rows = 0, dim = 0;
  std::vector<double> X;
  std::vector<double> y;  // 0 or 1
  double l2 = 0.0;

  /// X ~ N(0,1); y = 1[x . w* + noise > 0].
  static logistic_regression random(std::size_t m, std::size_t d, double noise, double l2,
                                    std::uint64_t seed) {
    require_positive("logistic_regression.rows", m);
    require_positive("logistic_regression.dim", d);
    require_non_negative("logistic_regression.l2", l2);
    const counter_rng rng(seed, 0x1091);
    logistic_regression p;
    p.rows = m;
    p.dim = d;
    p.l2 = l2;
    p.X.resize(m * d);
    p.y.resize(m);
    for (std::size_t k = 0; k < m * d; ++k) p.X[k] = rng.normal(k);
    for (std::size_t i = 0; i < m; ++i) {
      double z = noise * rng.substream(2).normal(i);
      for (std::size_t j = 0; j < d; ++j) z += p.X[i * d + j] * rng.substream(1).normal(j);
      p.y[i] = z > 0 ? 1.0 : 0.0;
    }
    return p;
  }
  double loss_and_gradient(span<const double> x, span<const std::size_t> indices,
                           span<double> g) const {
    require_same_size("logistic_regression.x", x.size(), "dim", dim);
    require_same_size("logistic_regression.g", g.size(), "dim", dim);
    std::fill(g.begin(), g.end(), 0.0);
    const std::size_t m = indices.empty() ? rows : indices.size();
    double f = 0;
    for (std::size_t k = 0; k < m; ++k) {
      const std::size_t i = indices.empty() ? k : indices[k];
      double z = 0;
      for (std::size_t j = 0; j < dim; ++j) z += X[i * dim + j] * x[j];
      // log(1 + e^z) - y z, computed stably.
      f += (z > 0 ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z))) - y[i] * z;
      const double s = 1.0 / (1.0 + std::exp(-z)) - y[i];
      for (std::size_t j = 0; j < dim; ++j) g[j] += s * X[i * dim + j];
    }
    double reg = 0;
    for (std::size_t j = 0; j < dim; ++j) {
      g[j] = g[j] / static_cast<double>(m) + l2 * x[j];
      reg += 0.5 * l2 * x[j] * x[j];
    }
    return f / static_cast<double>(m) + reg;
  }
};

}  // namespace heterograd::data
