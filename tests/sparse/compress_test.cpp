// Compression codecs: decode(encode(x)) bounds per codec, the exact error-feedback identity
// (sum of decoded messages over T rounds = sum of inputs - final residual), the compressed
// transport (same result on every rank, checkpoint/restore of its state, wire bytes), and the
// simulator's charge for compressed sizes.

#include <cmath>
#include <cstdint>
#include <mutex>
#include <numeric>
#include <sstream>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "hg_test.hpp"
#include "heterograd/comm/concepts.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/compress/accounting.hpp"
#include "heterograd/compress/codecs.hpp"
#include "heterograd/compress/error_feedback.hpp"
#include "heterograd/core/rng.hpp"

namespace hg = heterograd;
namespace hc = heterograd::comm;
namespace hi = heterograd::comm::inproc;
namespace cz = heterograd::compress;

namespace {

std::vector<float> normal_vector(std::uint64_t seed, std::uint64_t stream, std::size_t n, double sd = 1.0) {
  const hg::counter_rng rng(seed, stream);
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(rng.normal(i, 0.0, sd));
  return x;
}

// Multiples of 2^-12 in [-4, 4]: sums of a few stay exact in float.
std::vector<float> grid_vector(std::uint64_t seed, std::uint64_t stream, std::size_t n) {
  const hg::counter_rng rng(seed, stream);
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = std::ldexp(static_cast<float>(static_cast<std::int64_t>(rng.below(i, 1u << 15)) - (1 << 14)), -12);
  return x;
}

template <class C>
std::vector<float> round_trip(const C& c, const std::vector<float>& x) {
  auto s = c.init(x.size());
  std::vector<std::uint32_t> msg(c.message_words(x.size()));
  c.encode(hg::span<const float>(x), s, hg::span<std::uint32_t>(msg));
  std::vector<float> d(x.size(), hg_test::poison<float>());
  c.decode(hg::span<const std::uint32_t>(msg), s, hg::span<float>(d));
  return d;
}

double sq_norm(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return s;
}
double sq_dist(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
  return s;
}

// T rounds of error feedback on one rank (op sum: the result is this rank's decoded
// message). Checks sum_t d_t == sum_t x_t - e_T exactly, accumulating in R.
template <class R, class C>
void check_identity(const C& c, std::size_t n, int rounds, bool grid) {
  const auto seed = hg_test::seed();
  hi::spawn(1, [&](hi::communicator comm) {
    auto st = cz::init_error_feedback<R>(c, n);
    std::vector<R> sum_x(n, R(0)), sum_d(n, R(0));
    for (int t = 0; t < rounds; ++t) {
      auto x = grid ? grid_vector(seed, static_cast<std::uint64_t>(t), n)
                    : normal_vector(seed, static_cast<std::uint64_t>(t), n);
      for (std::size_t i = 0; i < n; ++i) sum_x[i] += static_cast<R>(x[i]);
      cz::compressed_allreduce(comm, c, st, hg::span<float>(x), hc::reduce_op::sum);
      for (std::size_t i = 0; i < n; ++i) sum_d[i] += static_cast<R>(x[i]);
    }
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += sum_d[i] != sum_x[i] - st.residual[i];
    BOOST_TEST_INFO("codec " << c.name());
    BOOST_TEST(bad == 0u);
    // The residual is not trivially zero: compression happened.
    BOOST_TEST(std::any_of(st.residual.begin(), st.residual.end(), [](R v) { return v != R(0); }));
  });
}

}  // namespace

BOOST_AUTO_TEST_SUITE(codecs)

