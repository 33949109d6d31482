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

#include "doc_tables.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/optim/loss_scale.hpp"
#include "heterograd/optim/optimizers.hpp"

#ifndef HG_DOCS_DIR
#error "HG_DOCS_DIR names the docs folder"
#endif

namespace hg = heterograd;
namespace ho = heterograd::optim;

namespace {

template <class S>
std::string table(const S& defaults, const std::vector<std::pair<std::string, S>>& others = {}) {
  return hg_test::doc_table(defaults, others);
}

std::string page() { return hg_test::read_page(std::string(HG_DOCS_DIR) + "/optimizers.md"); }

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
