// Reductions (against double references, and bitwise determinism across thread counts), clip
// by global norm, 16-bit casts and top-k selection.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include <boost/test/unit_test.hpp>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "heterograd/kernels/cast.hpp"
#include "heterograd/kernels/clip.hpp"
#include "heterograd/kernels/reduce.hpp"
#include "heterograd/kernels/select.hpp"
#include "kernel_test_util.hpp"

namespace hg = heterograd;
namespace hk = heterograd::kernels;

namespace {

std::uint64_t bits_of(double x) {
  return std::bit_cast<std::uint64_t>(x);
}

template <class B, class T>
void check_reductions() {
  for (std::size_t n : kt::sizes) {
    auto hx = kt::random_vector<T>(n, 80), hy = kt::random_vector<T>(n, 81);
    auto x = kt::to_backend<B>(hx);
    auto y = kt::to_backend<B>(hy);
    long double dot = 0, ss = 0;
    double mx = 0;
    for (std::size_t i = 0; i < n; ++i) {
      dot += static_cast<long double>(hx[i]) * hy[i];
      ss += static_cast<long double>(hx[i]) * hx[i];
      mx = std::max(mx, std::abs(double(hx[i])));
    }
    // Double accumulation of n products: error below n * 2^-53 relative to sum |x y|.
    const double bound = 1e-13 * (1.0 + static_cast<double>(n) * 1e-3);
    BOOST_TEST(std::abs(hk::dot(B::policy(), kt::cspan_of<B>(x), kt::cspan_of<B>(y)) -
                        double(dot)) <= bound * (1 + double(n)));
    BOOST_TEST(std::abs(hk::l2_norm(B::policy(), kt::cspan_of<B>(x)) - std::sqrt(double(ss))) <=
               bound * (1 + std::sqrt(double(ss))));
    BOOST_TEST(hk::max_abs(B::policy(), kt::cspan_of<B>(x)) == mx);
    BOOST_TEST(hk::all_finite(B::policy(), kt::cspan_of<B>(x)));
    if (n > 0) {
      // A single non-finite element anywhere is found.
      for (T bad : {std::numeric_limits<T>::infinity(), -std::numeric_limits<T>::infinity(),
                    std::numeric_limits<T>::quiet_NaN()}) {
        auto hb = hx;
        hb[n - 1 - n / 3] = bad;
        auto b = kt::to_backend<B>(hb);
        BOOST_TEST(!hk::all_finite(B::policy(), kt::cspan_of<B>(b)));
      }
      auto hb = hx;
      hb[n / 2] = std::numeric_limits<T>::quiet_NaN();
      auto b = kt::to_backend<B>(hb);
      BOOST_TEST(std::isnan(hk::max_abs(B::policy(), kt::cspan_of<B>(b))));
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kernels_reduce)

BOOST_AUTO_TEST_CASE_TEMPLATE(reductions_match_the_double_reference, B, hg_test::backends) {
  check_reductions<B, float>();
  check_reductions<B, double>();
}

BOOST_AUTO_TEST_CASE_TEMPLATE(global_norm_is_the_norm_of_the_concatenation, B, hg_test::backends) {
  std::vector<std::vector<float>> h = {kt::random_vector<float>(8193, 90),
                                       kt::random_vector<float>(0, 91),
                                       kt::random_vector<float>(17, 92)};
  std::vector<typename B::template vector<float>> d;
  for (auto& v : h) d.push_back(kt::to_backend<B>(v));
  std::vector<hg::span<const float, typename B::space>> list;
  for (auto& v : d) list.push_back(kt::cspan_of<B>(v));
  double ss = 0;
  for (auto& v : h)
    for (float x : v) ss += double(x) * x;
  BOOST_TEST(std::abs(hk::global_norm(B::policy(), list) - std::sqrt(ss)) <= 1e-12 * std::sqrt(ss));
}

#if defined(_OPENMP)
BOOST_AUTO_TEST_CASE(omp_reductions_are_bitwise_equal_with_1_and_2_threads) {
  const int saved = omp_get_max_threads();
  for (std::size_t n : {std::size_t{8193}, std::size_t{5 * 8192 + 3}, std::size_t{1000003}}) {
    auto hx = kt::random_vector<float>(n, 95, -1e3, 1e3), hy = kt::random_vector<float>(n, 96);
    const hg::span<const float> x(hx), y(hy);
    std::array<std::array<std::uint64_t, 4>, 2> r{};
    for (int t = 1; t <= 2; ++t) {
      omp_set_num_threads(t);
      r[t - 1] = {
          bits_of(hk::dot(thrust::omp::par, x, y)), bits_of(hk::l2_norm(thrust::omp::par, x)),
          bits_of(hk::max_abs(thrust::omp::par, x)), bits_of(hk::sum_squares(thrust::omp::par, y))};
    }
    omp_set_num_threads(saved);
    BOOST_TEST(r[0] == r[1]);
    // And the sequential backend runs the same chunks and tree.
    BOOST_TEST(bits_of(hk::dot(thrust::cpp::par, x, y)) == r[0][0]);
  }
}
#endif

BOOST_AUTO_TEST_CASE_TEMPLATE(clip_by_global_norm_scales_only_above_the_threshold, B,
                              hg_test::backends) {
  auto ha = kt::random_vector<double>(8193, 97), hb = kt::random_vector<double>(5, 98);
  auto a = kt::to_backend<B>(ha);
  auto b = kt::to_backend<B>(hb);
  std::vector<hg::span<double, typename B::space>> list = {kt::span_of<B>(a), kt::span_of<B>(b)};
  double ss = 0;
  for (double x : ha) ss += x * x;
  for (double x : hb) ss += x * x;
  const double norm = std::sqrt(ss);
  // Above: everything scaled by max/norm, new global norm = max.
  BOOST_TEST(std::abs(hk::clip_by_global_norm(B::policy(), list, norm / 4) - norm) <= 1e-12 * norm);
  BOOST_TEST(std::abs(hk::global_norm(B::policy(), list) - norm / 4) <= 1e-12 * norm);
  const auto ca = hg_test::to_host(a);
  std::vector<double> ref(ha.size());
  for (std::size_t i = 0; i < ha.size(); ++i) ref[i] = ha[i] * ((norm / 4) / norm);
  kt::check_close(ca, ref, 1e-14, "clip");
  // Below: untouched bitwise.
  hk::clip_by_global_norm(B::policy(), list, norm);
  BOOST_TEST(hg_test::to_host(a) == ca);
  BOOST_CHECK_THROW(hk::clip_by_global_norm(B::policy(), list, 0.0), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(kernels_cast)

// Independent reference: the exact rational value of a 16-bit pattern, then the nearest of
// all finite candidates with ties to the even pattern.
double fp16_value(std::uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0) return s * std::ldexp(m, -24);
  if (e == 31)
    return m ? std::numeric_limits<double>::quiet_NaN()
             : s * std::numeric_limits<double>::infinity();
  return s * std::ldexp(1024 + m, e - 25);
}

std::uint16_t fp16_reference(float f) {
  if (std::isnan(f)) return 0x7e00;
  const double x = f;
  const double mag = std::abs(x);
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (mag >= 65520.0) return sign | 0x7c00;
  // Binary search over the monotone positive patterns 0..0x7bff.
  std::uint16_t lo = 0, hi = 0x7bff;
  while (hi - lo > 1) {
    const std::uint16_t mid = static_cast<std::uint16_t>((lo + hi) / 2);
    if (fp16_value(mid) <= mag)
      lo = mid;
    else
      hi = mid;
  }
  const double dl = mag - fp16_value(lo), dh = fp16_value(hi) - mag;
  std::uint16_t r = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
  if (mag < fp16_value(lo)) r = lo;
  return sign | r;
}

std::uint16_t bf16_reference(float f) {
  if (std::isnan(f)) return 0x7fc0;
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t lo = static_cast<std::uint16_t>(u >> 16);
  const float a = std::bit_cast<float>(static_cast<std::uint32_t>(lo) << 16);
  // The next pattern up; past the largest finite value it stands for 2^128 (IEEE rounding
  // with an unbounded exponent decides overflow).
  const std::uint32_t nb = static_cast<std::uint32_t>(lo + 1) << 16;
  const double b = ((nb & 0x7f800000u) == 0x7f800000u) ? std::copysign(std::ldexp(1.0, 128), f)
                                                       : double(std::bit_cast<float>(nb));
  const double da = std::abs(double(f) - a), db = std::abs(b - f);
  return da < db   ? lo
         : db < da ? static_cast<std::uint16_t>(lo + 1)
                   : ((lo & 1) ? static_cast<std::uint16_t>(lo + 1) : lo);
}

BOOST_AUTO_TEST_CASE(every_fp16_and_bf16_pattern_survives_a_round_trip_through_float) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const hk::fp16 h{static_cast<std::uint16_t>(b)};
    const float f = hk::to_float(h);
    if (std::isnan(f)) {
      BOOST_TEST(std::isnan(hk::to_float(hk::to_fp16(f))));
    } else {
      BOOST_TEST_REQUIRE(hk::to_fp16(f).bits == h.bits);
      BOOST_TEST_REQUIRE(double(f) == fp16_value(h.bits));
    }
    const hk::bf16 g{static_cast<std::uint16_t>(b)};
    const float fg = hk::to_float(g);
    if (!std::isnan(fg)) BOOST_TEST_REQUIRE(hk::to_bf16(fg).bits == g.bits);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(casts_round_to_nearest_even, B, hg_test::backends) {
  // Random floats over the whole exponent range, halfway cases, and specials.
  std::mt19937 gen(static_cast<std::uint32_t>(hg_test::seed()));
  std::vector<float> hf;
  for (int i = 0; i < 20000; ++i) {
    float f = std::bit_cast<float>(static_cast<std::uint32_t>(gen()));
    if (i % 2)
      f = std::ldexp(std::uniform_real_distribution<float>(-2, 2)(gen), int(gen() % 40) - 30);
    hf.push_back(f);
  }
  for (std::uint32_t h : {0x0001u, 0x03ffu, 0x0400u, 0x3c00u, 0x7bfeu}) {  // fp16 halfway points
    const double mid = (fp16_value(static_cast<std::uint16_t>(h)) +
                        fp16_value(static_cast<std::uint16_t>(h + 1))) /
                       2;
    hf.push_back(static_cast<float>(mid));
    hf.push_back(-static_cast<float>(mid));
  }
  for (std::uint32_t u : {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x00000001u})  // bf16 ties
    hf.push_back(std::bit_cast<float>(u));
  for (float s : {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 2.98023224e-8f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()})
    hf.push_back(s);
  auto f = kt::to_backend<B>(hf);
  typename B::template vector<hk::fp16> h(hf.size(), hk::fp16{0x5a5a});
  typename B::template vector<hk::bf16> g(hf.size(), hk::bf16{0x5a5a});
  hk::cast(B::policy(), kt::cspan_of<B>(f), kt::span_of<B>(h));
  hk::cast(B::policy(), kt::cspan_of<B>(f), kt::span_of<B>(g));
  const auto hh = hg_test::to_host(h);
  const auto hgv = hg_test::to_host(g);
  std::size_t bad16 = 0, badbf = 0;
  for (std::size_t i = 0; i < hf.size(); ++i) {
    if (std::isnan(hf[i])) {
      bad16 += !std::isnan(hk::to_float(hh[i]));
      badbf += !std::isnan(hk::to_float(hgv[i]));
      continue;
    }
    bad16 += hh[i].bits != fp16_reference(hf[i]);
    badbf += hgv[i].bits != bf16_reference(hf[i]);
  }
  BOOST_TEST(bad16 == 0u);
  BOOST_TEST(badbf == 0u);
#if defined(__FLT16_MAX__) && !defined(__CUDACC__)
  // The compiler's own _Float16 conversion agrees (it rounds to nearest even too).
  for (std::size_t i = 0; i < hf.size(); ++i) {
    if (std::isnan(hf[i])) continue;
    const _Float16 c = static_cast<_Float16>(hf[i]);
    std::uint16_t cb;
    std::memcpy(&cb, &c, 2);
    BOOST_TEST_REQUIRE(hh[i].bits == cb);
  }
#endif
  // Back to float: exact.
  typename B::template vector<float> back(hf.size(), hg_test::poison<float>());
  hk::cast(B::policy(), kt::cspan_of<B>(h), kt::span_of<B>(back));
  const auto hb = hg_test::to_host(back);
  for (std::size_t i = 0; i < hf.size(); ++i) {
    if (std::isnan(hf[i])) continue;
    BOOST_TEST_REQUIRE(std::bit_cast<std::uint32_t>(hb[i]) ==
                       std::bit_cast<std::uint32_t>(hk::to_float(hh[i])));
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(kernels_select)

BOOST_AUTO_TEST_CASE_TEMPLATE(top_k_and_partial_top_k_return_the_best_scores_in_order, B,
                              hg_test::backends) {
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{8193}, std::size_t{50000}}) {
    // Few distinct values, so many ties (broken by lower index), and a few NaNs (last).
    auto hs = kt::random_vector<float>(n, 110, 0, 20);
    for (auto& x : hs) x = std::floor(x);
    for (std::size_t i = 3; i < n; i += 997) hs[i] = std::numeric_limits<float>::quiet_NaN();
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      const bool na = std::isnan(hs[a]), nb = std::isnan(hs[b]);
      if (na != nb) return nb;
      return !na && hs[a] > hs[b];
    });
    auto s = kt::to_backend<B>(hs);
    for (std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{5}, n / 2, n}) {
      if (k > n) continue;
      typename B::template vector<std::size_t> out(k, 0x5a5a5a5a), out2(k, 0x5a5a5a5a);
      hk::top_k(B::policy(), kt::cspan_of<B>(s), kt::span_of<B>(out));
      hk::partial_top_k(B::policy(), kt::cspan_of<B>(s), kt::span_of<B>(out2));
      const std::vector<std::size_t> want(order.begin(), order.begin() + static_cast<long>(k));
      BOOST_TEST(hg_test::to_host(out) == want);
      BOOST_TEST(hg_test::to_host(out2) == want);
    }
    typename B::template vector<std::size_t> too_many(n + 1);
    BOOST_CHECK_THROW(hk::top_k(B::policy(), kt::cspan_of<B>(s), kt::span_of<B>(too_many)),
                      std::invalid_argument);
  }
}

BOOST_AUTO_TEST_SUITE_END()
