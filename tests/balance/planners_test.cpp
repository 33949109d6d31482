// The Cephalo-style planner, the cost-model planner, the pipeline-stage partitioner and DAPPLE's
// pipeline planner.
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/algorithms/decoupled/schedule.hpp"
#include "heterograd/balance/cephalo.hpp"
#include "heterograd/balance/cost_model.hpp"
#include "heterograd/balance/pipeline.hpp"
#include "heterograd/balance/pipeline_planner.hpp"

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

namespace {

/// A worker taking f and b seconds per sample on each of L layers.
bal::worker_profile uniform_worker(std::size_t layers, double f, double b,
                                   double memory = std::numeric_limits<double>::infinity()) {
  return {std::vector<double>(layers, f), std::vector<double>(layers, b), memory};
}

/// The message of the std::invalid_argument f throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

/// Two layers of 10 parameters, 100 activation bytes and 1 output byte per sample; two equal
/// workers (f = 0.1 s, b = 0.2 s per sample and layer); B = 8 in M = 4 micro-batches of 2 rows.
struct two_by_two {
  std::vector<bal::layer_profile> layers{{10, 100, 1}, {10, 100, 1}};
  std::vector<bal::worker_profile> workers{uniform_worker(2, 0.1, 0.2),
                                           uniform_worker(2, 0.1, 0.2)};
  bal::link_profile link{0.01, 100};  // a cut: 2·(0.01 + 2 B / 100 B/s) = 0.06 s per micro-batch
  bal::pipeline_plan_config config{
      .global_batch = 8, .micro_batches = {4}, .order = bal::worker_order::given};
};

}  // namespace

BOOST_AUTO_TEST_SUITE(pipeline_planner)

