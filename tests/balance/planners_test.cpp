// The Cephalo-style planner, the cost-model planner and the pipeline-stage partitioner.
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/balance/cephalo.hpp"
#include "heterograd/balance/cost_model.hpp"
#include "heterograd/balance/pipeline.hpp"

namespace bal = heterograd::balance;

namespace {

/// Least step time over every (m1, a1, u1) x (m2, a2) of two devices (m_d·a_d summing to B,
/// u1 + u2 = U), checking memory directly; infinity when nothing fits.
double brute_force_two(const std::vector<bal::device_profile>& d,
                       const bal::training_memory_model& mm, std::size_t big_b,
                       std::size_t units) {
  double best = std::numeric_limits<double>::infinity();
  for (std::size_t m1 = 1; m1 <= big_b; ++m1) {
    for (std::size_t a1 = 1; m1 * a1 < big_b; ++a1) {
      const std::size_t rest = big_b - m1 * a1;
      for (std::size_t m2 = 1; m2 <= rest; ++m2) {
        if (rest % m2 != 0) continue;
        const std::size_t a2 = rest / m2;
        const double t = std::max(a1 * (d[0].seconds_per_micro_batch + m1 * d[0].seconds_per_sample),
                                  a2 * (d[1].seconds_per_micro_batch + m2 * d[1].seconds_per_sample));
        if (t >= best) continue;
        for (std::size_t u1 = 0; u1 <= units; ++u1) {
          if (bal::device_memory_bytes(d[0], mm, m1, u1, units) <= d[0].memory_bytes &&
              bal::device_memory_bytes(d[1], mm, m2, units - u1, units) <= d[1].memory_bytes) {
            best = t;
            break;
          }
        }
      }
    }
  }
  return best;
}

void check_plan(const bal::cephalo_plan& p, const std::vector<bal::device_profile>& d,
                const bal::training_memory_model& mm, std::size_t big_b, std::size_t units) {
  std::size_t samples = 0, shards = 0;
  double worst = 0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const auto& x = p.devices[i];
    BOOST_TEST(x.micro_batch >= 1u);
    BOOST_TEST(x.accumulation >= 1u);
    samples += x.micro_batch * x.accumulation;
    shards += x.shard_units;
    BOOST_TEST(x.memory_bytes ==
               bal::device_memory_bytes(d[i], mm, x.micro_batch, x.shard_units, units));
    BOOST_TEST(x.memory_bytes <= d[i].memory_bytes);  // never exceeds a device's memory
    worst = std::max(worst, x.compute_seconds);
  }
  BOOST_TEST(samples == big_b);
  BOOST_TEST(shards == units);
  BOOST_TEST(p.step_seconds == worst);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cephalo)

BOOST_AUTO_TEST_CASE(two_devices_match_a_brute_force_search_and_fit_in_memory) {
  // A fast device with little memory and a slow one with plenty: the fast one must use
  // small micro-batches with accumulation and hand most of the state to the slow one.
  const std::vector<bal::device_profile> d{
      {.seconds_per_sample = 1.0, .seconds_per_micro_batch = 0.5, .memory_bytes = 40,
       .reserved_bytes = 4},
      {.seconds_per_sample = 3.0, .seconds_per_micro_batch = 0.2, .memory_bytes = 100,
       .reserved_bytes = 4}};
  const bal::training_memory_model mm{.activation_bytes_per_sample = 6, .state_bytes = 60};
  const std::size_t big_b = 24, units = 20;
  const auto p = bal::plan_cephalo(d, mm, {.global_batch = big_b, .shard_units = units});
  BOOST_REQUIRE(p.has_value());
  check_plan(*p, d, mm, big_b, units);
  BOOST_TEST(p->step_seconds == brute_force_two(d, mm, big_b, units));
  // The fast device computes more samples than the slow one, in several micro-batches.
  const auto& f = p->devices[0];
  const auto& s = p->devices[1];
  BOOST_TEST(f.micro_batch * f.accumulation > s.micro_batch * s.accumulation);
  BOOST_TEST(f.accumulation > 1u);
  BOOST_TEST(s.shard_units > f.shard_units);
}

