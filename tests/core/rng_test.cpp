#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform.h>

#include "heterograd/core/rng.hpp"
#include "hg_test.hpp"

namespace hg = heterograd;

BOOST_AUTO_TEST_SUITE(rng)

// Known-answer vectors published with Random123 (kat_vectors): counter[4], key[2] -> out[4].
BOOST_AUTO_TEST_CASE(philox4x32_10_matches_the_published_known_answers) {
  struct kat {
    hg::philox_block ctr;
    std::uint32_t k0, k1;
    hg::philox_block expected;
  };
  const kat cases[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       0xffffffffu,
       0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       0xa4093822u,
       0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const auto& c : cases) {
    const auto out = hg::philox4x32<10>(c.ctr, c.k0, c.k1);
    for (int w = 0; w < 4; ++w) BOOST_TEST(out[w] == c.expected[w]);
  }
  // The same function is usable in constant expressions.
  static_assert(hg::philox4x32<10>(hg::philox_block{{0, 0, 0, 0}}, 0, 0)[0] == 0x6627e8d5u);
}

BOOST_AUTO_TEST_CASE(counter_rng_maps_seed_stream_and_counter_onto_philox_words) {
  const hg::counter_rng r(0x299f31d0a4093822ull, 0x0370734413198a2eull);
  const auto b = r.block(0x85a308d3243f6a88ull);
  BOOST_TEST(b[0] == 0xd16cfe09u);
  BOOST_TEST(b[3] == 0x24126ea1u);
}

BOOST_AUTO_TEST_CASE(draws_depend_only_on_seed_stream_and_index) {
  const hg::counter_rng a(42, 7), b(42, 7), c(43, 7), d(42, 8);
  int differ_seed = 0, differ_stream = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    BOOST_TEST(a.uniform(i) == b.uniform(i));
    BOOST_TEST(a.normal(i) == b.normal(i));
    differ_seed += a.bits32(i) != c.bits32(i);
    differ_stream += a.bits32(i) != d.bits32(i);
  }
  BOOST_TEST(differ_seed > 990);
  BOOST_TEST(differ_stream > 990);
  BOOST_TEST((a.substream(1) != a.substream(2)));
  BOOST_TEST((a.substream(1) == b.substream(1)));
}

BOOST_AUTO_TEST_CASE(uniform_draws_lie_in_their_interval_with_the_right_moments) {
  const hg::counter_rng r(hg_test::seed());
  const int n = 100000;
  double sum = 0, sum2 = 0;
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform(i);
    BOOST_REQUIRE(u >= 0.0);
    BOOST_REQUIRE(u < 1.0);
    const float f = r.uniform_float(i);
    BOOST_REQUIRE(f >= 0.0f);
    BOOST_REQUIRE(f < 1.0f);
    BOOST_REQUIRE(r.below(i, 7) < 7u);
    sum += u;
    sum2 += u * u;
  }
  // Mean 1/2 and variance 1/12, each within ~5 standard errors.
  const double mean = sum / n, var = sum2 / n - mean * mean;
  BOOST_TEST(std::abs(mean - 0.5) < 5 * std::sqrt(1.0 / 12 / n));
  BOOST_TEST(std::abs(var - 1.0 / 12) < 0.002);
}

BOOST_AUTO_TEST_CASE(normal_family_draws_match_their_theoretical_means) {
  const hg::counter_rng r(hg_test::seed(), 3);
  const int n = 100000;
  double s_norm = 0, s_norm2 = 0, s_half = 0, s_exp = 0, s_logn = 0;
  const double sigma = 2.5, lambda = 4.0, mu = 0.1, ls = 0.3;
  for (int i = 0; i < n; ++i) {
    const double z = r.normal(i);
    s_norm += z;
    s_norm2 += z * z;
    s_half += r.half_normal(i, sigma);
    s_exp += r.exponential(i, lambda);
    s_logn += r.lognormal(i, mu, ls);
  }
  BOOST_TEST(std::abs(s_norm / n) < 5 / std::sqrt(double(n)));
  BOOST_TEST(std::abs(s_norm2 / n - 1.0) < 0.02);
  // Half-normal mean sigma*sqrt(2/pi) within 1% (the simulator's noise model relies on it).
  const double half_mean = sigma * std::sqrt(2.0 / std::numbers::pi);
  BOOST_TEST(std::abs(s_half / n - half_mean) < 0.01 * half_mean);
  BOOST_TEST(std::abs(s_exp / n - 1.0 / lambda) < 0.02 / lambda);
  const double logn_mean = std::exp(mu + ls * ls / 2);
  BOOST_TEST(std::abs(s_logn / n - logn_mean) < 0.01 * logn_mean);
}

BOOST_AUTO_TEST_CASE(permutation_is_a_permutation_and_is_reproducible) {
  const hg::counter_rng r(hg_test::seed(), 11);
  for (std::size_t n : {0u, 1u, 2u, 17u, 1000u}) {
    std::vector<int> p(n), q(n);
    r.permutation(p.begin(), p.end());
    r.permutation(q.begin(), q.end());
    BOOST_TEST(p == q);
    std::vector<int> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> iota(n);
    std::iota(iota.begin(), iota.end(), 0);
    BOOST_TEST(sorted == iota);
  }
  // Every position is reachable: over many streams, element 0 lands everywhere among 5 slots.
  std::vector<int> hits(5, 0);
  for (std::uint64_t s = 0; s < 2000; ++s) {
    std::vector<int> p(5);
    hg::counter_rng(s).permutation(p.begin(), p.end());
    hits[std::find(p.begin(), p.end(), 0) - p.begin()]++;
  }
  for (int h : hits) BOOST_TEST(std::abs(h - 400) < 100);
}

namespace {
struct draw_fn {
  hg::counter_rng r;
  HG_HOST_DEVICE double operator()(std::uint64_t i) const { return r.normal(i) + r.uniform(i); }
};
}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(backend_draws_equal_host_draws_bitwise, B, hg_test::backends) {
  const hg::counter_rng r(hg_test::seed(), 5);
  const std::size_t n = 4097;
  typename B::template vector<double> out(n, hg_test::poison<double>());
  thrust::transform(B::policy(), thrust::counting_iterator<std::uint64_t>(0),
                    thrust::counting_iterator<std::uint64_t>(n), out.begin(), draw_fn{r});
  const auto h = hg_test::to_host(out);
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < n; ++i) {
    // Device math libraries may round log/cos differently: CUDA is held to 1 ulp-ish.
    const double ref = draw_fn{r}(i);
    if (B::name == std::string("cuda") ? std::abs(h[i] - ref) > 1e-12 : h[i] != ref) ++mismatches;
  }
  BOOST_TEST(mismatches == 0u, "backend " << B::name);
}

BOOST_AUTO_TEST_SUITE_END()
