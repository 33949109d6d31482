// The sharded state (algorithms/sharded/) over MPI ranks (mpirun -np 2, 3; a source of
// decoupled_mpi_test, whose global fixture initialises MPI): per-bucket gathers and
// reduce-scatters through comm/uneven.hpp over MPI send/recv, against the replicated run that
// every rank computes locally with the rank-ordered sum (x_0 + x_1 + ...) / n, bitwise; and a
// Cephalo run of an MLP (cephalo_run.hpp) with uneven (m_d, a_d, f_d) against its derived-order
// global-batch step, bitwise.
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

/// The B = 12 samples of step t: inputs in [-1, 1] (width 5), labels in [0, 3).
struct cephalo_data {
  std::vector<float> x;
  std::vector<std::int32_t> y;
  hg::nn::batch<float> range(std::size_t b, std::size_t e) const {
    return {hg::span<const float>(x.data() + 5 * b, 5 * (e - b)),
            hg::span<const std::int32_t>(y.data() + b, e - b)};
  }
};
cephalo_data cephalo_samples_of(int t) {
  const auto v = values(9000 + static_cast<std::uint64_t>(t), 12 * 6);
  cephalo_data d;
  d.x.assign(v.begin(), v.begin() + 60);
  for (std::size_t j = 0; j < 12; ++j)
    d.y.push_back(static_cast<std::int32_t>((v[60 + j] + 1.0f) * 1.4999f));
  return d;
}

/// The derived order (cephalo_run.hpp): per device its micro-batch gradients added in order,
/// times float(m_d / B), the devices' sums in rank order, the optimizer on the whole vector.
void cephalo_reference(hg::nn::mlp<float>& model, const ho::adam& opt, ho::state<float>& st,
                       std::vector<float>& p, const hg::balance::cephalo_plan& plan,
                       const cephalo_data& s) {
  const std::size_t n = p.size();
  std::vector<float> total(n), acc(n), g(n);
  std::size_t at = 0;
  for (std::size_t d = 0; d < plan.devices.size(); ++d) {
    const std::size_t m = plan.devices[d].micro_batch;
    for (std::size_t k = 0; k < plan.devices[d].accumulation; ++k, at += m) {
      model.loss_and_gradient(hg::span<const float>(p.data(), n), s.range(at, at + m),
                              hg::span<float>(g.data(), n));
      for (std::size_t i = 0; i < n; ++i) acc[i] = k == 0 ? g[i] : acc[i] + g[i];
    }
    const auto w = static_cast<float>(static_cast<double>(m) / 12.0);
    for (std::size_t i = 0; i < n; ++i) acc[i] *= w;
    for (std::size_t i = 0; i < n; ++i) total[i] = d == 0 ? acc[i] : total[i] + acc[i];
  }
  opt.update(thrust::cpp::par, hg::span<const float>(total.data(), n), st,
             hg::span<float>(p.data(), n));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sharded_mpi)

BOOST_AUTO_TEST_CASE(
    a_sharded_step_over_mpi_equals_the_replicated_step_bitwise_with_uneven_fractions) {
  const int n = mpi_test::world().size();
  std::vector<double> fr = {0.6, 0.4};
  if (n == 3) fr = {0.5, 0.0, 0.5};
  if (n == 4) fr = {0.4, 0.0, 0.35, 0.25};
  BOOST_REQUIRE(static_cast<int>(fr.size()) == n);
  check(ho::sgd({.lr = 0.05, .weight_decay = 0.01}), hs::layout({fr, {1000, 37, 2500}, 1}));
  check(ho::adam({.lr = 0.01, .weight_decay = 0.01}), hs::layout({fr, {1000, 37, 2500}, 1}));
  const std::vector<std::size_t> tensors = {20000, 300, 17000};
  check(ho::lamb({.lr = 0.01, .tensor_sizes = tensors}),
        hs::layout({fr, tensors, hs::lamb_granularity}));
}

BOOST_AUTO_TEST_CASE(a_cephalo_run_over_mpi_equals_its_derived_order_global_batch_step_bitwise) {
  auto& c = mpi_test::world();
  const int n = c.size();
  std::vector<std::tuple<std::size_t, std::size_t, double>> d = {{3, 3, 0.7}, {1, 3, 0.3}};
  if (n == 3) d = {{2, 3, 0.2}, {1, 2, 0.5}, {4, 1, 0.3}};
  if (n == 4) d = {{3, 1, 0.4}, {1, 4, 0.1}, {2, 2, 0.0}, {1, 1, 0.5}};
  BOOST_REQUIRE(static_cast<int>(d.size()) == n);
  hg::balance::cephalo_plan plan;
  for (const auto& [m, a, f] : d) {
    hg::balance::device_plan x;
    x.micro_batch = m;
    x.accumulation = a;
    x.shard_fraction = f;
    plan.devices.push_back(x);
  }
  hg::nn::mlp<float> model({5, 7, 6, 3});
  std::vector<float> p(model.num_params());
  model.init(hg::span<float>(p.data(), p.size()), 31);
  const ho::adam opt({.lr = 0.01, .weight_decay = 0.01});
  hs::cephalo_worker<ho::adam> w(model, opt, plan, 12, c.rank(), p);
  auto st = opt.init(thrust::cpp::par, hg::span<const float>(p.data(), p.size()));
  std::vector<float> full(p.size());
  for (int t = 0; t < 3; ++t) {
    const auto s = cephalo_samples_of(t);
    const auto [b, e] = w.samples();
    w.step(thrust::cpp::par, c, s.range(b, e));  // this rank's samples only
    cephalo_reference(model, opt, st, p, plan, s);
    w.gather(c, hg::span<float>(full.data(), full.size()));
    BOOST_TEST((std::memcmp(full.data(), p.data(), p.size() * sizeof(float)) == 0),
               "step " << t << " rank " << c.rank());
  }
}

BOOST_AUTO_TEST_SUITE_END()
