// Collective schedules as data: a single-threaded simulator runs every rank's schedule with
// FIFO channels between rank pairs, so results and step counts are checked without threads.

#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "comm_test_support.hpp"
#include "heterograd/comm/reduce.hpp"
#include "heterograd/comm/schedule.hpp"

namespace hg = heterograd;
namespace hc = heterograd::comm;

namespace {

/// Runs the schedules of all ranks on `data` (one buffer per rank); throws on a deadlock or
/// on a message whose size does not match its receive.
template <class T>
void simulate(const std::vector<hc::schedule>& s, std::vector<std::vector<T>>& data,
              hc::reduce_op op = hc::reduce_op::sum) {
  const int n = static_cast<int>(s.size());
  std::map<std::pair<int, int>, std::deque<std::vector<T>>> chan;
  std::vector<std::size_t> step(static_cast<std::size_t>(n), 0);
  std::vector<bool> sent(static_cast<std::size_t>(n), false);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      const auto ru = static_cast<std::size_t>(r);
      if (step[ru] == s[ru].steps.size()) continue;
      const auto& st = s[ru].steps[step[ru]];
      if (!sent[ru]) {
        for (const auto& t : st.transfers)
          if (t.what == hc::transfer::kind::send)
            chan[{r, t.peer}].emplace_back(data[ru].begin() + static_cast<std::ptrdiff_t>(t.offset),
                                           data[ru].begin() + static_cast<std::ptrdiff_t>(t.offset + t.count));
        sent[ru] = true;
        progress = true;
      }
      // The step completes when every receive has a message waiting (counted per peer).
      std::map<int, std::size_t> need;
      for (const auto& t : st.transfers)
        if (t.what != hc::transfer::kind::send) ++need[t.peer];
      bool ready = true;
      for (auto& [peer, k] : need) ready = ready && chan[{peer, r}].size() >= k;
      if (!ready) continue;
      for (const auto& t : st.transfers) {
        if (t.what == hc::transfer::kind::send) continue;
        auto msg = std::move(chan[{t.peer, r}].front());
        chan[{t.peer, r}].pop_front();
        if (msg.size() != t.count) throw std::runtime_error("message size mismatch");
        if (t.what == hc::transfer::kind::recv_copy)
          std::copy(msg.begin(), msg.end(), data[ru].begin() + static_cast<std::ptrdiff_t>(t.offset));
        else
          hc::detail::combine(op, data[ru].data() + t.offset, msg.data(), t.count);
      }
      ++step[ru];
      sent[ru] = false;
      progress = true;
    }
  }
  for (int r = 0; r < n; ++r)
    if (step[static_cast<std::size_t>(r)] != s[static_cast<std::size_t>(r)].steps.size())
      throw std::runtime_error("deadlock in schedule");
  for (auto& [k, q] : chan)
    if (!q.empty()) throw std::runtime_error("unreceived message");
}

std::vector<hc::schedule> all_ranks(hc::algorithm a, int n, std::size_t count, int group = 0) {
  std::vector<hc::schedule> s;
  for (int r = 0; r < n; ++r) s.push_back(hc::make_allreduce_schedule(a, r, n, count, 4, group));
  return s;
}

const hc::algorithm kAlgorithms[] = {hc::algorithm::ring, hc::algorithm::recursive_halving_doubling,
                                     hc::algorithm::tree, hc::algorithm::hierarchical,
                                     hc::algorithm::torus_2d};

}  // namespace

BOOST_AUTO_TEST_SUITE(schedules)

