// E2 of docs/references.md (reduced size): Ringmaster ASGD vs Rennala SGD vs delay-adaptive
// ASGD on the worst-case quadratic of Maranjyan, Tyurin, Richtarik (ICML 2025), n = 1000 simulated
// workers with tau_i = 1 + sqrt(i) (randomly permuted) plus fresh half-normal noise on every
// job, a fixed virtual-time horizon, each method tuned over a small grid as the paper does.
// Expected: final ||grad f||^2 orders Ringmaster <= Rennala < delay-adaptive ASGD.
#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "support.hpp"
#include "heterograd/data/synthetic.hpp"

using namespace async_test;
namespace data = heterograd::data;

namespace {

// Reduced from the paper's d = 1729 to keep the test within seconds; n is the paper's
// reduced n = 1000. Gradient noise N(0, 0.001^2) per coordinate (E||xi||^2 = 2e-4): the
// regime sigma^2 / eps small where the theory separates the methods (their time complexities
// differ in the 1/eps term, the delay-adaptive one paying the harmonic mean of all n
// workers' times, the other two only that of the fastest few).
constexpr std::size_t n = 1000;
constexpr std::size_t d = 200;
constexpr double sigma = 1e-3;
constexpr double horizon = 1000;

// A fixed seed, like the papers' experiments (the ordering was checked over seeds 1..10);
// HG_E2_SEED overrides it.
std::uint64_t e2_seed() {
  if (const char* s = std::getenv("HG_E2_SEED")) return std::strtoull(s, nullptr, 10);
  return 7;
}

template <class Policy>
double final_grad_norm_sq(Policy& p, std::uint64_t seed) {
  const data::worst_case_quadratic q(d, 1.0);
  // Per-job noise |N(0, 1)| (constant scale): tau_i is the heterogeneity, the noise makes
  // every job's time random.
  const auto model = sim::plus(sim::sqrt_times(n, seed),
                               sim::half_normal_noise(seed, 1.0, sim::noise_growth::constant));
  hr::async_runtime<std::vector<double>, std::remove_const_t<decltype(model)>> rt(n, model);
  const hg::counter_rng noise(seed, 0xe2);
  auto grad = [&](sim::worker_id w, std::uint64_t, std::uint64_t k, std::vector<double>& g) {
    g.resize(d);
    q.gradient(p.params(), g);
    data::add_gaussian_noise(g, sigma, noise.substream(w), k);
  };
  hr::run_options opt;
  opt.horizon = horizon;
  rt.run(p, grad, opt);
  const double v = q.grad_norm_sq(p.params());
  return std::isfinite(v) ? v : std::numeric_limits<double>::infinity();
}

async::model_server<double> origin(double gamma) {
  return async::model_server<double>(std::vector<double>(d, 0.0), async::plain_sgd(gamma));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(async_convergence)

BOOST_AUTO_TEST_CASE(ringmaster_beats_rennala_beats_delay_adaptive_asgd_on_the_worst_case_quadratic) {
  const std::uint64_t seed = e2_seed();
  BOOST_TEST_MESSAGE("E2 seed " << seed);
  // Grids around the tuned values (the paper's protocol: gamma in 5^k, R, B in n / 4^j,
  // refined here to the neighbourhood of the optimum found for this instance).
  double ring = std::numeric_limits<double>::infinity();
  for (const auto& [R, gamma] : std::vector<std::pair<std::uint64_t, double>>{{16, 0.1}, {32, 0.05}}) {
    async::ringmaster_asgd p(n, origin(gamma),
                             {.threshold = R, .variant = async::ringmaster_variant::interrupt});
    const double v = final_grad_norm_sq(p, seed);
    BOOST_TEST_MESSAGE("Ringmaster R = " << R << ", gamma = " << gamma << ": " << v);
    ring = std::min(ring, v);
  }
  double rennala = std::numeric_limits<double>::infinity();
  for (const auto& [B, gamma] : std::vector<std::pair<std::size_t, double>>{{8, 1.0}, {16, 1.4}, {32, 1.4}}) {
    async::rennala_sgd p(n, origin(gamma), {.batch = B});
    const double v = final_grad_norm_sq(p, seed);
    BOOST_TEST_MESSAGE("Rennala B = " << B << ", gamma = " << gamma << ": " << v);
    rennala = std::min(rennala, v);
  }
  double adaptive = std::numeric_limits<double>::infinity();
  for (const double gamma : {0.0016, 0.0025, 0.004}) {
    async::delay_adaptive_asgd p(n, origin(gamma));
    const double v = final_grad_norm_sq(p, seed);
    BOOST_TEST_MESSAGE("delay-adaptive gamma = " << gamma << ": " << v);
    adaptive = std::min(adaptive, v);
  }
  BOOST_TEST_MESSAGE("best: Ringmaster " << ring << ", Rennala " << rennala
                                         << ", delay-adaptive " << adaptive);
  const double start = data::worst_case_quadratic(d, 1.0).grad_norm_sq(std::vector<double>(d, 0.0));
  BOOST_TEST(ring < start / 100);  // every method made real progress, the best by 100x
  BOOST_TEST(ring <= rennala);
  BOOST_TEST(rennala < adaptive);
}

BOOST_AUTO_TEST_SUITE_END()