BOOST_AUTO_TEST_CASE(fp16_and_bf16_round_within_half_an_ulp) {
  auto x = normal_vector(hg_test::seed(), 1, 1001, 100.0);
  x[3] = 1e-6f;  // fp16 subnormal range
  x[4] = 0.0f;
  const auto h = round_trip(cz::fp16_codec{}, x);
  const auto b = round_trip(cz::bf16_codec{}, x);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double a = std::fabs(x[i]);
    const double fp16_bound = a >= std::ldexp(1.0, -14) ? std::ldexp(a, -11) : std::ldexp(1.0, -25);
    BOOST_TEST(std::fabs(static_cast<double>(h[i]) - x[i]) <= fp16_bound);
    BOOST_TEST(std::fabs(static_cast<double>(b[i]) - x[i]) <= std::ldexp(a, -8));
  }
  BOOST_TEST(cz::fp16_codec{}.message_words(1001) == 501u);  // 2 bytes an element
}

BOOST_AUTO_TEST_CASE(top_k_keeps_the_k_largest_magnitudes_and_bounds_the_error) {
  for (double ratio : {0.01, 0.1, 0.5, 1.0}) {
    const std::size_t n = 2000;
    const auto x = normal_vector(hg_test::seed(), 2, n);
    const cz::top_k_codec c(ratio);
    const std::size_t k = c.k(n);
    BOOST_TEST(k == static_cast<std::size_t>(std::ceil(ratio * n - 1e-9)));
    const auto d = round_trip(c, x);
    std::size_t kept = 0;
    float smallest_kept = INFINITY, largest_dropped = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (d[i] != 0.0f) {
        ++kept;
        BOOST_TEST(d[i] == x[i]);
        smallest_kept = std::min(smallest_kept, std::fabs(x[i]));
      } else {
        largest_dropped = std::max(largest_dropped, std::fabs(x[i]));
      }
    }
    BOOST_TEST(kept == k);
    BOOST_TEST(smallest_kept >= largest_dropped);
    BOOST_TEST(sq_dist(x, d) <= (1.0 - static_cast<double>(k) / n) * sq_norm(x) * (1 + 1e-12));
  }
}

BOOST_AUTO_TEST_CASE(random_k_keeps_k_entries_drawn_the_same_on_every_rank) {
  const std::size_t n = 3000;
  const cz::random_k_codec c(0.05, hg_test::seed());
  const auto x = normal_vector(hg_test::seed(), 3, n);
  const auto d = round_trip(c, x);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    BOOST_TEST((d[i] == x[i] || d[i] == 0.0f));
    kept += d[i] != 0.0f;
  }
  BOOST_TEST(kept == c.k(n));
  BOOST_TEST(sq_dist(x, d) <= sq_norm(x));
  // Same (seed, round) -> same indices; another round -> another set.
  BOOST_TEST(c.indices(n, 4) == c.indices(n, 4));
  BOOST_TEST(c.indices(n, 4) != c.indices(n, 5));
  const auto idx = c.indices(n, 7);
  BOOST_TEST((std::adjacent_find(idx.begin(), idx.end()) == idx.end()));  // distinct (sorted)
}

BOOST_AUTO_TEST_CASE(sign_codec_error_equals_the_closed_form_for_both_scales) {
  const std::size_t n = 777;
  auto x = normal_vector(hg_test::seed(), 4, n);
  x[10] = 0.0f;
  double l1 = 0;
  for (float v : x) l1 += std::fabs(v);
  for (auto kind : {cz::sign_scale::rms, cz::sign_scale::l1}) {
    const cz::sign_codec c{kind};
    const auto d = round_trip(c, x);
    const double s = std::fabs(d[0]);
    const double expected_s = kind == cz::sign_scale::rms ? std::sqrt(sq_norm(x) / n) : l1 / n;
    BOOST_TEST(s == expected_s, boost::test_tools::tolerance(1e-6));
    for (std::size_t i = 0; i < n; ++i) BOOST_TEST(std::fabs(d[i]) == s);
    BOOST_TEST(d[10] > 0.0f);  // sign(0) = +1
    // ||x - s sign x||^2 = ||x||^2 - 2 s ||x||_1 + n s^2.
    BOOST_TEST(sq_dist(x, d) == sq_norm(x) - 2 * s * l1 + n * s * s, boost::test_tools::tolerance(1e-5));
    BOOST_TEST(c.message_words(n) == 1 + (n + 31) / 32);
  }
  // The l1 scale minimises the error: it never does worse than rms.
  BOOST_TEST(sq_dist(x, round_trip(cz::sign_codec{cz::sign_scale::l1}, x)) <=
             sq_dist(x, round_trip(cz::sign_codec{cz::sign_scale::rms}, x)) * (1 + 1e-9));
}

