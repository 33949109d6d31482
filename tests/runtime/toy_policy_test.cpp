// A new asynchronous server policy, written in this file alone (no library header names it),
// runs under the three runtimes: the simulator, threads over inproc and (under mpirun) MPI
// ranks. In virtual-time arrival order all three hand it the same results in the same order,
// so they end with bitwise the same model and the same update records.
// Under mpirun this executable also runs runtime::run's round methods on the real clock over
// the ranks (suite run_rounds_on_mpi_ranks: BSP, eager-SGD; invariants, not traces: the wall
// clock decides).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/algorithms/async/server.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/runtime.hpp"
#include "heterograd/sim/worker_time.hpp"
#include "heterograd/testing/runtime_archetypes.hpp"
#if defined(HG_TOY_UNDER_MPIEXEC)
#include <optional>

#include "heterograd/algorithms/sync/bsp.hpp"
#include "heterograd/algorithms/sync/eager.hpp"
#include "heterograd/comm/mpi_partial.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "hg_mpi.hpp"
#include "toy_policy.hpp"
#endif

namespace hg = heterograd;
namespace async = heterograd::algorithms::async;
namespace hr = heterograd::runtime;
namespace ht = heterograd::testing;
namespace sim = heterograd::sim;

namespace {

using hg_test::damped_asgd;

static_assert(hr::server_policy<damped_asgd<>, double, ht::async_control_archetype>);

// Worker w's gradient of |x - c_w|^2 / 2 plus N(0, 0.1^2) noise drawn at (w, job, element).
struct problem {
  std::size_t n, d = 4;
  std::vector<double> c;
  explicit problem(std::size_t workers) : n(workers), c(workers * d) {
    const hg::counter_rng rng(7, 0xc0);
    for (std::size_t k = 0; k < c.size(); ++k) c[k] = rng.normal(k);
  }
  void gradient(hr::worker_id w, std::uint64_t k, const double* x, std::vector<double>& g) const {
    g.resize(d);
    const auto rng = hg::counter_rng(7, 0x9b).substream(w);
    for (std::size_t j = 0; j < d; ++j) g[j] = x[j] - c[w * d + j] + 0.1 * rng.normal(k * d + j);
  }
  auto remote_gradient() const {
    return [this](hr::worker_id w, std::uint64_t, std::uint64_t k, hg::span<const double> x,
                  std::vector<double>& g) { gradient(w, k, x.data(), g); };
  }
  damped_asgd<> policy() const {
    return damped_asgd<>(n, async::model_server<double>(std::vector<double>(d, 0.0), async::plain_sgd(0.3)));
  }
  // Heterogeneous speeds: worker w takes 1 + 1.5 w per job.
  sim::fixed_times model() const {
    std::vector<double> t(n);
    for (std::size_t w = 0; w < n; ++w) t[w] = 1.0 + 1.5 * static_cast<double>(w);
    return sim::fixed_times(t);
  }
};

constexpr std::uint64_t arrivals = 240;

// The simulator's run: the reference.
struct simulated {
  damped_asgd<> p;
  hr::async_runtime<std::vector<double>, sim::fixed_times> rt;
  explicit simulated(const problem& prob) : p(prob.policy()), rt(prob.n, prob.model()) {
    hr::run_options o;
    o.max_events = arrivals;
    rt.run(p, [&](hr::worker_id w, std::uint64_t, std::uint64_t k, std::vector<double>& g) {
      prob.gradient(w, k, p.params().data(), g);
    }, o);
  }
};

const hr::remote_options virtual_order{.order = hr::arrival_order::virtual_time,
                                       .max_arrivals = arrivals};

void same_run(const damped_asgd<>& p, const hr::remote_summary& s, const simulated& ref) {
  BOOST_TEST(s.arrivals == arrivals);
  BOOST_TEST(p.version() == ref.p.version());
  BOOST_TEST(std::memcmp(p.params().data(), ref.p.params().data(), p.dim() * sizeof(double)) == 0);
  const auto& rec = ref.rt.recorder();
  BOOST_TEST(s.log.count(sim::update_outcome::applied) == rec.count(sim::update_outcome::applied));
  BOOST_TEST(s.log.staleness_histogram(sim::update_outcome::applied) ==
                 rec.staleness_histogram(sim::update_outcome::applied),
             boost::test_tools::per_element());
  for (hr::worker_id w = 0; w < rec.workers(); ++w)
    BOOST_TEST(s.log.count(w, sim::update_outcome::applied) ==
               rec.count(w, sim::update_outcome::applied));
}


}  // namespace

