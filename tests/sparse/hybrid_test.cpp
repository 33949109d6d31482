// The sharded sparse parameter server and the hybrid aggregator over inproc ranks: the same
// parameters as an all-dense allreduce (1e-6), each route forced and automatic, pull/push
// semantics, and the bytes moved at 1% of rows touched (< 5% of dense).

#include <cmath>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "hg_test.hpp"
#include "heterograd/comm/inproc.hpp"
#include "hybrid_model.hpp"

namespace hg = heterograd;
namespace hc = heterograd::comm;
namespace hps = heterograd::algorithms::sparse;
namespace hs = heterograd::sparse;
namespace hi = heterograd::comm::inproc;
namespace hm = hybrid_model;

BOOST_AUTO_TEST_SUITE(hybrid_aggregation)

BOOST_AUTO_TEST_CASE(hybrid_gives_the_parameters_of_an_all_dense_allreduce_on_every_route,
                     *boost::unit_test::timeout(120)) {
  for (int n : {2, 3}) {
    for (double threshold : {-1.0, 0.0, 1.0}) {  // automatic, always dense, always sparse
      hm::config c;
      c.seed = hg_test::seed();
      c.max_sparse_density = threshold;
      std::mutex m;
      double diff = 0;
      std::vector<hps::route> routes;
      hi::spawn(n, [&](hi::communicator comm) {
        const auto ref = hm::run_dense(comm, c);
        const auto hyb = hm::run_hybrid(comm, c);
        std::lock_guard<std::mutex> l(m);
        diff = std::max({diff, hm::max_abs_diff(ref.table, hyb.table), hm::max_abs_diff(ref.dense, hyb.dense)});
        routes = hyb.routes;
      });
      BOOST_TEST_INFO("n = " << n << ", max_sparse_density = " << threshold);
      BOOST_TEST(diff <= 1e-6);
      BOOST_TEST_REQUIRE(routes.size() == 1u);
      // 2000 rows, each rank touching <= 40 rows a step: automatic picks the sparse path.
      BOOST_TEST((routes[0] == (threshold == 0.0 ? hps::route::dense : hps::route::sparse)));
    }
  }
}

BOOST_AUTO_TEST_CASE(automatic_routing_goes_dense_when_most_rows_are_touched) {
  hm::config c;
  c.seed = hg_test::seed();
  // 40 tokens a rank per step over 30 rows of width 1: a pushed row costs 12 bytes (index and
  // value) against 4 per row for the dense allreduce, so the dense path is cheaper.
  c.rows = 30;
  c.width = 1;
  c.steps = 3;
  std::vector<hps::route> routes;
  double diff = 0;
  std::mutex m;
  hi::spawn(2, [&](hi::communicator comm) {
    const auto ref = hm::run_dense(comm, c);
    const auto hyb = hm::run_hybrid(comm, c);
    std::lock_guard<std::mutex> l(m);
    routes = hyb.routes;
    diff = std::max({diff, hm::max_abs_diff(ref.table, hyb.table), hm::max_abs_diff(ref.dense, hyb.dense)});
  });
  BOOST_TEST((routes.at(0) == hps::route::dense));
  BOOST_TEST(diff <= 1e-6);
}

BOOST_AUTO_TEST_CASE(at_one_percent_of_rows_touched_the_hybrid_moves_under_five_percent_of_dense_bytes) {
  for (std::size_t width : {8u, 64u}) {
    hm::config c;
    c.seed = hg_test::seed();
    c.rows = 20000;
    c.width = width;
    c.batch = 40;
    c.tokens = 5;  // 200 row reads a rank per step: 1% of the rows
    c.steps = 4;
    double ratio = 0;
    std::mutex m;
    hi::spawn(2, [&](hi::communicator comm) {
      const auto hyb = hm::run_hybrid(comm, c);
      std::lock_guard<std::mutex> l(m);
      ratio = std::max(ratio, hyb.traffic.ratio());
    });
    BOOST_TEST_INFO("width " << width);
    BOOST_TEST(ratio > 0.0);
    BOOST_TEST(ratio < 0.05);
  }
}

