// The forwarding headers of public headers that moved (docs/architecture.md, "Public
// headers"): each still compiles where old code includes it, and its old names are the new
// ones (the same types and functions, not copies). Deprecated aliases are used on purpose.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include <type_traits>

#include <boost/test/unit_test.hpp>

#include "heterograd/algorithms/async/remote.hpp"
#include "heterograd/algorithms/async/threads.hpp"
#include "heterograd/algorithms/sync/drive.hpp"
#include "heterograd/algorithms/sync/threads.hpp"
#include "heterograd/comm/sparse/hybrid.hpp"
#include "heterograd/comm/sparse/parameter_server.hpp"
#include "heterograd/nn/gemm.hpp"
#include "heterograd/sim/runtime.hpp"
#ifdef HG_HAS_MPI
#include "heterograd/algorithms/sync/mpi.hpp"
#endif

namespace hg = heterograd;

BOOST_AUTO_TEST_SUITE(forwarding_headers)

BOOST_AUTO_TEST_CASE(old_paths_give_the_moved_names) {
  static_assert(std::is_same_v<hg::sim::run_options, hg::runtime::run_options>);
  static_assert(std::is_same_v<hg::sim::run_summary, hg::runtime::run_summary>);
  static_assert(std::is_same_v<hg::algorithms::async::remote_options, hg::runtime::remote_options>);
  static_assert(std::is_same_v<hg::algorithms::async::remote_summary, hg::runtime::remote_summary>);
  static_assert(std::is_same_v<hg::comm::hybrid_options, hg::algorithms::sparse::hybrid_config>);
  static_assert(std::is_same_v<hg::comm::sparse_ps_options, hg::algorithms::sparse::sparse_ps_config>);
  static_assert(std::is_same_v<hg::nn::transpose, hg::kernels::transpose>);
  // Code written against the old names runs: a run_options as sim_test's first tests wrote it.
  hg::sim::run_options o;
  o.horizon = 5.0;
  BOOST_TEST(o.horizon == 5.0);
  BOOST_TEST(&hg::nn::set_blas_threads == &hg::kernels::set_blas_threads);
  BOOST_TEST(hg::comm::shard_block(10, 3) == hg::algorithms::sparse::shard_block(10, 3));
}

BOOST_AUTO_TEST_SUITE_END()

#pragma GCC diagnostic pop
