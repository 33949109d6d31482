// OmniLearn's ASP server (algorithms/async/omnilearn.hpp): with job times proportional to the
// batch over each worker's speed, one controller run (k_p = 1) gives every worker the mean
// iteration time t̄ with b_i = speed_i * t̄, and that is a fixed point; each push is weighted
// by b_i / b_i(0); the state resumes from bytes.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/algorithms/async/omnilearn.hpp"
#include "heterograd/core/archive.hpp"
#include "heterograd/runtime/sim.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace async = heterograd::algorithms::async;
namespace hr = heterograd::runtime;
namespace sim = heterograd::sim;

namespace {

using policy = async::omnilearn_asgd<double>;
using model = sim::batch_affine_times;

// Speeds 1, 2, 4, 8 samples per second: a job of b samples takes b / speed_i.
model speeds() { return model({0.0}, {1.0, 0.5, 0.25, 0.125}); }

policy make() {
  // f(x) = x^2 / 2 per sample: gradient x, whatever the batch.
  return policy(4, async::model_server<double>(std::vector<double>{1.0}, async::plain_sgd(0.01)),
                {32, 32, 32, 32},
                {.controller = {.min_batch = 4, .max_batch = 256}, .rebalance_every = 8});
}

// Runs to virtual time t; jobs[w] counts the jobs worker w started.
template <class Runtime>
void run_to(Runtime& rt, policy& p, double t, std::vector<std::uint64_t>* jobs = nullptr) {
  hr::run_options o;
  o.horizon = t;
  rt.run(p,
         [&p, jobs](sim::worker_id w, std::uint64_t, std::uint64_t, std::vector<double>& g) {
           if (jobs) ++(*jobs)[w];
           g.assign(1, p.params()[0]);
         },
         o);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(omnilearn_asp)

BOOST_AUTO_TEST_CASE(one_controller_run_equalises_iteration_times_at_the_mean_and_stays_there) {
  policy p = make();
  hr::async_runtime<std::vector<double>, model> rt(4, speeds(), 32);
  std::vector<std::uint64_t> before(4, 0), after(4, 0);
  run_to(rt, p, 200, &before);
  // Measured t_i = 32 / speed_i = 32, 16, 8, 4: t̄ = 15 and b_i' = speed_i * 15.
  const std::vector<std::size_t> want{15, 30, 60, 120};
  for (std::size_t w = 0; w < 4; ++w) BOOST_TEST(p.batch(static_cast<sim::worker_id>(w)) == want[w]);
  run_to(rt, p, 400, &after);
  BOOST_TEST(p.changes() == 1u);  // the later runs see equal times: inside the dead-band
  BOOST_TEST(p.rebalances() > 3u);
  // The runtime times each job with the worker's batch: every iteration now takes 15, so in
  // (200, 400] every worker started 200 / 15 = 13.3 jobs, 13 or 14, whatever its speed.
  for (std::size_t w = 0; w < 4; ++w) {
    BOOST_TEST(after[w] >= 13u);
    BOOST_TEST(after[w] <= 14u);
  }
}

BOOST_AUTO_TEST_CASE(a_push_is_weighted_by_its_workers_batch_over_the_initial_batch) {
  // One step of plain SGD (lr 0.01) from x = 1 with weight b/b0: after the controller gave
  // worker 3 b = 120 (weight 120/32 = 3.75), its push moves x by 0.01 * 3.75 * x.
  policy p = make();
  hr::async_runtime<std::vector<double>, model> rt(4, speeds(), 32);
  run_to(rt, p, 400);
  BOOST_TEST(p.controller().learning_rate_scale(3) == 120.0 / 32.0);
  BOOST_TEST(p.controller().learning_rate_scale(0) == 15.0 / 32.0);
  struct ctl_t {
    void applied(sim::worker_id, std::uint64_t) {}
    void discarded(sim::worker_id, std::uint64_t) {}
  } ctl;
  const double x = p.params()[0];
  const std::vector<double> g{x};
  p.on_arrival(ctl, hr::arrival{3, p.version(), 0, 0.0, 0.0}, g);
  BOOST_TEST(p.params()[0] == x - 0.01 * (120.0 / 32.0) * x);
}

BOOST_AUTO_TEST_CASE(the_policy_resumes_from_bytes_to_the_same_batches_and_model) {
  policy a = make(), b = make();
  hr::async_runtime<std::vector<double>, model> ra(4, speeds(), 32), rb(4, speeds(), 32);
  run_to(ra, a, 37.5);  // mid-window: some workers measured, jobs running with old batches
  heterograd::archive_writer w;
  w(a, ra);
  heterograd::archive_reader r(w.bytes());
  r(b, rb);
  BOOST_TEST(r.done());
  run_to(ra, a, 300);
  run_to(rb, b, 300);
  BOOST_TEST(a.params()[0] == b.params()[0]);
  BOOST_TEST(a.version() == b.version());
  for (sim::worker_id k = 0; k < 4; ++k) BOOST_TEST(a.batch(k) == b.batch(k));
  BOOST_TEST(ra.engine().trace_hash() == rb.engine().trace_hash());
}

BOOST_AUTO_TEST_CASE(initial_batches_must_match_the_workers_and_the_bounds) {
  auto server = [] { return async::model_server<double>(std::vector<double>{0.0}, async::plain_sgd(0.1)); };
  BOOST_CHECK_THROW(policy(4, server(), {32, 32}), std::invalid_argument);
  BOOST_CHECK_THROW(policy(2, server(), {32, 300}), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
