// The MPI runtime (mpirun -np 3: rank 0 serves, ranks 1-2 compute) against the threads
// runtime on a small logistic-regression problem: bitwise the same parameters in
// virtual-time order, the same loss in real time (Ringleader, whose fixed point does not depend on the order).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "hg_mpi.hpp"
#include "heterograd/algorithms/async.hpp"
#include "heterograd/data/synthetic.hpp"
#include "heterograd/runtime/async_threads.hpp"
#include "heterograd/runtime/server.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace hg = heterograd;
namespace async = heterograd::algorithms::async;
namespace data = heterograd::data;
namespace sim = heterograd::sim;
namespace hr = heterograd::runtime;

namespace {

// Worker w owns rows w, w + n, w + 2n, ... of the problem and returns their full gradient.
struct sharded_logistic {
  data::logistic_regression prob = data::logistic_regression::random(240, 8, 0.5, 1e-3, 11);
  std::size_t n;
  std::vector<std::vector<std::size_t>> rows;
  explicit sharded_logistic(std::size_t workers) : n(workers), rows(workers) {
    for (std::size_t i = 0; i < prob.rows; ++i) rows[i % n].push_back(i);
  }
  auto compute() const {
    return [this](async::worker_id w, std::uint64_t, std::uint64_t, hg::span<const double> x,
                  std::vector<double>& g) {
      g.resize(prob.dim);
      prob.loss_and_gradient(x, rows[w], g);
    };
  }
  double loss(hg::span<const double> x) const {
    std::vector<double> g(prob.dim);
    return prob.loss_and_gradient(x, {}, g);
  }
};

async::asgd<double> make_policy(std::size_t n) {
  return async::asgd(n, async::model_server<double>(std::vector<double>(8, 0.0), async::plain_sgd(0.5)));
}

// In real time the arrival frequencies vary from run to run, and vanilla ASGD's fixed point
// with them; Ringleader's does not (it is the optimum of f), so both runtimes must reach
// the same loss.
async::ringleader_asgd<double> make_table_policy(std::size_t n) {
  return async::ringleader_asgd(n, async::model_server<double>(std::vector<double>(8, 0.0), async::plain_sgd(0.5)));
}

}  // namespace

using mpi_test::mpi_session;
BOOST_TEST_GLOBAL_FIXTURE(mpi_session);

BOOST_AUTO_TEST_SUITE(async_mpi)

BOOST_AUTO_TEST_CASE(mpi_runtime_matches_the_threads_runtime_on_logistic_regression) {
  auto& c = mpi_test::world();
  BOOST_TEST_REQUIRE(c.size() >= 2);
  const std::size_t n = static_cast<std::size_t>(c.size() - 1);
  const sharded_logistic problem(n);
  std::vector<double> speeds(n);
  for (std::size_t w = 0; w < n; ++w) speeds[w] = 1.0 + 1.5 * static_cast<double>(w);
  const sim::fixed_times model(speeds);

  // Virtual-time order: deterministic, so MPI and threads agree bit for bit.
  auto mpi_policy = make_policy(n);
  const hr::remote_options vt{.order = hr::arrival_order::virtual_time, .max_updates = 400};
  const auto s = hr::run_remote<double>(mpi_policy, c, problem.compute(), vt, model);
  // Real time: nondeterministic order; both runtimes reach the same loss.
  auto mpi_rt = make_table_policy(n);
  hr::run_remote<double>(mpi_rt, c, problem.compute(), {.max_updates = 2000});
  if (c.rank() != 0) return;

  auto threads_policy = make_policy(n);
  hr::run_threads<double>(threads_policy, problem.compute(), vt, model);
  const double l_mpi = problem.loss(mpi_policy.params());
  const double l_thr = problem.loss(threads_policy.params());
  BOOST_TEST_MESSAGE("virtual-time order: loss " << l_mpi << " (MPI) vs " << l_thr << " (threads), "
                                                 << s.arrivals << " arrivals");
  BOOST_TEST(mpi_policy.version() == 400u);
  BOOST_TEST(std::memcmp(mpi_policy.params().data(), threads_policy.params().data(),
                         8 * sizeof(double)) == 0);
  BOOST_TEST(l_mpi == l_thr);
  BOOST_TEST(l_mpi < 0.5 * problem.loss(std::vector<double>(8, 0.0)));

  auto threads_rt = make_table_policy(n);
  hr::run_threads<double>(threads_rt, problem.compute(), {.max_updates = 2000});
  const double r_mpi = problem.loss(mpi_rt.params());
  const double r_thr = problem.loss(threads_rt.params());
  BOOST_TEST_MESSAGE("real-time order: loss " << r_mpi << " (MPI) vs " << r_thr << " (threads)");
  BOOST_TEST(std::fabs(r_mpi - r_thr) < 1e-6);
  BOOST_TEST(mpi_rt.version() == 2000u);
}

BOOST_AUTO_TEST_SUITE_END()