BOOST_AUTO_TEST_CASE(no_plan_when_the_state_fits_nowhere) {
  const std::vector<bal::device_profile> d{{1.0, 0, 10, 0}, {1.0, 0, 10, 0}};
  const bal::training_memory_model mm{.activation_bytes_per_sample = 1, .state_bytes = 19};
  BOOST_TEST(!bal::plan_cephalo(d, mm, {.global_batch = 4, .shard_units = 10}).has_value());
  // With room for the state and one sample each, it fits.
  const bal::training_memory_model small{.activation_bytes_per_sample = 1, .state_bytes = 17};
  const auto p = bal::plan_cephalo(d, small, {.global_batch = 4, .shard_units = 10});
  BOOST_REQUIRE(p.has_value());
  check_plan(*p, d, small, 4, 10);
}

BOOST_AUTO_TEST_CASE(equal_devices_split_evenly_and_limits_are_respected) {
  const std::vector<bal::device_profile> d(4, {.seconds_per_sample = 1, .memory_bytes = 1000});
  const bal::training_memory_model mm{.activation_bytes_per_sample = 10, .state_bytes = 100};
  const auto p = bal::plan_cephalo(
      d, mm, {.global_batch = 64, .max_micro_batch = 8, .max_accumulation = 4, .shard_units = 8});
  BOOST_REQUIRE(p.has_value());
  check_plan(*p, d, mm, 64, 8);
  BOOST_TEST(p->step_seconds == 16.0);
  for (const auto& x : p->devices) {
    BOOST_TEST(x.micro_batch <= 8u);
    BOOST_TEST(x.accumulation <= 4u);
    BOOST_TEST(x.shard_units == 2u);
  }
}

