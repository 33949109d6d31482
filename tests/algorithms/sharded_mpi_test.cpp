// The sharded state (algorithms/sharded/) over MPI ranks (mpirun -np 2, 3; a source of
// decoupled_mpi_test, whose global fixture initialises MPI): per-bucket gathers and
// reduce-scatters through comm/uneven.hpp over MPI send/recv, against the replicated run that
// every rank computes locally with the rank-ordered sum (x_0 + x_1 + ...) / n, bitwise.
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/algorithms/sharded.hpp"
#include "heterograd/core/rng.hpp"
#include "hg_mpi.hpp"

namespace hg = heterograd;
namespace hs = heterograd::algorithms::sharded;
namespace ho = heterograd::optim;

namespace {

std::vector<float> values(std::uint64_t stream, std::size_t n) {
  const hg::counter_rng rng(20260, stream);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(rng.uniform(i, -1.0, 1.0));
  return v;
}

/// Rank r's gradient at step t, a function of the full parameters.
std::vector<float> gradient(int t, int r, const std::vector<float>& p) {
  auto g = values(100 + 10 * static_cast<std::uint64_t>(t) + static_cast<std::uint64_t>(r), p.size());
  for (std::size_t i = 0; i < g.size(); ++i) g[i] += 0.5f * p[i];
  return g;
}

template <class O>
void check(const O& opt, const hs::layout& l) {
  auto& c = mpi_test::world();
  const int n = c.size();
  std::vector<float> rep = values(7, l.size());
  hs::sharded_state<O> sh(opt, l, c.rank(), rep);
  auto rst = opt.init(thrust::cpp::par, hg::span<const float>(rep.data(), rep.size()));
  std::vector<float> full(l.size()), bucket(l.largest_bucket());
  for (int t = 0; t < 3; ++t) {
    sh.gather_all(c, hg::span<float>(full.data(), full.size()));
    BOOST_TEST((std::memcmp(full.data(), rep.data(), full.size() * sizeof(float)) == 0),
               O::name() << " step " << t << " rank " << c.rank());
    const auto g = gradient(t, c.rank(), full);
    for (std::size_t b = l.buckets(); b-- > 0;) {
      sh.gather(c, b, hg::span<float>(bucket.data(), l.bucket_size(b)));
      sh.reduce_gradients(c, b, hg::span<const float>(g.data() + l.bucket_offset(b), l.bucket_size(b)));
    }
    sh.apply(thrust::cpp::par, c);
    std::vector<float> sum = gradient(t, 0, rep);
    for (int q = 1; q < n; ++q) {
      const auto x = gradient(t, q, rep);
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += x[i];
    }
    for (auto& v : sum) v = v / static_cast<float>(n);
    opt.update(thrust::cpp::par, hg::span<const float>(sum.data(), sum.size()), rst,
               hg::span<float>(rep.data(), rep.size()));
  }
  sh.gather_all(c, hg::span<float>(full.data(), full.size()));
  BOOST_TEST((std::memcmp(full.data(), rep.data(), full.size() * sizeof(float)) == 0), O::name() << " at the end");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sharded_mpi)

BOOST_AUTO_TEST_CASE(a_sharded_step_over_mpi_equals_the_replicated_step_bitwise_with_uneven_fractions) {
  const int n = mpi_test::world().size();
  std::vector<double> fr = {0.6, 0.4};
  if (n == 3) fr = {0.5, 0.0, 0.5};
  if (n == 4) fr = {0.4, 0.0, 0.35, 0.25};
  BOOST_REQUIRE(static_cast<int>(fr.size()) == n);
  check(ho::sgd({.lr = 0.05, .weight_decay = 0.01}), hs::layout({fr, {1000, 37, 2500}, 1}));
  check(ho::adam({.lr = 0.01, .weight_decay = 0.01}), hs::layout({fr, {1000, 37, 2500}, 1}));
  const std::vector<std::size_t> tensors = {20000, 300, 17000};
  check(ho::lamb({.lr = 0.01, .tensor_sizes = tensors}), hs::layout({fr, tensors, hs::lamb_granularity}));
}

BOOST_AUTO_TEST_SUITE_END()