#if defined(HG_TOY_UNDER_MPIEXEC)
using mpi_test::mpi_session;
BOOST_TEST_GLOBAL_FIXTURE(mpi_session);
#endif

BOOST_AUTO_TEST_SUITE(runtime_toy_policy)

BOOST_AUTO_TEST_CASE(a_policy_written_in_a_test_runs_on_threads_bitwise_as_under_the_simulator) {
  const problem prob(3);
  const simulated ref(prob);
  BOOST_TEST_REQUIRE(ref.p.version() == arrivals);  // every arrival is applied
  BOOST_TEST(ref.rt.recorder().max_staleness() > 0u);  // and the fast workers make delays

  auto p = prob.policy();
  const auto s = hr::run_threads<double>(p, prob.remote_gradient(), virtual_order, prob.model());
  same_run(p, s, ref);
}

#if defined(HG_TOY_UNDER_MPIEXEC)
BOOST_AUTO_TEST_CASE(a_policy_written_in_a_test_runs_on_mpi_ranks_bitwise_as_under_the_simulator) {
  auto& c = mpi_test::world();
  BOOST_TEST_REQUIRE(c.size() >= 2);
  const problem prob(static_cast<std::size_t>(c.size() - 1));
  auto p = prob.policy();
  const auto s = hr::run_remote<double>(p, c, prob.remote_gradient(), virtual_order, prob.model());
  if (c.rank() != 0) return;  // the server's rank holds the model and the records
  const simulated ref(prob);
  same_run(p, s, ref);
}
#endif

BOOST_AUTO_TEST_SUITE_END()

#if defined(HG_TOY_UNDER_MPIEXEC)
namespace {
// f_w(x) = |x - (w + 1)|^2 / 2 in every coordinate (its loss unused).
struct centres_oracle {
  double operator()(std::size_t w, std::uint64_t, std::size_t, hg::span<const float> x, hg::span<float> g) const {
    for (std::size_t j = 0; j < x.size(); ++j) g[j] = x[j] - static_cast<float>(w + 1);
    return 0.0;
  }
};
using bsp_method = heterograd::algorithms::sync::bsp<float, heterograd::optim::sgd, centres_oracle>;
using eager_method = heterograd::algorithms::sync::eager_sgd<float, heterograd::optim::sgd, centres_oracle>;

// Every rank's value of x is the same (max == min over the ranks).
bool same_on_every_rank(const heterograd::comm::mpi::communicator& c, double x) {
  std::vector<double> v{x, -x};
  c.allreduce(hg::span<double>(v.data(), v.size()),
              heterograd::comm::allreduce_options{.op = heterograd::comm::reduce_op::max})
      .wait();
  return v[0] == -v[1];
}
}  // namespace

BOOST_AUTO_TEST_SUITE(run_rounds_on_mpi_ranks)

// BSP with rank k as worker k, the last one paced twice as slow: halted after the second
// evaluation's checkpoint (rank 0 holds every rank's part), then resumed by fresh methods. The
// resumed run goes on from the cut (its hash, every rank at the cut's round), and at the end
// every rank's own replica is bitwise the same.
BOOST_AUTO_TEST_CASE(bsp_on_the_real_clock_resumes_every_rank_from_the_cut_and_the_replicas_agree) {
  auto& c = mpi_test::world();
  const auto n = static_cast<std::size_t>(c.size()), d = std::size_t{8};
  const auto me = static_cast<std::size_t>(c.rank());
  auto make = [&] {
    return bsp_method(n, hg::span<const float>(std::vector<float>(d, 0.0f)), heterograd::optim::sgd({.lr = 0.05}),
                      centres_oracle{}, std::vector<std::size_t>(n, 1));
  };
  std::vector<double> tau(n, 1.0);
  tau.back() = 2.0;
  const sim::fixed_times model(tau);
  hr::run_options o;
  o.horizon = 100;
  o.real_scale = 0.002;
  o.eval_interval = 20;
  o.evaluate = [](const hr::snapshot& s) { return std::vector<double>{static_cast<double>(s.updates)}; };
  o.checkpoint.every = 1;
  std::optional<std::vector<std::byte>> saved;
  o.checkpoint.write = [&](const std::vector<std::byte>& payload, const hr::cut_record&) { saved = payload; };
  o.halt_after = 2;
  auto p = make();
  if (me == 0) {
    BOOST_CHECK_THROW(hr::run(p, hr::where::mpi{c}, o, model), hr::halted);
    BOOST_REQUIRE(saved.has_value());
  } else {
    BOOST_TEST(!hr::run(p, hr::where::mpi{c}, o, model).evaluating);
  }
  auto q = make();
  o.halt_after = 0;
  if (me == 0) o.checkpoint.resume = *saved;
  const auto r = hr::run(q, hr::where::mpi{c}, o, model);
  const auto x = q.params(me);
  BOOST_TEST(same_on_every_rank(c, static_cast<double>(hr::fnv1a(x.data(), x.size() * sizeof(float)) >> 11)));
  if (me != 0) return;
  BOOST_REQUIRE(r.resumed_from.has_value());
  BOOST_REQUIRE(r.cuts.size() >= 2u);
  BOOST_TEST(r.resumed_from->params_hash == r.cuts[1].params_hash);
  BOOST_TEST(r.resumed_from->version == r.cuts[1].version);
  BOOST_TEST(r.resumed_rounds_per_rank == std::vector<std::uint64_t>(n, r.cuts[1].version),
             boost::test_tools::per_element());
  BOOST_REQUIRE_EQUAL(r.evaluations.size(), 6u);  // 0, 20, ..., 100
  BOOST_TEST(r.rounds >= r.cuts[1].version);
  BOOST_TEST(r.workers.size() == n);
  for (std::size_t w = 0; w < n; ++w) BOOST_TEST(r.workers[w].jobs > 0u, "worker " << w);
}