BOOST_AUTO_TEST_CASE(powersgd_projects_and_recovers_a_rank_r_matrix) {
  const std::size_t rows = 40, cols = 30;
  for (std::size_t r : {1u, 2u, 4u}) {
    // A rank-r matrix: sum of r outer products.
    const auto u = normal_vector(hg_test::seed(), 5, rows * r), v = normal_vector(hg_test::seed(), 6, cols * r);
    std::vector<float> m(rows * cols, 0.0f);
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < cols; ++j)
        for (std::size_t k = 0; k < r; ++k) m[i * cols + j] += u[i * r + k] * v[j * r + k];
    const cz::powersgd_codec c(r, cols, hg_test::seed());
    const auto d = round_trip(c, m);
    BOOST_TEST_INFO("rank " << r);
    BOOST_TEST(std::sqrt(sq_dist(m, d)) <= 1e-4 * std::sqrt(sq_norm(m)));
    BOOST_TEST(c.message_words(rows * cols) == (rows + cols) * r);
  }
  // A full-rank input: d is an orthogonal projection, ||d||^2 + ||x - d||^2 = ||x||^2.
  const auto x = normal_vector(hg_test::seed(), 7, 1024);  // 32 x 32: no padding
  const cz::powersgd_codec c(2, 0, 3);
  const auto d = round_trip(c, x);
  BOOST_TEST(sq_norm(d) + sq_dist(x, d) == sq_norm(x), boost::test_tools::tolerance(1e-4));
  BOOST_TEST(sq_dist(x, d) <= sq_norm(x));
}

BOOST_AUTO_TEST_CASE(powersgd_warm_start_converges_to_the_best_rank_r_approximation) {
  // Compressing the same matrix again and again with a warm start is subspace iteration: the
  // error falls to that of the best rank-r approximation (Eckart-Young: the sum of the
  // squared singular values beyond r), which no round can beat.
  const std::size_t rows = 20, cols = 20;
  std::vector<float> m(rows * cols);
  for (std::size_t i = 0; i < rows; ++i) m[i * cols + i] = std::ldexp(1.0f, -static_cast<int>(i));
  double tail = 0;  // singular values 1, 1/2, 1/4, ...: the best rank-1 error
  for (std::size_t i = 1; i < rows; ++i) tail += std::ldexp(1.0, -2 * static_cast<int>(i));
  const cz::powersgd_codec warm(1, cols, hg_test::seed(), true);
  auto sw = warm.init(m.size());
  std::vector<std::uint32_t> msg(warm.message_words(m.size()));
  std::vector<float> d(m.size());
  double err = 0;
  for (int t = 0; t < 30; ++t) {
    warm.encode(hg::span<const float>(m), sw, hg::span<std::uint32_t>(msg));
    warm.decode(hg::span<const std::uint32_t>(msg), sw, hg::span<float>(d));
    err = sq_dist(m, d);
    BOOST_TEST(err >= tail * (1 - 1e-5));
  }
  BOOST_TEST(err == tail, boost::test_tools::tolerance(1e-4));
  BOOST_TEST(sw.round == 30u);
}