// Two stages, one layer each: τ = 2 rows · 0.3 s = 0.6 s, cut 0.06 s, K = 0.6 s:
//   J = (4 − 1)·0.6 + (0.6 + 0.6) + 0.06 = 3.06 s; bubble 1 − 4·1.2 / (2·3.06).
// One stage on both workers: n = (2, 2), τ = 2·1.2 / 4 = 0.6 s, all-reduce of 20 parameters
// (80 bytes): 2·1·0.01 + 2·(1/2)·80/100 = 0.82 s, stage 0 exposes it all:
//   J = 3·0.6 + 0.6 + 0.82 = 3.22 s. One stage on one worker: τ = 1.2 s, J = 4·1.2 = 4.8 s.
BOOST_AUTO_TEST_CASE(a_slow_network_favours_two_stages_by_the_hand_computed_objective) {
  const two_by_two x;
  const auto two = bal::even_plan(2, x.layers, x.workers, x.link, x.config);
  const auto one = bal::even_plan(1, x.layers, x.workers, x.link, x.config);
  BOOST_REQUIRE(two && one);
  BOOST_TEST(two->predicted_step_s == 3.06, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(two->bubble_fraction == 1 - 4 * 1.2 / (2 * 3.06), boost::test_tools::tolerance(1e-12));
  BOOST_TEST(one->predicted_step_s == 3.22, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(one->stages[0].allreduce_s == 0.82, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(one->stages[0].micro_batches == (std::vector<std::size_t>{2, 2}),
             boost::test_tools::per_element());
  const auto best = bal::plan_pipeline(x.layers, x.workers, x.link, x.config);
  BOOST_REQUIRE(best);
  BOOST_TEST(best->predicted_step_s == 3.06, boost::test_tools::tolerance(1e-12));
  BOOST_REQUIRE(best->stages.size() == 2u);
  BOOST_TEST(best->stages[0].end_layer == 1u);
  BOOST_TEST(best->stages[1].workers == (std::vector<std::size_t>{1}),
             boost::test_tools::per_element());
  BOOST_TEST(best->micro_batch_rows == 2u);
}

// With a free network the replicated single stage costs 3·0.6 + 0.6 = 2.4 s, the two stages
// 3·0.6 + 1.2 = 3.0 s: data parallelism wins.
BOOST_AUTO_TEST_CASE(a_free_network_favours_replication) {
  two_by_two x;
  x.link = {};
  const auto best = bal::plan_pipeline(x.layers, x.workers, x.link, x.config);
  BOOST_REQUIRE(best);
  BOOST_TEST(best->predicted_step_s == 2.4, boost::test_tools::tolerance(1e-12));
  BOOST_REQUIRE(best->stages.size() == 1u);
  BOOST_TEST(best->stages[0].workers == (std::vector<std::size_t>{0, 1}),
             boost::test_tools::per_element());
  x.config.replication = false;  // without replication the pipeline is the best left
  BOOST_TEST(bal::plan_pipeline(x.layers, x.workers, x.link, x.config)->predicted_step_s == 3.0,
             boost::test_tools::tolerance(1e-12));
}

// Stage 0 of 2 under 1F1B holds min(2, 4) = 2 micro-batches: 12·10 + 100·2·2 = 520 bytes; one
// stage holds 12·20 + 200·2·1 = 640. A 500-byte worker 0 rules out the 3.06 s pipeline and any
// stage on worker 0, leaving worker 1 alone (4.8 s); check_plan names the over-budget worker.
BOOST_AUTO_TEST_CASE(a_memory_budget_excludes_the_otherwise_best_plan) {
  two_by_two x;
  const auto unbounded = bal::plan_pipeline(x.layers, x.workers, x.link, x.config);
  BOOST_REQUIRE(unbounded);
  BOOST_TEST(unbounded->stages[0].memory_bytes[0] == 520.0);
  x.workers[0].memory_bytes = 500;
  const auto bounded = bal::plan_pipeline(x.layers, x.workers, x.link, x.config);
  BOOST_REQUIRE(bounded);
  BOOST_TEST(bounded->predicted_step_s == 4.8, boost::test_tools::tolerance(1e-12));
  BOOST_REQUIRE(bounded->stages.size() == 1u);
  BOOST_TEST(bounded->stages[0].workers == (std::vector<std::size_t>{1}),
             boost::test_tools::per_element());
  BOOST_TEST(bounded->stages[0].memory_bytes[0] == 640.0);
  const auto msg =
      error_of([&] { bal::check_plan(*unbounded, x.layers, x.workers, x.link, x.config); });
  BOOST_TEST(
      msg ==
      "heterograd: invalid argument 'pipeline_plan.stages[0].workers[0]' = 0: needs 520 bytes, "
      "over its budget 500");
  x.workers[1].memory_bytes = 500;
  BOOST_TEST(!bal::plan_pipeline(x.layers, x.workers, x.link, x.config).has_value());
  BOOST_TEST(!bal::plan_pipeline_exhaustive(x.layers, x.workers, x.link, x.config).has_value());
}

// The two-stage plan's stage 0 (10 parameters, 100 activation bytes per sample, 2 rows, 4
// micro-batches): 1F1B holds 2 in flight, 12·10 + 100·2·2 = 520 bytes; GPipe holds all 4,
// 120 + 100·2·4 = 920; stashing adds a 4-byte weight copy per in-flight micro-batch,
// 520 + 4·10·2 = 600. The last stage holds one micro-batch under 1F1B: 120 + 200 = 320.
BOOST_AUTO_TEST_CASE(memory_follows_the_schedule_and_weight_stashing) {
  two_by_two x;
  const auto stage_bytes = [&](const bal::pipeline_plan_config& c, std::size_t s) {
    const auto p = bal::even_plan(2, x.layers, x.workers, x.link, c);
    BOOST_REQUIRE(p);
    return p->stages[s].memory_bytes[0];
  };
  BOOST_TEST(stage_bytes(x.config, 0) == 520.0);
  BOOST_TEST(stage_bytes(x.config, 1) == 320.0);
  auto c = x.config;
  c.schedule = bal::pipeline_schedule_kind::gpipe;
  BOOST_TEST(stage_bytes(c, 0) == 920.0);
  BOOST_TEST(stage_bytes(c, 1) == 920.0);
  c = x.config;
  c.stash_weights = true;
  BOOST_TEST(stage_bytes(c, 0) == 600.0);
}

// Eight equal layers, worker 1 three times as fast (f + b = 1 s per sample and layer against
// 3 s), M = B = 16, no replication, a free network. Planned: 6 layers on the fast worker and 2
// on the slow one, τ = 6 s each: J = 15·6 + 12 = 102 s. Even: 4 and 4, τ = 4 s and 12 s:
// J = 15·12 + 16 = 196 s, 1.92 times the planned step. With M → ∞ the split is the bottleneck
// partition of partition_stages.
BOOST_AUTO_TEST_CASE(the_faster_worker_takes_more_layers_and_beats_the_even_split) {
  const std::vector<bal::layer_profile> layers(8, bal::layer_profile{1, 1, 1});
  const std::vector<bal::worker_profile> workers{uniform_worker(8, 0.75, 2.25),
                                                 uniform_worker(8, 0.25, 0.75)};
  const bal::pipeline_plan_config config{
      .global_batch = 16, .micro_batches = {16}, .replication = false};
  const auto planned = bal::plan_pipeline(layers, workers, {}, config);
  const auto even = bal::even_plan(2, layers, workers, {}, config);
  BOOST_REQUIRE(planned && even);
  BOOST_REQUIRE(planned->stages.size() == 2u);
  BOOST_TEST(planned->stages[0].workers == (std::vector<std::size_t>{1}),
             boost::test_tools::per_element());
  BOOST_TEST(planned->stages[0].end_layer == 6u);
  BOOST_TEST(planned->predicted_step_s == 102.0);
  BOOST_TEST(even->stages[0].end_layer == 4u);
  BOOST_TEST(even->predicted_step_s == 196.0);
  const std::vector<double> times(8, 1.0), speeds{3.0, 1.0};
  BOOST_TEST(bal::partition_stages(times, speeds) == (std::vector<std::size_t>{0, 6, 8}),
             boost::test_tools::per_element());
}

// With equal stages and no network the closed form (M + S − 1)·(f + b) is the makespan of the
// list-scheduled GPipe and 1F1B schedules.
BOOST_AUTO_TEST_CASE(equal_stages_predict_the_list_scheduled_makespan) {
  namespace dec = heterograd::algorithms::decoupled;
  for (std::size_t S = 1; S <= 4; ++S) {
    for (std::size_t M = 1; M <= 8; ++M) {
      const std::vector<bal::layer_profile> layers(S, bal::layer_profile{});
      const std::vector<bal::worker_profile> workers(S, uniform_worker(S, 0.25, 0.5));
      const bal::pipeline_plan_config config{
          .global_batch = M, .micro_batches = {M}, .replication = false};
      const auto p = bal::even_plan(S, layers, workers, {}, config);
      BOOST_REQUIRE(p);
      const std::vector<double> f(S, 0.25), b(S, 0.5);
      BOOST_TEST(p->predicted_step_s ==
                 dec::execute_schedule(dec::schedule_1f1b(S, M), f, b, M).makespan);
      BOOST_TEST(p->predicted_step_s ==
                 dec::execute_schedule(dec::schedule_gpipe(S, M), f, b, M).makespan);
    }
  }
}

// Each plan must be priced at its own bottleneck K. Here (M = 2, one row per micro-batch, a
// free-latency link of 1 B/s, 4-byte gradients) layers 2-3 on workers {2, 3} as stage 2 have
// τ = 3 and an all-reduce of 2·(1/2)·8 B = 8 s: with stages τ = (1, 0, 3) the plan costs
// 3 + 4 + (8 − 2·3) = 9 s, but priced at a larger cap 4 it would seem to cost 4 + 4 + 0 = 8 s.
// The optimum (found by enumeration) is layers 1-2 on worker 1 and layer 3 on {2, 3}:
// τ = (1, 3, 1.5), no parameters to reduce: 3 + 5.5 = 8.5 s.
BOOST_AUTO_TEST_CASE(a_plan_is_priced_at_its_own_bottleneck) {
  const std::vector<bal::layer_profile> layers{{0, 0, 0}, {3, 0, 0}, {2, 0, 0}, {0, 0, 0}};
  const std::vector<bal::worker_profile> workers{{{0, 0, 1, 1}, {1, 1, 1, 1}},
                                                 {{1, 0, 1, 2}, {1, 0, 2, 1}},
                                                 {{0, 2, 2, 0}, {2, 0, 0, 2}},
                                                 {{1, 0, 1, 1}, {0, 2, 2, 2}}};
  const bal::link_profile link{0, 1};
  const bal::pipeline_plan_config config{
      .global_batch = 2, .micro_batches = {2}, .order = bal::worker_order::given};
  const auto p = bal::plan_pipeline(layers, workers, link, config);
  BOOST_REQUIRE(p);
  BOOST_TEST(p->predicted_step_s == 8.5);
  BOOST_TEST(bal::plan_pipeline_exhaustive(layers, workers, link, config)->predicted_step_s == 8.5);
  BOOST_REQUIRE(p->stages.size() == 3u);
  BOOST_TEST(p->stages[2].first_layer == 3u);
}

BOOST_AUTO_TEST_CASE(hostile_input_is_refused_naming_the_field) {
  const two_by_two x;
  const auto plan = [&](auto layers, auto workers, bal::link_profile link,
                        bal::pipeline_plan_config c) {
    return error_of([&] { bal::plan_pipeline(layers, workers, link, c); });
  };
  const auto has = [](const std::string& msg, const std::string& what) {
    return msg.find(what) != std::string::npos;
  };
  auto w = x.workers;
  w[1].forward_s_per_sample[0] = std::numeric_limits<double>::quiet_NaN();
  BOOST_TEST(
      has(plan(x.layers, w, x.link, x.config), "'workers[1].forward_s_per_sample[0]' = nan"));
  w = x.workers;
  w[0].backward_s_per_sample[1] = -1;
  BOOST_TEST(
      has(plan(x.layers, w, x.link, x.config), "'workers[0].backward_s_per_sample[1]' = -1"));
  w = x.workers;
  w[0].backward_s_per_sample.pop_back();
  BOOST_TEST(has(plan(x.layers, w, x.link, x.config), "'workers[0].backward_s_per_sample' = 1"));
  w = x.workers;
  w[1].memory_bytes = std::numeric_limits<double>::quiet_NaN();
  BOOST_TEST(has(plan(x.layers, w, x.link, x.config), "'workers[1].memory_bytes' = nan"));
  auto l = x.layers;
  l[1].parameters = -5;
  BOOST_TEST(has(plan(l, x.workers, x.link, x.config), "'layers[1].parameters' = -5"));
  BOOST_TEST(
      has(plan(std::vector<bal::layer_profile>{}, x.workers, x.link, x.config), "'layers' = 0"));
  BOOST_TEST(
      has(plan(x.layers, std::vector<bal::worker_profile>{}, x.link, x.config), "'workers' = 0"));
  BOOST_TEST(has(plan(x.layers, x.workers, {-1, 1}, x.config), "'link.latency_s' = -1"));
  BOOST_TEST(has(plan(x.layers, x.workers, {0, 0}, x.config), "'link.bytes_per_s' = 0"));
  auto c = x.config;
  c.global_batch = 0;
  BOOST_TEST(has(plan(x.layers, x.workers, x.link, c), "'pipeline_plan.global_batch' = 0"));
  c = x.config;
  c.micro_batches = {4, 3};
  BOOST_TEST(has(plan(x.layers, x.workers, x.link, c),
                 "'pipeline_plan.micro_batches[1]' = 3: must divide"));
  c.global_batch = 4096;
  c.micro_batches = {4096};
  BOOST_TEST(has(plan(x.layers, x.workers, x.link, c),
                 "'pipeline_plan.micro_batches[0]' = 4096: must be <= 1024"));
  c.micro_batches = {0};
  BOOST_TEST(has(plan(x.layers, x.workers, x.link, c), "'pipeline_plan.micro_batches[0]' = 0"));
  c = x.config;
  c.state_bytes_per_parameter = std::numeric_limits<double>::infinity();
  BOOST_TEST(
      has(plan(x.layers, x.workers, x.link, c), "'pipeline_plan.state_bytes_per_parameter' = inf"));
  // Too large for the oracle, or for every worker order.
  const std::vector<bal::layer_profile> eleven(11, bal::layer_profile{});
  const std::vector<bal::worker_profile> w11(2, uniform_worker(11, 1, 1));
  BOOST_TEST(has(error_of([&] { bal::plan_pipeline_exhaustive(eleven, w11, {}, x.config); }),
                 "'layers' = 11: must be <= 10"));
  const std::vector<bal::worker_profile> six(6, uniform_worker(2, 1, 1));
  BOOST_TEST(has(error_of([&] { bal::plan_pipeline_exhaustive(x.layers, six, {}, x.config); }),
                 "'workers' = 6: must be <= 5"));
  const std::vector<bal::layer_profile> hundred(100, bal::layer_profile{});
  const std::vector<bal::worker_profile> w32(32, uniform_worker(100, 1, 1));
  BOOST_TEST(has(plan(hundred, w32, {}, x.config),
                 "'workers' = 32: must keep (layers + 1)^2 (workers + 1)^2 <= 4194304"));
  c = x.config;
  c.order = bal::worker_order::all;
  const std::vector<bal::worker_profile> seven(7, uniform_worker(2, 1, 1));
  BOOST_TEST(
      has(plan(x.layers, seven, {}, c), "'workers' = 7: must be <= 6 for pipeline_plan.order = all"));
  BOOST_TEST(has(error_of([&] { bal::even_plan(3, x.layers, x.workers, x.link, x.config); }),
                 "'stages' = 3"));
}

BOOST_AUTO_TEST_CASE(check_plan_names_bad_boundaries_and_unknown_workers) {
  const two_by_two x;
  const auto good = bal::plan_pipeline(x.layers, x.workers, x.link, x.config);
  BOOST_REQUIRE(good);
  BOOST_CHECK_NO_THROW(bal::check_plan(*good, x.layers, x.workers, x.link, x.config));
  const auto broken = [&](auto edit) {
    auto p = *good;
    edit(p);
    return error_of([&] { bal::check_plan(p, x.layers, x.workers, x.link, x.config); });
  };
  BOOST_TEST(broken([](auto& p) { p.stages[1].first_layer = 0; }) ==
             "heterograd: invalid argument 'pipeline_plan.stages[1].first_layer' = 0: must equal "
             "stages[0].end_layer (1)");
  BOOST_TEST(broken([](auto& p) {
               p.stages[1].end_layer = 3;
             }).find("'pipeline_plan.stages[1].end_layer' = 3") != std::string::npos);
  BOOST_TEST(broken([](auto& p) { p.stages[1].workers[0] = 2; }) ==
             "heterograd: invalid argument 'pipeline_plan.stages[1].workers[0]' = 2: must be < the "
             "number of "
             "workers (2)");
  BOOST_TEST(broken([](auto& p) { p.stages[1].workers[0] = 0; })
                 .find("'pipeline_plan.stages[1].workers[0]' = 0: must "
                       "not run more than one stage") != std::string::npos);
  BOOST_TEST(broken([](auto& p) {
               p.stages[0].micro_batches[0] = 3;
             }).find("'pipeline_plan.stages[0].micro_batches' = 3") != std::string::npos);
  BOOST_TEST(broken([](auto& p) {
               p.micro_batches = 3;
             }).find("'pipeline_plan.micro_batches' = 3: must divide") != std::string::npos);
  BOOST_TEST(broken([](auto& p) { p.stages.pop_back(); })
                 .find("'pipeline_plan.stages[0].end_layer' = 1: must equal the "
                       "number of layers (2)") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_config_is_described) {
  const auto d = bal::pipeline_plan_config::description();
  BOOST_TEST(d.name == "pipeline_plan");
  BOOST_TEST(d.size() == 8u);
  std::string names;
  d.for_each([&](const auto& f) { names += std::string(f.name) + " "; });
  BOOST_TEST(names ==
             "global_batch micro_batches schedule replication state_bytes_per_parameter "
             "bytes_per_parameter stash_weights order ");
}

BOOST_AUTO_TEST_SUITE_END()