// eager-SGD with rank k as worker k over MPI's partial allreduce, the last rank paced three
// times slower: every rank ends at the flush round after rank 0's vote, so the ranks' own
// replicas are bitwise the same and the results applied sum to every rank's computed
// gradients; per worker, fresh + late = rounds, every late part folded in, the slow rank late.
BOOST_AUTO_TEST_CASE(eager_sgd_on_the_real_clock_over_mpi_ranks_keeps_the_replicas_equal_and_applies_every_gradient) {
  auto& c = mpi_test::world();
  const auto n = static_cast<std::size_t>(c.size()), d = std::size_t{8};
  const auto me = static_cast<std::size_t>(c.rank());
  heterograd::algorithms::sync::eager_config cfg;
  cfg.staleness_bound = 2;
  eager_method p(n, hg::span<const float>(std::vector<float>(d, 0.0f)), heterograd::optim::sgd({.lr = 0.05}),
                 centres_oracle{}, std::vector<std::size_t>(n, 1), cfg);
  std::vector<double> tau(n, 1.0);
  tau.back() = 3.0;
  const sim::fixed_times model(tau);
  hr::run_options o;
  o.horizon = 100;
  o.real_scale = 0.002;
  o.eval_interval = 50;
  o.evaluate = [](const hr::snapshot& s) { return std::vector<double>{static_cast<double>(s.updates)}; };
  const auto r = hr::run(p, hr::where::mpi{c}, o, model);
  const auto x = p.params(me);
  BOOST_TEST(same_on_every_rank(c, static_cast<double>(hr::fnv1a(x.data(), x.size() * sizeof(float)) >> 11)));
  if (me != 0) {
    BOOST_TEST(!r.evaluating);
    return;
  }
  BOOST_TEST(r.partial.replicas_agree);
  BOOST_TEST(r.partial.conservation_error <= 1e-6);
  BOOST_REQUIRE_EQUAL(r.evaluations.size(), 3u);  // 0, 50, 100
  BOOST_TEST(r.rounds > 0u);
  BOOST_REQUIRE_EQUAL(r.partial.late_per_worker.size(), n);
  BOOST_REQUIRE_EQUAL(r.workers.size(), n);
  BOOST_TEST_MESSAGE("eager on " << n << " ranks: " << r.rounds << " rounds, the slow rank late "
                                 << r.partial.late_per_worker.back() << ", conservation error "
                                 << r.partial.conservation_error);
  for (std::size_t w = 0; w < n; ++w) {
    const auto id = static_cast<hr::worker_id>(w);
    const auto lw = r.partial.late_per_worker[w];
    BOOST_TEST(r.updates.count(id, sim::update_outcome::applied) + lw == r.rounds, "worker " << w);
    BOOST_TEST(r.updates.count(id, sim::update_outcome::buffered) == lw, "worker " << w);
    BOOST_TEST(r.workers[w].jobs == r.rounds, "worker " << w);
  }
  BOOST_TEST(r.partial.late_per_worker.back() > 0u);
}

BOOST_AUTO_TEST_SUITE_END()
#endif
