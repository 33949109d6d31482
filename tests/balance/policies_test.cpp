// Concept conformance, static proportional allocation and OmniLearn's controller (BSP, ASP),
// including bad input rejected before any state change.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/balance.hpp"
#include "heterograd/testing/balance_archetypes.hpp"
#include "messages.hpp"

namespace hg = heterograd;
namespace bal = heterograd::balance;

namespace {

std::size_t sum(const auto& v) {
  return std::accumulate(v.begin(), v.end(), std::size_t{0});
}

/// One epoch of `iters` iterations under the core-share model t_i = c · b_i / cores_i.
template <class Policy>
void run_epoch(Policy& p, const std::vector<double>& cores, double c = 0.01,
               std::size_t iters = 10) {
  for (std::size_t i = 0; i < cores.size(); ++i) {
    const double b = static_cast<double>(p.assignment(i));
    p.observe(i, {p.assignment(i) * iters, iters, hg::seconds{iters * c * b / cores[i]}, 0});
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(balance_concepts)

BOOST_AUTO_TEST_CASE(the_library_policies_and_the_archetype_model_balance_policy) {
  static_assert(bal::balance_policy<hg::testing::balance_policy_archetype>);
  static_assert(bal::balance_policy<bal::static_proportional>);
  static_assert(bal::balance_policy<bal::omnilearn_bsp>);
  static_assert(bal::balance_policy<bal::omnilearn_asp>);
  static_assert(!bal::balance_policy<hg::testing::balance_policy_without_observe>);
  static_assert(!bal::balance_policy<hg::testing::balance_policy_with_void_rebalance>);
  static_assert(!bal::balance_policy<hg::testing::balance_policy_without_weight>);
  static_assert(!bal::balance_policy<hg::testing::balance_policy_not_copyable>);
  static_assert(!bal::balance_policy<bal::dssp_controller>);
  BOOST_TEST(hg::testing::balance_policy_archetype{}.assignment(0) == 32u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(proportional)

BOOST_AUTO_TEST_CASE(split_is_proportional_and_sums_exactly_by_largest_remainder) {
  const std::vector<double> cores{12, 12, 8, 16};
  // 128 · cores / 48 = (32, 32, 21.33, 42.67): floors sum to 127, the largest remainder
  // (0.67, worker 3) gets the last sample.
  BOOST_TEST(bal::proportional_split(128, cores) == (std::vector<std::size_t>{32, 32, 21, 43}),
             boost::test_tools::per_element());
  // Ties go to the lower index.
  BOOST_TEST(bal::proportional_split(10, std::vector<double>{1, 1, 1}) ==
                 (std::vector<std::size_t>{4, 3, 3}),
             boost::test_tools::per_element());
  for (std::size_t total : {1u, 7u, 100u, 1001u}) {
    const std::vector<double> w{0.3, 2.5, 1.0, 7.25, 0.01};
    const auto s = bal::proportional_split(total, w);
    BOOST_TEST(sum(s) == total);
    const double wsum = std::accumulate(w.begin(), w.end(), 0.0);
    for (std::size_t i = 0; i < w.size(); ++i) {
      BOOST_TEST(std::abs(static_cast<double>(s[i]) - total * w[i] / wsum) < 1.0);
    }
  }
}

BOOST_AUTO_TEST_CASE(split_clamps_and_gives_the_excess_to_unclamped_workers) {
  // 128 over (6, 6, 4, 32) with shares in [16, 96]: 4 cores would get 10.7 and is raised to
  // 16, the 6-core workers (16 exactly before the raise) are pushed below 16 and clamped
  // too, so the 32-core worker absorbs the difference: 128 − 3·16 = 80.
  BOOST_TEST(bal::proportional_split(128, std::vector<double>{6, 6, 4, 32}, 16, 96) ==
                 (std::vector<std::size_t>{16, 16, 16, 80}),
             boost::test_tools::per_element());
  // An upper clamp gives its excess to the others in proportion to their weights:
  // (1, 1, 8) · 10 = (10, 10, 80) → 80 capped at 50, the 30 extra split 15/15.
  BOOST_TEST(bal::proportional_split(100, std::vector<double>{1, 1, 8}, 1, 50) ==
                 (std::vector<std::size_t>{25, 25, 50}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(local_steps_follow_the_step_rate_with_at_least_one_step) {
  // Biased local SGD's GPU/CPU setting: H_gpu = 32 and a CPU 32× slower does 1 step.
  BOOST_TEST(bal::proportional_local_steps(32, std::vector<double>{32, 32, 1, 0.1}) ==
                 (std::vector<std::size_t>{32, 32, 1, 1}),
             boost::test_tools::per_element());
  BOOST_TEST(bal::proportional_local_steps(10, std::vector<double>{4, 2, 1}) ==
                 (std::vector<std::size_t>{10, 5, 3}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(static_policy_profiles_once_then_stays_fixed) {
  bal::static_proportional p(3, {.total = 96});
  BOOST_TEST(p.assignment(0) == 32u);
  BOOST_TEST(!p.fixed());
  const std::vector<double> speed{1, 2, 3};
  run_epoch(p, speed);
  BOOST_TEST(p.rebalance());
  BOOST_TEST(p.fixed());
  // Throughput X_i = cores_i / c: shares 96 · (1, 2, 3) / 6.
  BOOST_TEST(p.assignment(0) == 16u);
  BOOST_TEST(p.assignment(1) == 32u);
  BOOST_TEST(p.assignment(2) == 48u);
  BOOST_TEST(p.weight(2) == 0.5);
  // Static: a changed cluster does not move it.
  run_epoch(p, std::vector<double>{3, 2, 1});
  BOOST_TEST(!p.rebalance());
  BOOST_TEST(p.assignment(2) == 48u);

  // From known speeds: fixed from the start.
  const std::vector<double> cores{12, 12, 8, 16};
  bal::static_proportional q(cores, {.total = 128});
  BOOST_TEST(q.fixed());
  BOOST_TEST(q.assignment(3) == 43u);
}

BOOST_AUTO_TEST_CASE(static_policy_splits_local_steps_by_iteration_rate) {
  bal::static_proportional p(2, {.total = 30, .min_share = 1, .unit = bal::share_unit::local_steps});
  // Worker 1 runs iterations twice as fast (its batch is larger, so samples/s would say 4×).
  p.observe(0, {10, 10, hg::seconds{2.0}, 0});
  p.observe(1, {40, 20, hg::seconds{2.0}, 0});
  BOOST_TEST(p.rebalance());
  BOOST_TEST(p.assignment(0) == 10u);
  BOOST_TEST(p.assignment(1) == 20u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(omnilearn)

BOOST_AUTO_TEST_CASE(bsp_controller_equalises_times_and_keeps_the_global_batch) {
  const std::vector<double> cores{12, 12, 8, 16};
  bal::omnilearn_bsp p(4, 128);
  BOOST_TEST(p.assignment(0) == 32u);
  run_epoch(p, cores);
  BOOST_TEST(p.rebalance());
  BOOST_TEST(sum(p.batch_sizes()) == 128u);
  double wsum = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    BOOST_TEST(std::abs(p.targets()[i] - 128 * cores[i] / 48) < 1e-9);
    BOOST_TEST(p.weight(i) == p.assignment(i) / 128.0);
    wsum += p.weight(i);
  }
  BOOST_TEST(std::abs(wsum - 1.0) < 1e-15);
  // At the fixed point the dead-band holds the batches still.
  const auto before = p;
  run_epoch(p, cores);
  BOOST_TEST(!p.rebalance());
  BOOST_TEST((std::vector<std::size_t>(p.batch_sizes().begin(), p.batch_sizes().end()) ==
              std::vector<std::size_t>(before.batch_sizes().begin(), before.batch_sizes().end())));
}

BOOST_AUTO_TEST_CASE(bsp_dead_band_ignores_changes_below_the_threshold) {
  // Cores (10, 11): the balanced batches 64 · (10, 11)/21 = (30.5, 33.5) differ from 32 by
  // under 5 %, below the 0.2 dead-band: nothing moves.
  bal::omnilearn_bsp p(2, 64);
  run_epoch(p, {10, 11});
  BOOST_TEST(!p.rebalance());
  BOOST_TEST(p.assignment(0) == 32u);
  // With no dead-band the controller moves to the balanced split.
  bal::omnilearn_bsp q(2, 64, {.deadband = 0.0});
  run_epoch(q, {10, 11});
  BOOST_TEST(q.rebalance());
  BOOST_TEST(q.assignment(0) == 30u);
  BOOST_TEST(q.assignment(1) == 34u);
}

BOOST_AUTO_TEST_CASE(bsp_per_worker_dead_band_keeps_in_band_workers_before_renormalising) {
  // Throughputs X = (1, 1.2, 2.5) at b = 32: t = 32/X, t̄ = mean t, candidates X·t̄; the
  // middle worker's change is under 20 % so it keeps 32, then all scale to B = 96.
  const std::vector<double> x{1, 1.2, 2.5};
  bal::omnilearn_config cfg{.min_batch = 1, .max_batch = 96,
                            .scope = bal::deadband_scope::per_worker};
  bal::omnilearn_bsp p(3, 96, cfg);
  run_epoch(p, x, 1.0);
  BOOST_TEST(p.rebalance());
  double tbar = 0;
  for (double xi : x) tbar += 32 / xi / 3;
  std::vector<double> cand(3);
  for (std::size_t i = 0; i < 3; ++i) {
    cand[i] = x[i] * tbar;
    if (std::abs(cand[i] - 32) / cand[i] < 0.2) cand[i] = 32;
  }
  BOOST_TEST(cand[1] == 32.0);
  const double csum = cand[0] + cand[1] + cand[2];
  for (std::size_t i = 0; i < 3; ++i) {
    BOOST_TEST(std::abs(p.assignment(i) - 96 * cand[i] / csum) < 1.0);
  }
  BOOST_TEST(sum(p.batch_sizes()) == 96u);
}

BOOST_AUTO_TEST_CASE(bsp_gain_below_one_moves_part_of_the_way) {
  bal::omnilearn_bsp p(2, 64, {.min_batch = 1, .max_batch = 63, .deadband = 0.0, .gain = 0.5});
  run_epoch(p, {1, 3});
  BOOST_TEST(p.rebalance());
  // t = 32/X with X ∝ (1, 3): X·t̄ = (21.3, 64); the candidates move half way,
  // 32 + 0.5 (X t̄ − 32) = (26.7, 48), and scale to B = 64: (22.9, 41.1).
  const double t0 = 32.0, t1 = 32.0 / 3, tbar = (t0 + t1) / 2;
  const double c0 = 32 + 0.5 * (tbar - 32), c1 = 32 + 0.5 * (3 * tbar - 32);
  BOOST_TEST(std::abs(p.assignment(0) - 64 * c0 / (c0 + c1)) < 1.0);
  BOOST_TEST(std::abs(p.assignment(1) - 64 * c1 / (c0 + c1)) < 1.0);
  BOOST_TEST(p.assignment(0) == 23u);
  BOOST_TEST(p.assignment(1) == 41u);
}

BOOST_AUTO_TEST_CASE(asp_controller_equalises_iteration_times_without_a_global_batch) {
  // The paper's 5-worker ASP HL4 cores; each batch moves to X_i t̄ independently.
  const std::vector<double> cores{8, 10, 10, 4, 16};
  const std::vector<std::size_t> b0(5, 32);
  bal::omnilearn_asp p(b0);
  run_epoch(p, cores);
  BOOST_TEST(p.rebalance());
  double tbar = 0;
  for (double c : cores) tbar += 32 / c / 5;
  for (std::size_t i = 0; i < 5; ++i) {
    const double expect = std::clamp(cores[i] * tbar, 16.0, 96.0);
    BOOST_TEST(std::abs(p.assignment(i) - expect) <= 0.5);
    BOOST_TEST(p.weight(i) == 1.0);
    BOOST_TEST(p.learning_rate_scale(i) == p.assignment(i) / 32.0);
  }
  // A very slow worker is clamped at b_min without touching the others' batches (no
  // redistribution in ASP: there is no global batch to keep).
  bal::omnilearn_asp q(b0);
  run_epoch(q, {1, 10, 10, 10, 10});
  BOOST_TEST(q.rebalance());
  BOOST_TEST(q.assignment(0) == 16u);
  double t2 = (32.0 / 1 + 4 * 32.0 / 10) / 5;
  BOOST_TEST(std::abs(q.assignment(1) - 10 * t2) <= 0.5);
}

BOOST_AUTO_TEST_CASE(bad_input_throws_before_any_state_change) {
  // b_min > b_max.
  BOOST_CHECK_THROW(bal::omnilearn_bsp(4, 128, {.min_batch = 97, .max_batch = 96}),
                    std::invalid_argument);
  BOOST_TEST(hg_test::invalid_argument_message([] {
               bal::omnilearn_bsp(4, 128, {.min_batch = 97, .max_batch = 96});
             }).find("omnilearn.min_batch") != std::string::npos);
  BOOST_CHECK_THROW(bal::omnilearn_asp(std::vector<std::size_t>{32}, {.min_batch = 8, .max_batch = 4}),
                    std::invalid_argument);
  BOOST_CHECK_THROW(bal::proportional_split(10, std::vector<double>{1, 1}, 6, 5),
                    std::invalid_argument);
  // Batch sizes summing to 0.
  BOOST_CHECK_THROW(bal::omnilearn_bsp(std::vector<std::size_t>{0, 0}, {.min_batch = 1}),
                    std::invalid_argument);
  BOOST_CHECK_THROW(bal::omnilearn_bsp(2, 0), std::invalid_argument);
  BOOST_CHECK_THROW(bal::static_proportional(2, {.total = 0}), std::invalid_argument);
  BOOST_CHECK_THROW(bal::proportional_split(0, std::vector<double>{1, 1}), std::invalid_argument);
  // Empty worker lists.
  BOOST_CHECK_THROW(bal::omnilearn_bsp(std::vector<std::size_t>{}), std::invalid_argument);
  BOOST_CHECK_THROW(bal::omnilearn_bsp(0, 128), std::invalid_argument);
  BOOST_CHECK_THROW(bal::static_proportional(0, {.total = 8}), std::invalid_argument);
  BOOST_CHECK_THROW(bal::proportional_split(8, std::vector<double>{}), std::invalid_argument);
  BOOST_CHECK_THROW(bal::proportional_local_steps(8, std::vector<double>{}), std::invalid_argument);
  // Infeasible global batch, bad dead-band or gain, weights <= 0.
  BOOST_CHECK_THROW(bal::omnilearn_bsp(4, 60), std::invalid_argument);
  BOOST_CHECK_THROW(bal::omnilearn_bsp(4, 400), std::invalid_argument);
  BOOST_CHECK_THROW(bal::omnilearn_bsp(4, 128, {.deadband = 1.0}), std::invalid_argument);
  BOOST_CHECK_THROW(bal::omnilearn_bsp(4, 128, {.gain = 0.0}), std::invalid_argument);
  BOOST_CHECK_THROW(bal::proportional_split(8, std::vector<double>{1, -1}), std::invalid_argument);
  BOOST_CHECK_THROW(bal::proportional_split(8, std::vector<double>{1, NAN}), std::invalid_argument);

  // Negative or NaN times, unknown workers, incomplete epochs: the policy is unchanged.
  bal::omnilearn_bsp p(4, 128);
  run_epoch(p, {12, 12, 8, 16});
  p.observe(0, {32, 1, hg::seconds{0.01}, 0});
  const auto before = p;
  BOOST_CHECK_THROW(p.observe(1, {32, 1, hg::seconds{-1.0}, 0}), std::invalid_argument);
  BOOST_CHECK_THROW(p.observe(1, {32, 1, hg::seconds{NAN}, 0}), std::invalid_argument);
  BOOST_CHECK_THROW(p.observe(1, {32, 1, hg::seconds{1.0}, -5.0}), std::invalid_argument);
  BOOST_CHECK_THROW(p.observe(1, {32, 0, hg::seconds{1.0}, 0}), std::invalid_argument);
  BOOST_CHECK_THROW(p.observe(4, {32, 1, hg::seconds{1.0}, 0}), std::invalid_argument);
  BOOST_TEST((p == before));
  bal::omnilearn_bsp fresh(4, 128);
  fresh.observe(0, {32, 1, hg::seconds{0.1}, 0});  // the other workers reported nothing
  const auto fresh_before = fresh;
  BOOST_CHECK_THROW(fresh.rebalance(), std::invalid_argument);
  BOOST_TEST((fresh == fresh_before));
  bal::static_proportional s(2, {.total = 8});
  s.observe(0, {4, 1, hg::seconds{0.0}, 0});
  s.observe(1, {4, 1, hg::seconds{1.0}, 0});
  const auto s_before = s;
  BOOST_CHECK_THROW(s.rebalance(), std::invalid_argument);  // zero compute time
  BOOST_TEST((s == s_before));
}

BOOST_AUTO_TEST_SUITE_END()
