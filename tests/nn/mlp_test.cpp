#include <cmath>
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <thrust/system/cpp/execution_policy.h>

#include "heterograd/kernels/gemm.hpp"
#include "heterograd/nn/concepts.hpp"
#include "heterograd/nn/mlp.hpp"
#include "heterograd/testing/nn_archetypes.hpp"
#include "hg_test.hpp"

namespace hg = heterograd;
namespace nn = heterograd::nn;

namespace {
template <class T>
struct random_batch {
  std::vector<T> x;
  std::vector<std::int32_t> y;
  random_batch(std::size_t rows, std::size_t dim, std::size_t classes, std::uint64_t stream) {
    const hg::counter_rng rng(hg_test::seed(), stream);
    x.resize(rows * dim);
    y.resize(rows);
    for (std::size_t k = 0; k < x.size(); ++k) x[k] = static_cast<T>(rng.normal(k));
    for (std::size_t r = 0; r < rows; ++r)
      y[r] = static_cast<std::int32_t>(rng.below(1000000 + r, classes));
  }
  nn::batch<T> view() const { return {x, y}; }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(mlp)

BOOST_AUTO_TEST_CASE(mlp_gradient_matches_central_finite_differences_in_double_precision) {
  for (double smoothing : {0.0, 0.1}) {
    nn::mlp<double> m({6, 5, 4, 3}, {.label_smoothing = smoothing});
    std::vector<double> p(m.num_params()), g(m.num_params(), hg_test::poison<double>()),
        tmp(m.num_params());
    m.init(p, hg_test::seed());
    for (auto& v : p) v += 0.01;  // non-zero biases, so every kind of parameter is exercised
    const random_batch<double> b(7, 6, 3, 1);
    m.loss_and_gradient(p, b.view(), g);
    const double h = 1e-6;
    double worst = 0;
    for (std::size_t j = 0; j < p.size(); ++j) {
      auto pp = p, pm = p;
      pp[j] += h;
      pm[j] -= h;
      const double fd =
          (m.loss_and_gradient(pp, b.view(), tmp) - m.loss_and_gradient(pm, b.view(), tmp)) /
          (2 * h);
      worst = std::max(worst, std::abs(fd - g[j]) / (1e-6 + std::abs(g[j]) + std::abs(fd)));
      BOOST_REQUIRE(std::abs(fd - g[j]) < 1e-7 + 1e-5 * std::abs(g[j]));
    }
    BOOST_TEST_MESSAGE("worst relative FD error " << worst << " (smoothing " << smoothing << ")");
  }
}

BOOST_AUTO_TEST_CASE(softmax_regression_gradient_has_the_closed_form_x_transpose_p_minus_y) {
  auto m = nn::softmax_regression<double>(4, 3);
  std::vector<double> p(m.num_params(), 0.0), g(m.num_params());
  const random_batch<double> b(5, 4, 3, 2);
  const double loss = m.loss_and_gradient(p, b.view(), g);
  // All-zero weights: p = 1/3 everywhere, loss = log 3, dW[k][j] = mean_r x_rj (1/3 - [y_r=k]).
  BOOST_TEST(std::abs(loss - std::log(3.0)) < 1e-15);
  for (std::size_t k = 0; k < 3; ++k)
    for (std::size_t j = 0; j < 4; ++j) {
      double ref = 0;
      for (std::size_t r = 0; r < 5; ++r)
        ref += b.x[r * 4 + j] * (1.0 / 3 - (b.y[r] == static_cast<std::int32_t>(k))) / 5;
      BOOST_TEST(std::abs(g[k * 4 + j] - ref) < 1e-15);
    }
}

BOOST_AUTO_TEST_CASE(backward_over_layer_ranges_composes_to_the_full_gradient) {
  nn::mlp<double> m({5, 6, 4, 3});
  std::vector<double> p(m.num_params()), full(m.num_params()), part(m.num_params(), 0.0);
  m.init(p, 3);
  const random_batch<double> b(4, 5, 3, 3);
  m.loss_and_gradient(p, b.view(), full);
  // Same thing by hand: forward 0..3, dlogits, backward 2..3 with input gradient, then 0..2.
  nn::mlp<double> m2({5, 6, 4, 3});
  const auto h1 = m2.forward(p, b.x.data(), 4, 0, 2);
  std::vector<double> h(h1.begin(), h1.end());
  nn::mlp<double> top({5, 6, 4, 3});
  const auto logits = top.forward(p, h.data(), 4, 2, 3);
  std::vector<double> dl(12);
  for (std::size_t r = 0; r < 4; ++r) {
    std::size_t am = 0;
    nn::softmax_cross_entropy_row(logits.data() + r * 3, 3, b.y[r], 0.0, 0.25, dl.data() + r * 3,
                                  am);
  }
  std::vector<double> dh(4 * 4);
  top.backward(p, dl.data(), 2, 3, part, dh.data());
  std::vector<double> lower(m.num_params(), 0.0);
  m2.backward(p, dh.data(), 0, 2, lower);
  for (std::size_t j = 0; j < m.layer_offset(2); ++j) part[j] = lower[j];
  for (std::size_t j = 0; j < p.size(); ++j) BOOST_TEST(std::abs(part[j] - full[j]) < 1e-14);
}

BOOST_AUTO_TEST_CASE(blas_and_portable_gemm_agree_for_every_transpose_combination) {
  const std::size_t M = 7, N = 5, K = 9;
  const hg::counter_rng rng(hg_test::seed(), 4);
  std::vector<double> A(M * K), B(K * N);
  for (std::size_t i = 0; i < A.size(); ++i) A[i] = rng.normal(i);
  for (std::size_t i = 0; i < B.size(); ++i) B[i] = rng.normal(1000 + i);
  for (auto ta : {hg::kernels::transpose::no, hg::kernels::transpose::yes})
    for (auto tb : {hg::kernels::transpose::no, hg::kernels::transpose::yes}) {
      const std::size_t lda = ta == hg::kernels::transpose::no ? K : M;
      const std::size_t ldb = tb == hg::kernels::transpose::no ? N : K;
      std::vector<double> c1(M * N, 1.0), c2(M * N, 1.0), ref(M * N);
      hg::kernels::gemm(ta, tb, M, N, K, 2.0, A.data(), lda, B.data(), ldb, 0.5, c1.data(), N);
      hg::kernels::gemm_portable(thrust::cpp::par, ta, tb, M, N, K, 2.0, A.data(), lda, B.data(),
                                 ldb, 0.5, c2.data(), N);
      for (std::size_t i = 0; i < M; ++i)
        for (std::size_t j = 0; j < N; ++j) {
          double acc = 0;
          for (std::size_t k = 0; k < K; ++k)
            acc += (ta == hg::kernels::transpose::no ? A[i * K + k] : A[k * M + i]) *
                   (tb == hg::kernels::transpose::no ? B[k * N + j] : B[j * K + k]);
          ref[i * N + j] = 2 * acc + 0.5;
        }
      for (std::size_t i = 0; i < M * N; ++i) {
        BOOST_TEST(std::abs(c1[i] - ref[i]) < 1e-12);
        BOOST_TEST(std::abs(c2[i] - ref[i]) < 1e-12);
      }
    }
  BOOST_TEST_MESSAGE("gemm through BLAS: " << hg::kernels::has_blas());
}

BOOST_AUTO_TEST_CASE(bad_model_configuration_and_batches_throw_invalid_argument) {
  BOOST_CHECK_THROW(nn::mlp<float>({784}), std::invalid_argument);
  BOOST_CHECK_THROW(nn::mlp<float>({784, 0, 10}), std::invalid_argument);
  BOOST_CHECK_THROW(nn::mlp<float>({4, 3}, {.label_smoothing = 1.0}), std::invalid_argument);
  nn::mlp<float> m({4, 3});
  std::vector<float> p(m.num_params(), 0.f), g(m.num_params() + 1);
  const random_batch<float> b(2, 4, 3, 5);
  BOOST_CHECK_THROW(m.loss_and_gradient(p, b.view(), g), std::invalid_argument);
  g.resize(m.num_params());
  std::vector<std::int32_t> bad_y{0, 3};
  BOOST_CHECK_THROW(m.loss_and_gradient(p, nn::batch<float>{b.x, bad_y}, g), std::invalid_argument);
  static_assert(nn::model<hg::testing::model_archetype>);
  static_assert(!nn::model<hg::testing::not_a_model>);
}

BOOST_AUTO_TEST_SUITE_END()