BOOST_AUTO_TEST_CASE(bad_input_throws) {
  const bal::training_memory_model mm{1, 1};
  BOOST_CHECK_THROW(bal::plan_cephalo(std::vector<bal::device_profile>{}, mm, {.global_batch = 4}),
                    std::invalid_argument);
  const std::vector<bal::device_profile> neg{{-1.0, 0, 10, 0}};
  BOOST_CHECK_THROW(bal::plan_cephalo(neg, mm, {.global_batch = 4}), std::invalid_argument);
  const std::vector<bal::device_profile> ok{{1.0, 0, 10, 0}, {1.0, 0, 10, 0}};
  BOOST_CHECK_THROW(bal::plan_cephalo(ok, mm, {.global_batch = 0}), std::invalid_argument);
  BOOST_CHECK_THROW(bal::plan_cephalo(ok, mm, {.global_batch = 1}), std::invalid_argument);
  BOOST_CHECK_THROW(bal::plan_cephalo(ok, {-1, 1}, {.global_batch = 4}), std::invalid_argument);
  BOOST_CHECK_THROW(bal::plan_cephalo(ok, mm, {.global_batch = 4, .shard_units = 0}),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(cost_model)

BOOST_AUTO_TEST_CASE(least_squares_recovers_an_exact_linear_model) {
  // y = 2 − 3 x + 0.5 x² on 6 points.
  std::vector<double> a, y;
  for (double x : {-2.0, -1.0, 0.0, 1.0, 2.5, 4.0}) {
    a.insert(a.end(), {1.0, x, x * x});
    y.push_back(2 - 3 * x + 0.5 * x * x);
  }
  const auto w = bal::least_squares(a, 3, y);
  BOOST_TEST(std::abs(w[0] - 2) < 1e-12);
  BOOST_TEST(std::abs(w[1] + 3) < 1e-12);
  BOOST_TEST(std::abs(w[2] - 0.5) < 1e-12);
  // Overdetermined and inconsistent: the residual is orthogonal to the columns.
  const std::vector<double> a2{1, 0, 1, 1, 1, 2, 1, 3};
  const std::vector<double> y2{1, 2, 2, 5};
  const auto w2 = bal::least_squares(a2, 2, y2);
  double r0 = 0, r1 = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    const double r = y2[i] - w2[0] - w2[1] * i;
    r0 += r;
    r1 += r * i;
  }
  BOOST_TEST(std::abs(r0) < 1e-12);
  BOOST_TEST(std::abs(r1) < 1e-12);
}

BOOST_AUTO_TEST_CASE(a_user_feature_set_fits_and_searches_local_steps) {
  // Time of a local-SGD round with H local steps and a sync: 0.2 + 0.05·H, and the loss
  // progress per second modelled elsewhere; here the planner just predicts the round time.
  auto feats = [](std::size_t h) { return std::array<double, 2>{1.0, static_cast<double>(h)}; };
  bal::cost_model<std::size_t, decltype(feats)> m(feats);
  m.observe(1, 0.25);
  m.observe(4, 0.40);
  m.observe(8, 0.60);
  m.fit();
  BOOST_TEST(std::abs(m.coefficients()[0] - 0.2) < 1e-12);
  BOOST_TEST(std::abs(m.coefficients()[1] - 0.05) < 1e-12);
  BOOST_TEST(std::abs(m.predict(20) - 1.2) < 1e-12);
  const std::vector<std::size_t> space{16, 3, 9};
  BOOST_TEST(m.best(space) == 3u);
}

BOOST_AUTO_TEST_CASE(bad_input_throws_before_any_state_change) {
  bal::cost_model<bal::stream_config, bal::streaming_features> m({.work = 100});
  BOOST_CHECK_THROW(m.fit(), std::invalid_argument);  // no samples
  BOOST_CHECK_THROW((void)m.predict({1, 1}), std::invalid_argument);  // not fitted
  BOOST_CHECK_THROW(m.observe({2, 2}, -1.0), std::invalid_argument);
  BOOST_CHECK_THROW(m.observe({2, 2}, NAN), std::invalid_argument);
  BOOST_TEST(m.samples() == 0u);
  // P = 1 everywhere: the columns 1 and P coincide, the fit is rank-deficient.
  for (std::size_t k = 1; k <= 6; ++k) m.observe({1, k}, 1.0 + k);
  BOOST_CHECK_THROW(m.fit(), std::invalid_argument);
  BOOST_TEST(!m.fitted());
  BOOST_CHECK_THROW(bal::least_squares(std::vector<double>{1, 2}, 2, std::vector<double>{1}),
                    std::invalid_argument);  // fewer rows than features
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(pipeline)

BOOST_AUTO_TEST_CASE(equal_layers_and_speeds_split_evenly) {
  const std::vector<double> layers(8, 1.0), speeds(4, 1.0);
  BOOST_TEST(bal::partition_stages(layers, speeds) == (std::vector<std::size_t>{0, 2, 4, 6, 8}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_faster_worker_takes_more_layers) {
  const std::vector<double> layers(8, 1.0), speeds{1.0, 3.0};
  const auto b = bal::partition_stages(layers, speeds);
  BOOST_TEST(b == (std::vector<std::size_t>{0, 2, 8}), boost::test_tools::per_element());
  BOOST_TEST(bal::bottleneck_seconds(layers, speeds, b) == 2.0);
  const auto t = bal::stage_times(layers, speeds, b);
  BOOST_TEST(t[0] == 2.0);
  BOOST_TEST(t[1] == 2.0);
}

BOOST_AUTO_TEST_CASE(bad_input_throws) {
  const std::vector<double> layers{1, 2, 3};
  BOOST_CHECK_THROW(bal::partition_stages(std::vector<double>{}, std::vector<double>{1}),
                    std::invalid_argument);
  BOOST_CHECK_THROW(bal::partition_stages(layers, std::vector<double>{}), std::invalid_argument);
  BOOST_CHECK_THROW(bal::partition_stages(layers, std::vector<double>{1, 1, 1, 1}),
                    std::invalid_argument);  // more stages than layers
  BOOST_CHECK_THROW(bal::partition_stages(std::vector<double>{1, -2, 3}, std::vector<double>{1}),
                    std::invalid_argument);
  BOOST_CHECK_THROW(bal::partition_stages(layers, std::vector<double>{1, 0}),
                    std::invalid_argument);
  BOOST_CHECK_THROW(bal::stage_times(layers, std::vector<double>{1, 1},
                                     std::vector<std::size_t>{0, 3, 3}),
                    std::invalid_argument);  // an empty stage
}

BOOST_AUTO_TEST_SUITE_END()
