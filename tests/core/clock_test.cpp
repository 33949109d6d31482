#include <stdexcept>
#include <thread>

#include <boost/test/unit_test.hpp>

#include "heterograd/core/clock.hpp"
#include "heterograd/core/concepts.hpp"
#include "heterograd/testing/core_archetypes.hpp"

namespace hg = heterograd;

BOOST_AUTO_TEST_SUITE(clocks)

BOOST_AUTO_TEST_CASE(manual_clock_copies_share_one_time_line) {
  hg::manual_clock c;
  const hg::manual_clock copy = c;
  BOOST_TEST(copy.now().count() == 0.0);
  c.advance(hg::seconds{1.5});
  BOOST_TEST(copy.now().count() == 1.5);
  c.set(hg::seconds{4});
  BOOST_TEST(copy.now().count() == 4.0);
}

BOOST_AUTO_TEST_CASE(manual_clock_rejects_going_backwards_and_keeps_its_time) {
  hg::manual_clock c(hg::seconds{2});
  BOOST_CHECK_THROW(c.advance(hg::seconds{-1}), std::invalid_argument);
  BOOST_CHECK_THROW(c.set(hg::seconds{1}), std::invalid_argument);
  BOOST_TEST(c.now().count() == 2.0);
  BOOST_CHECK_THROW(hg::manual_clock(hg::seconds{-3}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(manual_clock_advances_atomically_from_many_threads) {
  hg::manual_clock c;
  std::thread a([c]() mutable { for (int i = 0; i < 10000; ++i) c.advance(hg::seconds{1}); });
  std::thread b([c]() mutable { for (int i = 0; i < 10000; ++i) c.advance(hg::seconds{1}); });
  a.join();
  b.join();
  BOOST_TEST(c.now().count() == 20000.0);
}

BOOST_AUTO_TEST_CASE(steady_clock_is_monotonic) {
  hg::steady_clock c;
  const auto t0 = c.now();
  const auto t1 = c.now();
  BOOST_TEST(t1.count() >= t0.count());
  BOOST_TEST(t0.count() >= 0.0);
}

BOOST_AUTO_TEST_CASE(clock_concept_accepts_archetypes_and_rejects_unitless_time) {
  static_assert(hg::clock<hg::testing::clock_archetype>);
  static_assert(!hg::clock<hg::testing::not_a_clock>);
  static_assert(hg::flat_span<hg::testing::flat_span_archetype>);
  static_assert(!hg::flat_span<hg::testing::not_a_flat_span>);
  BOOST_TEST(hg::testing::clock_archetype{}.now().count() == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
