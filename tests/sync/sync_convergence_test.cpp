// Longer runs: SelSync against BSP on a logistic problem (E5's claim at small scale).
#include <cmath>
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "hg_test.hpp"
#include "sync_support.hpp"
#include "heterograd/algorithms/sync.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/data/synthetic.hpp"
#include "heterograd/sim/runtime.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace hg = heterograd;
namespace hs = heterograd::algorithms::sync;
namespace sim = heterograd::sim;
namespace ho = heterograd::optim;
using sync_test::sgd;

namespace {

// Worker w's step-s batch: b rows drawn uniformly (with replacement) from the data.
struct logistic_oracle {
  const hg::data::logistic_regression* p;
  std::uint64_t seed;
  double operator()(std::size_t w, std::uint64_t s, std::size_t b, hg::span<const double> x,
                    hg::span<double> g) const {
    std::vector<std::size_t> idx(b);
    const hg::counter_rng rng(seed, 100 + w);
    for (std::size_t k = 0; k < b; ++k) idx[k] = rng.below(s * b + k, p->rows);
    return p->loss_and_gradient(x, idx, g);
  }
};

double full_loss(const hg::data::logistic_regression& p, hg::span<const double> x) {
  std::vector<double> g(p.dim);
  return p.loss_and_gradient(x, {}, g);
}

}  // namespace

BOOST_AUTO_TEST_CASE(selsync_at_threshold_0_3_is_mostly_local_after_warmup_and_matches_bsp_loss) {
  const std::uint64_t seed = hg_test::seed();
  const auto prob = hg::data::logistic_regression::random(2000, 20, 0.5, 1e-3, seed);
  const std::vector<double> x0(prob.dim, 0.0);
  const std::size_t n = 4, steps = 600;
  const std::vector<std::size_t> b(n, 32);
  logistic_oracle o{&prob, seed};
  hs::bsp<double, ho::sgd, logistic_oracle> base(n, x0, sgd(0.1), o, b,
                                                  {.mode = hs::aggregation::parameters, .sync_time = 4.0});
  hs::selsync<double, ho::sgd, logistic_oracle> sel(n, x0, sgd(0.1), o, b,
                                                     {.threshold = 0.3, .sync_time = 4.0});
  sim::round_runtime<hs::round_stats, sim::fixed_times> r1(n, sim::fixed_times({1, 1, 1, 1}));
  sim::round_runtime<hs::round_stats, sim::fixed_times> r2(n, sim::fixed_times({1, 1, 1, 1}));
  hs::run_rounds(r1, base, steps, sim::run_options{});
  hs::run_rounds(r2, sel, steps, sim::run_options{});
  const std::size_t warm = sel.config().window + 1;
  std::size_t local = 0;
  for (std::size_t t = warm; t < steps; ++t) local += sel.decisions()[t] ? 0 : 1;
  const double frac = static_cast<double>(local) / static_cast<double>(steps - warm);
  const double lb = full_loss(prob, base.params()), ls = full_loss(prob, sel.params());
  BOOST_TEST_MESSAGE("SelSync local fraction " << frac << ", loss " << ls << " vs BSP " << lb
                     << ", virtual time " << r2.engine().now() << " vs " << r1.engine().now());
  BOOST_TEST(frac > 0.5);
  BOOST_TEST(std::fabs(ls - lb) <= 0.02 * lb);
  // Local steps skip the 4-second synchronisation: SelSync's virtual time is lower.
  BOOST_TEST(r2.engine().now() < r1.engine().now());
}
