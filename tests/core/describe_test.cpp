#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/core/describe.hpp"
#include "messages.hpp"

namespace hg = heterograd;

namespace {

enum class mode { fast, careful };

struct inner {
  double scale = 1.0;
  static constexpr auto description() {
    return hg::describe("inner", hg::describe_field("scale", &inner::scale, "a scale",
                                                    hg::finite_above(0)));
  }
};

constexpr hg::choice<mode> modes[] = {{"fast", mode::fast}, {"careful", mode::careful}};

struct toy_config {
  double rate = 0.5;
  double beta = 0.9;
  std::uint64_t count = 6;
  bool flag = true;
  mode how = mode::fast;
  inner nested = {};
  std::vector<int> unchecked = {};

  static constexpr auto description() {
    return hg::describe(
        "toy_config", hg::describe_field("rate", &toy_config::rate, "a rate", hg::finite_at_least(0)),
        hg::describe_field("beta", &toy_config::beta, "a decay", hg::closed_open(0, 1)),
        hg::describe_field("count", &toy_config::count, "a count",
                           hg::with_note(hg::at_least(1), "(0 would do nothing)")),
        hg::describe_field("flag", &toy_config::flag, "a switch"),
        hg::describe_field("how", &toy_config::how, "a mode", modes),
        hg::describe_field("nested", &toy_config::nested, "a nested config"),
        hg::describe_field("unchecked", &toy_config::unchecked, "no rule"));
  }
};

std::string message_of(const toy_config& c) {
  return hg_test::invalid_argument_message([&] { hg::validate_fields(c); });
}

// A list field and a field that accepts part of its enumeration's table.
struct list_config {
  std::vector<std::size_t> steps = {1, 2};
  mode how = mode::careful;
  static constexpr auto description() {
    return hg::describe("list_config",
                        hg::describe_field("steps", &list_config::steps, "per-worker steps", hg::at_least(1)),
                        hg::describe_field("how", &list_config::how, "a mode (fast only)",
                                           std::span(modes).first(1)));
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(describe)

BOOST_AUTO_TEST_CASE(bounds_say_their_rule_in_the_words_of_require) {
  BOOST_TEST(hg::closed_open(0, 1).rule() == "must be in [0, 1)");
  BOOST_TEST(hg::closed(0, 1).rule() == "must be in [0, 1]");
  BOOST_TEST(hg::open_closed(0, 1).rule() == "must be in (0, 1]");
  BOOST_TEST(hg::finite_at_least(0).rule() == "must be finite and >= 0");
  BOOST_TEST(hg::finite_above(0).rule() == "must be finite and > 0");
  BOOST_TEST(hg::at_least(1).rule() == "must be >= 1");
  BOOST_TEST(hg::with_note(hg::at_least(1), "(why)").rule() == "must be >= 1 (why)");
}

BOOST_AUTO_TEST_CASE(bounds_refuse_nan_and_infinities_where_they_say_finite) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  BOOST_TEST(!hg::finite_at_least(0).admits(inf));
  BOOST_TEST(hg::at_least(0).admits(inf));
  BOOST_TEST(!hg::at_least(0).admits(std::nan("")));
  BOOST_TEST(!hg::closed(0, 1).admits(std::nan("")));
  BOOST_TEST(hg::closed_open(0, 1).admits(0.0));
  BOOST_TEST(!hg::closed_open(0, 1).admits(1.0));
  BOOST_TEST(!hg::open_closed(0, 1).admits(0.0));
  BOOST_TEST(hg::bounds{}.admits(std::nan("")));
}

BOOST_AUTO_TEST_CASE(the_defaults_of_a_described_struct_are_valid) {
  BOOST_TEST(message_of(toy_config{}).empty());
}

BOOST_AUTO_TEST_CASE(a_generated_check_names_struct_field_value_and_rule) {
  toy_config c;
  c.beta = 1.0;
  BOOST_TEST(message_of(c) == "heterograd: invalid argument 'toy_config.beta' = 1: must be in [0, 1)");
  c = {};
  c.rate = -0.5;
  BOOST_TEST(message_of(c) ==
             "heterograd: invalid argument 'toy_config.rate' = -0.5: must be finite and >= 0");
  c = {};
  c.count = 0;
  BOOST_TEST(message_of(c) ==
             "heterograd: invalid argument 'toy_config.count' = 0: must be >= 1 (0 would do nothing)");
  c = {};
  c.how = static_cast<mode>(7);
  BOOST_TEST(message_of(c) ==
             "heterograd: invalid argument 'toy_config.how' = 7: must be one of fast, careful");
  c = {};
  c.nested.scale = 0.0;
  BOOST_TEST(message_of(c) ==
             "heterograd: invalid argument 'toy_config.nested.scale' = 0: must be finite and > 0");
}

BOOST_AUTO_TEST_CASE(the_first_broken_rule_in_field_order_is_the_one_reported) {
  toy_config c;
  c.count = 0;
  c.rate = -1.0;
  BOOST_TEST(message_of(c).find("'toy_config.rate'") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_prefix_replaces_the_struct_name) {
  toy_config c;
  c.beta = 2.0;
  try {
    hg::validate_fields(c, "custom");
    BOOST_FAIL("no error");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("'custom.beta' = 2") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(a_description_lists_its_fields_in_order_with_kinds_and_names_of_choices) {
  constexpr auto d = toy_config::description();
  static_assert(d.size() == 7);
  static_assert(std::get<0>(d.fields).kind == hg::field_kind::number);
  static_assert(std::get<2>(d.fields).kind == hg::field_kind::integer);
  static_assert(std::get<3>(d.fields).kind == hg::field_kind::boolean);
  static_assert(std::get<4>(d.fields).kind == hg::field_kind::choice);
  static_assert(std::get<4>(d.fields).name_of(mode::careful) == "careful");
  std::vector<std::string> names;
  d.for_each([&](const auto& f) { names.emplace_back(f.name); });
  BOOST_TEST(names == (std::vector<std::string>{"rate", "beta", "count", "flag", "how", "nested",
                                                "unchecked"}),
             boost::test_tools::per_element());
  BOOST_TEST(std::get<0>(d.fields).of(toy_config{}) == 0.5);
}

BOOST_AUTO_TEST_CASE(a_list_field_checks_every_element_and_names_its_index) {
  constexpr auto d = list_config::description();
  static_assert(std::get<0>(d.fields).kind == hg::field_kind::list);
  list_config c;
  c.how = mode::fast;
  BOOST_TEST(hg_test::invalid_argument_message([&] { hg::validate_fields(c); }).empty());
  c.steps = {3, 0, 5};
  BOOST_TEST(hg_test::invalid_argument_message([&] { hg::validate_fields(c); }) ==
             "heterograd: invalid argument 'list_config.steps[1]' = 0: must be >= 1");
}

BOOST_AUTO_TEST_CASE(a_field_may_accept_part_of_its_enumerations_table) {
  list_config c;  // how = careful: in the enumeration, not in the part the field accepts
  BOOST_TEST(hg_test::invalid_argument_message([&] { hg::validate_fields(c); }) ==
             "heterograd: invalid argument 'list_config.how' = 1: must be one of fast");
  static_assert(hg::name_of(modes, mode::careful) == "careful");
  static_assert(hg::name_of(std::span(modes).first(1), mode::careful).empty());
}

BOOST_AUTO_TEST_SUITE_END()
