// LSH-sparse layer: with every neuron active it is the dense layer bit for bit; SimHash's
// collision rate matches 1 - angle/pi; DWTA codes depend on ranks only; the active set holds
// the label and the neurons colliding with the input; the decaying rebuild schedule.

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/core/rng.hpp"
#include "heterograd/kernels/gemm.hpp"
#include "heterograd/nn/loss.hpp"
#include "heterograd/nn/lsh_layer.hpp"
#include "hg_test.hpp"

namespace hg = heterograd;
namespace nn = heterograd::nn;

namespace {
std::vector<float> gaussian(std::uint64_t seed, std::uint64_t stream, std::size_t n) {
  const hg::counter_rng rng(seed, stream);
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(rng.normal(i));
  return x;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(lsh_layer)

BOOST_AUTO_TEST_CASE(with_every_neuron_active_the_layer_is_the_dense_layer_bitwise) {
  const std::size_t dim = 37, neurons = 53, steps = 25;
  for (auto family : {nn::lsh_family::simhash, nn::lsh_family::dwta}) {
    // Zero code bits: one bucket per table holding every neuron.
    nn::lsh_softmax_layer layer(dim, neurons, {.lsh = {.family = family, .parts = 0, .tables = 2}});
    std::vector<float> p(layer.num_params());
    layer.init(hg::span<float>(p), hg_test::seed(), 0.1);
    std::vector<float> ref = p;
    layer.rebuild(hg::span<const float>(p));
    nn::lsh_workspace ws;
    const float lr = 0.05f;
    std::vector<float> z(neurons), dz(neurons), dW(neurons * dim);
    for (std::size_t t = 0; t < steps; ++t) {
      const auto x = gaussian(hg_test::seed(), 100 + t, dim);
      const auto y = static_cast<std::int32_t>(hg::counter_rng(hg_test::seed(), 7).below(t, neurons));
      const float loss = layer.train_step(hg::span<float>(p), hg::span<const float>(x), y, lr, ws);
      BOOST_TEST(ws.active.size() == neurons);
      // The dense layer: z = W x + b by GEMM, softmax cross-entropy, dW = dz x^T, SGD.
      float* W = ref.data();
      float* b = W + neurons * dim;
      std::copy(b, b + neurons, z.begin());
      hg::kernels::gemm_portable(thrust::cpp::par, hg::kernels::transpose::no,
                                 hg::kernels::transpose::yes, 1, neurons, dim, 1.0f, x.data(), dim,
                                 W, dim, 1.0f, z.data(), neurons);
      std::size_t am = 0;
      const float ref_loss = nn::softmax_cross_entropy_row(z.data(), neurons, y, 0.0f, 1.0f, dz.data(), am);
      hg::kernels::gemm_portable(thrust::cpp::par, hg::kernels::transpose::yes,
                                 hg::kernels::transpose::no, neurons, dim, 1, 1.0f, dz.data(),
                                 neurons, x.data(), dim, 0.0f, dW.data(), dim);
      for (std::size_t i = 0; i < neurons * dim; ++i) W[i] -= lr * dW[i];
      for (std::size_t j = 0; j < neurons; ++j) b[j] -= lr * dz[j];
      BOOST_TEST(loss == ref_loss);
    }
    BOOST_TEST(p == ref, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(simhash_bits_agree_with_probability_one_minus_angle_over_pi) {
  const std::size_t dim = 64;
  nn::lsh_tables t(dim, {.family = nn::lsh_family::simhash, .parts = 16, .tables = 256, .seed = hg_test::seed()});
  const auto u = gaussian(hg_test::seed(), 1, dim);
  auto w = gaussian(hg_test::seed(), 2, dim);
  for (double theta : {0.3, 1.0, 2.0}) {
    // v = cos(theta) u/|u| + sin(theta) w_perp/|w_perp|: angle theta with u.
    double uu = 0, uw = 0;
    for (std::size_t i = 0; i < dim; ++i) uu += double(u[i]) * u[i], uw += double(u[i]) * w[i];
    std::vector<double> perp(dim);
    double pp = 0;
    for (std::size_t i = 0; i < dim; ++i) perp[i] = w[i] - uw / uu * u[i], pp += perp[i] * perp[i];
    std::vector<float> v(dim);
    for (std::size_t i = 0; i < dim; ++i)
      v[i] = static_cast<float>(std::cos(theta) * u[i] / std::sqrt(uu) + std::sin(theta) * perp[i] / std::sqrt(pp));
    std::vector<std::uint32_t> cu(256), cv(256);
    t.hash(hg::span<const float>(u), cu.data());
    t.hash(hg::span<const float>(v), cv.data());
    double agree = 0;
    for (std::size_t l = 0; l < 256; ++l) agree += 16 - std::popcount(cu[l] ^ cv[l]);
    const double rate = agree / (256 * 16), expected = 1 - theta / std::numbers::pi;
    // 4096 Bernoulli bits (dependent through the shared vectors, not the planes): 5 sigma.
    BOOST_TEST_INFO("theta " << theta);
    BOOST_TEST(std::fabs(rate - expected) <= 5 * std::sqrt(expected * (1 - expected) / 4096) + 1e-9);
  }
}

BOOST_AUTO_TEST_CASE(dwta_codes_depend_only_on_the_ranks_of_coordinates) {
  const std::size_t dim = 50;
  nn::lsh_tables t(dim, {.family = nn::lsh_family::dwta, .parts = 3, .tables = 8, .bin_size = 4, .seed = 3});
  auto x = gaussian(hg_test::seed(), 3, dim);
  for (auto& v : x) v = std::fabs(v) + 0.01f;
  std::vector<float> y(dim);
  for (std::size_t i = 0; i < dim; ++i) y[i] = 5.0f * x[i] * x[i];  // monotone on positives
  std::vector<std::uint32_t> cx(8), cy(8);
  t.hash(hg::span<const float>(x), cx.data());
  t.hash(hg::span<const float>(y), cy.data());
  BOOST_TEST(cx == cy, boost::test_tools::per_element());
  for (auto c : cx) BOOST_TEST(c < (1u << 6));  // 3 parts x log2(4) bits
  // A sparse input (most bins empty) still gets codes: densification.
  std::vector<float> s(dim, 0.0f);
  s[7] = 1.0f;
  t.hash(hg::span<const float>(s), cx.data());
}

BOOST_AUTO_TEST_CASE(the_active_set_is_the_colliding_neurons_plus_the_label) {
  const std::size_t dim = 16, neurons = 500;
  nn::lsh_softmax_layer layer(dim, neurons, {.lsh = {.parts = 4, .tables = 3, .seed = 5}});
  std::vector<float> p(layer.num_params());
  layer.init(hg::span<float>(p), hg_test::seed(), 1.0);
  layer.rebuild(hg::span<const float>(p));
  const auto x = gaussian(hg_test::seed(), 9, dim);
  nn::lsh_workspace ws;
  layer.active_set(hg::span<const float>(x), 123, ws);
  std::vector<std::uint32_t> cx(3), cw(3);
  layer.tables().hash(hg::span<const float>(x), cx.data());
  std::vector<std::uint32_t> expected;
  for (std::size_t j = 0; j < neurons; ++j) {
    layer.tables().hash(hg::span<const float>(p).subspan(j * dim, dim), cw.data());
    if (j == 123 || cx[0] == cw[0] || cx[1] == cw[1] || cx[2] == cw[2]) expected.push_back(static_cast<std::uint32_t>(j));
  }
  BOOST_TEST(ws.active == expected, boost::test_tools::per_element());
  BOOST_TEST(ws.active.size() < neurons / 2);  // 4 bits: each table keeps ~1/16 of them
}

BOOST_AUTO_TEST_CASE(rebuilds_follow_the_decaying_schedule) {
  const nn::rebuild_schedule s{.first = 10, .growth = 2.0};
  BOOST_TEST(s.period(0) == 10u);
  BOOST_TEST(s.period(3) == 80u);
  // 10 + 20 + 40 + 80 = 150 samples: rebuilds at 0, 10, 30, 70 (and 150 is the end).
  const std::size_t dim = 4, neurons = 6, n = 150;
  nn::lsh_softmax_layer layer(dim, neurons, {.lsh = {.parts = 2, .tables = 2}, .rebuild = s});
  std::vector<float> p(layer.num_params()), x(n * dim, 0.5f);
  std::vector<std::int32_t> y(n, 1);
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  layer.init(hg::span<float>(p), 1);
  const auto rep = nn::train_lsh_layer(layer, hg::span<float>(p), hg::span<const float>(x),
                                       hg::span<const std::int32_t>(y), hg::span<const std::size_t>(order), 0.1f);
  BOOST_TEST(rep.rebuilds == 4u);
  BOOST_TEST(rep.samples == n);
  BOOST_CHECK_THROW(nn::rebuild_schedule{.growth = 0.5}.validate(), std::invalid_argument);
  BOOST_CHECK_THROW(nn::lsh_config{.bin_size = 3}.validate(), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
