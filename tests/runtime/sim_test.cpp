// The simulated drivers: runtime::run's evaluation and stopping rules, and the async and round
// runtimes driving small policies written the way the algorithm issues will write theirs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <type_traits>
#include <stdexcept>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "hg_test.hpp"
#include "heterograd/sim/network.hpp"
#include "heterograd/runtime/sim.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace sim = heterograd::sim;
namespace hr = heterograd::runtime;

namespace {

// One worker restarting 1-second jobs; counts finishes; evaluation logs what it saw.
struct counting_handler {
  std::uint64_t finished = 0;
  std::uint64_t stop_after = ~std::uint64_t{0};
  std::vector<std::pair<double, std::uint64_t>> seen;
  void on_job_finished(sim::engine& e, const sim::event& ev) {
    ++finished;
    e.start(ev.worker, 1.0, finished);
  }
  void evaluate(sim::engine& e, double t) {
    BOOST_TEST(e.now() == t);
    seen.emplace_back(t, finished);
  }
  bool done(const sim::engine&) const { return finished >= stop_after; }
};

// Vanilla ASGD on f_i(x) = (x - c_i)^2 / 2 with a per-worker step multiplier: 1 for vanilla
// ASGD, tau_i / tau_max for Rescaled ASGD (Mahran, Maranjyan, Richtarik, arXiv 2605.13434).
struct scalar_asgd {
  double x = 0;
  std::uint64_t k = 0;
  double gamma = 1e-3;
  std::vector<double> step_scale;
  std::uint64_t version() const { return k; }
  template <class Ctl>
  void on_arrival(Ctl& ctl, const hr::arrival& a, double& g) {
    x -= gamma * step_scale[a.worker] * g;
    ctl.applied(a.worker, k - a.version);
    ++k;
  }
};

// Ringmaster ASGD, Alg. 5 (Maranjyan, Tyurin, Richtarik, ICML 2025): after each update
// every other worker's delay grows by one; a worker reaching R is interrupted.
constexpr std::size_t ring_n = 40;
constexpr std::uint64_t ring_R = 6;
struct ringmaster {
  std::uint64_t k = 0;
  std::vector<std::uint64_t> d = std::vector<std::uint64_t>(ring_n, 0);
  std::vector<std::uint64_t> started = std::vector<std::uint64_t>(ring_n, 0);
  std::set<std::pair<sim::worker_id, std::uint64_t>> interrupted;
  std::uint64_t version() const { return k; }
  template <class Ctl>
  void on_arrival(Ctl& ctl, const hr::arrival& a, std::uint64_t& job) {
    BOOST_REQUIRE(job == a.job_index);
    BOOST_REQUIRE(!interrupted.count({a.worker, a.job_index}));
    BOOST_REQUIRE(k - a.version < ring_R);
    ctl.applied(a.worker, k - a.version);
    ++k;
    d[a.worker] = 0;
    for (sim::worker_id j = 0; j < ring_n; ++j) {
      if (j == a.worker || ++d[j] < ring_R) continue;
      interrupted.insert({j, started[j]});
      ctl.interrupt(j);
      d[j] = 0;
    }
  }
};

// Stale synchronous parallel with bound s: a worker more than s pushes ahead of the slowest
// waits; it is released by the slowest worker's push and restarts at that instant.
constexpr std::size_t ssp_n = 4;
constexpr std::uint64_t ssp_s = 2;
template <class Runtime>
struct ssp {
  Runtime* rt = nullptr;
  std::uint64_t k = 0;
  std::vector<std::uint64_t> pushes = std::vector<std::uint64_t>(ssp_n, 0);
  std::uint64_t releases = 0;
  std::uint64_t version() const { return k; }
  template <class Ctl>
  void on_arrival(Ctl& ctl, const hr::arrival& a, int&) {
    ctl.applied(a.worker, k - a.version);
    ++k;
    ++pushes[a.worker];
    const auto lo = *std::min_element(pushes.begin(), pushes.end());
    for (sim::worker_id j = 0; j < ssp_n; ++j) {
      if (ctl.waiting(j) && pushes[j] - lo <= ssp_s) {
        ctl.release(j);
        ++releases;
        BOOST_REQUIRE(rt->engine().current_job(j).start == a.time);
      }
    }
    if (pushes[a.worker] - lo > ssp_s) ctl.hold(a.worker);
    const auto hi = *std::max_element(pushes.begin(), pushes.end());
    BOOST_REQUIRE(hi - lo <= ssp_s + 1);
  }
};

struct bsp {
  std::vector<double> ends;
  template <class Ctl>
  void on_round(Ctl& ctl, std::uint64_t r, std::vector<double>& contributions) {
    for (sim::worker_id w = 0; w < 4; ++w) {
      BOOST_REQUIRE(contributions[w] == 10.0 * static_cast<double>(r) + w);
      ctl.applied(w, 0);
    }
    ends.push_back(ctl.now());
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(runtime)

BOOST_AUTO_TEST_CASE(an_evaluation_at_time_t_sees_every_event_up_to_t_and_none_after) {
  sim::engine e(1);
  e.start(0, 1.0, 0);
  counting_handler h;
  hr::run_options opt;
  opt.horizon = 3.5;
  opt.eval_interval = 1.0;
  const auto s = hr::run(e, h, opt);
  BOOST_TEST(s.events == 3u);
  BOOST_TEST(s.evaluations == 4u);
  BOOST_TEST(s.end_time == 3.5);
  BOOST_TEST(e.now() == 3.5);
  const std::vector<std::pair<double, std::uint64_t>> expected{{0, 0}, {1, 1}, {2, 2}, {3, 3}};
  BOOST_TEST((h.seen == expected));

  // max_events and done() stop the run where they say.
  sim::engine f(1);
  f.start(0, 1.0, 0);
  counting_handler g;
  hr::run_options two;
  two.max_events = 2;
  two.horizon = 100;
  BOOST_TEST(hr::run(f, g, two).events == 2u);
  BOOST_TEST(f.now() == 2.0);
  counting_handler d;
  d.stop_after = 5;
  sim::engine q(1);
  q.start(0, 1.0, 0);
  const auto sd = hr::run(q, d);
  BOOST_TEST(sd.stopped);
  BOOST_TEST(q.now() == 5.0);

  hr::run_options bad;
  bad.eval_interval = -1;
  BOOST_CHECK_THROW(hr::run(q, d, bad), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(vanilla_asgd_converges_to_the_frequency_weighted_optimum_and_rescaled_asgd_to_the_true_one) {
  // E1 (docs/references.md): tau = (1, 2, 4, 8), c = (0, 1, 2, 3). Vanilla ASGD's fixed point is
  // sum(c_i / tau_i) / sum(1 / tau_i) = 1.375 / 1.875; Rescaled ASGD's is mean(c) = 1.5.
  const std::vector<double> c{0, 1, 2, 3};
  const std::vector<double> tau{1, 2, 4, 8};
  for (const bool rescaled : {false, true}) {
    scalar_asgd p;
    p.step_scale = rescaled ? std::vector<double>{1.0 / 8, 2.0 / 8, 4.0 / 8, 1.0}
                            : std::vector<double>{1, 1, 1, 1};
    hr::async_runtime<double, sim::fixed_times> rt(4, sim::fixed_times(tau));
    auto grad = [&](sim::worker_id w, std::uint64_t, std::uint64_t, double& g) { g = p.x - c[w]; };
    hr::run_options opt;
    opt.horizon = rescaled ? 80000.0 : 40000.0;
    rt.run(p, grad, opt);
    // Average over one period of the schedule (lcm of tau = 8) cancels the limit cycle.
    double sum = 0;
    int n = 0;
    opt.horizon += 8.0;
    opt.eval_interval = 0;
    const std::uint64_t k0 = p.k;
    auto watch = [&](sim::worker_id w, std::uint64_t v, std::uint64_t k, double& g) {
      sum += p.x;
      ++n;
      grad(w, v, k, g);
    };
    rt.run(p, watch, opt);
    const double mean = sum / n;
    const double target = rescaled ? 1.5 : 1.375 / 1.875;
    BOOST_TEST_MESSAGE((rescaled ? "rescaled" : "vanilla") << " ASGD: x = " << mean);
    BOOST_TEST(std::fabs(mean - target) < 1e-3);
    BOOST_TEST(p.k - k0 == 15u);  // 8 + 4 + 2 + 1 arrivals per period
    // Every update was applied; the slowest worker's gradients are the stalest.
    const auto& r = rt.recorder();
    BOOST_TEST(r.count(sim::update_outcome::applied) == p.k);
    BOOST_TEST(r.max_staleness() == 14u);
  }
}

BOOST_AUTO_TEST_CASE(ringmaster_with_calculation_stops_never_applies_a_gradient_with_delay_r_or_more) {
  const std::uint64_t seed = hg_test::seed();
  constexpr std::size_t n = ring_n;
  constexpr std::uint64_t R = ring_R;
  ringmaster p;
  const auto model = sim::plus(sim::sqrt_times(n, seed), sim::half_normal_noise(seed));
  hr::async_runtime<std::uint64_t, std::remove_const_t<decltype(model)>> rt(n, model);
  auto compute = [&](sim::worker_id w, std::uint64_t, std::uint64_t k, std::uint64_t& out) {
    p.started[w] = k;
    out = k;
  };
  hr::run_options opt;
  opt.horizon = 500;
  rt.run(p, compute, opt);
  const auto& r = rt.recorder();
  BOOST_TEST(r.count(sim::update_outcome::interrupted) == p.interrupted.size());
  BOOST_TEST(r.count(sim::update_outcome::interrupted) > 0u);
  BOOST_TEST(r.staleness_histogram(sim::update_outcome::applied).size() <= R);
  std::uint64_t finished = 0, cancelled = 0, started = 0;
  for (sim::worker_id w = 0; w < n; ++w) {
    const auto& s = r.worker(w);
    finished += s.jobs_finished;
    cancelled += s.jobs_cancelled;
    started += s.jobs_started;
  }
  BOOST_TEST(finished == p.k);
  BOOST_TEST(cancelled == p.interrupted.size());
  BOOST_TEST(started == finished + cancelled + n);  // n jobs still in flight
}

BOOST_AUTO_TEST_CASE(ssp_blocked_workers_restart_at_the_instant_they_are_released) {
  constexpr std::size_t n = ssp_n;
  using runtime_t = hr::async_runtime<int, sim::fixed_times>;
  runtime_t rt(n, sim::fixed_times({1.0, 1.0, 1.5, 10.0}));
  ssp<runtime_t> p;
  p.rt = &rt;
  hr::run_options opt;
  opt.horizon = 200;
  rt.run(p, [](sim::worker_id, std::uint64_t, std::uint64_t, int&) {}, opt);
  BOOST_TEST(p.releases > 0u);
  // The fast workers spend most of their time blocked: worker 0 computes 3 jobs per 10 s.
  const auto& w0 = rt.recorder().worker(0);
  // Worker 0 pushes at t = 1, 2, 3, is then 3 ahead and waits; each push of worker 3 (every
  // 10 s) lets it compute exactly one more job: 3 + 19 jobs by t = 200, and it waits 7 s in
  // the first period and 9 s in each of the 19 others.
  BOOST_TEST(w0.jobs_finished == 22u);
  BOOST_TEST(w0.busy == 22.0);
  BOOST_TEST(w0.waiting == 7.0 + 19 * 9.0);
  BOOST_TEST(w0.idle == 0.0);
}

BOOST_AUTO_TEST_CASE(synchronous_rounds_end_at_the_slowest_worker_plus_the_communication_time) {
  const std::vector<double> tau{1, 2, 4, 8};
  // Powers of two keep every virtual time exact: 6 alpha + 1.5 m / beta = 3/256 s.
  const sim::link l{0x1p-10, 0x1p30};
  const double comm = sim::ring_allreduce(l, 4, 0x1p22).seconds;
  BOOST_TEST(comm == 3.0 / 256.0);
  hr::round_runtime<double, sim::fixed_times> rt(4, sim::fixed_times(tau), 1, comm);
  bsp p;
  auto compute = [](sim::worker_id w, std::uint64_t round, std::uint64_t k, double& out) {
    BOOST_REQUIRE(k == round);
    out = 10.0 * static_cast<double>(round) + w;
  };
  hr::run_options opt;
  opt.horizon = 10 * (8 + comm);
  opt.eval_interval = 8 + comm;
  std::vector<double> eval_times;
  rt.run(p, compute, opt, [&](double t) {
    eval_times.push_back(t);
    return std::vector<double>{static_cast<double>(p.ends.size())};
  });
  BOOST_TEST(p.ends.size() == 10u);
  for (std::size_t r = 0; r < p.ends.size(); ++r)
    BOOST_TEST(p.ends[r] == static_cast<double>(r + 1) * (8 + comm));
  const auto& rec = rt.recorder();
  BOOST_TEST(rec.evaluations().size() == 11u);
  BOOST_TEST(rec.evaluations().back().values[0] == 10.0);  // round 10 ends exactly then
  const auto& w0 = rec.worker(0);
  BOOST_TEST(w0.busy == 10.0);
  BOOST_TEST(w0.waiting == 10 * (7 + comm));
  BOOST_TEST(rec.count(sim::update_outcome::applied) == 40u);
}

BOOST_AUTO_TEST_SUITE_END()
