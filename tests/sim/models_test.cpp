// Worker-time models (statistics from theory, presets from the papers, exact window and
// trace arithmetic, validation) and the network cost formulas against hand-computed values.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "hg_test.hpp"
#include "heterograd/sim/network.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace sim = heterograd::sim;
namespace tt = boost::test_tools;

namespace {

template <class F>
void check_names(F&& f, const std::string& field) {
  try {
    f();
    BOOST_ERROR("accepted a bad '" << field << "'");
  } catch (const std::invalid_argument& ex) {
    const std::string what = ex.what();
    BOOST_TEST(what.find("'" + field) != std::string::npos, what << " does not name " << field);
  }
}

template <class M>
double mean_of(const M& m, sim::worker_id w, std::uint64_t draws) {
  double s = 0;
  for (std::uint64_t k = 0; k < draws; ++k) s += m.duration(w, k, 0.0, 1);
  return s / static_cast<double>(draws);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(worker_time)

BOOST_AUTO_TEST_CASE(half_normal_noise_has_mean_sqrt_2_over_pi_sigma_within_one_percent) {
  const std::uint64_t seed = hg_test::seed();
  const sim::half_normal_noise noise(seed);  // |N(0, i+1)|: sigma_i = sqrt(i+1)
  for (sim::worker_id w : {0u, 9u, 99u}) {
    const double sigma = std::sqrt(static_cast<double>(w) + 1.0);
    BOOST_TEST(noise.sigma(w) == sigma);
    BOOST_TEST(mean_of(noise, w, 100000) == std::sqrt(2.0 / std::numbers::pi) * sigma,
               tt::tolerance(0.01));
  }
  const sim::half_normal_noise linear(seed, 0.5, sim::noise_growth::stddev_linear);
  BOOST_TEST(mean_of(linear, 3, 100000) == std::sqrt(2.0 / std::numbers::pi) * 2.0,
             tt::tolerance(0.01));
}

BOOST_AUTO_TEST_CASE(lognormal_and_exponential_times_have_their_theoretical_means) {
  const std::uint64_t seed = hg_test::seed();
  const sim::lognormal_times ln(seed, {2.0, 3.0}, 0.1, 0.5);
  BOOST_TEST(mean_of(ln, 1, 200000) == 3.0 * std::exp(0.1 + 0.125), tt::tolerance(0.01));
  const sim::exponential_times ex(seed, {0.5, 4.0});
  BOOST_TEST(mean_of(ex, 1, 400000) == 4.0, tt::tolerance(0.01));
  BOOST_TEST(mean_of(ex, 0, 400000) == 0.5, tt::tolerance(0.01));
}

BOOST_AUTO_TEST_CASE(a_draw_depends_only_on_the_seed_the_worker_and_the_job_index) {
  const std::uint64_t seed = hg_test::seed();
  const auto m = sim::plus(sim::sqrt_times(50, seed), sim::half_normal_noise(seed));
  std::vector<double> forward, backward;
  for (sim::worker_id w = 0; w < 50; ++w)
    for (std::uint64_t k = 0; k < 20; ++k) forward.push_back(m.duration(w, k, 0.0, 1));
  for (sim::worker_id w = 50; w-- > 0;)
    for (std::uint64_t k = 20; k-- > 0;) backward.push_back(m.duration(w, k, 123.0, 7));
  std::reverse(backward.begin(), backward.end());
  BOOST_TEST(forward == backward);  // bitwise: the start time and batch do not enter here
  const auto other = sim::plus(sim::sqrt_times(50, seed + 1), sim::half_normal_noise(seed + 1));
  BOOST_TEST(other.duration(7, 3, 0.0, 1) != m.duration(7, 3, 0.0, 1));
  // Type erasure changes nothing.
  const sim::any_time_model any = m;
  const sim::any_time_model copy = any;
  BOOST_TEST(copy.duration(13, 5, 0.0, 1) == m.duration(13, 5, 0.0, 1));
}

BOOST_AUTO_TEST_CASE(sqrt_and_linear_times_are_a_permutation_of_their_base_times) {
  const std::uint64_t seed = hg_test::seed();
  for (const std::size_t n : {1u, 2u, 17u, 1000u}) {
    for (const bool sqrt_law : {true, false}) {
      const auto t = sqrt_law ? sim::sqrt_times(n, seed) : sim::linear_times(n, seed);
      BOOST_REQUIRE(t.workers() == n);
      std::vector<double> sorted = t.tau;
      std::sort(sorted.begin(), sorted.end());
      for (std::size_t i = 0; i < n; ++i) {
        const double x = static_cast<double>(i);
        BOOST_REQUIRE(sorted[i] == (sqrt_law ? 1.0 + std::sqrt(x) : 1.0 + x));
      }
      const auto identity = sqrt_law ? sim::sqrt_times(n, seed, false) : sim::linear_times(n, seed, false);
      BOOST_TEST(std::is_sorted(identity.tau.begin(), identity.tau.end()));
      if (n == 1000) {
        BOOST_TEST(t.tau != identity.tau);
        const auto t2 = sqrt_law ? sim::sqrt_times(n, seed + 1) : sim::linear_times(n, seed + 1);
        BOOST_TEST(t2.tau != t.tau);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(speed_classes_give_the_cpu_to_gpu_ratio) {
  const auto t = sim::speed_classes({{2, 32.0}, {8, 1.0}});
  BOOST_TEST(t.workers() == 10u);
  BOOST_TEST(t.duration(0, 0, 0, 1) / t.duration(9, 0, 0, 1) == 32.0);
  BOOST_TEST(t.duration(1, 0, 0, 1) == 32.0);
  BOOST_TEST(t.duration(2, 0, 0, 1) == 1.0);
}

BOOST_AUTO_TEST_CASE(omnilearn_presets_give_the_papers_core_shares_and_ratios) {
  using hl = sim::heterogeneity_level;
  // Max/min core ratio of each preset on OmniLearn's 48-core machine.
  struct expect {
    hl level;
    sim::omnilearn_mode mode;
    std::size_t workers;
    double ratio;
  };
  const expect cases[] = {
      {hl::hl1, sim::omnilearn_mode::bsp, 4, 1.0},  {hl::hl2, sim::omnilearn_mode::bsp, 4, 2.0},
      {hl::hl4, sim::omnilearn_mode::bsp, 4, 25.0 / 6.0}, {hl::hl8, sim::omnilearn_mode::bsp, 4, 8.0},
      {hl::hl1, sim::omnilearn_mode::asp, 5, 1.25}, {hl::hl2, sim::omnilearn_mode::asp, 5, 2.0},
      {hl::hl4, sim::omnilearn_mode::asp, 5, 4.0},  {hl::hl8, sim::omnilearn_mode::asp, 5, 7.0},
  };
  for (const auto& c : cases) {
    const auto cores = sim::omnilearn_cores(c.level, c.mode);
    BOOST_TEST(cores.size() == c.workers);
    BOOST_TEST(std::accumulate(cores.begin(), cores.end(), 0.0) == 48.0);
    const auto [lo, hi] = std::minmax_element(cores.begin(), cores.end());
    BOOST_TEST(*hi / *lo == c.ratio);
    // Compute time is proportional to batch / cores: the slowest-to-fastest time ratio is
    // the core ratio, and doubling the batch doubles the time.
    const auto m = sim::omnilearn_preset(c.level, c.mode, 0.5);
    std::vector<double> t;
    for (sim::worker_id w = 0; w < c.workers; ++w) t.push_back(m.duration(w, 0, 0, 32));
    BOOST_TEST(*std::max_element(t.begin(), t.end()) / *std::min_element(t.begin(), t.end()) ==
               c.ratio, tt::tolerance(1e-15));
    BOOST_TEST(m.duration(0, 0, 0, 64) == 2 * m.duration(0, 0, 0, 32));
    BOOST_TEST(m.duration(0, 0, 0, 32) == 0.5 * 32 / cores[0]);
  }
  // HL1 -> HL2 -> HL4 -> HL8 -> HL8 -> HL4 -> HL2 -> HL1, 50 iterations per level, then the
  // last level stays; by virtual time too.
  const auto dyn = sim::omnilearn_dynamic(sim::omnilearn_mode::bsp, 50);
  const double expected_w3[] = {12, 16, 25, 32, 32, 25, 16, 12};
  for (std::uint64_t p = 0; p < 8; ++p) {
    BOOST_TEST(dyn.cores(3, p * 50, 0) == expected_w3[p]);
    BOOST_TEST(dyn.cores(3, p * 50 + 49, 0) == expected_w3[p]);
  }
  BOOST_TEST(dyn.cores(3, 100000, 0) == 12.0);
  const auto by_time = sim::omnilearn_dynamic(sim::omnilearn_mode::asp, 10.0, sim::phase_unit::time);
  BOOST_TEST(by_time.cores(4, 1000, 9.99) == 10.0);
  BOOST_TEST(by_time.cores(4, 0, 10.0) == 16.0);
  BOOST_TEST(by_time.cores(4, 0, 35.0) == 28.0);
}

BOOST_AUTO_TEST_CASE(time_scales_affinely_with_the_batch) {
  const sim::batch_affine_times m({0.25, 0.5}, {0.125});
  BOOST_TEST(m.duration(0, 0, 0, 8) == 0.25 + 0.125 * 8);
  BOOST_TEST(m.duration(1, 9, 3.0, 32) == 0.5 + 0.125 * 32);
  check_names([] { sim::batch_affine_times({0.1, 0.2}, {0.1, 0.2, 0.3}); },
              "batch_affine_times.per_sample.size");
}

BOOST_AUTO_TEST_CASE(outages_and_slowdowns_delay_a_job_by_exactly_the_lost_progress) {
  const auto m = sim::with_windows(sim::fixed_times({2.0, 2.0, 2.0}),
                                   {{0, 1.0, 3.0, sim::never},   // outage of worker 0
                                    {1, 1.0, 3.0, 2.0},          // worker 1 at half speed
                                    {2, 0.5, 1.0, sim::never},   // worker 2: two windows
                                    {2, 2.0, 4.0, 4.0}});
  BOOST_TEST(m.duration(0, 0, 0.0, 1) == 4.0);   // 1 s before, 2 s lost, 1 s after
  BOOST_TEST(m.duration(0, 0, 1.5, 1) == 3.5);   // starts inside the outage: resumes at 3
  BOOST_TEST(m.duration(0, 0, 3.0, 1) == 2.0);   // after the window
  BOOST_TEST(m.duration(1, 0, 0.0, 1) == 3.0);   // 1 s at full speed, 1 s of work takes 2 s
  BOOST_TEST(m.duration(1, 0, 2.5, 1) == 2.25);  // 0.25 s of work in the window, 1.75 after
  // Worker 2 from t = 0: 0.5 work by 0.5, outage to 1, 1.0 work by 2, then 0.5 work at
  // quarter speed takes 2 s: finishes at 4.
  BOOST_TEST(m.duration(2, 0, 0.0, 1) == 4.0);
  const auto forever = sim::with_windows(sim::fixed_times({1.0}), {{0, 0.5, sim::never, sim::never}});
  BOOST_TEST(forever.duration(0, 0, 0.0, 1) == sim::never);
  check_names([] { sim::with_windows(sim::fixed_times({1.0}), {{0, 1.0, 3.0, 2.0}, {0, 2.0, 4.0, 2.0}}); },
              "windows.begin");
  check_names([] { sim::with_windows(sim::fixed_times({1.0}), {{0, -1.0, 3.0, 2.0}}); },
              "windows.begin[0]");
  check_names([] { sim::with_windows(sim::fixed_times({1.0}), {{0, 1.0, 3.0, 0.5}}); },
              "windows.slowdown[0]");
}

BOOST_AUTO_TEST_CASE(a_measured_trace_replays_by_job_index_or_by_start_time) {
  std::istringstream csv(
      "worker,start,duration\n"
      "# measured on the lab cluster\n"
      "1,0.0,2.5\n"
      "0,0.0,1.0\n"
      "0,1.0,1.5\r\n"
      "1,2.5,3.0\n"
      "0,2.5,0.5\n");
  const auto t = sim::trace_replay::from_csv(csv, 2);
  BOOST_TEST(t.rows(0) == 3u);
  BOOST_TEST(t.duration(0, 0, 0, 1) == 1.0);
  BOOST_TEST(t.duration(0, 2, 0, 1) == 0.5);
  BOOST_TEST(t.duration(0, 3, 0, 1) == 1.0);  // cycles
  BOOST_TEST(t.duration(1, 1, 0, 1) == 3.0);
  std::istringstream again(csv.str());
  const auto by_time = sim::trace_replay::from_csv(again, 2, sim::replay_mode::start_time);
  BOOST_TEST(by_time.duration(0, 0, 0.99, 1) == 1.0);
  BOOST_TEST(by_time.duration(0, 0, 1.0, 1) == 1.5);
  BOOST_TEST(by_time.duration(0, 0, 100.0, 1) == 0.5);
  BOOST_TEST(by_time.duration(1, 0, 2.0, 1) == 2.5);

  std::istringstream unknown("0,0,1\n1,0,1\n5,0.0,1.0\n");
  check_names([&] { sim::trace_replay::from_csv(unknown, 2); }, "trace.worker[2]");
  std::istringstream missing("0,0,1\n");
  check_names([&] { sim::trace_replay::from_csv(missing, 2); }, "trace.worker");
  std::istringstream negative("0,0,1\n1,-2,1\n");
  check_names([&] { sim::trace_replay::from_csv(negative, 2); }, "trace.start[1]");
  std::istringstream garbage("0,0,1\n1,x,1\n");
  check_names([&] { sim::trace_replay::from_csv(garbage, 2); }, "trace.line[2]");
  // A field is a number and nothing more; a worker id must fit (4294967297 is not worker 1).
  std::istringstream tail("0,0,1\n1,0,1x\n");
  check_names([&] { sim::trace_replay::from_csv(tail, 2); }, "trace.line[2]");
  std::istringstream fourth("0,0,1\n1,0,1,7\n");
  check_names([&] { sim::trace_replay::from_csv(fourth, 2); }, "trace.line[2]");
  std::istringstream wide("0,0,1\n4294967297,0,1\n");
  check_names([&] { sim::trace_replay::from_csv(wide, 2); }, "trace.worker[2]");
  check_names([] { sim::trace_replay({}, 0); }, "trace.workers");
}

BOOST_AUTO_TEST_CASE(bad_model_configurations_throw_naming_the_field) {
  check_names([] { sim::fixed_times(std::vector<double>{}); }, "fixed_times.tau");
  check_names([] { sim::fixed_times({1.0, -2.0}); }, "fixed_times.tau[1]");
  check_names([] { sim::sqrt_times(0, 1); }, "sqrt_times.workers");
  check_names([] { sim::linear_times(0, 1); }, "linear_times.workers");
  check_names([] { sim::speed_classes({}); }, "speed_classes.classes");
  check_names([] { sim::speed_classes({{2, 1.0}, {1, -1.0}}); }, "speed_classes.time[1]");
  check_names([] { sim::half_normal_noise(1, -1.0); }, "half_normal_noise.scale");
  check_names([] { sim::lognormal_times(1, {1.0}, 0.0, -0.5); }, "lognormal_times.sigma");
  check_names([] { sim::exponential_times(1, {1.0, 0.0}); }, "exponential_times.mean[1]");
  check_names([] { sim::core_share_times({{4, 8}, {4, 8, 12}}); }, "core_share_times.phases[1]");
  check_names([] { sim::core_share_times({{4, 0}}); }, "core_share_times.phases[0][1]");
  check_names([] { sim::scaled(sim::constant_time{1.0}, -2.0); }, "scaled.factor");
  check_names([] { sim::fixed_times({1.0}).duration(1, 0, 0, 1); }, "worker");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(network)

BOOST_AUTO_TEST_CASE(flat_collectives_cost_what_the_alpha_beta_formulas_say) {
  // alpha = 10 us, beta = 10 GB/s, m = 100 MB, n = 8.
  const sim::link l{1e-5, 1e10};
  const double m = 1e8;
  const auto ring = sim::ring_allreduce(l, 8, m);
  BOOST_TEST(ring.seconds == 2 * 7 * 1e-5 + 2.0 * 7 / 8 * 1e8 / 1e10, tt::tolerance(1e-14));
  BOOST_TEST(ring.seconds == 0.01764, tt::tolerance(1e-14));
  BOOST_TEST(ring.steps == 14u);
  BOOST_TEST(ring.bytes_per_rank == 1.75e8, tt::tolerance(1e-14));
  const auto tree = sim::tree_allreduce(l, 8, m);
  BOOST_TEST(tree.seconds == 0.06006, tt::tolerance(1e-14));  // 2 * 3 * (1e-5 + 0.01)
  BOOST_TEST(tree.steps == 6u);
  BOOST_TEST(sim::tree_allreduce(l, 5, m).seconds == tree.seconds);  // ceil(log2 5) = 3
  BOOST_TEST(sim::tree_broadcast(l, 8, m).seconds == 0.03003, tt::tolerance(1e-14));
  BOOST_TEST(sim::tree_broadcast(l, 2, m).steps == 1u);
  BOOST_TEST(sim::recursive_doubling_allreduce(l, 8, m).seconds == 0.03003, tt::tolerance(1e-14));
  BOOST_TEST(sim::point_to_point(l, m).seconds == 0.01001, tt::tolerance(1e-14));
  // One rank communicates with no one.
  BOOST_TEST(sim::ring_allreduce(l, 1, m).seconds == 0.0);
  BOOST_TEST(sim::tree_allreduce(l, 1, m).steps == 0u);
}

BOOST_AUTO_TEST_CASE(two_dimensional_torus_and_hierarchical_allreduce_match_hand_computed_costs) {
  // 4 x 4 grid. Horizontal (intra-node): 1 us, 100 GB/s; vertical (inter-node): 10 us,
  // 10 GB/s; m = 160 MB.
  const sim::link h{1e-6, 1e11}, v{1e-5, 1e10};
  const double m = 1.6e8;
  const auto t = sim::torus2d_allreduce(h, v, 4, 4, m);
  // reduce-scatter 3e-6 + 1.2e-3, allreduce of 40 MB 6e-5 + 6e-3, allgather 3e-6 + 1.2e-3
  BOOST_TEST(t.seconds == 8.466e-3, tt::tolerance(1e-13));
  BOOST_TEST(t.steps == 12u);  // 2(X-1) + 2(Y-1), vs 2(XY-1) = 30 for the flat ring
  BOOST_TEST(sim::ring_allreduce(v, 16, m).steps == 30u);
  // Volume per rank 2(X-1)/X m + 2(Y-1)/(XY) m (Mikami et al.).
  BOOST_TEST(t.bytes_per_rank == 2.0 * 3 / 4 * m + 2.0 * 3 / 16 * m, tt::tolerance(1e-14));

  const sim::network net(h, v, 4);
  BOOST_TEST(net.hierarchical_allreduce(16, m).seconds == 8.466e-3, tt::tolerance(1e-13));
  BOOST_TEST(net.torus2d_allreduce(16, m).seconds == 8.466e-3, tt::tolerance(1e-13));
  // Within one node the hierarchy is a ring over the intra-node link.
  BOOST_TEST(net.hierarchical_allreduce(3, m).seconds == 4e-6 + 4.0 / 3 * 1.6e-3, tt::tolerance(1e-13));
  // A flat ring across nodes runs at the inter-node link: 30 alpha + 30/16 m/beta.
  BOOST_TEST(net.ring_allreduce(16, m).seconds == 3e-4 + 0.03, tt::tolerance(1e-13));
  BOOST_TEST(net.ring_allreduce(4, m).seconds == 6e-6 + 1.5 * 1.6e-3, tt::tolerance(1e-13));
  BOOST_TEST(net.broadcast(16, m).seconds == 4 * (1e-5 + 1.6e-2), tt::tolerance(1e-13));
  BOOST_TEST(net.between(0, 3).bandwidth == 1e11);
  BOOST_TEST(net.between(3, 4).bandwidth == 1e10);
  BOOST_TEST(net.send(5, 6, 1e6).seconds == 1e-6 + 1e-5, tt::tolerance(1e-13));
}

BOOST_AUTO_TEST_CASE(parameter_server_push_and_pull_share_the_servers_links) {
  const sim::link l{1e-4, 1e9};
  BOOST_TEST(sim::ps_push(l, 1e7).seconds == 0.0101, tt::tolerance(1e-14));
  BOOST_TEST(sim::ps_push(l, 1e7, 4, 2).seconds == 0.0201, tt::tolerance(1e-14));
  BOOST_TEST(sim::ps_pull(l, 1e7, 4, 2).seconds == 0.0201, tt::tolerance(1e-14));
  BOOST_TEST(sim::ps_push_pull(l, 1e7, 4, 2).seconds == 0.0402, tt::tolerance(1e-14));
  const sim::network net({1e-6, 1e11}, l, 8);
  BOOST_TEST(net.ps_push(1e7, 8).seconds == 1e-4 + 0.08, tt::tolerance(1e-14));
}

BOOST_AUTO_TEST_CASE(bad_network_configurations_throw_naming_the_field) {
  check_names([] { sim::point_to_point(sim::link{-1.0, 1e9}, 10); }, "link.latency");
  check_names([] { sim::ring_allreduce(sim::link{0.0, 0.0}, 2, 10); }, "link.bandwidth");
  check_names([] { sim::network(sim::link{0, 0}, sim::link{}, 2); }, "network.intra.bandwidth");
  check_names([] { sim::network(sim::link{}, sim::link{}, 0); }, "network.ranks_per_node");
  check_names([] { sim::ring_allreduce(sim::link{}, 0, 10); }, "ranks");
  check_names([] { sim::ring_allreduce(sim::link{}, 2, -1); }, "bytes");
  check_names([] { sim::network(sim::link{}, sim::link{}, 4).hierarchical_allreduce(6, 1); }, "ranks");
  check_names([] { sim::torus2d_allreduce(sim::link{}, sim::link{-1, 1}, 2, 2, 1); }, "vertical.latency");
}

BOOST_AUTO_TEST_SUITE_END()
