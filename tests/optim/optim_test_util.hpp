#pragma once
// Helpers of the optim tests: backend buffers, the test problems, and loops that drive an
// optimizer with gradients computed on the host.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include <thrust/copy.h>

#include "heterograd/core/span.hpp"
#include "hg_test.hpp"

namespace ot {

namespace hg = heterograd;

using hg_test::cspan_of;
using hg_test::span_of;
using hg_test::to_backend;

inline std::vector<double> random_vector(std::size_t n, std::uint64_t stream, double lo = -1,
                                         double hi = 1) {
  std::mt19937_64 gen(hg_test::seed() ^ (stream * 0x9e3779b97f4a7c15ull));
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

/// f(x) = 1/2 sum a_i (x_i - c_i)^2 with curvatures a_i in [0.5, 2].
struct quadratic {
  std::vector<double> a, c;
  explicit quadratic(std::size_t n)
      : a(random_vector(n, 1000, 0.5, 2.0)), c(random_vector(n, 1001)) {}
  double value(const std::vector<double>& x) const {
    double f = 0;
    for (std::size_t i = 0; i < x.size(); ++i) f += 0.5 * a[i] * (x[i] - c[i]) * (x[i] - c[i]);
    return f;
  }
  std::vector<double> grad(const std::vector<double>& x) const {
    std::vector<double> g(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) g[i] = a[i] * (x[i] - c[i]);
    return g;
  }
  std::vector<double> start() const { return std::vector<double>(a.size(), 0.0); }
};

/// Rosenbrock's function in two variables, minimum 0 at (1, 1), started at (-1.2, 1).
struct rosenbrock {
  double value(const std::vector<double>& x) const {
    return (1 - x[0]) * (1 - x[0]) + 100 * (x[1] - x[0] * x[0]) * (x[1] - x[0] * x[0]);
  }
  std::vector<double> grad(const std::vector<double>& x) const {
    return {-2 * (1 - x[0]) - 400 * x[0] * (x[1] - x[0] * x[0]), 200 * (x[1] - x[0] * x[0])};
  }
  std::vector<double> start() const { return {-1.2, 1.0}; }
};

/// Runs `steps` updates of optimizer o from the problem's start; returns the final point.
template <class B, class O, class P>
std::vector<double> minimise(const O& o, const P& problem, int steps) {
  auto hx = problem.start();
  auto x = to_backend<B>(hx);
  typename B::template vector<double> g(hx.size());
  auto st = o.init(B::policy(), span_of<B>(x));
  for (int t = 0; t < steps; ++t) {
    hx = hg_test::to_host(x);
    const auto hg = problem.grad(hx);
    thrust::copy(hg.begin(), hg.end(), g.begin());
    o.update(B::policy(), cspan_of<B>(g), st, span_of<B>(x));
  }
  return hg_test::to_host(x);
}

template <class Tuple, class F>
void for_each_in(const Tuple& t, F&& f) {
  std::apply([&](const auto&... o) { (f(o), ...); }, t);
}

}  // namespace ot
