// Asynchronous server policies driven by the simulator: exact fixed points (E1 of
// docs/references.md), exact equivalences (Ringmaster R = infinity is vanilla ASGD), delay
// bounds (Ringmaster, Ringleader, SSP, DSSP), the step rules' formulas, and bad input.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <numeric>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "hg_test.hpp"
#include "support.hpp"
#include "under_test.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/data/synthetic.hpp"
#include "heterograd/optim/optimizers.hpp"

#include "heterograd/balance/dssp.hpp"

// The checkpoint archive (core; heterograd-run writes its checkpoints with it).
#include "heterograd/core/archive.hpp"

using namespace async_test;
namespace data = heterograd::data;

namespace {

double frequency_weighted(const std::vector<double>& c, const std::vector<double>& tau) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    num += c[i] / tau[i];
    den += 1.0 / tau[i];
  }
  return num / den;
}

double mean(const std::vector<double>& c) {
  return std::accumulate(c.begin(), c.end(), 0.0) / static_cast<double>(c.size());
}

async::model_server<double> scalar_server(double gamma, double x0 = 0.0) {
  return async::model_server<double>({x0}, async::plain_sgd(gamma));
}

// Two E1 configurations: the paper's, and one with other centres and times (tau in halves:
// a common period is 15).
struct e1_case {
  std::vector<double> c, tau;
  double window;
};
const std::vector<e1_case> e1_cases{
    {{0, 1, 2, 3}, {1, 2, 4, 8}, 8.0},
    {{-1, 4, 0.5, 2}, {3, 1, 2.5, 1.5}, 15.0},
};

// A heterogeneous noisy problem: worker i owns f_i(x) = |x - c_i|^2 / 2 in d dimensions and
// adds N(0, sigma^2) noise drawn at (seed, worker, job).
struct noisy_mixture {
  std::size_t n, d;
  double sigma;
  std::uint64_t seed;
  std::vector<double> centres;
  noisy_mixture(std::size_t workers, std::size_t dim, double s, std::uint64_t sd)
      : n(workers), d(dim), sigma(s), seed(sd), centres(workers * dim) {
    const hg::counter_rng rng(seed, 0xce);
    for (std::size_t k = 0; k < centres.size(); ++k) centres[k] = rng.normal(k);
  }
  template <class Policy>
  auto gradient(const Policy& p) const {
    return [this, &p](sim::worker_id w, std::uint64_t, std::uint64_t k, std::vector<double>& g) {
      const auto x = p.params();
      g.resize(d);
      const hg::counter_rng rng = hg::counter_rng(seed, 0x9a).substream(w);
      for (std::size_t j = 0; j < d; ++j)
        g[j] = x[j] - centres[w * d + j] + sigma * rng.normal(k * d + j);
    };
  }
};

template <class Policy, class Model>
sim::recorder run_noisy(Policy& p, const noisy_mixture& prob, Model model, double horizon) {
  hr::async_runtime<std::vector<double>, Model> rt(prob.n, model);
  hr::run_options opt;
  opt.horizon = horizon;
  rt.run(p, prob.gradient(p), opt);
  return rt.recorder();
}