BOOST_AUTO_TEST_CASE(every_algorithm_gives_every_rank_the_exact_integer_sum) {
  const auto seed = hg_test::seed();
  for (auto a : kAlgorithms) {
    for (int n = 1; n <= 9; ++n) {
      for (std::size_t count : {0, 1, 3, 7, 64, 1000}) {
        std::vector<std::vector<std::int64_t>> data;
        std::vector<std::int64_t> expected(count, 0);
        for (int r = 0; r < n; ++r) {
          data.push_back(comm_test::integer_input<std::int64_t>(seed, r, count, -1000, 1000));
          for (std::size_t i = 0; i < count; ++i) expected[i] += data.back()[i];
        }
        simulate(all_ranks(a, n, count), data);
        for (int r = 0; r < n; ++r)
          BOOST_TEST(data[static_cast<std::size_t>(r)] == expected,
                     hc::algorithm_name(a) << " n=" << n << " count=" << count << " rank " << r);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(min_and_max_reduce_through_the_same_schedules) {
  const auto seed = hg_test::seed();
  for (auto op : {hc::reduce_op::min, hc::reduce_op::max}) {
    for (auto a : kAlgorithms) {
      const int n = 6;
      const std::size_t count = 50;
      std::vector<std::vector<std::int32_t>> data;
      std::vector<std::int32_t> expected;
      for (int r = 0; r < n; ++r) {
        data.push_back(comm_test::integer_input<std::int32_t>(seed, r, count, -100, 100));
        if (r == 0) expected = data.back();
        for (std::size_t i = 0; i < count; ++i)
          expected[i] = op == hc::reduce_op::min ? std::min(expected[i], data.back()[i])
                                                 : std::max(expected[i], data.back()[i]);
      }
      simulate(all_ranks(a, n, count), data, op);
      for (const auto& d : data) BOOST_TEST(d == expected, hc::algorithm_name(a));
    }
  }
}

BOOST_AUTO_TEST_CASE(torus_2d_takes_2_x_minus_1_plus_2_y_minus_1_steps_against_2_xy_minus_1_for_the_ring) {
  // Mikami et al. (#2): 2(X-1) + 2(Y-1) steps on an X x Y grid, 2(XY-1) for the flat ring.
  for (int X = 1; X <= 6; ++X) {
    for (int Y = 1; Y <= 5; ++Y) {
      const int n = X * Y;
      const std::size_t count = static_cast<std::size_t>(n) * 12;
      for (int r = 0; r < n; ++r) {
        const auto torus = hc::torus_2d_allreduce(r, n, count, X);
        const auto ring = hc::ring_allreduce(r, n, count);
        BOOST_TEST(torus.steps.size() == static_cast<std::size_t>(2 * (X - 1) + 2 * (Y - 1)));
        BOOST_TEST(ring.steps.size() == static_cast<std::size_t>(2 * (n - 1)));
        // Per-rank volume: 2(X-1)/X * S along X plus 2(Y-1)/(XY) * S along Y.
        const std::size_t vol = 2 * static_cast<std::size_t>(X - 1) * count / static_cast<std::size_t>(X) +
                                2 * static_cast<std::size_t>(Y - 1) * count / static_cast<std::size_t>(n);
        BOOST_TEST(torus.elements_sent() == vol);
        BOOST_TEST(ring.elements_sent() == 2 * static_cast<std::size_t>(n - 1) * count / static_cast<std::size_t>(n));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(recursive_halving_doubling_takes_2_log2_p_steps_plus_2_off_powers_of_two) {
  for (int n = 2; n <= 17; ++n) {
    int p = 1, l = 0;
    while (p * 2 <= n) {
      p *= 2;
      ++l;
    }
    for (int r = 0; r < n; ++r) {
      const auto s = hc::recursive_halving_doubling_allreduce(r, n, 1024);
      const bool folded = r < 2 * (n - p);
      const bool idle_partner = folded && r % 2 == 0;  // hands its data over and waits
      const std::size_t expected = idle_partner ? 2 : static_cast<std::size_t>(2 * l) + (folded ? 2 : 0);
      BOOST_TEST(s.steps.size() == expected, "n=" << n << " rank " << r);
    }
  }
}

BOOST_AUTO_TEST_CASE(floating_point_results_of_every_algorithm_match_the_ring_within_reordering_tolerance) {
  const auto seed = hg_test::seed();
  const int n = 8;
  const std::size_t count = 999;
  std::vector<std::vector<float>> ring_data;
  for (int r = 0; r < n; ++r) ring_data.push_back(comm_test::real_input<float>(seed, r, count));
  const auto inputs = ring_data;
  simulate(all_ranks(hc::algorithm::ring, n, count), ring_data);
  for (auto a : kAlgorithms) {
    auto d = inputs;
    simulate(all_ranks(a, n, count), d);
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < count; ++i) {
        // n-1 additions of |x| <= 1 reordered: at most ~2 n eps of the magnitude n.
        BOOST_TEST(std::abs(d[static_cast<std::size_t>(r)][i] - ring_data[0][i]) <= 2.0f * n * n * 1.2e-7f);
      }
      // Every rank of one algorithm holds the same bits.
      BOOST_TEST(d[static_cast<std::size_t>(r)] == d[0], hc::algorithm_name(a));
    }
  }
}

BOOST_AUTO_TEST_CASE(automatic_choice_goes_tree_then_halving_doubling_then_ring_as_buffers_grow_and_exchanges_on_two_ranks) {
  const hc::algorithm_thresholds t{};
  BOOST_TEST(hc::choose_schedule_algorithm(8, t.tree_max_bytes) == hc::algorithm::tree);
  BOOST_TEST(hc::choose_schedule_algorithm(8, t.tree_max_bytes + 1) ==
             hc::algorithm::recursive_halving_doubling);
  BOOST_TEST(hc::choose_schedule_algorithm(8, t.rhd_max_bytes + 1) == hc::algorithm::ring);
  BOOST_TEST(hc::choose_schedule_algorithm(2, t.rhd_max_bytes + 1) ==
             hc::algorithm::recursive_halving_doubling);
  BOOST_TEST(hc::choose_schedule_algorithm(2, 8) == hc::algorithm::recursive_halving_doubling);
  BOOST_TEST(hc::default_torus_x(12) == 4);
  BOOST_TEST(hc::default_torus_x(16) == 4);
  BOOST_TEST(hc::default_torus_x(7) == 7);
}

BOOST_AUTO_TEST_CASE(bad_grid_shapes_are_rejected_with_the_parameter_named) {
  BOOST_CHECK_EXCEPTION(hc::torus_2d_allreduce(0, 6, 10, 4), std::invalid_argument,
                        [](const std::invalid_argument& e) {
                          return std::string(e.what()).find("torus_2d.x") != std::string::npos;
                        });
  BOOST_CHECK_THROW(hc::hierarchical_allreduce(0, 6, 10, 0), std::invalid_argument);
  BOOST_CHECK_THROW(hc::make_allreduce_schedule(hc::algorithm::ring, 3, 3, 10, 4), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
