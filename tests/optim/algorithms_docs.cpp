// docs/async.md's, docs/sync.md's, docs/pipeline.md's, docs/balance.md's and docs/elastic.md's parameter tables are the
// descriptions of the methods' and planners'
// config structs, printed with their defaults (tests/support/doc_tables.hpp): a default or a
// rule changed in a header and not in its page fails here, with the table to paste.
#include <string>

#include <boost/test/unit_test.hpp>

#include "doc_tables.hpp"
#include "heterograd/algorithms/async.hpp"
#include "heterograd/algorithms/pipeline/config.hpp"
#include "heterograd/algorithms/sync/biased.hpp"
#include "heterograd/algorithms/sync/bsp.hpp"
#include "heterograd/algorithms/sync/eager.hpp"
#include "heterograd/algorithms/sync/local_sgd.hpp"
#include "heterograd/algorithms/sync/selsync.hpp"
#include "heterograd/balance/dssp.hpp"
#include "heterograd/balance/omnilearn.hpp"
#include "heterograd/balance/pipeline_planner.hpp"
#include "heterograd/runtime/membership.hpp"

#ifndef HG_DOCS_DIR
#error "HG_DOCS_DIR names the docs folder"
#endif

namespace as = heterograd::algorithms::async;
namespace hs = heterograd::algorithms::sync;
namespace hb = heterograd::balance;

namespace {

template <class S>
void check_in(const std::string& page, const S& defaults) {
  const std::string t = hg_test::doc_table(defaults);
  const std::string name(S::description().name);
  const bool found = hg_test::read_page(std::string(HG_DOCS_DIR) + "/" + page).find(t) != std::string::npos;
  BOOST_TEST(found, "docs/" << page << " lacks the table of " << name << "; generated:\n" << t);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(algorithm_docs)

BOOST_AUTO_TEST_CASE(the_async_pages_tables_are_the_server_policies_configs) {
  check_in("async.md", as::delay_adaptive_config{});
  check_in("async.md", as::staleness_scaled_config{});
  check_in("async.md", as::ringmaster_config{});
  check_in("async.md", as::rennala_config{});
  check_in("async.md", as::rescaled_config{});
  check_in("async.md", as::ia2sgd_config{});
  check_in("async.md", as::malenia_config{});
  check_in("async.md", as::ssp_config{});
  check_in("async.md", hb::dssp_config{});
  check_in("async.md", as::dc_asgd_config{});
  check_in("async.md", as::fedbuff_config{});
  check_in("async.md", as::omnilearn_asgd_config{});
}

BOOST_AUTO_TEST_CASE(the_elastic_pages_tables_are_the_real_clock_membership_configs) {
  check_in("elastic.md", heterograd::runtime::membership_options{});
  check_in("elastic.md", heterograd::runtime::deadline_rule{});
}

BOOST_AUTO_TEST_CASE(the_sync_pages_tables_are_the_round_methods_configs) {
  check_in("sync.md", hs::bsp_config{});
  check_in("sync.md", hs::selsync_config{});
  check_in("sync.md", hs::eager_config{});
  check_in("sync.md", hs::local_sgd_config{});
  check_in("sync.md", hs::biased_config{});
  check_in("sync.md", hb::omnilearn_config{});
}

BOOST_AUTO_TEST_CASE(the_pipeline_pages_table_is_the_pipeline_config) {
  check_in("pipeline.md", heterograd::algorithms::pipeline::pipeline_config{});
}

BOOST_AUTO_TEST_CASE(the_balance_pages_table_is_the_pipeline_planners_config) {
  check_in("balance.md", hb::pipeline_plan_config{});
}

BOOST_AUTO_TEST_SUITE_END()