auto ringmaster_times(std::size_t n, std::uint64_t seed) {
  return sim::plus(sim::sqrt_times(n, seed), sim::half_normal_noise(seed));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(async_policies)

BOOST_AUTO_TEST_CASE(vanilla_asgd_converges_to_the_frequency_weighted_point) {
  for (const auto& e : e1_cases) {
    async::asgd p(4, scalar_server(5e-3));
    const double x = e1_fixed_point(p, e.c, e.tau, 20000, e.window, [](sim::worker_id) { return 1.0; });
    const double target = frequency_weighted(e.c, e.tau);
    BOOST_TEST_MESSAGE("vanilla ASGD: x = " << x << ", sum(c/tau)/sum(1/tau) = " << target);
    BOOST_TEST(std::fabs(x - target) < 1e-3);
    BOOST_TEST(std::fabs(x - mean(e.c)) > 0.1);  // and not the true optimum
  }
}

// IA^2SGD's warm-up (the authors' rule): no step until every worker has a gradient in the
// table, and none on the arrival that completes it. With fixed times tau_i the slowest worker
// first arrives at tau_max, after sum_{i != slowest} floor(tau_max / tau_i) arrivals of the
// others (no ties): all of them and the completing arrival are buffered. With
// step_on_completion the completing arrival is the first step, with the mean of gradients all
// computed at x0; without the warm-up the first arrival steps.
BOOST_AUTO_TEST_CASE(ia2sgd_takes_no_step_before_every_worker_has_reported) {
  for (const std::vector<double>& tau : {std::vector<double>{1.0, 1.7, 3.1, 7.3}, std::vector<double>{2.3, 0.9, 5.05}}) {
    const std::size_t n = tau.size();
    std::vector<double> c(n);
    for (std::size_t i = 0; i < n; ++i) c[i] = 0.5 + static_cast<double>(i);
    const auto slowest = static_cast<std::size_t>(std::max_element(tau.begin(), tau.end()) - tau.begin());
    std::uint64_t before = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (i != slowest) before += static_cast<std::uint64_t>(std::floor(tau[slowest] / tau[i]));
    const double gamma = 0.1, x0 = 2.0;
    for (const auto& cfg : {async::ia2sgd_config{}, async::ia2sgd_config{.step_on_completion = true},
                            async::ia2sgd_config{.warm_up = false}}) {
      async::ia2sgd p(n, scalar_server(gamma, x0), cfg);
      hr::async_runtime<std::vector<double>, sim::fixed_times> rt(n, sim::fixed_times(tau));
      auto grad = [&](sim::worker_id w, std::uint64_t, std::uint64_t, std::vector<double>& g) {
        g.assign(1, p.params()[0] - c[w]);
      };
      hr::run_options opt;
      opt.horizon = tau[slowest] * (1.0 + 1e-9);  // the slowest worker's first arrival, no later one
      rt.run(p, grad, opt);
      const auto& rec = rt.recorder();
      std::uint64_t arrivals = 0;
      for (sim::worker_id w = 0; w < n; ++w) arrivals += rec.worker(w).jobs_finished;
      BOOST_TEST_CONTEXT("tau " << tau.size() << " workers, warm_up " << cfg.warm_up
                                << ", step_on_completion " << cfg.step_on_completion) {
        BOOST_TEST(arrivals == before + 1);
        if (!cfg.warm_up) {
          BOOST_TEST(rec.count(sim::update_outcome::buffered) == 0u);
          BOOST_TEST(p.version() == before + 1);
        } else if (cfg.step_on_completion) {
          BOOST_TEST(rec.count(sim::update_outcome::buffered) == before);
          BOOST_TEST(p.version() == 1u);
          // Every entry was computed at x0: the one step is gamma times the mean of (x0 - c_i).
          BOOST_TEST(std::fabs(p.params()[0] - (x0 - gamma * (x0 - mean(c)))) < 1e-12);
        } else {
          BOOST_TEST(rec.count(sim::update_outcome::buffered) == before + 1);
          BOOST_TEST(p.version() == 0u);
          BOOST_TEST(p.params()[0] == x0);
        }
      }
    }
  }
}

// The update count on a fixed arrival sequence, counted by hand (issue 50). tau = (1, 2.4, 3.7),
// horizon 7.9; the arrivals in order (time, worker):
//   1 w0, 2 w0, 2.4 w1, 3 w0, 3.7 w2 | 4 w0, 4.8 w1, 5 w0, 6 w0, 7 w0, 7.2 w1, 7.4 w2
// 12 arrivals; the 5th (w2 at 3.7) completes the table. The authors' simulator stores it and
// steps from the 6th on: 7 updates, the first at t = 4 with every entry computed at x0 (w0's
// job from 3 to 4 started before any step). Stepping on the completing arrival makes 8;
// without the warm-up every arrival steps: 12.
BOOST_AUTO_TEST_CASE(ia2sgd_makes_the_authors_update_count_on_a_hand_counted_arrival_sequence) {
  const std::vector<double> tau{1.0, 2.4, 3.7}, c{0.5, 1.5, 2.5};
  const double gamma = 0.1, x0 = 2.0;
  struct expected {
    async::ia2sgd_config cfg;
    std::uint64_t updates_at_4_5, updates_at_7_9;
  };
  for (const auto& e : {expected{{}, 1, 7}, expected{{.step_on_completion = true}, 2, 8},
                        expected{{.warm_up = false}, 6, 12}}) {
    for (const double horizon : {4.5, 7.9}) {
      async::ia2sgd p(3, scalar_server(gamma, x0), e.cfg);
      hr::async_runtime<std::vector<double>, sim::fixed_times> rt(3, sim::fixed_times(tau));
      auto grad = [&](sim::worker_id w, std::uint64_t, std::uint64_t, std::vector<double>& g) {
        g.assign(1, p.params()[0] - c[w]);
      };
      hr::run_options opt;
      opt.horizon = horizon;
      rt.run(p, grad, opt);
      const auto& rec = rt.recorder();
      std::uint64_t arrivals = 0;
      for (sim::worker_id w = 0; w < 3; ++w) arrivals += rec.worker(w).jobs_finished;
      const std::uint64_t updates = horizon < 5 ? e.updates_at_4_5 : e.updates_at_7_9;
      BOOST_TEST_CONTEXT("warm_up " << e.cfg.warm_up << ", step_on_completion "
                                    << e.cfg.step_on_completion << ", horizon " << horizon) {
        BOOST_TEST(arrivals == (horizon < 5 ? 6u : 12u));
        BOOST_TEST(p.version() == updates);
        BOOST_TEST(rec.count(sim::update_outcome::applied) == updates);
        BOOST_TEST(rec.count(sim::update_outcome::buffered) == arrivals - updates);
        if (e.cfg.warm_up && !e.cfg.step_on_completion && horizon < 5)
          BOOST_TEST(std::fabs(p.params()[0] - (x0 - gamma * (x0 - 1.5))) < 1e-12);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(rescaled_asgd_ia2sgd_malenia_and_ringleader_converge_to_the_true_optimum) {
  for (const auto& e : e1_cases) {
    const double target = mean(e.c);
    const auto one = [](sim::worker_id) { return 1.0; };
    {
      async::rescaled_asgd p(4, scalar_server(5e-3));
      // The weight of worker w's steps is gamma_w / gamma = tau_w / tau_max (learnt online).
      const double x = e1_fixed_point(p, e.c, e.tau, 20000, e.window,
                                      [&](sim::worker_id w) { return p.step_scale(w); });
      const double tmax = *std::max_element(e.tau.begin(), e.tau.end());
      for (sim::worker_id w = 0; w < 4; ++w) BOOST_TEST(p.step_scale(w) == e.tau[w] / tmax);
      BOOST_TEST_MESSAGE("rescaled ASGD: x = " << x);
      BOOST_TEST(std::fabs(x - target) < 1e-3);
    }
    {
      async::ia2sgd p(4, scalar_server(5e-3));
      const double x = e1_fixed_point(p, e.c, e.tau, 20000, e.window, one);
      BOOST_TEST_MESSAGE("IA2SGD: x = " << x);
      BOOST_TEST(std::fabs(x - target) < 1e-3);
      BOOST_TEST(std::fabs(p.params()[0] - target) < 1e-3);
    }
    {
      async::ringleader_asgd p(4, scalar_server(5e-3));
      const double x = e1_fixed_point(p, e.c, e.tau, 20000, e.window, one);
      BOOST_TEST_MESSAGE("Ringleader ASGD: x = " << x);
      BOOST_TEST(std::fabs(x - target) < 1e-3);
      BOOST_TEST(std::fabs(p.params()[0] - target) < 1e-3);
    }
    {
      async::malenia_sgd p(4, scalar_server(0.05));
      const double x = e1_fixed_point(p, e.c, e.tau, 20000, e.window, one);
      BOOST_TEST_MESSAGE("Malenia SGD: x = " << x);
      BOOST_TEST(std::fabs(p.params()[0] - target) < 1e-3);
      (void)x;
    }
  }
}

BOOST_AUTO_TEST_CASE(servers_apply_their_updates_through_any_optim_optimizer) {
  namespace optim = heterograd::optim;
  const auto& e = e1_cases[0];
  {
    // Heavy-ball momentum is a linear filter with gain 1 / (1 - mu) at rest: vanilla ASGD's
    // fixed point is unchanged (frequency-weighted), reached with the momentum optimizer.
    async::asgd p(4, async::model_server<double, optim::momentum>(
                         {0.0}, optim::momentum({.lr = 5e-4, .momentum = 0.9})));
    const double x = e1_fixed_point(p, e.c, e.tau, 20000, e.window, [](sim::worker_id) { return 1.0; });
    BOOST_TEST_MESSAGE("vanilla ASGD + momentum: x = " << x);
    BOOST_TEST(std::fabs(x - frequency_weighted(e.c, e.tau)) < 1e-3);
    BOOST_TEST(p.server().optimizer_state().count == static_cast<std::int64_t>(p.version()));
    BOOST_TEST(p.server().optimizer_state().kind == "momentum");
  }
  {
    // Ringleader's table mean vanishes at the true optimum, whatever the optimizer: Adam.
    async::ringleader_asgd p(4, async::model_server<double, optim::adam>({0.0}, optim::adam({.lr = 1e-3})));
    e1_fixed_point(p, e.c, e.tau, 20000, e.window, [](sim::worker_id) { return 1.0; });
    BOOST_TEST_MESSAGE("Ringleader + Adam: x = " << p.params()[0]);
    BOOST_TEST(std::fabs(p.params()[0] - mean(e.c)) < 1e-2);
    BOOST_TEST(p.server().optimizer_state().count == static_cast<std::int64_t>(p.version()));
  }
}

BOOST_AUTO_TEST_CASE(ringmaster_with_an_infinite_threshold_equals_vanilla_asgd_bit_for_bit) {
  const std::uint64_t seed = hg_test::seed();
  const noisy_mixture prob(30, 40, 0.3, seed);
  const std::vector<double> x0(prob.d, 0.5);
  async::asgd vanilla(prob.n, async::model_server<double>(x0, async::plain_sgd(0.02)));
  const auto rv = run_noisy(vanilla, prob, ringmaster_times(prob.n, seed), 300);
  for (const auto variant : {async::ringmaster_variant::discard, async::ringmaster_variant::interrupt}) {
    async::ringmaster_asgd ring(prob.n, async::model_server<double>(x0, async::plain_sgd(0.02)),
                                {.threshold = async::infinite_delay, .variant = variant});
    const auto rr = run_noisy(ring, prob, ringmaster_times(prob.n, seed), 300);
    BOOST_TEST(ring.version() == vanilla.version());
    BOOST_TEST(ring.version() > 1000u);
    BOOST_TEST(std::memcmp(ring.params().data(), vanilla.params().data(),
                           prob.d * sizeof(double)) == 0);
    BOOST_TEST(rr.count(sim::update_outcome::discarded) == 0u);
    BOOST_TEST(rr.count(sim::update_outcome::interrupted) == 0u);
    BOOST_TEST(rr.max_staleness() == rv.max_staleness());
  }
}

BOOST_AUTO_TEST_CASE(ringmaster_never_applies_a_gradient_with_delay_r_or_more) {
  const std::uint64_t seed = hg_test::seed();
  const noisy_mixture prob(40, 10, 0.3, seed);
  for (const std::uint64_t R : {1u, 3u, 8u}) {
    for (const auto variant :
         {async::ringmaster_variant::discard, async::ringmaster_variant::interrupt}) {
      async::ringmaster_asgd p(prob.n, async::model_server<double>(std::vector<double>(prob.d, 0.0),
                                                                   async::plain_sgd(0.01)),
                               {.threshold = R, .variant = variant});
      const auto r = run_noisy(p, prob, ringmaster_times(prob.n, seed), 200);
      const auto& applied = r.staleness_histogram(sim::update_outcome::applied);
      BOOST_TEST(applied.size() <= R);  // histogram index = delay: all < R
      BOOST_TEST(r.count(sim::update_outcome::applied) == p.version());
      const auto& dropped = r.staleness_histogram(sim::update_outcome::discarded);
      for (std::size_t s = 0; s < std::min<std::size_t>(R, dropped.size()); ++s)
        BOOST_TEST(dropped[s] == 0u);
      if (variant == async::ringmaster_variant::discard) {
        BOOST_TEST(r.count(sim::update_outcome::discarded) > 0u);
        BOOST_TEST(r.count(sim::update_outcome::interrupted) == 0u);
      } else {
        BOOST_TEST(r.count(sim::update_outcome::discarded) == 0u);
        BOOST_TEST(r.count(sim::update_outcome::interrupted) > 0u);
        BOOST_TEST(r.count(sim::update_outcome::interrupted) == cancelled_jobs(r));
        // Stopped exactly when R versions behind.
        const auto& stopped = r.staleness_histogram(sim::update_outcome::interrupted);
        BOOST_TEST(stopped.size() == R + 1);
      }
      BOOST_TEST(recorded_outcomes(r) == finished_jobs(r));
    }
  }
}

BOOST_AUTO_TEST_CASE(ringleader_never_uses_a_gradient_older_than_2n_minus_2) {
  const std::uint64_t seed = hg_test::seed();
  for (const std::size_t n : {2u, 7u, 25u}) {
    const noisy_mixture prob(n, 5, 0.5, seed);
    async::ringleader_asgd p(n, async::model_server<double>(std::vector<double>(prob.d, 0.0),
                                                            async::plain_sgd(0.01)));
    const auto model = sim::plus(sim::linear_times(n, seed), sim::half_normal_noise(seed));
    const auto r = run_noisy(p, prob, model, 400.0 * static_cast<double>(n));
    BOOST_TEST_MESSAGE("n = " << n << ": rounds " << p.round() << ", largest delay used "
                              << p.max_delay_used() << " (bound " << 2 * n - 2 << ")");
    BOOST_TEST(p.round() >= 10u);
    BOOST_TEST(p.max_delay_used() <= 2 * n - 2);
    BOOST_TEST(p.max_delay_used() >= n - 1);  // the bound is not vacuous here
    // n updates per round, nothing discarded, no worker ever idle.
    BOOST_TEST(p.version() == p.round() * n + p.updates_in_round());
    BOOST_TEST(r.count(sim::update_outcome::discarded) == 0u);
    BOOST_TEST(recorded_outcomes(r) == finished_jobs(r));
    for (sim::worker_id w = 0; w < n; ++w) BOOST_TEST(r.worker(w).idle == 0.0);
  }
}

BOOST_AUTO_TEST_CASE(ssp_never_lets_a_worker_start_more_than_s_iterations_ahead) {
  const std::uint64_t seed = hg_test::seed();
  const noisy_mixture prob(6, 4, 0.2, seed);
  for (const std::uint64_t s : {0u, 1u, 3u}) {
    async::ssp_server p(prob.n, async::model_server<double>(std::vector<double>(prob.d, 0.0),
                                                            async::plain_sgd(0.01)),
                        {.staleness = s});
    hr::async_runtime<std::vector<double>, sim::fixed_times> rt(
        prob.n, sim::fixed_times({1, 1, 1.5, 2, 3, 7}));
    std::uint64_t worst = 0;
    const auto grad = prob.gradient(p);
    auto watched = [&](sim::worker_id w, std::uint64_t v, std::uint64_t k, std::vector<double>& g) {
      worst = std::max(worst, p.clock(w) - p.min_clock());  // at every iteration start
      grad(w, v, k, g);
    };
    hr::run_options opt;
    opt.horizon = 500;
    rt.run(p, watched, opt);
    BOOST_TEST_MESSAGE("s = " << s << ": largest lead at a start " << worst);
    BOOST_TEST(worst <= s);
    BOOST_TEST(worst == s);  // the fast workers do run s ahead
    BOOST_TEST(p.max_gap_started() == worst);
    // The slowest worker (7 s per job) bounds everyone: at most s + 1 pushes ahead of it.
    for (sim::worker_id w = 0; w < prob.n; ++w) BOOST_TEST(p.clock(w) <= p.clock(5) + s + 1);
    BOOST_TEST(recorded_outcomes(rt.recorder()) == finished_jobs(rt.recorder()));
  }
}

BOOST_AUTO_TEST_CASE(dssp_never_lets_a_worker_start_more_than_s_l_plus_r_max_ahead) {
  const std::uint64_t seed = hg_test::seed();
  const noisy_mixture prob(4, 4, 0.2, seed);
  namespace balance = heterograd::balance;
  for (const std::size_t range : {0u, 4u, 12u}) {
    const balance::dssp_config cfg{.lower = 3, .range = range};
    async::dssp_server p(prob.n, async::model_server<double>(std::vector<double>(prob.d, 0.0),
                                                             async::plain_sgd(0.01)),
                         cfg);
    // E8 (docs/references.md): speeds (1, 1, 1, 3), with noise so the controller has work to do.
    const auto model = sim::plus(sim::fixed_times({1, 1, 1, 3}), sim::half_normal_noise(seed, 0.2));
    hr::async_runtime<std::vector<double>, std::remove_const_t<decltype(model)>> rt(prob.n, model);
    std::size_t worst = 0;
    const auto grad = prob.gradient(p);
    auto watched = [&](sim::worker_id w, std::uint64_t v, std::uint64_t k, std::vector<double>& g) {
      worst = std::max(worst, p.controller().gap(w));
      grad(w, v, k, g);
    };
    hr::run_options opt;
    opt.horizon = 2000;
    rt.run(p, watched, opt);
    BOOST_TEST_MESSAGE("DSSP s_L = 3, r_max = " << range << ": largest lead " << worst);
    BOOST_TEST(worst <= 3 + range);
    BOOST_TEST(worst >= 3u);
    BOOST_TEST(p.max_gap_started() <= 3 + range);
    BOOST_TEST(recorded_outcomes(rt.recorder()) == finished_jobs(rt.recorder()));
  }
}

BOOST_AUTO_TEST_CASE(every_arrival_is_recorded_with_its_delay) {
  const std::uint64_t seed = hg_test::seed();
  const noisy_mixture prob(12, 6, 0.3, seed);
  const std::vector<double> x0(prob.d, 0.0);
  const auto model = ringmaster_times(prob.n, seed);
  auto check = [&](auto& p, const char* name) {
    const auto r = run_noisy(p, prob, model, 300);
    BOOST_TEST_MESSAGE(name << ": " << finished_jobs(r) << " arrivals, " << p.version()
                            << " updates, max delay " << r.max_staleness());
    BOOST_TEST(recorded_outcomes(r) == finished_jobs(r), name);
    BOOST_TEST(r.count(sim::update_outcome::interrupted) == cancelled_jobs(r), name);
    BOOST_TEST(r.count(sim::update_outcome::applied) == p.version(), name);
    BOOST_TEST(finished_jobs(r) > 100u, name);
  };
  auto srv = [&](double lr) { return async::model_server<double>(x0, async::plain_sgd(lr)); };
  { async::asgd p(prob.n, srv(0.01)); check(p, "asgd"); }
  { async::delay_adaptive_asgd p(prob.n, srv(0.01)); check(p, "delay-adaptive"); }
  { async::staleness_scaled_asgd p(prob.n, srv(0.01)); check(p, "staleness-scaled"); }
  { async::ringmaster_asgd p(prob.n, srv(0.01)); check(p, "ringmaster"); }
  { async::rennala_sgd p(prob.n, srv(0.01), {.batch = 4}); check(p, "rennala"); }
  { async::rescaled_asgd p(prob.n, srv(0.01)); check(p, "rescaled"); }
  { async::ia2sgd p(prob.n, srv(0.01)); check(p, "ia2sgd"); }
  { async::malenia_sgd p(prob.n, srv(0.1), {.threshold = 2}); check(p, "malenia"); }
  { async::ringleader_asgd p(prob.n, srv(0.01)); check(p, "ringleader"); }
  { async::ssp_server p(prob.n, srv(0.01)); check(p, "ssp"); }
  { async::dssp_server p(prob.n, srv(0.01)); check(p, "dssp"); }
  { async::dc_asgd p(prob.n, srv(0.01)); check(p, "dc-asgd"); }
  { async::dc_asgd p(prob.n, srv(0.01), {.adaptive = true}); check(p, "dc-asgd-a"); }
  { async::fedbuff p(prob.n, srv(0.01), {.buffer = 5}); check(p, "fedbuff"); }
  {
    std::vector<double> tau(prob.n);
    for (std::size_t i = 0; i < prob.n; ++i) tau[i] = model.duration(static_cast<sim::worker_id>(i), 0, 0, 1);
    async::naive_optimal_asgd p(prob.n, srv(0.01), {.tau = tau, .noise_ratio = 4});
    check(p, "naive optimal");
  }
}

BOOST_AUTO_TEST_CASE(step_rules_follow_their_formulas) {
  // gamma = 1 on a scalar: the step taken is -w(delta) g exactly.
  auto step = [](auto& p, sim::worker_id w, std::uint64_t v, double g) {
    ctl c;
    const double before = p.params()[0];
    p.on_arrival(c, arrival(w, v), std::vector<double>{g});
    return before - p.params()[0];
  };
  {
    async::delay_adaptive_asgd p(4, scalar_server(1.0));
    for (int i = 0; i < 10; ++i) step(p, 0, p.version(), 0.0);  // k = 10
    BOOST_TEST(step(p, 1, 10, 1.0) == 1.0);        // delay 0: n / max(n, 0) = 1
    BOOST_TEST(step(p, 1, 11 - 4, 1.0) == 1.0);    // delay 4 = n
    BOOST_TEST(step(p, 1, 12 - 8, 1.0) == 0.5);    // delay 8: 4 / 8
    BOOST_TEST(std::fabs(step(p, 1, 0, 2.0) - 2.0 * 4.0 / 13.0) < 1e-12);  // delay 13
  }
  {
    async::staleness_scaled_asgd p(4, scalar_server(1.0), {.rule = async::staleness_rule::inverse});
    for (int i = 0; i < 10; ++i) step(p, 0, p.version(), 0.0);
    BOOST_TEST(step(p, 1, 10, 1.0) == 1.0);
    BOOST_TEST(std::fabs(step(p, 1, 11 - 5, 1.0) - 0.2) < 1e-12);
    async::staleness_scaled_asgd q(4, scalar_server(1.0), {.exponent = 0.5});
    for (int i = 0; i < 10; ++i) step(q, 0, q.version(), 0.0);
    BOOST_TEST(std::fabs(step(q, 1, 10 - 3, 1.0) - 0.5) < 1e-12);  // (1 + 3)^(-1/2)
  }
  {
    // Rennala: B fresh gradients, averaged; a stale one is discarded.
    async::rennala_sgd p(3, scalar_server(1.0), {.batch = 3});
    ctl c;
    p.on_arrival(c, arrival(0, 0), std::vector<double>{3.0});
    p.on_arrival(c, arrival(1, 0), std::vector<double>{6.0});
    BOOST_TEST(p.version() == 0u);
    p.on_arrival(c, arrival(2, 0), std::vector<double>{9.0});
    BOOST_TEST(p.version() == 1u);
    BOOST_TEST(p.params()[0] == -6.0);
    p.on_arrival(c, arrival(0, 0), std::vector<double>{100.0});  // computed at version 0 < 1
    BOOST_TEST(c.discarded_delays == std::vector<std::uint64_t>{1});
    BOOST_TEST(p.collected() == 0u);
    BOOST_TEST(c.buffered_delays.size() == 2u);
    BOOST_TEST(c.applied_delays.size() == 1u);
  }
  {
    // FedBuff: K contributions weighted by (1 + delta)^(-1/2), then their mean.
    async::fedbuff p(2, scalar_server(1.0), {.buffer = 2});
    ctl c;
    p.on_arrival(c, arrival(0, 0), std::vector<double>{1.0});
    p.on_arrival(c, arrival(1, 0), std::vector<double>{3.0});
    BOOST_TEST(p.params()[0] == -2.0);
    p.on_arrival(c, arrival(0, 1), std::vector<double>{2.0});   // delay 0
    p.on_arrival(c, arrival(1, 0), std::vector<double>{4.0});   // delay 1: weight 1/sqrt(2)
    BOOST_TEST(std::fabs(p.params()[0] - (-2.0 - (2.0 + 4.0 / std::sqrt(2.0)) / 2)) < 1e-12);
  }
  {
    // DC-ASGD-c: g~ = g + lambda g^2 (x - x_bak).
    async::dc_asgd p(2, scalar_server(1.0, 1.0), {.lambda = 0.5});
    ctl c;
    p.on_arrival(c, arrival(0, 0), std::vector<double>{0.5});  // x: 1 -> 0.5 (x_bak(0) = 1)
    BOOST_TEST(p.params()[0] == 0.5);
    BOOST_TEST(p.backup(0)[0] == 0.5);
    BOOST_TEST(p.backup(1)[0] == 1.0);
    // Worker 1 pulled x = 1, now x = 0.5: g~ = 2 + 0.5 * 4 * (0.5 - 1) = 1.
    p.on_arrival(c, arrival(1, 0), std::vector<double>{2.0});
    BOOST_TEST(p.params()[0] == -0.5);
  }
  {
    // Naive optimal ASGD: m* = argmin (m + S) / sum_{i<=m} 1/tau_(i).
    const std::vector<double> tau{4, 1, 2, 100};
    BOOST_TEST(async::optimal_worker_count(tau, 0.0) == 1u);
    // S = 4: m=1: 5/1 = 5; m=2: 6/1.5 = 4; m=3: 7/1.75 = 4; m=4: 8/1.76 > 4 -> m* = 2.
    BOOST_TEST(async::optimal_worker_count(tau, 4.0) == 2u);
    BOOST_TEST(async::optimal_worker_count(tau, 1000.0) == 4u);
    async::naive_optimal_asgd p(4, scalar_server(1.0), {.tau = tau, .noise_ratio = 4});
    BOOST_TEST(p.active_workers() == 2u);
    BOOST_TEST(p.active(1));
    BOOST_TEST(p.active(2));
    BOOST_TEST(!p.active(0));
    ctl c;
    p.on_start(c);
    BOOST_TEST((c.restarted == std::vector<sim::worker_id>{1, 2}));
    BOOST_TEST((c.held == std::vector<sim::worker_id>{0, 3}));
  }
  {
    // Rescaled ASGD: gamma_i = gamma tau_i / max_j tau_j, tau_i by an EMA of job times.
    async::rescaled_asgd p(2, scalar_server(1.0), {.ema = 0.5});
    ctl c;
    p.on_arrival(c, arrival(0, 0, 0.0, 2.0), std::vector<double>{1.0});  // tau_0 = 2: first
    BOOST_TEST(p.params()[0] == -1.0);                                    // 2 / 2
    p.on_arrival(c, arrival(1, 0, 0.0, 8.0), std::vector<double>{1.0});  // tau_1 = 8
    BOOST_TEST(p.params()[0] == -2.0);
    p.on_arrival(c, arrival(0, 1, 2.0, 6.0), std::vector<double>{1.0});  // tau_0 = (2 + 4) / 2
    BOOST_TEST(p.tau(0) == 3.0);
    BOOST_TEST(p.params()[0] == -2.375);                                  // 3 / 8
  }
}

BOOST_AUTO_TEST_CASE(bad_input_throws_and_leaves_the_server_state_unchanged) {
  const std::vector<double> x0{0.5, -1.0, 2.0};
  auto srv = [&] { return async::model_server<double>(x0, async::plain_sgd(0.1)); };
  const std::vector<double> good{1.0, 2.0, 3.0};
  const std::vector<double> short_grad{1.0, 2.0};
  auto exercise = [&](auto p, const char* name) {
    ctl c;
    // A little history first, so that tables and buffers hold something (four arrivals: a
    // batch or buffer of 3 holds one).
    for (sim::worker_id i = 0; i < 4; ++i) p.on_arrival(c, arrival(i % 3, 0, 0.0, 1.0 + i), good);
    const auto before = p;
    const std::size_t outcomes = c.outcomes();
    BOOST_CHECK_THROW(p.on_arrival(c, arrival(0, p.version()), short_grad), std::invalid_argument);
    BOOST_CHECK_THROW(p.on_arrival(c, arrival(3, p.version()), good), std::invalid_argument);
    BOOST_CHECK_THROW(p.on_arrival(c, arrival(1, p.version() + 1), good), std::invalid_argument);
    BOOST_TEST((p == before), name);
    BOOST_TEST(c.outcomes() == outcomes, name);
    // And it still works afterwards.
    p.on_arrival(c, arrival(1, p.version(), 0.0, 10.0), good);
    BOOST_TEST(c.outcomes() == outcomes + 1, name);
  };
  hg_test::for_each_server_policy(3, srv, exercise);  // every policy (tests/support/under_test.hpp)

  // A job that ends before it starts is no job time (Rescaled ASGD's estimate).
  {
    async::rescaled_asgd p(3, srv());
    ctl c;
    const auto before = p;
    BOOST_CHECK_THROW(p.on_arrival(c, arrival(0, 0, 5.0, 4.0), good), std::invalid_argument);
    BOOST_TEST((p == before));
  }
  // DSSP: a push time before the worker's previous push is no push time (the controller
  // checks it before anything is applied).
  {
    async::dssp_server p(3, srv());
    ctl c;
    p.on_arrival(c, arrival(0, 0, 0.0, 5.0), good);
    const auto before = p;
    BOOST_CHECK_THROW(p.on_arrival(c, arrival(0, 1, 0.0, 4.0), good), std::invalid_argument);
    BOOST_TEST((p == before));
  }
  // Configurations.
  BOOST_CHECK_THROW(async::ringmaster_asgd(3, srv(), {.threshold = 0}), std::invalid_argument);
  BOOST_CHECK_THROW(async::rennala_sgd(3, srv(), {.batch = 0}), std::invalid_argument);
  BOOST_CHECK_THROW(async::fedbuff(3, srv(), {.buffer = 0}), std::invalid_argument);
  BOOST_CHECK_THROW(async::malenia_sgd(3, srv(), {.threshold = 0}), std::invalid_argument);
  BOOST_CHECK_THROW(async::rescaled_asgd(3, srv(), {.ema = 0}), std::invalid_argument);
  BOOST_CHECK_THROW(async::rescaled_asgd(3, srv(), {.initial_tau = {1, 2}}), std::invalid_argument);
  BOOST_CHECK_THROW(async::staleness_scaled_asgd(3, srv(), {.exponent = -1}), std::invalid_argument);
  BOOST_CHECK_THROW(async::dc_asgd(3, srv(), {.mean_square_decay = 1}), std::invalid_argument);
  BOOST_CHECK_THROW(async::naive_optimal_asgd(3, srv(), {.tau = {1, 2}}), std::invalid_argument);
  BOOST_CHECK_THROW(async::naive_optimal_asgd(3, srv(), {.tau = {1, 0, 2}}), std::invalid_argument);
  BOOST_CHECK_THROW(async::asgd(0, srv()), std::invalid_argument);
  BOOST_CHECK_THROW(async::model_server<double>(std::vector<double>{}), std::invalid_argument);
  // The server's own update checks its direction.
  auto s = srv();
  const auto before = s;
  BOOST_CHECK_THROW(s.apply(hg::span<const double>(short_grad)), std::invalid_argument);
  BOOST_CHECK_THROW(s.apply(hg::span<const double>(good), std::nan("")), std::invalid_argument);
  BOOST_TEST((s == before));
}

// DESIGN.md "Errors": a non-finite gradient is a policy (fail / skip / zero), never applied
// silently. Worker k = 1 sends a gradient with a NaN or an infinity in element 1 at step s
// (the server's version when it arrives; computed at s, so every method would use it).
BOOST_AUTO_TEST_CASE(every_server_fails_skips_or_zeroes_a_non_finite_gradient_as_its_policy_says) {
  using nf = async::nonfinite_policy;
  const std::vector<double> x0{0.5, -1.0, 2.0};
  auto srv = [&](nf policy) { return async::model_server<double>(x0, async::plain_sgd(0.1), policy); };
  const std::vector<double> good{1.0, 2.0, 3.0};
  const sim::worker_id k = 1;
  auto exercise = [&](auto make, const char* name) {
    for (const double poison : {std::nan(""), std::numeric_limits<double>::infinity(),
                                -std::numeric_limits<double>::infinity()}) {
      for (const nf policy : {nf::fail, nf::skip, nf::zero}) {
        BOOST_TEST_CONTEXT(name << ", " << async::nonfinite_policy_name(policy) << ", " << poison) {
          auto p = make(srv(policy));
          ctl c;
          // History, so that tables, buffers and clocks hold something and s > 0.
          for (int i = 0; i < 6; ++i)
            p.on_arrival(c, arrival(static_cast<sim::worker_id>(i % 3), p.version(), 0.0, 1.0 + i), good);
          const std::uint64_t s = p.version();
          BOOST_TEST(s > 0u);
          std::vector<double> bad = good;
          bad[1] = poison;
          const auto at = arrival(k, s, 0.0, 10.0);
          const auto before = p;
          const std::size_t outcomes = c.outcomes();
          const std::size_t discarded = c.discarded_delays.size();
          if (policy == nf::fail) {
            try {
              p.on_arrival(c, at, bad);
              BOOST_ERROR("no error");
            } catch (const async::nonfinite_gradient_error& e) {
              BOOST_TEST(e.worker() == k);
              BOOST_TEST(e.step() == s);
              BOOST_TEST(e.index() == 1u);
              const std::string what = e.what();
              BOOST_TEST(what.find("worker 1 ") != std::string::npos, what);
              BOOST_TEST(what.find("step " + std::to_string(s) + " ") != std::string::npos, what);
            }
            BOOST_TEST((p == before));  // parameters, optimizer state, tables: bitwise
            BOOST_TEST(c.outcomes() == outcomes);
          } else if (policy == nf::skip) {
            p.on_arrival(c, at, bad);
            BOOST_TEST((p.server() == before.server()));  // parameters, version, state: bitwise
            BOOST_TEST(p.server().nonfinite_skipped() == 1u);
            BOOST_TEST(c.outcomes() == outcomes + 1);  // recorded once, as discarded
            BOOST_TEST(c.discarded_delays.size() == discarded + 1);
            // It counts nowhere (no batch slot, table entry, clock tick, push): the same next
            // arrivals give the same server as without it.
            auto without = before;
            ctl c2;
            for (int i = 0; i < 4; ++i) {
              const auto next = arrival(static_cast<sim::worker_id>(2 - i % 2 * 2), p.version(), 0.0, 11.0 + i);
              p.on_arrival(c, next, good);
              without.on_arrival(c2, next, good);
            }
            BOOST_TEST((p.server() == without.server()));
          } else {
            auto reference = before;
            std::vector<double> zeroed = good;
            zeroed[1] = 0.0;
            ctl c2;
            p.on_arrival(c, at, bad);
            reference.on_arrival(c2, at, zeroed);
            BOOST_TEST((p == reference));  // bitwise what the zeroed gradient gives
            BOOST_TEST(p.server().nonfinite_skipped() == 0u);
          }
        }
      }
    }
  };
  hg_test::for_each_server_policy_maker(3, exercise);  // every policy (tests/support/under_test.hpp)
  exercise([](auto s) {
    return async::ringmaster_asgd(3, std::move(s), {.threshold = 2, .variant = async::ringmaster_variant::interrupt});
  }, "ringmaster interrupt");
  exercise([](auto s) { return async::ssp_server(3, std::move(s), {.staleness = 1}); }, "ssp, staleness 1");
  // The policy is validated like every other setting.
  BOOST_CHECK_THROW(async::model_server<double>(x0, async::plain_sgd(0.1), static_cast<nf>(7)),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------------
// Checkpoints: every policy's serialize() visits all of its mutable state. A policy run for a
// while, saved to bytes with its runtime (event queue, job counters) and restored into a
// freshly built policy and runtime, is equal to the original (operator==, and the same bytes
// when saved again); both then continue to the same state, trace hash included.

namespace {

using mom = heterograd::optim::momentum;
using time_model = sim::sum_model<sim::fixed_times, sim::half_normal_noise>;

// f_i(x) = |x - c_i|^2 / 2 in 3 dimensions with Gaussian noise drawn from counter k of worker
// i's substream, k the job index (the engine's: no sampler state outside the checkpoint).
template <class P>
auto noisy_gradient(const P& p, std::uint64_t seed) {
  return [&p, seed](sim::worker_id w, std::uint64_t, std::uint64_t k, std::vector<double>& g) {
    const auto x = p.params();
    g.resize(x.size());
    const hg::counter_rng rng(seed, 0xc4ec);
    for (std::size_t j = 0; j < g.size(); ++j)
      g[j] = x[j] - static_cast<double>(w + j) + 0.5 * rng.substream(w).normal(3 * k + j);
  };
}

async::model_server<double, mom> momentum_server() {
  return async::model_server<double, mom>(
      std::vector<double>{0.0, 0.5, -1.0},
      mom(heterograd::optim::momentum_config{.lr = 0.05,
                                                                            .momentum = 0.5}));
}

template <class Policy>
std::vector<std::byte> save(Policy& p, hr::async_runtime<std::vector<double>, time_model>& rt) {
  heterograd::archive_writer w;
  w(p, rt);
  return w.bytes();
}

// Runs make() to t = 23.5, checkpoints, restores into a second make(), runs both to t = 70
// (under `churn` when given: its pending leaves and joins are in the checkpoint's engine).
template <class Make, class Extra>
void check_resume(Make make, Extra extra, const sim::churn_schedule& churn = {}) {
  const std::uint64_t seed = hg_test::seed();
  const std::size_t n = 4;
  auto model = [&] { return sim::plus(sim::linear_times(n, seed, true), sim::half_normal_noise(seed, 0.5)); };
  auto a = make();
  hr::async_runtime<std::vector<double>, time_model> rta(n, model());
  rta.set_churn(churn);
  hr::run_options o;
  o.horizon = 23.5;
  rta.run(a, noisy_gradient(a, seed), o);
  const auto bytes = save(a, rta);
  const std::uint64_t at_save = a.version();

  auto b = make();
  hr::async_runtime<std::vector<double>, time_model> rtb(n, model());
  rtb.set_churn(churn);
  heterograd::archive_reader r(bytes);
  r(b, rtb);
  BOOST_TEST(r.done());
  BOOST_TEST((a == b));
  BOOST_TEST((save(b, rtb) == bytes));
  BOOST_TEST(extra(a) == extra(b));

  o.horizon = 70;
  rta.run(a, noisy_gradient(a, seed), o);
  rtb.run(b, noisy_gradient(b, seed), o);
  BOOST_TEST(at_save > 0u);
  BOOST_TEST(a.version() > at_save);  // the continuation did something
  BOOST_TEST((a == b));
  BOOST_TEST(extra(a) == extra(b));
  BOOST_TEST(rta.engine().trace_hash() == rtb.engine().trace_hash());
  BOOST_TEST(rta.lost_jobs() == rtb.lost_jobs());
  BOOST_TEST((save(a, rta) == save(b, rtb)));
}

constexpr auto none = [](const auto&) { return 0; };

}  // namespace

BOOST_AUTO_TEST_SUITE(async_checkpoints)

BOOST_AUTO_TEST_CASE(rennala_and_naive_optimal_resume_from_bytes_to_the_same_state) {
  check_resume([] { return async::rennala_sgd<double, mom>(4, momentum_server(), {.batch = 3}); },
               [](const auto& p) { return p.collected(); });
  check_resume([] { return async::naive_optimal_asgd<double, mom>(4, momentum_server(), {.tau = {1, 2, 3, 4}, .active = 2}); },
               none);
}

BOOST_AUTO_TEST_CASE(gradient_table_methods_resume_from_bytes_to_the_same_state) {
  check_resume([] { return async::ia2sgd<double, mom>(4, momentum_server()); }, none);
  check_resume([] { return async::malenia_sgd<double, mom>(4, momentum_server(), {.threshold = 1.5}); },
               [](const auto& p) { return p.table().harmonic_count(); });
  check_resume([] { return async::ringleader_asgd<double, mom>(4, momentum_server()); },
               [](const auto& p) { return std::vector<std::uint64_t>{p.round(), p.updates_in_round(), p.max_delay_used()}; });
}

BOOST_AUTO_TEST_CASE(ssp_and_dssp_resume_from_bytes_with_their_clocks_and_waiting_workers) {
  check_resume([] { return async::ssp_server<double, mom>(4, momentum_server(), {.staleness = 1}); },
               [](const auto& p) { return p.max_gap_started(); });
  check_resume([] { return async::dssp_server<double, mom>(4, momentum_server(), heterograd::balance::dssp_config{.lower = 1, .range = 2}); },
               [](const auto& p) { return p.max_gap_started(); });
}

// Issue 46: worker 1 leaves at 10.3 (before the checkpoint at 23.5), worker 3 is absent at
// the start and joins at 40.1, worker 1 returns at 50.2 (after it): the membership, the lost
// jobs and the pending events survive the bytes.
BOOST_AUTO_TEST_CASE(churn_runs_resume_from_bytes_with_their_membership_and_pending_events) {
  sim::churn_schedule c;
  c.absent = {3};
  c.events = {{sim::churn_kind::leave, 1, 10.3, 0},
              {sim::churn_kind::stall, 0, 20.0, 6.0},
              {sim::churn_kind::join, 3, 40.1, 0},
              {sim::churn_kind::join, 1, 50.2, 0}};
  const auto members = [](const auto& p) {
    return std::vector<bool>{p.live(0), p.live(1), p.live(2), p.live(3)};
  };
  check_resume([] { return async::ringmaster_asgd<double, mom>(4, momentum_server(), {.threshold = 2, .variant = async::ringmaster_variant::interrupt}); }, members, c);
  check_resume([] { return async::ia2sgd<double, mom>(4, momentum_server()); }, members, c);
  check_resume([] { return async::ringleader_asgd<double, mom>(4, momentum_server()); },
               [](const auto& p) { return std::vector<std::uint64_t>{p.round(), p.updates_in_round(), p.live_workers()}; }, c);
  check_resume([] { return async::ssp_server<double, mom>(4, momentum_server(), {.staleness = 1}); },
               [](const auto& p) { return std::vector<std::uint64_t>{p.max_gap_started(), p.min_clock(), p.live_workers()}; }, c);
  check_resume([] { return async::dssp_server<double, mom>(4, momentum_server(), heterograd::balance::dssp_config{.lower = 1, .range = 2}); },
               members, c);
  check_resume([] { return async::rescaled_asgd<double, mom>(4, momentum_server()); },
               [](const auto& p) { return std::vector<double>{p.tau(0), p.tau(1), p.tau(2), p.tau(3)}; }, c);
}

BOOST_AUTO_TEST_CASE(dc_asgd_and_fedbuff_resume_from_bytes_to_the_same_state) {
  check_resume([] { return async::dc_asgd<double, mom>(4, momentum_server(), {.adaptive = true}); }, none);
  check_resume([] { return async::fedbuff<double, mom>(4, momentum_server(), {.buffer = 3}); },
               [](const auto& p) { return p.buffered(); });
}

BOOST_AUTO_TEST_CASE(the_dssp_controller_resumes_from_bytes_to_the_same_decisions) {
  heterograd::balance::dssp_controller a(3, {.lower = 1, .range = 3});
  const std::vector<double> period{1.0, 1.7, 3.1};
  std::vector<double> next(period);
  auto push = [&](heterograd::balance::dssp_controller& c, std::vector<double>& t, std::size_t steps) {
    std::vector<heterograd::balance::dssp_decision> out;
    for (std::size_t s = 0; s < steps; ++s) {
      const auto w = static_cast<std::size_t>(std::min_element(t.begin(), t.end()) - t.begin());
      out.push_back(c.on_push(w, t[w]));
      t[w] += period[w];
    }
    return out;
  };
  push(a, next, 11);
  heterograd::archive_writer w;
  w(a);
  heterograd::balance::dssp_controller b(3, {.lower = 1, .range = 3});
  heterograd::archive_reader r(w.bytes());
  r(b);
  BOOST_TEST(r.done());
  BOOST_TEST((a == b));
  auto tb = next;
  const auto da = push(a, next, 20), db = push(b, tb, 20);
  BOOST_TEST((da == db));
  BOOST_TEST((a == b));
}

BOOST_AUTO_TEST_SUITE_END()
