// The threads runtime and the worker-side helper over the inproc transport: the same policy
// objects as the simulator, bitwise the same parameters in virtual-time order, delay bounds
// and bookkeeping in real time, and a hand-written worker loop with pull / push.
#include <algorithm>
#include <array>
#include <bit>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "hg_test.hpp"
#include "support.hpp"
#include "heterograd/runtime/async_threads.hpp"
#include "heterograd/comm/inproc.hpp"

using namespace async_test;

namespace {

// Worker w's gradient of f_w(x) = |x - c_w|^2 / 2 plus N(0, sigma^2) noise at (seed, w, job).
struct mixture {
  std::size_t n, d;
  double sigma;
  std::uint64_t seed;
  std::vector<double> c;
  mixture(std::size_t workers, std::size_t dim, double s, std::uint64_t sd)
      : n(workers), d(dim), sigma(s), seed(sd), c(workers * dim) {
    const hg::counter_rng rng(seed, 0xc0);
    for (std::size_t k = 0; k < c.size(); ++k) c[k] = rng.normal(k);
  }
  void gradient(sim::worker_id w, std::uint64_t k, const double* x, std::vector<double>& g) const {
    g.resize(d);
    const auto rng = hg::counter_rng(seed, 0x9b).substream(w);
    for (std::size_t j = 0; j < d; ++j) g[j] = x[j] - c[w * d + j] + sigma * rng.normal(k * d + j);
  }
};

// Runs `p` under the simulator and `q` (a copy taken before) under the threads runtime in
// virtual-time order, for the same number of arrivals; both must end bitwise equal.
// Returns the threads run's summary.
template <class Policy, class Model>
hr::remote_summary same_under_sim_and_threads(Policy p, const mixture& prob, const Model& model,
                                                 std::uint64_t arrivals, const char* name,
                                                 hg::seconds timeout = hg::seconds{120.0}) {
  Policy q = p;
  hr::async_runtime<std::vector<double>, Model> rt(prob.n, model);
  hr::run_options opt;
  opt.max_events = arrivals;
  rt.run(p, [&](sim::worker_id w, std::uint64_t, std::uint64_t k, std::vector<double>& g) {
    prob.gradient(w, k, p.params().data(), g);
  }, opt);
  const auto s = hr::run_threads<double>(
      q,
      [&](async::worker_id w, std::uint64_t, std::uint64_t k, hg::span<const double> x,
          std::vector<double>& g) { prob.gradient(w, k, x.data(), g); },
      {.timeout = timeout, .order = hr::arrival_order::virtual_time, .max_arrivals = arrivals}, model);
  BOOST_TEST_MESSAGE(name << ": " << p.version() << " updates under sim, " << q.version()
                          << " under threads, " << s.arrivals << " arrivals");
  BOOST_TEST(s.arrivals == arrivals, name);
  BOOST_TEST(q.version() == p.version(), name);
  BOOST_TEST(std::memcmp(q.params().data(), p.params().data(), prob.d * sizeof(double)) == 0, name);
  BOOST_TEST((q == p), name);
  BOOST_TEST(s.log.count(sim::update_outcome::applied) == rt.recorder().count(sim::update_outcome::applied), name);
  BOOST_TEST(s.log.count(sim::update_outcome::interrupted) == rt.recorder().count(sim::update_outcome::interrupted), name);
  return s;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(async_runtimes)

BOOST_AUTO_TEST_CASE(sim_and_threads_give_bitwise_equal_parameters_for_ssp_with_s_0_and_equal_speeds) {
  const mixture prob(4, 16, 0.0, hg_test::seed());  // equal speeds, zero noise
  const std::vector<double> x0(prob.d, 0.25);
  async::ssp_server p(prob.n, async::model_server<double>(x0, async::plain_sgd(0.05)), {.staleness = 0});
  same_under_sim_and_threads(p, prob, sim::fixed_times(std::vector<double>(prob.n, 1.0)), 400, "SSP s = 0");
}

BOOST_AUTO_TEST_CASE(virtual_time_order_reproduces_the_simulator_for_heterogeneous_speeds_too) {
  const std::uint64_t seed = hg_test::seed();
  const mixture prob(5, 8, 0.1, seed);
  const std::vector<double> x0(prob.d, 0.0);
  const auto model = sim::plus(sim::sqrt_times(prob.n, seed), sim::half_normal_noise(seed));
  auto srv = [&] { return async::model_server<double>(x0, async::plain_sgd(0.05)); };
  same_under_sim_and_threads(async::asgd(prob.n, srv()), prob, model, 300, "ASGD");
  same_under_sim_and_threads(async::ringleader_asgd(prob.n, srv()), prob, model, 300, "Ringleader");
  same_under_sim_and_threads(async::ringmaster_asgd(prob.n, srv(), {.threshold = 3, .variant = async::ringmaster_variant::interrupt}),
                             prob, model, 300, "Ringmaster (interrupt)");
  same_under_sim_and_threads(async::ssp_server(prob.n, srv(), {.staleness = 2}), prob, model, 300, "SSP s = 2");
  same_under_sim_and_threads(async::dssp_server(prob.n, srv(), {.lower = 1, .range = 3}), prob, model, 300, "DSSP");
}

// OmniLearn's ASP server: speeds 1, 2, 4, 8 samples per model unit, so a job of b samples
// lasts b / speed_i (batch_affine_times), and every worker starts at b = 32.
sim::batch_affine_times omnilearn_speeds() { return sim::batch_affine_times({0.0}, {1.0, 0.5, 0.25, 0.125}); }
async::omnilearn_asgd<double> omnilearn_policy(std::size_t dim, std::size_t every) {
  return async::omnilearn_asgd<double>(
      4, async::model_server<double>(std::vector<double>(dim, 0.0), async::plain_sgd(0.05)), {32, 32, 32, 32},
      {.controller = {.min_batch = 4, .max_batch = 256}, .rebalance_every = every});
}

BOOST_AUTO_TEST_CASE(omnilearn_asgd_under_threads_in_virtual_time_order_is_the_simulator_bitwise_across_batch_changes) {
  // The controller changes the batches mid-run (t_i = 32 / speed_i = 32, 16, 8, 4: b_i' =
  // speed_i * 15 = 15, 30, 60, 120); the server times each job at its batch and sends it, the
  // worker computes with it: the gradient's noise shrinks with the batch (sigma / sqrt(b)), so
  // a worker that used another batch than the simulator's would give other parameters.
  const mixture prob(4, 8, 0.3, hg_test::seed());
  auto gradient = [&](sim::worker_id w, std::uint64_t k, std::size_t b, const double* x, std::vector<double>& g) {
    prob.gradient(w, k, x, g);  // x - c_w + sigma noise
    const double scale = 1.0 / std::sqrt(static_cast<double>(b));
    for (std::size_t j = 0; j < prob.d; ++j) {
      const double clean = x[j] - prob.c[w * prob.d + j];
      g[j] = clean + (g[j] - clean) * scale;
    }
  };
  auto p = omnilearn_policy(prob.d, 8), q = p;
  const auto model = omnilearn_speeds();
  const std::uint64_t arrivals = 200;
  hr::async_runtime<std::vector<double>, sim::batch_affine_times> rt(4, model, 32);
  hr::run_options opt;
  opt.max_events = arrivals;
  rt.run(p, [&](sim::worker_id w, std::uint64_t, std::uint64_t k, std::vector<double>& g) {
    gradient(w, k, p.batch(w), p.params().data(), g);
  }, opt);
  std::vector<std::vector<std::size_t>> sent(4);
  const auto s = hr::run_threads<double>(
      q,
      [&](async::worker_id w, std::uint64_t, std::uint64_t k, std::size_t b, hg::span<const double> x,
          std::vector<double>& g) {
        sent[w].push_back(b);
        gradient(w, k, b, x.data(), g);
      },
      {.order = hr::arrival_order::virtual_time, .max_arrivals = arrivals, .batch = 32}, model);
  BOOST_TEST(p.changes() >= 1u);
  const std::vector<std::size_t> want{15, 30, 60, 120};
  for (sim::worker_id w = 0; w < 4; ++w) {
    BOOST_TEST(q.batch(w) == want[w]);
    BOOST_TEST(sent[w].front() == 32u);
    BOOST_TEST(sent[w].back() == want[w]);
  }
  BOOST_TEST(s.arrivals == arrivals);
  BOOST_TEST(q.version() == p.version());
  BOOST_TEST(std::memcmp(q.params().data(), p.params().data(), prob.d * sizeof(double)) == 0);
  BOOST_TEST((q == p));
  BOOST_TEST(q.rebalances() == p.rebalances());
}

BOOST_AUTO_TEST_CASE(omnilearn_asgd_on_measured_wall_times_settles_on_batches_proportional_to_speed) {
  // Real-time order, jobs paced to 2 ms per model unit at their batch: the controller reads
  // wall job times (the server's clock in model units: wall / time_scale) and, with k_p = 1,
  // moves every worker to b_i = speed_i * t̄ (15, 30, 60, 120 up to the overheads), after which
  // every iteration takes t̄ and the later runs stay inside the dead-band: the final batches
  // over the speeds agree with their mean within the dead-band (0.2).
  auto p = omnilearn_policy(4, 8);
  const auto model = omnilearn_speeds();
  const std::vector<double> speed{1, 2, 4, 8};
  const auto s = hr::run_threads<double>(
      p,
      [](async::worker_id, std::uint64_t, std::uint64_t, hg::span<const double> x, std::vector<double>& g) {
        g.assign(x.begin(), x.end());
      },
      {.time_scale = 0.002, .max_arrivals = 160, .batch = 32}, model);
  BOOST_TEST(s.arrivals == 160u);
  BOOST_TEST(p.changes() >= 1u);
  BOOST_TEST(p.rebalances() >= 2u);  // one run on the balanced batches at least
  double mean = 0;
  for (sim::worker_id w = 0; w < 4; ++w) mean += static_cast<double>(p.batch(w)) / speed[w] / 4;
  for (sim::worker_id w = 0; w < 4; ++w) {
    const double target = speed[w] * mean;
    BOOST_TEST_MESSAGE("worker " << w << ": batch " << p.batch(w) << ", speed x mean iteration time " << target);
    BOOST_TEST(std::abs(static_cast<double>(p.batch(w)) - target) / target < 0.2);
  }
  // The fastest worker's batch grew, the slowest's shrank (from 32).
  BOOST_TEST(p.batch(3) > 32u);
  BOOST_TEST(p.batch(0) < 32u);
}

BOOST_AUTO_TEST_CASE(repeated_interruptions_of_a_worker_still_pushing_a_large_model_do_not_deadlock) {
  // Models above the inproc eager limit go by rendezvous: a worker's push completes only
  // when the server receives it, which in virtual-time order can be after the server has
  // interrupted that worker twice. The server must not wait for the worker to take the first
  // new job before it sends the second (it would wait for ever: the worker waits for it).
  const std::uint64_t seed = hg_test::seed();
  const std::size_t d = 2 * hg::comm::inproc::eager_bytes / sizeof(double);
  const mixture prob(6, d, 0.1, seed);
  const std::vector<double> x0(prob.d, 0.0);
  const auto model = sim::plus(sim::linear_times(prob.n, seed), sim::half_normal_noise(seed));
  async::ringmaster_asgd p(prob.n, async::model_server<double>(x0, async::plain_sgd(0.05)),
                           {.threshold = 2, .variant = async::ringmaster_variant::interrupt});
  // Bitwise equal to the simulator, interrupted counts included (a deadlock fails the
  // 20 s receive deadline instead of hanging).
  const auto s = same_under_sim_and_threads(p, prob, model, 200, "Ringmaster, large model", hg::seconds{20.0});
  BOOST_TEST(s.log.count(sim::update_outcome::interrupted) > 2 * prob.n);  // repeated ones
}

BOOST_AUTO_TEST_CASE(threads_in_real_time_keep_the_delay_bounds_and_record_every_arrival) {
  const mixture prob(4, 8, 0.1, hg_test::seed());
  const std::vector<double> x0(prob.d, 0.0);
  auto compute = [&](async::worker_id w, std::uint64_t, std::uint64_t k, hg::span<const double> x,
                     std::vector<double>& g) { prob.gradient(w, k, x.data(), g); };
  // Workers slowed down 1 ms per unit of (1, 1, 3, 8): the slow ones fall behind.
  const sim::fixed_times model({1, 1, 3, 8});
  {
    async::ringmaster_asgd p(prob.n, async::model_server<double>(x0, async::plain_sgd(0.05)),
                             {.threshold = 2, .variant = async::ringmaster_variant::interrupt});
    const auto s = hr::run_threads<double>(p, compute, {.time_scale = 1e-3, .max_updates = 200}, model);
    const auto& applied = s.log.staleness_histogram(sim::update_outcome::applied);
    BOOST_TEST(p.version() == 200u);
    BOOST_TEST(applied.size() <= 2u);  // every applied delay < R = 2
    BOOST_TEST(s.log.count(sim::update_outcome::interrupted) > 0u);
    BOOST_TEST(s.log.count(sim::update_outcome::applied) + s.log.count(sim::update_outcome::discarded) == s.arrivals);
  }
  {
    async::ssp_server p(prob.n, async::model_server<double>(x0, async::plain_sgd(0.05)), {.staleness = 1});
    std::atomic<std::uint64_t> worst{0};
    const auto s = hr::run_threads<double>(
        p, [&](async::worker_id w, std::uint64_t v, std::uint64_t k, hg::span<const double> x, std::vector<double>& g) {
          compute(w, v, k, x, g);
        },
        {.time_scale = 1e-3, .max_updates = 120}, model);
    BOOST_TEST(p.max_gap_started() <= 1u);
    BOOST_TEST(p.max_gap_started() == 1u);
    BOOST_TEST(s.arrivals == p.version());
    (void)worst;
  }
}

BOOST_AUTO_TEST_CASE(every_worker_reports_its_jobs_and_time_and_the_counts_reconcile_with_the_server) {
  // Real-time order, paced jobs of 2, 2, 4, 8 ms: each worker's pushes are the results the
  // server handed over or dropped, plus at most one still in flight at the end; each paced
  // job but the last lasts at least its model time; a compute that sleeps 1 ms is at least
  // 1 ms a job.
  const mixture prob(4, 8, 0.1, hg_test::seed());
  const std::vector<double> x0(prob.d, 0.0);
  const sim::fixed_times model({2, 2, 4, 8});
  async::asgd p(prob.n, async::model_server<double>(x0, async::plain_sgd(0.05)));
  const auto s = hr::run_threads<double>(
      p,
      [&](async::worker_id w, std::uint64_t, std::uint64_t k, hg::span<const double> x, std::vector<double>& g) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        prob.gradient(w, k, x.data(), g);
      },
      {.time_scale = 1e-3, .max_updates = 120}, model);
  BOOST_TEST_REQUIRE(s.workers.size() == prob.n);
  std::uint64_t pushed = 0, handed = 0;
  for (std::size_t w = 0; w < prob.n; ++w) {
    const auto& r = s.workers[w];
    BOOST_TEST_CONTEXT("worker " << w) {
      BOOST_TEST(r.jobs >= s.jobs_finished[w]);
      BOOST_TEST(r.jobs <= s.jobs_finished[w] + 1 + s.dropped);
      BOOST_TEST(r.compute_seconds >= 1e-3 * static_cast<double>(r.jobs));
      // The last job's sleep may be cut short by the stop at the end.
      BOOST_TEST(r.compute_seconds + r.paced_seconds >=
                 1e-3 * model.tau[w] * static_cast<double>(r.jobs - 1) - 1e-9);
      BOOST_TEST(r.pull_seconds > 0.0);
    }
    pushed += r.jobs;
    handed += s.jobs_finished[w];
  }
  BOOST_TEST(handed == s.arrivals);
  BOOST_TEST(pushed >= s.arrivals + s.dropped);
  BOOST_TEST(p.version() == 120u);
}

BOOST_AUTO_TEST_CASE(a_framework_worker_loop_with_pull_and_push_drives_the_server) {
  // Framework authors own the loop: pull the model, compute, push the gradient.
  const mixture prob(3, 6, 0.0, hg_test::seed());
  async::ringleader_asgd p(prob.n, async::model_server<double>(std::vector<double>(prob.d, 0.0), async::plain_sgd(0.2)));
  hr::remote_summary s;
  hg::comm::inproc::spawn(4, [&](hg::comm::inproc::communicator c) {
    if (c.rank() == 0) {
      s = hr::serve<double>(p, c, {.max_updates = 600});
      return;
    }
    hr::worker_client<double, hg::comm::inproc::communicator> client(c, prob.d);
    std::vector<double> x(prob.d), g;
    while (client.pull(x)) {
      prob.gradient(client.worker(), client.job_index(), x.data(), g);
      client.push(g);
    }
  });
  // Ringleader's fixed point is the mean of the centres, whatever the arrival order (every
  // round waits for every worker, however the threads are scheduled).
  for (std::size_t j = 0; j < prob.d; ++j) {
    double m = 0;
    for (std::size_t w = 0; w < prob.n; ++w) m += prob.c[w * prob.d + j] / static_cast<double>(prob.n);
    BOOST_TEST(std::fabs(p.params()[j] - m) < 1e-6);
  }
  BOOST_TEST(p.version() == 600u);
  BOOST_TEST(s.arrivals >= 600u);
}

BOOST_AUTO_TEST_CASE(a_worker_refuses_a_hostile_job_header_naming_the_field) {
  // The job header is the server's word: a worker must not compute a batch of 0 samples, a
  // job starting at a time that is no time, or a kind the protocol lacks. Each is refused by
  // worker_client::pull (a comm_error naming the field and the value), never a job.
  struct bad_header {
    std::array<std::uint64_t, 5> h;
    const char* says;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<bad_header> cases{
      {{1, 0, 0, std::bit_cast<std::uint64_t>(0.0), 0}, "batch 0"},
      {{1, 0, 0, std::bit_cast<std::uint64_t>(nan), 4}, "start time"},
      {{1, 0, 0, std::bit_cast<std::uint64_t>(-1.0), 4}, "start time"},
      {{7, 0, 0, 0, 4}, "kind 7"},
  };
  for (const auto& bad : cases) {
    BOOST_TEST_CONTEXT(bad.says) {
      std::string caught;
      bool computed = false;
      try {
        hg::comm::inproc::spawn(2, [&](hg::comm::inproc::communicator c) {
          const hr::remote_options o{.timeout = hg::seconds{5}};
          if (c.rank() == 0) {
            const std::vector<double> x(3, 1.0);
            auto a = c.send(hg::span<const std::uint64_t>(bad.h.data(), bad.h.size()), 1, o.tag_base,
                            hg::comm::send_options{.timeout = o.timeout});
            auto b = c.send(hg::span<const double>(x.data(), x.size()), 1, o.tag_base + 1,
                            hg::comm::send_options{.timeout = o.timeout});
            try {
              a.wait();
              b.wait();
            } catch (const hg::comm::comm_error&) {  // the worker's refusal aborts the world
            }
            return;
          }
          hr::worker_client<double, hg::comm::inproc::communicator> client(c, 3, o);
          std::vector<double> x(3);
          computed = client.pull(x);  // throws: spawn rethrows the worker's error, the first
        });
      } catch (const hg::comm::comm_error& e) {
        caught = e.what();
      }
      BOOST_TEST(!computed);
      BOOST_TEST(caught.find(bad.says) != std::string::npos, caught);
    }
  }
}

// Issue 43: a peer decides what it sends, never how much the server writes or applies. A
// hostile worker (rank 3) takes its first job and answers with a result of another size or
// type, or a header of a kind the protocol lacks. The server refuses that one message by
// name, never hands it to the policy (the payload is 1e30s: applied once, the model would be
// far from the centres' mean) and evicts the worker; the honest workers finish the run.
namespace {
struct hostile_result {
  std::size_t count;  // the payload it sends instead of d doubles: `count` of them,
  bool as_float;      // or of floats
  std::uint64_t kind;  // the result header's kind
  const char* says;
};

void hostile_worker(hg::comm::inproc::communicator c, const hr::remote_options& o, std::size_t d,
                    const hostile_result& bad) {
  std::array<std::uint64_t, 5> job{};
  std::vector<double> x(d);
  const hg::comm::recv_options ro{.timeout = o.timeout};
  c.recv(hg::span<std::uint64_t>(job.data(), job.size()), 0, o.tag_base, ro).wait();
  c.recv(hg::span<double>(x), 0, o.tag_base + 1, ro).wait();
  const std::array<std::uint64_t, 4> h{bad.kind, job[1], job[2], 0};
  const std::vector<float> f(bad.as_float ? bad.count : 0, 1e30f);
  const std::vector<double> g(bad.as_float ? 0 : bad.count, 1e30);
  try {
    c.send(hg::span<const std::uint64_t>(h.data(), h.size()), 0, o.tag_base + 2).wait();
    if (bad.kind == 1 && !bad.as_float) c.send(hg::span<const double>(g), 0, o.tag_base + 3).wait();
    if (bad.kind == 1 && bad.as_float) c.send(hg::span<const float>(f), 0, o.tag_base + 3).wait();
  } catch (const hg::comm::comm_error&) {  // a rendezvous sender learns of the refusal too
  }
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_result_of_another_size_or_type_is_refused_by_name_never_applied_and_its_worker_evicted,
                     *boost::unit_test::timeout(120)) {
  const std::size_t d = 9000;  // 72 KB of doubles: above inproc's eager limit
  const mixture prob(3, d, 0.0, hg_test::seed());
  const std::vector<hostile_result> cases{
      {2 * d, false, 1, "has 144000 bytes (18000 f64), the receive expects exactly 72000 bytes (9000 f64)"},
      {d / 2, false, 1, "has 36000 bytes (4500 f64)"},
      {1, false, 1, "has 8 bytes (1 f64)"},
      {0, false, 1, "has 0 bytes (0 f64)"},
      {d, true, 1, "holds f32 elements, the receive expects f64"},
      {0, false, 9, "result header: kind 9"},
  };
  for (const auto& bad : cases) {
    BOOST_TEST_CONTEXT(bad.says) {
      async::asgd p(prob.n, async::model_server<double>(std::vector<double>(d, 0.0), async::plain_sgd(0.2)));
      const hr::remote_options o{.timeout = hg::seconds{30}, .max_updates = 300, .shutdown_grace = hg::seconds{30}};
      hr::remote_summary s;
      hg::comm::inproc::spawn(4, [&](hg::comm::inproc::communicator c) {
        if (c.rank() == 0) {
          s = hr::serve<double>(p, c, o);
        } else if (c.rank() == 3) {
          hostile_worker(c, o, d, bad);
        } else {
          hr::worker_client<double, hg::comm::inproc::communicator> client(c, d, o);
          std::vector<double> x(d), g;
          while (client.pull(x)) {
            prob.gradient(client.worker(), client.job_index(), x.data(), g);
            client.push(g);
          }
        }
      });
      BOOST_TEST(p.version() == 300u);
      BOOST_TEST(s.refused == 1u);
      BOOST_REQUIRE(s.evicted.size() == 3u);
      BOOST_TEST(s.evicted[0].empty());
      BOOST_TEST(s.evicted[1].empty());
      BOOST_TEST(s.evicted[2].find("worker 2 (rank 3)") != std::string::npos, s.evicted[2]);
      BOOST_TEST(s.evicted[2].find(bad.says) != std::string::npos, s.evicted[2]);
      BOOST_TEST(s.jobs_finished[2] == 0u);
      // Only workers 0 and 1 were applied: x stays near their centres (|c| of a few units),
      // where one 1e30 applied would have thrown it.
      double worst = 0;
      for (std::size_t j = 0; j < d; ++j)
        worst = std::max(worst, std::fabs(p.params()[j] - (prob.c[j] + prob.c[d + j]) / 2));
      BOOST_TEST(worst < 5.0);
    }
  }
}

// In virtual_time order the simulator's order needs every result: a refused one fails the run,
// naming the worker, the field and both sizes.
BOOST_AUTO_TEST_CASE(in_virtual_time_order_a_refused_result_fails_the_run_by_name, *boost::unit_test::timeout(60)) {
  const std::size_t d = 8;
  const mixture prob(2, d, 0.0, hg_test::seed());
  async::asgd p(prob.n, async::model_server<double>(std::vector<double>(d, 0.0)));
  const hr::remote_options o{.timeout = hg::seconds{10}, .order = hr::arrival_order::virtual_time, .max_updates = 50};
  const sim::fixed_times model({1.0, 1.0});
  std::string caught;
  try {
    hg::comm::inproc::spawn(3, [&](hg::comm::inproc::communicator c) {
      if (c.rank() == 0) hr::serve<double>(p, c, o, model);
      else if (c.rank() == 1) hostile_worker(c, o, d, {d / 2, false, 1, ""});
      else {
        hr::worker_client<double, hg::comm::inproc::communicator> client(c, d, o);
        std::vector<double> x(d), g;
        while (client.pull(x)) {
          prob.gradient(client.worker(), client.job_index(), x.data(), g);
          client.push(g);
        }
      }
    });
  } catch (const hg::comm::comm_error& e) {
    caught = e.what();
  }
  BOOST_TEST(caught.find("worker 0 (rank 1): result payload") != std::string::npos, caught);
  BOOST_TEST(caught.find("has 32 bytes (4 f64), the receive expects exactly 64 bytes (8 f64)") != std::string::npos, caught);
  BOOST_TEST(p.version() == 0u);
}

// An honest mismatch (the C API's worker of 2,000 values against a server of 4,000, either way
// round): each side fails naming the cause and both sizes, within the timeout; nothing is
// applied.
BOOST_AUTO_TEST_CASE(a_worker_and_a_server_of_different_dims_both_fail_naming_both_sizes, *boost::unit_test::timeout(60)) {
  for (auto [server_dim, worker_dim] : {std::pair<std::size_t, std::size_t>{4000, 2000}, {2000, 4000}}) {
    async::asgd p(1, async::model_server<float>(std::vector<float>(server_dim, 0.0f)));
    const hr::remote_options o{.timeout = hg::seconds{10}, .max_updates = 5};
    std::string server_error, worker_error;
    hg::comm::inproc::spawn(2, [&](hg::comm::inproc::communicator c) {
      try {
        if (c.rank() == 0) {
          hr::serve<float>(p, c, o);
          return;
        }
        hr::worker_client<float, hg::comm::inproc::communicator> client(c, worker_dim, o);
        std::vector<float> x(worker_dim), g(worker_dim, 1.0f);
        while (client.pull(x)) client.push(g);
      } catch (const hg::comm::comm_error& e) {
        (c.rank() == 0 ? server_error : worker_error) = e.what();
      }
    });
    const std::string sizes = "has " + std::to_string(4 * server_dim) + " bytes (" + std::to_string(server_dim) +
                              " f32), the receive expects exactly " + std::to_string(4 * worker_dim) + " bytes";
    BOOST_TEST(worker_error.find("job payload: ") != std::string::npos, worker_error);
    BOOST_TEST(worker_error.find(sizes) != std::string::npos, worker_error);
    BOOST_TEST(server_error.find("refused its job: it holds " + std::to_string(worker_dim) +
                                 " parameters, the server sends " + std::to_string(server_dim)) != std::string::npos,
               server_error);
    BOOST_TEST(p.version() == 0u);
  }
}

BOOST_AUTO_TEST_CASE(remote_runtimes_reject_bad_configurations_and_gradients) {
  const mixture prob(2, 4, 0.0, 1);
  auto compute = [&](async::worker_id w, std::uint64_t, std::uint64_t k, hg::span<const double> x,
                     std::vector<double>& g) { prob.gradient(w, k, x.data(), g); };
  {
    async::asgd p(prob.n, async::model_server<double>(std::vector<double>(prob.d, 0.0)));
    // virtual_time needs a worker-time model; a bad timeout is refused.
    BOOST_CHECK_THROW(hr::run_threads<double>(p, compute, {.order = hr::arrival_order::virtual_time}),
                      std::invalid_argument);
    BOOST_CHECK_THROW(hr::run_threads<double>(p, compute, {.timeout = hg::seconds{0}}), std::invalid_argument);
    BOOST_TEST(p.version() == 0u);
  }
  {
    // A worker whose gradient has the wrong size: the run fails (no hang) and the server
    // state is as it was before that arrival.
    async::asgd p(prob.n, async::model_server<double>(std::vector<double>(prob.d, 0.0)));
    auto bad = [&](async::worker_id w, std::uint64_t, std::uint64_t k, hg::span<const double> x,
                   std::vector<double>& g) {
      prob.gradient(w, k, x.data(), g);
      g.push_back(1.0);
    };
    BOOST_CHECK_THROW(hr::run_threads<double>(p, bad, {.timeout = hg::seconds{5}, .max_updates = 10}),
                      std::invalid_argument);
    BOOST_TEST(p.version() == 0u);
  }
}

// Issue 17: a worker slower than the transport timeout when the run meets its stopping rule
// must not turn the completed run into an error. Worker 2 spends 0.8 s in every job, past
// the 0.25 s timeout; workers 0 and 1 reach the 40 updates in milliseconds.
namespace {
struct slow_last_worker {
  const mixture& prob;
  double seconds;
  void operator()(async::worker_id w, std::uint64_t, std::uint64_t k, hg::span<const double> x,
                  std::vector<double>& g) const {
    if (w == prob.n - 1) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    prob.gradient(w, k, x.data(), g);
  }
};
}  // namespace

BOOST_AUTO_TEST_CASE(a_worker_computing_past_the_timeout_when_the_run_ends_leaves_the_run_complete,
                     *boost::unit_test::timeout(30)) {
  const mixture prob(3, 4, 0.0, hg_test::seed());
  async::asgd p(prob.n, async::model_server<double>(std::vector<double>(prob.d, 0.0), async::plain_sgd(0.1)));
  hr::remote_summary s;
  BOOST_REQUIRE_NO_THROW(s = hr::run_threads<double>(
                             p, slow_last_worker{prob, 0.8}, {.timeout = hg::seconds{0.25}, .max_updates = 40}));
  BOOST_TEST(p.version() == 40u);
  BOOST_TEST(s.arrivals == 40u);
  BOOST_TEST(s.log.count(sim::update_outcome::applied) == 40u);
  BOOST_TEST(s.jobs_finished[2] == 0u);  // its job was in flight at the end, then dropped
  BOOST_TEST(s.abandoned == 0u);             // shutdown waited for its goodbye
}

BOOST_AUTO_TEST_CASE(shutdown_grace_bounds_the_wait_for_a_computing_worker_and_abandons_it,
                     *boost::unit_test::timeout(30)) {
  const mixture prob(3, 4, 0.0, hg_test::seed());
  async::asgd p(prob.n, async::model_server<double>(std::vector<double>(prob.d, 0.0), async::plain_sgd(0.1)));
  hr::remote_summary s;
  BOOST_REQUIRE_NO_THROW(s = hr::run_threads<double>(
                             p, slow_last_worker{prob, 0.8},
                             {.timeout = hg::seconds{0.25}, .max_updates = 40, .shutdown_grace = hg::seconds{0.05}}));
  BOOST_TEST(p.version() == 40u);
  BOOST_TEST(s.arrivals == 40u);
  BOOST_TEST(s.abandoned == 1u);  // worker 2 was still computing after the grace
  BOOST_CHECK_THROW(hr::run_threads<double>(p, slow_last_worker{prob, 0.0},
                                               {.shutdown_grace = hg::seconds{-1}}),
                    std::invalid_argument);
}

// heterograd-run's evaluation loop ends a threads/MPI run itself (its gate): a policy with
// ready(t) stops the server before it waits for a result finishing after the end, so worker
// 2, 0.8 s into a job that ends at virtual time 60, past the 0.25 s timeout, is left to
// shutdown instead of failing the completed run.
namespace {
struct ends_at {
  async::asgd<double> inner;
  double end;
  std::size_t workers() const { return inner.workers(); }
  std::size_t dim() const { return inner.dim(); }
  std::uint64_t version() const { return inner.version(); }
  hg::span<const double> params() const { return inner.params(); }
  template <class Ctl, class A, class G>
  void on_arrival(Ctl& c, const A& a, const G& g) {
    inner.on_arrival(c, a, g);
  }
  bool ready(double t) const { return t <= end; }
};
}  // namespace

BOOST_AUTO_TEST_CASE(a_policy_that_ends_the_run_is_not_failed_by_a_worker_still_computing,
                     *boost::unit_test::timeout(30)) {
  const mixture prob(3, 4, 0.0, hg_test::seed());
  ends_at p{async::asgd(prob.n, async::model_server<double>(std::vector<double>(prob.d, 0.0), async::plain_sgd(0.1))),
            50.0};
  hr::remote_summary s;
  BOOST_REQUIRE_NO_THROW(s = hr::run_threads<double>(
                             p, slow_last_worker{prob, 0.8},
                             {.timeout = hg::seconds{0.25}, .order = hr::arrival_order::virtual_time},
                             sim::fixed_times(std::vector<double>{1.0, 1.0, 60.0})));
  BOOST_TEST(p.version() == 100u);  // workers 0 and 1 at t = 1, ..., 50; nothing after
  BOOST_TEST(s.arrivals == 100u);
  BOOST_TEST(s.jobs_finished[2] == 0u);
  BOOST_TEST(s.abandoned == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
