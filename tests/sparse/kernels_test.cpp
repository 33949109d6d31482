// Row-sparse kernels: gather, scatter-add, coalesce and dense <-> sparse against host
// references, typed over the backends, outputs poisoned; determinism of duplicate sums.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "hg_test.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/sparse/kernels.hpp"
#include "heterograd/sparse/row_sparse.hpp"

namespace hg = heterograd;
namespace hs = heterograd::sparse;

namespace {

// nnz random rows of [0, rows) (duplicates likely) with random values.
struct random_rows {
  std::vector<hs::index_t> idx;
  std::vector<float> values;
};
random_rows make_rows(std::uint64_t seed, std::size_t rows, std::size_t width, std::size_t nnz) {
  const hg::counter_rng rng(seed, 11);
  random_rows r;
  for (std::size_t k = 0; k < nnz; ++k) r.idx.push_back(static_cast<hs::index_t>(rng.below(2 * k, rows)));
  for (std::size_t e = 0; e < nnz * width; ++e)
    r.values.push_back(static_cast<float>(rng.uniform(2 * e + 1, -1.0, 1.0)));
  return r;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sparse_kernels)

BOOST_AUTO_TEST_CASE_TEMPLATE(gather_rows_copies_the_listed_rows, B, hg_test::backends) {
  const std::size_t rows = 97, width = 5;
  const auto in = make_rows(hg_test::seed(), rows, width, 40);
  std::vector<float> table(rows * width);
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i) * 0.5f;
  typename B::template vector<float> t(table.begin(), table.end()), out(40 * width, hg_test::poison<float>());
  typename B::template vector<hs::index_t> idx(in.idx.begin(), in.idx.end());
  hs::gather_rows(B::policy(), hg::span<const float, typename B::space>(hg::make_span(t)), width,
                  hg::span<const hs::index_t, typename B::space>(hg::make_span(idx)), hg::make_span(out));
  const auto got = hg_test::to_host(out);
  for (std::size_t k = 0; k < 40; ++k)
    for (std::size_t j = 0; j < width; ++j)
      BOOST_TEST(got[k * width + j] == table[static_cast<std::size_t>(in.idx[k]) * width + j]);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(scatter_add_sums_duplicates_in_list_order_bitwise, B, hg_test::backends) {
  const std::size_t rows = 31, width = 7, nnz = 200;  // many duplicates
  const auto in = make_rows(hg_test::seed(), rows, width, nnz);
  std::vector<float> expected(rows * width, 1.0f);
  for (std::size_t k = 0; k < nnz; ++k)
    for (std::size_t j = 0; j < width; ++j)
      expected[static_cast<std::size_t>(in.idx[k]) * width + j] += -0.5f * in.values[k * width + j];
  typename B::template vector<float> t(rows * width, 1.0f), v(in.values.begin(), in.values.end());
  typename B::template vector<hs::index_t> idx(in.idx.begin(), in.idx.end());
  hs::scatter_add_rows(B::policy(), hg::span<const hs::index_t, typename B::space>(hg::make_span(idx)),
                       hg::span<const float, typename B::space>(hg::make_span(v)), width,
                       hg::make_span(t), -0.5f);
  BOOST_TEST(hg_test::to_host(t) == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(coalesce_sorts_merges_and_sums_in_list_order, B, hg_test::backends) {
  const std::size_t rows = 50, width = 3, nnz = 300;
  const auto in = make_rows(hg_test::seed(), rows, width, nnz);
  std::map<hs::index_t, std::vector<float>> ref;
  for (std::size_t k = 0; k < nnz; ++k) {
    auto [it, fresh] = ref.try_emplace(in.idx[k], in.values.begin() + static_cast<std::ptrdiff_t>(k * width),
                                       in.values.begin() + static_cast<std::ptrdiff_t>((k + 1) * width));
    if (!fresh)
      for (std::size_t j = 0; j < width; ++j) it->second[j] += in.values[k * width + j];
  }
  typename B::template vector<float> v(in.values.begin(), in.values.end()), vo(nnz * width, hg_test::poison<float>());
  typename B::template vector<hs::index_t> idx(in.idx.begin(), in.idx.end()), io(nnz, -7);
  const std::size_t u = hs::coalesce(B::policy(), hg::span<const hs::index_t, typename B::space>(hg::make_span(idx)),
                                     hg::span<const float, typename B::space>(hg::make_span(v)), width,
                                     hg::make_span(io), hg::make_span(vo));
  BOOST_TEST_REQUIRE(u == ref.size());
  const auto gi = hg_test::to_host(io);
  const auto gv = hg_test::to_host(vo);
  std::size_t k = 0;
  for (const auto& [r, vals] : ref) {
    BOOST_TEST(gi[k] == r);
    for (std::size_t j = 0; j < width; ++j) BOOST_TEST(gv[k * width + j] == vals[j]);  // bitwise
    ++k;
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(dense_to_sparse_and_back_is_the_identity, B, hg_test::backends) {
  const std::size_t rows = 120, width = 4;
  const hg::counter_rng rng(hg_test::seed(), 12);
  std::vector<float> dense(rows * width, 0.0f);
  std::vector<hs::index_t> nonzero;
  for (std::size_t r = 0; r < rows; ++r) {
    if (rng.uniform(r) < 0.2) {
      nonzero.push_back(static_cast<hs::index_t>(r));
      dense[r * width + rng.below(rows + r, width)] = static_cast<float>(rng.uniform(3 * rows + r, 0.5, 1.0));
    }
  }
  typename B::template vector<float> d(dense.begin(), dense.end()), vo(rows * width, hg_test::poison<float>());
  typename B::template vector<hs::index_t> io(rows, -7);
  const std::size_t nnz = hs::dense_to_sparse(B::policy(), hg::span<const float, typename B::space>(hg::make_span(d)),
                                              width, hg::make_span(io), hg::make_span(vo));
  BOOST_TEST_REQUIRE(nnz == nonzero.size());
  auto gi = hg_test::to_host(io);
  gi.resize(nnz);
  BOOST_TEST(gi == nonzero, boost::test_tools::per_element());
  typename B::template vector<float> back(rows * width, hg_test::poison<float>());
  hs::sparse_to_dense(B::policy(), hg::span<const hs::index_t, typename B::space>(hg::make_span(io).first(nnz)),
                      hg::span<const float, typename B::space>(hg::make_span(vo).first(nnz * width)), width,
                      hg::make_span(back), true);
  BOOST_TEST(hg_test::to_host(back) == dense, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(the_row_sparse_value_round_trips_and_reports_its_bytes) {
  const std::size_t rows = 1000, width = 16;
  const auto in = make_rows(hg_test::seed(), rows, width, 30);
  hs::row_sparse<float> g(rows, width);
  g.indices = in.idx;
  g.values = in.values;
  BOOST_TEST(g.bytes() == 30 * (8 + 16 * 4));
  BOOST_TEST(g.dense_bytes() == rows * width * 4);
  const auto c = hs::coalesced(thrust::cpp::par, g);
  BOOST_TEST(c.is_coalesced());
  std::vector<float> d1(rows * width), d2(rows * width);
  hs::to_dense(thrust::cpp::par, g, hg::span<float>(d1));
  hs::to_dense(thrust::cpp::par, c, hg::span<float>(d2));
  BOOST_TEST(d1 == d2, boost::test_tools::per_element());  // same sums, same order
  const auto back = hs::from_dense(thrust::cpp::par, hg::span<const float>(d1), width);
  BOOST_TEST((back == c));
  const auto gathered = hs::gather(thrust::cpp::par, hg::span<const float>(d1), width,
                                   hg::span<const hs::index_t>(c.indices));
  BOOST_TEST((gathered == c));
}

BOOST_AUTO_TEST_CASE(bad_arguments_throw_before_anything_changes) {
  std::vector<float> table(10 * 2, 1.0f), vals(2 * 2, 1.0f);
  std::vector<hs::index_t> idx{3, 10};  // 10 is out of range
  BOOST_CHECK_THROW(hs::scatter_add_rows(thrust::cpp::par, hg::span<const hs::index_t>(idx),
                                         hg::span<const float>(vals), 2, hg::span<float>(table)),
                    std::invalid_argument);
  BOOST_TEST(std::all_of(table.begin(), table.end(), [](float v) { return v == 1.0f; }));
  BOOST_CHECK_THROW(hs::row_sparse<float>(10, 0), std::invalid_argument);
  hs::row_sparse<float> g(10, 2);
  BOOST_CHECK_THROW(g.push_row(-1, hg::span<const float>(vals).first(2)), std::invalid_argument);
  BOOST_CHECK_THROW(g.push_row(1, hg::span<const float>(vals)), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
