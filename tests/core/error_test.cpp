#include <cmath>
#include <stdexcept>
#include <string>

#include <boost/test/unit_test.hpp>

#include "heterograd/core/error.hpp"
#include "messages.hpp"

namespace hg = heterograd;

BOOST_AUTO_TEST_SUITE(errors)

using hg_test::invalid_argument_message;

BOOST_AUTO_TEST_CASE(invalid_argument_names_parameter_value_and_rule) {
  const auto m =
      invalid_argument_message([] { hg::require_in_range_co("adam.beta1", 1.0, 0.0, 1.0); });
  BOOST_TEST(m == "heterograd: invalid argument 'adam.beta1' = 1: must be in [0, 1)");
  BOOST_TEST(invalid_argument_message([] { hg::require_positive("eps", 0.0); }) ==
             "heterograd: invalid argument 'eps' = 0: must be > 0");
  BOOST_TEST(invalid_argument_message([] { hg::require_non_negative("lr", -0.5); }) ==
             "heterograd: invalid argument 'lr' = -0.5: must be >= 0");
  BOOST_TEST(invalid_argument_message([] { hg::require_same_size("grads", 3, "params", 4); }) ==
             "heterograd: invalid argument 'grads' = 3: must equal the size of 'params' (4)");
  BOOST_TEST(invalid_argument_message([] {
               hg::require(false, "mode", std::string("x"), "unknown");
             }) == "heterograd: invalid argument 'mode' = x: unknown");
}

BOOST_AUTO_TEST_CASE(valid_arguments_do_not_throw) {
  BOOST_CHECK_NO_THROW(hg::require_in_range("p", 1.0, 0.0, 1.0));
  BOOST_CHECK_NO_THROW(hg::require_positive("n", 1));
  BOOST_CHECK_NO_THROW(hg::require_same_size("a", 2, "b", 2));
  BOOST_CHECK_THROW(hg::require_in_range("p", 1.5, 0.0, 1.0), std::invalid_argument);
  // NaN breaks every ordered rule.
  BOOST_CHECK_THROW(hg::require_positive("lr", std::nan("")), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