BOOST_AUTO_TEST_CASE(error_feedback_loses_nothing_sum_of_decoded_equals_inputs_minus_residual_exactly) {
  // Float residuals where every operation is exact on the grid (selection and rounding codecs);
  // long double where the codec's arithmetic rounds (scales, projections).
  check_identity<float>(cz::top_k_codec(0.01), 1500, 20, true);
  check_identity<float>(cz::random_k_codec(0.02, 9), 1500, 20, true);
  check_identity<float>(cz::fp16_codec{}, 1500, 20, true);
  check_identity<float>(cz::bf16_codec{}, 1500, 20, true);
  check_identity<long double>(cz::sign_codec{cz::sign_scale::rms}, 1500, 20, true);
  check_identity<long double>(cz::sign_codec{cz::sign_scale::l1}, 1500, 20, true);
  check_identity<long double>(cz::powersgd_codec(2, 0, 5), 1500, 20, true);
  check_identity<long double>(cz::top_k_codec(0.05), 1500, 20, false);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(compressed_transport)

using topk_transport = cz::compressed_transport<hi::communicator, cz::top_k_codec>;
static_assert(hc::transport<topk_transport>);
static_assert(hc::transport<cz::compressed_transport<hi::communicator, cz::powersgd_codec, double>>);

BOOST_AUTO_TEST_CASE(every_rank_gets_the_same_average_and_the_aggregate_identity_holds) {
  const int n = 3;
  const std::size_t m = 4000;
  const int rounds = 12;
  const auto seed = hg_test::seed();
  std::mutex mu;
  std::vector<std::vector<float>> results(n);
  std::vector<std::vector<float>> residuals(n);
  std::vector<double> sum_in(m, 0.0), sum_out(m, 0.0);
  hi::spawn(n, [&](hi::communicator comm) {
    topk_transport t(comm, cz::top_k_codec(0.01));
    std::vector<float> buf(m), acc_out(m, 0.0f);
    std::vector<double> in(m, 0.0), out(m, 0.0);
    for (int r = 0; r < rounds; ++r) {
      const auto x = grid_vector(seed, static_cast<std::uint64_t>(100 * comm.rank() + r), m);
      std::copy(x.begin(), x.end(), buf.begin());
      for (std::size_t i = 0; i < m; ++i) in[i] += x[i];
      t.allreduce(hg::span<float>(buf), hc::allreduce_options{.op = hc::reduce_op::sum}).wait();
      for (std::size_t i = 0; i < m; ++i) out[i] += buf[i];
    }
    const auto st = t.state();
    std::lock_guard<std::mutex> l(mu);
    results[comm.rank()] = buf;
    residuals[comm.rank()] = st.at(0).residual;
    for (std::size_t i = 0; i < m; ++i) sum_in[i] += in[i];
    if (comm.rank() == 0) sum_out = out;
  });
  for (int r = 1; r < n; ++r) BOOST_TEST(results[r] == results[0], boost::test_tools::per_element());
  // sum over rounds of the summed messages = sum of all inputs - sum of the final residuals.
  std::size_t bad = 0;
  for (std::size_t i = 0; i < m; ++i) {
    double res = 0;
    for (int r = 0; r < n; ++r) res += residuals[r][i];
    bad += sum_out[i] != sum_in[i] - res;
  }
  BOOST_TEST(bad == 0u);
}

BOOST_AUTO_TEST_CASE(a_restored_checkpoint_continues_bit_for_bit) {
  const std::size_t m = 1000;
  const auto seed = hg_test::seed();
  std::mutex mu;
  bool same = true;
  hi::spawn(2, [&](hi::communicator comm) {
    auto run = [&](auto& t, std::vector<float>& buf, int from, int to) {
      for (int r = from; r < to; ++r) {
        const auto x = normal_vector(seed, static_cast<std::uint64_t>(10 * comm.rank() + r), m);
        for (std::size_t i = 0; i < m; ++i) buf[i] = x[i];
        t.allreduce(hg::span<float>(buf), hc::allreduce_options{}).wait();
      }
    };
    using T = cz::compressed_transport<hi::communicator, cz::powersgd_codec>;
    T a(comm, cz::powersgd_codec(2, 0, seed));
    std::vector<float> buf(m), again(m);
    run(a, buf, 0, 5);
    const T::state_type checkpoint = a.state();
    run(a, buf, 5, 9);
    T b(comm, cz::powersgd_codec(2, 0, seed));
    b.restore(checkpoint);
    run(b, again, 5, 9);
    std::lock_guard<std::mutex> l(mu);
    same = same && buf == again && a.state() == b.state();
  });
  BOOST_TEST(same);
}

BOOST_AUTO_TEST_CASE(wire_bytes_follow_the_codec_plan_and_the_simulator_charges_them) {
  const std::size_t m = 10000;
  const int n = 4;
  std::mutex mu;
  cz::wire_stats stats;
  hi::spawn(n, [&](hi::communicator comm) {
    topk_transport t(comm, cz::top_k_codec(0.01));
    std::vector<float> buf(m, 1.0f);
    std::vector<double> other(3, 1.0);
    for (int r = 0; r < 3; ++r) t.allreduce(hg::span<float>(buf)).wait();
    t.allreduce(hg::span<double>(other)).wait();  // not float: passes through uncompressed
    std::lock_guard<std::mutex> l(mu);
    if (comm.rank() == 0) stats = t.stats();
  });
  // Per round: allgather of k = 100 (index, value) pairs = 800 bytes to 3 peers = 2400 bytes,
  // against 2 (n-1)/n 40000 = 60000 bytes for the dense ring allreduce.
  BOOST_TEST(stats.rounds == 3u);
  BOOST_TEST(stats.wire_bytes == 3 * 2400.0);
  BOOST_TEST(stats.dense_bytes == 3 * 60000.0);
  BOOST_TEST(stats.ratio() == 0.04, boost::test_tools::tolerance(1e-12));

  const hg::sim::network net({1e-6, 10e9}, {20e-6, 1e9}, 1);
  const auto plan = cz::top_k_codec(0.01).plan(m);
  const auto c = cz::network_cost(net, n, plan);
  // Ring allgather of 4 x 800 bytes over the inter-node link: 3 alpha + 3/4 3200 / beta.
  BOOST_TEST(c.seconds == 3 * 20e-6 + 0.75 * 3200 / 1e9, boost::test_tools::tolerance(1e-12));
  const auto dense = cz::dense_network_cost(net, n, m);
  BOOST_TEST(dense.seconds == 6 * 20e-6 + 1.5 * 40000 / 1e9, boost::test_tools::tolerance(1e-12));
  const auto ps = cz::network_cost(net, n, cz::powersgd_codec(2), m);  // 100 x 100, r = 2
  BOOST_TEST(ps.seconds == 2 * (6 * 20e-6 + 1.5 * 800 / 1e9), boost::test_tools::tolerance(1e-12));

  hg::sim::recorder rec(n);
  cz::record(rec, stats, "topk");
  std::ostringstream os;
  rec.write_json(os);
  BOOST_TEST(os.str().find("topk.wire_bytes") != std::string::npos);
  BOOST_TEST(os.str().find("7200") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(bad_arguments_throw_invalid_argument) {
  BOOST_CHECK_THROW(cz::top_k_codec(0.0), std::invalid_argument);
  BOOST_CHECK_THROW(cz::random_k_codec(1.5), std::invalid_argument);
  BOOST_CHECK_THROW(cz::powersgd_codec(0), std::invalid_argument);
  hi::spawn(1, [](hi::communicator comm) {
    auto st = cz::init_error_feedback(cz::fp16_codec{}, 5);
    std::vector<float> x(6);
    BOOST_CHECK_THROW(cz::compressed_allreduce(comm, cz::fp16_codec{}, st, hg::span<float>(x)),
                      std::invalid_argument);
    std::vector<float> y(5);
    BOOST_CHECK_THROW(cz::compressed_allreduce(comm, cz::fp16_codec{}, st, hg::span<float>(y), hc::reduce_op::max),
                      std::invalid_argument);
  });
}

BOOST_AUTO_TEST_SUITE_END()
