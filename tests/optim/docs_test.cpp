// docs/optimizers.md's hyper-parameter tables are the descriptions of the optimizers'
// structs (kernels/hyperparameters.hpp), printed: each table below is generated here from the
// description and the optimizer's own defaults and must appear in the page as it is. When a
// field, a default or a rule changes, the test prints the table to paste.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/core/describe.hpp"
#include "heterograd/optim/loss_scale.hpp"
#include "heterograd/optim/optimizers.hpp"

#ifndef HG_DOCS_DIR
#error "HG_DOCS_DIR names the docs folder"
#endif

namespace hg = heterograd;
namespace ho = heterograd::optim;

namespace {

std::string number_text(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  std::string s = b;
  // 1e-08 -> 1e-8: the exponent as people write it.
  const auto e = s.find("e-0");
  if (e != std::string::npos) s.erase(e + 2, 1);
  return s;
}

template <class M>
std::string value_text(const M& v) {
  if constexpr (std::is_same_v<M, bool>)
    return v ? "true" : "false";
  else if constexpr (std::is_same_v<M, ho::schedule>)
    return number_text(v.value);  // the constant a default schedule holds
  else if constexpr (std::is_arithmetic_v<M>)
    return number_text(static_cast<double>(v));
  else
    return v.empty() ? "{}" : "...";
}

template <class M>
std::string type_text() {
  if constexpr (std::is_same_v<M, bool>)
    return "bool";
  else if constexpr (std::is_same_v<M, double>)
    return "double";
  else if constexpr (std::is_same_v<M, ho::schedule>)
    return "schedule";
  else if constexpr (std::is_integral_v<M>)
    return "integer";
  else
    return "sizes";
}

// "finite and >= 0", "in [0, 1)": the rule without "must be ".
std::string rule_text(const hg::bounds& b) {
  std::string r = b.rule();
  if (r.rfind("must be ", 0) == 0) r = r.substr(8);
  return r;
}

/// The Markdown table of S's description; `others` add "(name: value)" to a default that
/// differs from the first's (AdamW's weight decay).
template <class S>
std::string table(const S& defaults, const std::vector<std::pair<std::string, S>>& others = {}) {
  std::string t = "| type | name | default | rule | meaning |\n|---|---|---|---|---|\n";
  S::description().for_each([&](const auto& f) {
    using M = typename std::remove_cvref_t<decltype(f)>::member_type;
    std::string d = value_text(f.of(defaults));
    for (const auto& [name, o] : others)
      if (value_text(f.of(o)) != value_text(f.of(defaults))) d += " (" + name + ": " + value_text(f.of(o)) + ")";
    std::string rule;
    if constexpr (!std::is_same_v<M, bool> && !std::is_same_v<M, std::vector<std::size_t>>)
      rule = rule_text(f.range);
    std::string row = "|";
    for (const std::string& cell : {type_text<M>(), std::string(f.name), d, rule, std::string(f.meaning)})
      row += cell.empty() ? " |" : " " + cell + " |";
    t += row + "\n";
  });
  return t;
}

std::string page() {
  std::ifstream in(std::string(HG_DOCS_DIR) + "/optimizers.md");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void check_in_page(const std::string& what, const std::string& t) {
  const bool found = page().find(t) != std::string::npos;
  BOOST_TEST(found, "docs/optimizers.md lacks the table of " << what << "; generated:\n" << t);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optimizer_docs)

BOOST_AUTO_TEST_CASE(the_docs_tables_are_the_descriptions_of_the_hyper_parameters) {
  BOOST_TEST_REQUIRE(!page().empty(), "cannot read " HG_DOCS_DIR "/optimizers.md");
  check_in_page("sgd", table(ho::sgd{}.params()));
  check_in_page("momentum/nesterov", table(ho::momentum{}.params()));
  check_in_page("adam/adamw", table(ho::adam{}.params(), {{"adamw", ho::adamw{}.params()}}));
  check_in_page("lamb", table(ho::lamb{}.params()));
  check_in_page("adagrad", table(ho::adagrad{}.params()));
  check_in_page("dynamic_loss_scale", table(ho::loss_scale_config{}));
}

BOOST_AUTO_TEST_CASE(nesterov_and_momentum_share_their_defaults) {
  BOOST_TEST(table(ho::nesterov{}.params()) == table(ho::momentum{}.params()));
}

BOOST_AUTO_TEST_SUITE_END()
