// runtime::target_times (runtime/evaluation.hpp): the first crossing of a target and the
// sustained time (the first evaluation after which every evaluation reaches the target for
// `window` model units), on curves written out by hand; and evaluation_grid's dating of the
// last evaluation where an updates rule held (never before the evaluation before it).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/core/archive.hpp"
#include "heterograd/runtime/evaluation.hpp"

namespace hr = heterograd::runtime;

namespace {

// The times of a curve evaluated at 0, interval, 2 interval, ... (the grid's e * interval).
hr::target_times times_of(const hr::target_rule& r, const std::vector<double>& curve, double interval = 1.0) {
  hr::target_times t;
  for (std::size_t e = 0; e < curve.size(); ++e) t.observe(r, static_cast<double>(e) * interval, curve[e]);
  return t;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(target_times)

BOOST_AUTO_TEST_CASE(a_flat_curve_at_the_target_is_sustained_from_its_first_evaluation) {
  const hr::target_rule r{0, 0.8, false, 2.0};
  const auto t = times_of(r, {0.8, 0.8, 0.8, 0.8});
  BOOST_TEST(t.first.value() == 0.0);
  BOOST_TEST(t.sustained.value() == 0.0);
  BOOST_TEST(t.best.value() == 0.8);
  const auto below = times_of(r, {0.79, 0.79, 0.79, 0.79});  // just under it: never reached
  BOOST_TEST(!below.first.has_value());
  BOOST_TEST(!below.sustained.has_value());
  BOOST_TEST(below.best.value() == 0.79);
}

BOOST_AUTO_TEST_CASE(a_single_lucky_evaluation_is_a_first_crossing_and_no_sustained_time) {
  const hr::target_rule r{0, 0.8, false, 2.0};
  const auto t = times_of(r, {0.5, 0.6, 0.81, 0.7, 0.75, 0.7, 0.72});
  BOOST_TEST(t.first.value() == 2.0);
  BOOST_TEST(!t.sustained.has_value());
  BOOST_TEST(t.best.value() == 0.81);
}

// Reached at 2, lost at 3, reached from 4 on: the sustained time is 4, once 6 (= 4 + window)
// reached it too.
BOOST_AUTO_TEST_CASE(a_noisy_crossing_is_sustained_from_the_evaluation_after_which_it_stays_reached) {
  const hr::target_rule r{0, 0.8, false, 2.0};
  const std::vector<double> curve{0.5, 0.7, 0.82, 0.79, 0.81, 0.83, 0.8, 0.79};
  hr::target_times t;
  for (std::size_t e = 0; e < curve.size(); ++e) {
    t.observe(r, static_cast<double>(e), curve[e]);
    if (e < 6) BOOST_TEST(!t.sustained.has_value(), "after evaluation " << e);
  }
  BOOST_TEST(t.first.value() == 2.0);
  BOOST_TEST(t.sustained.value() == 4.0);  // kept when 7 loses the target again
  BOOST_TEST(t.best.value() == 0.83);
}

BOOST_AUTO_TEST_CASE(a_run_that_ends_inside_the_window_has_no_sustained_time) {
  const hr::target_rule r{0, 0.8, false, 2.0};
  const auto t = times_of(r, {0.5, 0.7, 0.8, 0.9});  // reached at 2 and 3; the window needs 4
  BOOST_TEST(t.first.value() == 2.0);
  BOOST_TEST(!t.sustained.has_value());
}

// Evaluations only see the grid: a window of 1.5 intervals needs the evaluation at t + 2.
BOOST_AUTO_TEST_CASE(a_window_between_grid_points_is_rounded_up_to_the_next_evaluation) {
  const hr::target_rule r{0, 0.8, false, 1.5};
  BOOST_TEST(!times_of(r, {0.5, 0.9, 0.9, 0.7}).sustained.has_value());
  BOOST_TEST(times_of(r, {0.5, 0.9, 0.9, 0.9}).sustained.value() == 1.0);
}

BOOST_AUTO_TEST_CASE(a_window_of_zero_gives_the_first_crossing) {
  const hr::target_rule r{0, 0.8, false, 0.0};
  const auto t = times_of(r, {0.5, 0.6, 0.81, 0.7, 0.75});
  BOOST_TEST(t.first.value() == 2.0);
  BOOST_TEST(t.sustained.value() == 2.0);
}

BOOST_AUTO_TEST_CASE(a_target_below_is_reached_at_or_under_the_value) {
  const hr::target_rule r{0, 0.1, true, 2.0};
  const auto t = times_of(r, {1.0, 0.1, 0.2, 0.09, 0.1, 0.05, 0.3});
  BOOST_TEST(t.first.value() == 1.0);
  BOOST_TEST(t.sustained.value() == 3.0);
  BOOST_TEST(t.best.value() == 0.05);
}

BOOST_AUTO_TEST_CASE(a_nan_evaluation_breaks_the_run_of_reaching_evaluations_and_is_never_the_best) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const hr::target_rule r{0, 0.8, false, 2.0};
  const auto t = times_of(r, {nan, 0.9, 0.9, nan, 0.85, 0.85, 0.85});
  BOOST_TEST(t.first.value() == 1.0);
  BOOST_TEST(t.sustained.value() == 4.0);
  BOOST_TEST(t.best.value() == 0.9);
}

// 8 x 0.1 - 6 x 0.1 = 0.19999999999999996 < 0.2: two intervals of 0.1 all the same.
BOOST_AUTO_TEST_CASE(a_window_of_two_intervals_holds_on_a_grid_whose_times_are_rounded) {
  BOOST_TEST(8 * 0.1 - 6 * 0.1 < 2 * 0.1);  // the rounding this guards against
  const hr::target_rule r{0, 0.8, false, 2 * 0.1};
  const auto t = times_of(r, {0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.9, 0.9, 0.9}, 0.1);
  BOOST_TEST(t.first.value() == 6 * 0.1);
  BOOST_TEST(t.sustained.value() == 6 * 0.1);
  const hr::target_rule longer{0, 0.8, false, 2.001 * 0.1};  // longer than the span seen
  BOOST_TEST(!times_of(longer, {0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.9, 0.9, 0.9}, 0.1).sustained.has_value());
}

// A checkpoint between two evaluations of the streak: the restored times go on as if never
// stopped.
BOOST_AUTO_TEST_CASE(times_restored_from_an_archive_mid_streak_go_on_as_the_uninterrupted_ones) {
  const hr::target_rule r{0, 0.8, false, 2.0};
  const std::vector<double> curve{0.5, 0.82, 0.79, 0.81, 0.83, 0.8, 0.79};
  hr::target_times a;
  for (std::size_t e = 0; e < 5; ++e) a.observe(r, static_cast<double>(e), curve[e]);
  heterograd::archive_writer w;
  w(a);
  hr::target_times b;
  heterograd::archive_reader in(w.bytes());
  in(b);
  BOOST_TEST(in.done());
  BOOST_TEST(b.candidate.value() == 3.0);
  for (std::size_t e = 5; e < curve.size(); ++e) b.observe(r, static_cast<double>(e), curve[e]);
  const auto whole = times_of(r, curve);
  BOOST_TEST(b.first.value() == whole.first.value());
  BOOST_TEST(b.sustained.value() == 3.0);
  BOOST_TEST(whole.sustained.value() == 3.0);
}

BOOST_AUTO_TEST_CASE(a_negative_or_nonfinite_window_is_refused_by_name) {
  auto message = [](double window) {
    try {
      hr::target_rule{0, 0.8, false, window}.validate();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  BOOST_TEST(message(-1.0) == "heterograd: invalid argument 'target.window' = -1: must be finite and >= 0");
  BOOST_TEST(message(std::numeric_limits<double>::quiet_NaN()).find("'target.window' = nan") != std::string::npos);
  BOOST_TEST(message(std::numeric_limits<double>::infinity()).find("'target.window' = inf") != std::string::npos);
  BOOST_TEST(message(0.0) == "accepted");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(evaluation_grid_dates)

// The grid (evaluation_grid): an updates rule that held inside advance dates the last
// evaluation where it held, but never before the evaluation before it. On the real clock the
// method's time of its last update can trail the grid's clock (a result's arrival), so the
// rule can hold "at" 2.98 after the evaluation at 3 saw it unmet: the last one is dated 3, not
// 2.98 (a recorder refuses evaluations out of order). Where it held later (3.5) it is dated
// there, as before.
BOOST_AUTO_TEST_CASE(an_updates_rule_that_held_inside_advance_is_dated_no_earlier_than_the_evaluation_before) {
  for (const double held : {2.98, 3.5}) {
    hr::horizon_rule hz;
    hz.time = 10;
    hz.updates = 30;
    std::uint64_t updates = 0;
    std::vector<hr::grid_point> points;
    const hr::grid_hooks h{[&](double t) {
                             updates = t < 4 ? static_cast<std::uint64_t>(t * 9) : 30;  // 27 at 3: not yet
                             return true;
                           },
                           [&] { return updates; }, [] { return 0.0; }, [&] { return held; }};
    hr::evaluation_grid(hz, 1.0, 0, h, [&](const hr::grid_point& g) {
      points.push_back(g);
      return true;
    });
    BOOST_TEST_REQUIRE(points.size() == 5u);  // 0, 1, 2, 3, and the last at index 4
    BOOST_TEST(points[3].time == 3.0);
    BOOST_TEST(points[4].last);
    BOOST_TEST(points[4].time == std::max(3.0, held));
    for (std::size_t i = 1; i < points.size(); ++i) BOOST_TEST(points[i].time >= points[i - 1].time);
  }
}

BOOST_AUTO_TEST_SUITE_END()
