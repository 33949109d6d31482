#include <cmath>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/data/synthetic.hpp"
#include "hg_test.hpp"

namespace hg = heterograd;
namespace hd = heterograd::data;

BOOST_AUTO_TEST_SUITE(synthetic)

BOOST_AUTO_TEST_CASE(worst_case_quadratic_has_zero_gradient_at_its_closed_form_solution) {
  for (std::size_t d : {1u, 2u, 17u, 1729u}) {
    const hd::worst_case_quadratic q(d, 2.0);
    const auto x = q.solution();
    BOOST_TEST(q.grad_norm_sq(x) < 1e-24, "d = " << d);
    // f* = -1/2 b^T x* = (L/8) x*_0 = -(L/8) d/(d+1).
    BOOST_TEST(std::abs(q.loss(x) + 2.0 / 8 * d / (d + 1.0)) < 1e-12);
    // At 0 the gradient is -b = (L/4) e_1.
    std::vector<double> z(d, 0.0), g(d);
    q.gradient(z, g);
    BOOST_TEST(g[0] == 0.5);
  }
  BOOST_CHECK_THROW(hd::worst_case_quadratic(0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(quadratic_mixture_optimum_is_the_curvature_weighted_mean_of_centres) {
  const auto m = hd::quadratic_mixture::scalars({0, 1, 2, 3});
  BOOST_TEST(m.weighted_optimum()[0] == 1.5);
  // Weighting worker i by 1/tau_i gives vanilla ASGD's biased point (E1): sum(c/tau)/sum(1/tau).
  const std::vector<double> tau{1, 2, 4, 8};
  std::vector<double> w;
  double num = 0, den = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    w.push_back(1 / tau[i]);
    num += i / tau[i];
    den += 1 / tau[i];
  }
  BOOST_TEST(std::abs(m.weighted_optimum(w)[0] - num / den) < 1e-15);
  std::vector<double> x{2.0}, g(1);
  m.worker_gradient(3, x, g);
  BOOST_TEST(g[0] == -1.0);
}

template <class P>
void check_gradient_by_finite_differences(const P& p, std::size_t dim) {
  const hg::counter_rng rng(hg_test::seed(), 77);
  std::vector<double> x(dim), g(dim), gp(dim);
  for (std::size_t j = 0; j < dim; ++j) x[j] = 0.3 * rng.normal(j);
  p.loss_and_gradient(x, {}, g);
  const double h = 1e-6;
  for (std::size_t j = 0; j < dim; ++j) {
    auto xp = x, xm = x;
    xp[j] += h;
    xm[j] -= h;
    const double fd = (p.loss_and_gradient(xp, {}, gp) - p.loss_and_gradient(xm, {}, gp)) / (2 * h);
    BOOST_TEST(std::abs(fd - g[j]) < 1e-7 * (1 + std::abs(g[j])), "coordinate " << j);
  }
}

BOOST_AUTO_TEST_CASE(least_squares_and_logistic_gradients_match_finite_differences) {
  check_gradient_by_finite_differences(hd::least_squares::random(50, 7, 0.1, hg_test::seed()), 7);
  check_gradient_by_finite_differences(
      hd::logistic_regression::random(60, 5, 0.5, 1e-2, hg_test::seed()), 5);
}

BOOST_AUTO_TEST_CASE(least_squares_minibatch_gradient_averages_to_the_full_gradient) {
  const auto p = hd::least_squares::random(40, 3, 0.1, 9);
  std::vector<double> x{0.1, -0.2, 0.3}, g(3), g1(3), g2(3);
  p.loss_and_gradient(x, {}, g);
  std::vector<std::size_t> a(20), b(20);
  for (std::size_t i = 0; i < 20; ++i) a[i] = i, b[i] = 20 + i;
  p.loss_and_gradient(x, a, g1);
  p.loss_and_gradient(x, b, g2);
  for (std::size_t j = 0; j < 3; ++j) BOOST_TEST(std::abs((g1[j] + g2[j]) / 2 - g[j]) < 1e-14);
}

BOOST_AUTO_TEST_SUITE_END()