BOOST_AUTO_TEST_CASE(pull_returns_current_rows_in_request_order_and_push_averages_over_ranks) {
  const std::size_t rows = 10, width = 2;
  std::vector<float> init(rows * width);
  for (std::size_t i = 0; i < init.size(); ++i) init[i] = static_cast<float>(i);
  std::mutex m;
  std::vector<std::vector<float>> pulled(3), tables(3);
  std::vector<std::vector<hs::index_t>> touched(3);
  hi::spawn(3, [&](hi::communicator comm) {
    hps::sparse_parameter_server<hi::communicator> ps(comm, rows, width,
                                                      hg::span<const float>(init));
    if (ps.range(comm.rank()).size() != (comm.rank() < 2 ? 4u : 2u))
      throw std::logic_error("blocks of 4 rows");
    hs::row_sparse<float> g(rows, width);
    const float one[] = {1.0f, 1.0f};
    g.push_row(9, hg::span<const float>(one));
    g.push_row(static_cast<hs::index_t>(comm.rank()), hg::span<const float>(one));
    g.push_row(9, hg::span<const float>(one));  // duplicate: aggregated locally
    std::vector<hs::index_t> touched_rows;
    ps.push(g, [&](hs::index_t r, hg::span<float> p, hg::span<const float> gr) {
      touched_rows.push_back(r);
      for (std::size_t j = 0; j < width; ++j) p[j] += gr[j];
    });
    // Row 9: 2 from each of 3 ranks, averaged: +2. Rows 0, 1, 2: +1/3 each.
    const hs::index_t want[] = {9, 0, 9, 5};
    std::vector<float> out(4 * width);
    ps.pull(hg::span<const hs::index_t>(want), hg::span<float>(out));
    std::vector<float> all(rows * width);
    ps.gather_table(hg::span<float>(all));
    std::lock_guard<std::mutex> l(m);
    pulled[comm.rank()] = out;
    tables[comm.rank()] = all;
    touched[comm.rank()] = touched_rows;
  });
  const std::vector<float> expected = {20.0f, 21.0f, 0.0f + 1.0f / 3, 1.0f + 1.0f / 3, 20.0f, 21.0f, 10.0f, 11.0f};
  for (int r = 0; r < 3; ++r) {
    BOOST_TEST(pulled[r] == expected, boost::test_tools::per_element());
    BOOST_TEST(tables[r] == tables[0], boost::test_tools::per_element());
  }
  BOOST_TEST((touched[0] == std::vector<hs::index_t>{0, 1, 2}));  // owner 0: rows 0-3
  BOOST_TEST(touched[1].empty());                                  // owner 1: rows 4-7
  BOOST_TEST((touched[2] == std::vector<hs::index_t>{9}));          // owner 2: rows 8-9
  BOOST_TEST(tables[0][18] == 20.0f);
  BOOST_TEST(tables[0][4] == 4.0f + 1.0f / 3);
  BOOST_TEST(tables[0][6] == 6.0f);  // row 3: nobody touched it
}

BOOST_AUTO_TEST_CASE(bad_options_and_shapes_throw_invalid_argument) {
  BOOST_CHECK_THROW(hps::hybrid_config{.max_sparse_density = 2.0}.validate(),
                    std::invalid_argument);
  hi::spawn(1, [](hi::communicator comm) {
    std::vector<float> init(6);
    BOOST_CHECK_THROW(
        hps::sparse_parameter_server<hi::communicator>(comm, 4, 2, hg::span<const float>(init)),
        std::invalid_argument);
    hps::sparse_parameter_server<hi::communicator> ps(comm, 3, 2, hg::span<const float>(init));
    const hs::index_t bad[] = {3};
    std::vector<float> out(2);
    BOOST_CHECK_THROW(ps.pull(hg::span<const hs::index_t>(bad), hg::span<float>(out)), std::invalid_argument);
  });
}

BOOST_AUTO_TEST_SUITE_END()
