// Elastic membership (issue 46; docs/elastic.md): every server policy in a simulated run where
// a worker stalls, one leaves mid-run and a fresh one joins. Invariants across the change:
// conservation of jobs (started = handed over + interrupted + lost + in flight), no update
// applied twice (version = applied outcomes), the leaver's lost jobs exactly as the fixed
// times give them, Ringmaster's delay bound, SSP / DSSP bounds over the members, gradient
// tables without the leaver's entry (their fixed point is the members' mean), and the run
// reaching the fault-free run's tolerance. Hostile schedules are refused by name.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "support.hpp"
#include "heterograd/sim/churn.hpp"

using namespace async_test;

namespace {

constexpr std::size_t n_slots = 5;  // workers 0..3 at the start, 4 joins fresh
constexpr std::size_t dim = 3;
const std::vector<double> tau = {1.0, 1.5, 2.0, 3.0, 1.2};
constexpr double leave_time = 20.3, join_time = 30.1, horizon = 400.0;
constexpr sim::worker_id leaver = 2, joiner = 4;

sim::churn_schedule schedule() {
  sim::churn_schedule s;
  s.absent = {joiner};
  s.events = {{sim::churn_kind::stall, 1, 10.0, 5.0},
              {sim::churn_kind::leave, leaver, leave_time, 0.0},
              {sim::churn_kind::join, joiner, join_time, 0.0}};
  return s;
}
sim::churn_schedule no_churn() {
  sim::churn_schedule s;
  s.absent = {joiner};  // the same four workers, nobody leaves
  return s;
}

// Worker w's gradient of |x - c_w|^2 / 2 plus N(0, sigma^2) noise at (w, job k).
struct problem {
  std::vector<double> c;  // n_slots x dim
  double sigma;
  void gradient(sim::worker_id w, std::uint64_t k, const double* x, std::vector<double>& g) const {
    g.resize(dim);
    const auto rng = hg::counter_rng(46, 0x7c).substream(w);
    for (std::size_t j = 0; j < dim; ++j) g[j] = x[j] - c[w * dim + j] + sigma * rng.normal(k * dim + j);
  }
  // The mean of the centres of `members`.
  std::vector<double> mean_of(const std::vector<sim::worker_id>& members) const {
    std::vector<double> m(dim, 0.0);
    for (auto w : members)
      for (std::size_t j = 0; j < dim; ++j) m[j] += c[w * dim + j] / static_cast<double>(members.size());
    return m;
  }
};
problem homogeneous() {
  problem p{std::vector<double>(n_slots * dim), 0.05};
  for (std::size_t w = 0; w < n_slots; ++w) {
    p.c[w * dim] = 1.0;
    p.c[w * dim + 1] = -2.0;
    p.c[w * dim + 2] = 0.5;
  }
  return p;
}
problem heterogeneous() {
  problem p{std::vector<double>(n_slots * dim), 0.0};
  for (std::size_t k = 0; k < p.c.size(); ++k) p.c[k] = std::sin(1.0 + 0.7 * static_cast<double>(k)) * 3.0;
  return p;
}

double distance(const double* x, const std::vector<double>& target) {
  double s = 0;
  for (std::size_t j = 0; j < dim; ++j) s += (x[j] - target[j]) * (x[j] - target[j]);
  return std::sqrt(s);
}

struct run_result {
  double error = 0;  // distance of the final model to `target`
  std::uint64_t lost = 0, leaver_finished = 0, leaver_started = 0, leaver_interrupted = 0;
  std::vector<std::uint64_t> applied_staleness;  // the applied outcomes' histogram
  double leaver_last_start = -1;  // the leaver's last job start before it left (-1: none)
};

// Runs p under `churn`, checks the invariants every policy keeps, returns what the caller
// checks further.
template <class Policy>
run_result run(Policy& p, const problem& prob, const sim::churn_schedule& churn,
               const std::vector<double>& target, const std::string& name) {
  hr::async_runtime<std::vector<double>, sim::fixed_times> rt(n_slots, sim::fixed_times(tau));
  rt.set_churn(churn);
  hr::run_options opt;
  opt.horizon = horizon;
  double last_start = -1;
  rt.run(p, [&](sim::worker_id w, std::uint64_t, std::uint64_t k, std::vector<double>& g) {
    if (w == leaver && rt.engine().now() < leave_time) last_start = rt.engine().now();
    prob.gradient(w, k, p.params().data(), g);
  }, opt);
  const auto& rec = rt.recorder();
  std::uint64_t started = 0;
  for (sim::worker_id w = 0; w < n_slots; ++w) started += rec.worker(w).jobs_started;
  // Conservation: every job started was handed over (applied, buffered or discarded),
  // stopped by the policy, lost with its worker, or is still running.
  BOOST_TEST(started == recorded_outcomes(rec) + rec.count(sim::update_outcome::interrupted) +
                            rt.lost_jobs() + rt.engine().jobs_in_flight(), name);
  BOOST_TEST(recorded_outcomes(rec) == finished_jobs(rec), name);
  // No update applied twice: one model version per applied outcome.
  BOOST_TEST(p.version() == rec.count(sim::update_outcome::applied), name);
  BOOST_TEST(p.dropped_after_leave() == 0u, name);  // the simulator never delivers a lost job
  BOOST_TEST(p.live_workers() == 4u, name);
  BOOST_TEST(!p.live(churn.events.empty() ? joiner : leaver), name);
  run_result r;
  r.leaver_last_start = last_start;
  r.error = distance(p.params().data(), target);
  r.lost = rt.lost_jobs();
  r.leaver_finished = rec.worker(leaver).jobs_finished;
  r.leaver_started = rec.worker(leaver).jobs_started;
  r.leaver_interrupted = rec.count(leaver, sim::update_outcome::interrupted);
  r.applied_staleness = rec.staleness_histogram(sim::update_outcome::applied);
  BOOST_TEST_MESSAGE(name << ": error " << r.error << ", version " << p.version() << ", lost " << r.lost);
  return r;
}

// The fault-free run and the churn run of `make()`'s policy: both reach `tol` around the
// members' target; the churn run lost exactly the leaver's job in flight.
// How the leaver's jobs can be counted without running the policy: `exact` for a policy that
// never stops or holds a worker, `busy` for one that stops jobs but never holds a worker (it
// is busy at every instant), `may_wait` for SSP / DSSP (a held worker has nothing in flight).
enum class leaver_jobs { exact, busy, may_wait };

template <class Make>
void same_tolerance(Make make, const problem& prob, double tol, const std::string& name,
                    leaver_jobs how = leaver_jobs::exact) {
  auto free_policy = make();
  const auto all = prob.mean_of({0, 1, 2, 3});
  const auto free = run(free_policy, prob, no_churn(), all, name + " (no churn)");
  auto churn_policy = make();
  const auto members = prob.mean_of({0, 1, 3, 4});
  const auto r = run(churn_policy, prob, schedule(), members, name + " (churn)");
  BOOST_TEST(free.error <= tol, name);
  BOOST_TEST(r.error <= tol, name);
  BOOST_TEST(free.lost == 0u, name);
  // Per worker: every job the leaver started finished, was stopped, or was lost.
  BOOST_TEST(r.leaver_started == r.leaver_finished + r.leaver_interrupted + r.lost, name);
  if (how == leaver_jobs::exact) {
    // A worker that is never stopped nor idle has one job in flight when it leaves: the one
    // it started at tau * floor(t / tau), after floor(t / tau) finished ones.
    const auto k = static_cast<std::uint64_t>(std::floor(leave_time / tau[leaver]));
    BOOST_TEST(r.leaver_finished == k, name);
    BOOST_TEST(r.leaver_started == k + 1, name);
  }
  // The jobs lost are the leaver's job in flight at the leave instant, if it had one: its
  // last start (seen by the gradient oracle) plus its fixed time passes the leave.
  const bool in_flight = r.leaver_last_start >= 0 && r.leaver_last_start + tau[leaver] > leave_time;
  BOOST_TEST(r.lost == (in_flight ? 1u : 0u), name);
  if (how != leaver_jobs::may_wait) BOOST_TEST(in_flight, name);
}

auto server(double lr) {
  return async::model_server<double>(std::vector<double>(dim, 0.0), async::plain_sgd(lr));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(elastic_membership)

BOOST_AUTO_TEST_CASE(asgd_family_forgets_the_leavers_job_and_converges_as_without_churn) {
  const auto prob = homogeneous();
  same_tolerance([] { return async::asgd(n_slots, server(0.1)); }, prob, 0.05, "asgd");
  same_tolerance([] { return async::delay_adaptive_asgd(n_slots, server(0.1)); }, prob, 0.05,
                 "delay_adaptive_asgd");
  same_tolerance([] { return async::staleness_scaled_asgd(n_slots, server(0.1)); }, prob, 0.05,
                 "staleness_scaled_asgd");
  same_tolerance([] { return async::fedbuff(n_slots, server(0.5), {.buffer = 3}); }, prob, 0.05,
                 "fedbuff");
  same_tolerance([] { return async::dc_asgd(n_slots, server(0.1)); }, prob, 0.05, "dc_asgd");
  same_tolerance([] { return async::rescaled_asgd(n_slots, server(0.1)); }, prob, 0.05,
                 "rescaled_asgd");
  // The 4 fastest by tau are 0, 4, 1, 2: worker 3 is held throughout, the fresh joiner 4 runs.
  same_tolerance([] { return async::naive_optimal_asgd(n_slots, server(0.1), {.tau = tau, .active = 4}); },
                 prob, 0.05, "naive_optimal_asgd");
}

BOOST_AUTO_TEST_CASE(ringmaster_keeps_every_applied_delay_below_r_across_the_change) {
  const auto prob = homogeneous();
  for (auto variant : {async::ringmaster_variant::discard, async::ringmaster_variant::interrupt}) {
    const std::string name = variant == async::ringmaster_variant::discard ? "ringmaster discard"
                                                                            : "ringmaster interrupt";
    const async::ringmaster_config cfg{.threshold = 3, .variant = variant};
    same_tolerance([&] { return async::ringmaster_asgd(n_slots, server(0.1), cfg); }, prob,
                   0.05, name,
                   variant == async::ringmaster_variant::discard ? leaver_jobs::exact : leaver_jobs::busy);
    auto p = async::ringmaster_asgd(n_slots, server(0.1), cfg);
    const auto r = run(p, prob, schedule(), prob.mean_of({0, 1, 3, 4}), name);
    BOOST_TEST(r.applied_staleness.size() <= cfg.threshold, name);  // no applied delay >= R
  }
}

BOOST_AUTO_TEST_CASE(rennala_keeps_what_it_accepted_and_fills_its_batch_from_the_members) {
  const auto prob = homogeneous();
  same_tolerance([] { return async::rennala_sgd(n_slots, server(0.5), {.batch = 3}); }, prob,
                 0.05, "rennala", leaver_jobs::busy);
}

BOOST_AUTO_TEST_CASE(gradient_tables_drop_the_leavers_entry_and_reach_the_members_mean) {
  // sigma = 0: the tables' fixed point is exactly the mean of the centres they average. With
  // the leaver's entry kept it would be the mean over {0, 1, 2, 3, 4}, 0.39 away or more.
  const auto prob = heterogeneous();
  const double apart = distance(prob.mean_of({0, 1, 3, 4}).data(), prob.mean_of({0, 1, 2, 3, 4}));
  BOOST_TEST(apart > 0.3);
  same_tolerance([] { return async::ia2sgd(n_slots, server(0.2)); }, prob, 1e-6, "ia2sgd");
  same_tolerance([] { return async::malenia_sgd(n_slots, server(0.5)); }, prob, 1e-6, "malenia",
                 leaver_jobs::busy);
  same_tolerance([] { return async::ringleader_asgd(n_slots, server(0.1)); }, prob, 1e-6,
                 "ringleader");
  auto p = async::ringleader_asgd(n_slots, server(0.1));
  run(p, prob, schedule(), prob.mean_of({0, 1, 3, 4}), "ringleader");
  BOOST_TEST(p.current().count(leaver) == 0u);
  BOOST_TEST(p.next().count(leaver) == 0u);
  BOOST_TEST_MESSAGE("ringleader: largest delay used " << p.max_delay_used() << ", rounds " << p.round());
  // Every delay used stays within Ringleader's 2n - 2 (n: the most members at once, 4).
  BOOST_TEST(p.max_delay_used() <= 2u * 4u - 2u, "max delay used " << p.max_delay_used());
}

BOOST_AUTO_TEST_CASE(ssp_and_dssp_bound_the_gap_over_the_members_and_nobody_waits_for_a_leaver) {
  const auto prob = homogeneous();
  const async::ssp_config s{.staleness = 1};
  same_tolerance([&] { return async::ssp_server(n_slots, server(0.1), s); }, prob, 0.05, "ssp",
                 leaver_jobs::may_wait);
  auto p = async::ssp_server(n_slots, server(0.1), s);
  run(p, prob, schedule(), prob.mean_of({0, 1, 3, 4}), "ssp");
  BOOST_TEST_MESSAGE("ssp: largest gap started " << p.max_gap_started());
  BOOST_TEST(p.max_gap_started() <= s.staleness);
  BOOST_TEST(p.clock(joiner) > 0u);
  const hg::balance::dssp_config d{.lower = 1, .range = 2};
  same_tolerance([&] { return async::dssp_server(n_slots, server(0.1), d); }, prob, 0.05, "dssp",
                 leaver_jobs::may_wait);
  auto q = async::dssp_server(n_slots, server(0.1), d);
  run(q, prob, schedule(), prob.mean_of({0, 1, 3, 4}), "dssp");
  BOOST_TEST_MESSAGE("dssp: largest gap started " << q.max_gap_started());
  BOOST_TEST(q.max_gap_started() <= d.lower + d.range);
}

BOOST_AUTO_TEST_CASE(omnilearn_rebalances_over_the_members) {
  const auto prob = homogeneous();
  const auto make = [] {
    return async::omnilearn_asgd(n_slots, server(0.1), std::vector<std::size_t>(n_slots, 32));
  };
  same_tolerance(make, prob, 0.05, "omnilearn");
  auto p = make();
  run(p, prob, schedule(), prob.mean_of({0, 1, 3, 4}), "omnilearn");
  BOOST_TEST(p.rebalances() > 0u);
}

BOOST_AUTO_TEST_CASE(membership_hooks_refuse_a_leave_of_an_absent_and_a_join_of_a_present_worker) {
  auto p = async::asgd(3, server(0.1));
  ctl c;
  BOOST_CHECK_EXCEPTION(p.on_join(c, 1), std::invalid_argument, [](const std::invalid_argument& e) {
    return std::string(e.what()).find("'worker' = 1: must be absent to join") != std::string::npos;
  });
  p.on_leave(c, 1);
  BOOST_TEST(p.live_workers() == 2u);
  BOOST_CHECK_EXCEPTION(p.on_leave(c, 1), std::invalid_argument, [](const std::invalid_argument& e) {
    return std::string(e.what()).find("must be a member to leave") != std::string::npos;
  });
  p.on_leave(c, 0);
  BOOST_CHECK_EXCEPTION(p.on_leave(c, 2), std::invalid_argument, [](const std::invalid_argument& e) {
    return std::string(e.what()).find("must not be the last member") != std::string::npos;
  });
  BOOST_CHECK_THROW(p.on_join(c, 7), std::invalid_argument);
  // A late result of a worker that left is dropped, counted, and changes nothing.
  std::vector<double> g(dim, 1.0);
  p.on_arrival(c, arrival(1, 0), g);
  BOOST_TEST(p.version() == 0u);
  BOOST_TEST(p.dropped_after_leave() == 1u);
  BOOST_TEST(c.discarded_delays.size() == 1u);
  p.on_join(c, 1);
  p.on_arrival(c, arrival(1, 0), g);
  BOOST_TEST(p.version() == 1u);
}

BOOST_AUTO_TEST_CASE(a_gradient_table_step_never_averages_the_entry_of_a_worker_that_left) {
  // One coordinate, gamma = 1, x0 = 0; worker 2's gradient (10 or 4) is in the table when it
  // leaves. Each expected x is the mean over the members' entries only.
  const auto one = [] { return async::model_server<double>(std::vector<double>{0.0}, async::plain_sgd(1.0)); };
  const auto g = [](double v) { return std::vector<double>{v}; };
  {
    auto p = async::malenia_sgd(3, one());  // S = 1
    ctl c;
    p.on_arrival(c, arrival(2, 0), g(10));
    p.on_arrival(c, arrival(0, 0), g(1));
    p.on_leave(c, 2);
    p.on_arrival(c, arrival(1, 0), g(3));  // the members {0, 1} complete the round
    BOOST_TEST(p.version() == 1u);
    BOOST_TEST(p.params()[0] == -2.0);  // -(1 + 3) / 2; with worker 2's entry: -14/3
  }
  {
    auto p = async::ia2sgd(3, one());
    ctl c;
    p.on_arrival(c, arrival(0, 0), g(1));
    p.on_arrival(c, arrival(1, 0), g(2));
    p.on_arrival(c, arrival(2, 0), g(4));  // the table is complete; no step yet (the authors' rule)
    BOOST_TEST(p.version() == 0u);
    p.on_leave(c, 2);
    p.on_arrival(c, arrival(0, 0), g(1));  // the first step, over the members: x = -(1 + 2) / 2
    BOOST_TEST(p.params()[0] == -1.5, boost::test_tools::tolerance(1e-14));
    BOOST_TEST(p.table().count(2) == 0u);
  }
  {
    auto p = async::ringleader_asgd(3, one());
    ctl c;
    p.on_arrival(c, arrival(0, 0), g(1));
    p.on_arrival(c, arrival(1, 0), g(2));
    p.on_arrival(c, arrival(2, 0), g(4));  // table complete: worker 2 triggers x = -7/3
    p.on_leave(c, 2);                      // its update no longer counts in the round
    p.on_arrival(c, arrival(0, 1), g(3));  // CURRENT[0] = mean(1, 3): x -= (2 + 2) / 2
    BOOST_TEST(p.round() == 0u);
    p.on_arrival(c, arrival(1, 2), g(5));  // CURRENT[1] = mean(2, 5): x -= (2 + 3.5) / 2
    BOOST_TEST(p.params()[0] == -7.0 / 3.0 - 2.0 - 2.75, boost::test_tools::tolerance(1e-14));
    BOOST_TEST(p.round() == 1u);  // one update per member: the round is over
    BOOST_TEST(p.current().count(2) == 0u);
  }
}

BOOST_AUTO_TEST_CASE(hostile_churn_schedules_are_refused_by_key_value_and_rule) {
  const auto refused = [](sim::churn_schedule s, const std::string& key, const std::string& rule) {
    try {
      s.validate(4);
    } catch (const std::invalid_argument& e) {
      const std::string w = e.what();
      const bool ok = w.find("'" + key + "'") != std::string::npos && w.find(rule) != std::string::npos;
      BOOST_TEST(ok, w);
      return;
    }
    BOOST_ERROR("not refused: " << key << " / " << rule);
  };
  using k = sim::churn_kind;
  refused({{}, {{k::join, 1, 1.0, 0}}}, "churn.events[0].worker", "must be absent to join");
  refused({{}, {{k::leave, 1, 1.0, 0}, {k::leave, 1, 2.0, 0}}}, "churn.events[1].worker",
          "must be present to leave");
  refused({{1}, {{k::stall, 1, 1.0, 2.0}}}, "churn.events[0].worker", "must be present to stall");
  refused({{}, {{k::leave, 1, -1.0, 0}}}, "churn.events[0].time", "must be finite and >= 0");
  refused({{}, {{k::leave, 1, std::nan(""), 0}}}, "churn.events[0].time", "must be finite and >= 0");
  refused({{}, {{k::leave, 1, 5.0, 0}, {k::join, 1, 4.0, 0}}}, "churn.events[1].time",
          "must be >= the previous event's time");
  refused({{}, {{k::leave, 9, 1.0, 0}}}, "churn.events[0].worker", "must be < the number of workers");
  refused({{}, {{k::stall, 0, 1.0, 0.0}}}, "churn.events[0].duration", "must be > 0 for a stall");
  refused({{}, {{k::stall, 0, 1.0, 5.0}, {k::stall, 0, 3.0, 1.0}}}, "churn.events[1].time",
          "must not begin before the worker's previous stall ends");
  refused({{0, 1, 2, 3}, {}}, "churn.absent", "must leave at least one worker present");
  refused({{2, 2}, {}}, "churn.absent[1]", "must not name a worker twice");
  refused({{0, 1, 2}, {{k::leave, 3, 1.0, 0}}}, "churn.events[0].worker",
          "must not be the last present worker to leave");
  refused({{}, {{static_cast<k>(7), 0, 1.0, 0}}}, "churn.events[0].kind", "must be one of leave, join, stall");
  // The runtime refuses the same schedule by the same name, and a schedule set too late.
  hr::async_runtime<std::vector<double>, sim::fixed_times> rt(2, sim::fixed_times({1.0, 1.0}));
  BOOST_CHECK_THROW(rt.set_churn({{}, {{k::join, 0, 1.0, 0}}}), std::invalid_argument);
  auto p = async::asgd(2, server(0.1));
  hr::run_options opt;
  opt.horizon = 1.0;
  rt.run(p, [](sim::worker_id, std::uint64_t, std::uint64_t, std::vector<double>& g) { g.assign(dim, 0.0); },
         opt);
  BOOST_CHECK_THROW(rt.set_churn({}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(a_stall_delays_the_job_in_flight_by_exactly_the_stalled_time) {
  // Worker 0 (tau 1) stalls during [2.5, 4.5): its job started at 2 ends at 5, not 3.
  hr::async_runtime<std::vector<double>, sim::fixed_times> rt(2, sim::fixed_times({1.0, 10.0}));
  rt.set_churn({{}, {{sim::churn_kind::stall, 0, 2.5, 2.0}}});
  auto p = async::asgd(2, server(0.1));
  std::vector<double> starts;
  hr::run_options opt;
  opt.horizon = 7.5;
  rt.run(p, [&](sim::worker_id w, std::uint64_t, std::uint64_t, std::vector<double>& g) {
    if (w == 0) starts.push_back(rt.engine().now());
    g.assign(dim, 0.0);
  }, opt);
  BOOST_TEST(starts == std::vector<double>({0, 1, 2, 5, 6, 7}), boost::test_tools::per_element());
  // The same stalls in a worker-time model give the same finish.
  const auto m = sim::with_stalls(sim::fixed_times({1.0, 10.0}), rt.churn());
  BOOST_TEST(m.duration(0, 2, 2.0, 1) == 3.0);
}

BOOST_AUTO_TEST_CASE(a_returning_worker_starts_afresh_at_the_current_model) {
  // Worker 1 leaves at 3.5 and returns at 6.25: it starts a job at 6.25 at the version then.
  hr::async_runtime<std::vector<double>, sim::fixed_times> rt(2, sim::fixed_times({1.0, 2.0}));
  rt.set_churn({{}, {{sim::churn_kind::leave, 1, 3.5, 0}, {sim::churn_kind::join, 1, 6.25, 0}}});
  auto p = async::ringmaster_asgd(2, server(0.1));
  std::vector<std::pair<double, std::uint64_t>> starts;
  hr::run_options opt;
  opt.horizon = 9.0;
  rt.run(p, [&](sim::worker_id w, std::uint64_t v, std::uint64_t, std::vector<double>& g) {
    if (w == 1) starts.emplace_back(rt.engine().now(), v);
    g.assign(dim, 0.0);
  }, opt);
  // Worker 1: jobs at 0 and 2 (the one from 2 is lost at 3.5), then at 6.25 and 8.25. Worker 0
  // applies one update per second, worker 1's job from 0 one at 2: version 7 at 6.25.
  BOOST_TEST(starts.size() == 4u);
  BOOST_TEST(starts[2].first == 6.25);
  BOOST_TEST(starts[2].second == 7u);
  BOOST_TEST(rt.lost_jobs(1) == 1u);
  BOOST_TEST(p.live(1));
}

BOOST_AUTO_TEST_SUITE_END()
