// A new asynchronous server policy, written in this file alone (no library header names it),
// runs under the three runtimes: the simulator, threads over inproc and (under mpirun) MPI
// ranks. In virtual-time arrival order all three hand it the same results in the same order,
// so they end with bitwise the same model and the same update records.
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
#include "hg_mpi.hpp"
#endif
#if defined(HG_TOY_THROUGH_DRIVER)
#include <unistd.h>

#include <filesystem>
#include <string>

#include "config.hpp"
#include "run.hpp"
#include "servers.hpp"
#endif

namespace hg = heterograd;
namespace async = heterograd::algorithms::async;
namespace hr = heterograd::runtime;
namespace ht = heterograd::testing;
namespace sim = heterograd::sim;

namespace {

// The toy: every gradient is applied at once, with step lr / (1 + delay) (lr: the server's
// optimizer's).
template <class T = double, class O = async::default_optimizer>
class damped_asgd {
 public:
  damped_asgd(std::size_t workers, async::model_server<T, O> server)
      : n_(workers), server_(std::move(server)) {}

  std::uint64_t version() const { return server_.version(); }
  std::size_t workers() const { return n_; }
  std::size_t dim() const { return server_.dim(); }
  hg::span<const T> params() const { return server_.params(); }

  template <class Ctl, class G>
  void on_arrival(Ctl& ctl, const hr::arrival& a, const G& g) {
    const std::uint64_t delay = server_.version() - a.version;
    server_.apply(hg::span<const T>(g.data(), g.size()), 1.0 / (1.0 + static_cast<double>(delay)));
    ctl.applied(a.worker, delay);
  }

 private:
  std::size_t n_;
  async::model_server<T, O> server_;
};

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

#if defined(HG_TOY_THROUGH_DRIVER)
// heterograd-run learns the toy from one registry row (tools/driver/registry.hpp): its name,
// its config (none) and how to build it from the driver's model server. The schema, the
// runners and checkpointability all come from that row.
void add_toy_to_the_driver() {
  static const bool added = [] {
    hgrun::add_algorithm(hgrun::server_row<damped_asgd<float, hgrun::any_optimizer>>(
        "damped_asgd", hgrun::no_config{}, [](auto&, std::size_t n, auto server, const auto&) {
          return damped_asgd<float, hgrun::any_optimizer>(n, std::move(server));
        }));
    return true;
  }();
  (void)added;
}

// An experiment of one toy method on the worst-case quadratic with gradient noise.
hgrun::json toy_experiment(std::size_t workers, const std::string& runtime) {
  auto j = hgrun::json::parse(R"({
    "name": "toy", "data": {"dataset": "worst_case_quadratic", "dim": 8, "noise": 0.1},
    "workers": {"count": 3, "time": {"base": "linear", "permute": false}},
    "horizon": {"updates": 120}, "eval_interval": 10, "target": {"metric": "loss", "value": 0.1, "below": true},
    "optimizer": {"lr": 0.3}, "methods": [{"label": "toy", "algorithm": "damped_asgd"}]})");
  j["workers"]["count"] = workers;
  j["runtime"] = runtime;
  return hgrun::resolve(j);
}

hgrun::json run_toy(const hgrun::json& cfg, const std::string& name, bool root) {
  hgrun::run_request req;
  req.config = cfg;
  req.dir = std::filesystem::temp_directory_path() / ("hg-toy-" + std::to_string(::getpid())) / name;
  req.root = root;
  return hgrun::run_method(req);
}

// The driver's summaries of two runtimes: the same model, trace and update records.
void same_summary(const hgrun::json& a, const hgrun::json& b) {
  for (const char* k : {"params_hash", "trace_hash", "events", "updates", "max_staleness"})
    BOOST_TEST(a[k] == b[k], k << ": " << a[k].dump() << " vs " << b[k].dump());
}
#endif

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

#if defined(HG_TOY_THROUGH_DRIVER)
BOOST_AUTO_TEST_CASE(one_registry_row_runs_the_toy_through_the_driver_on_threads_bitwise_as_under_the_simulator) {
  add_toy_to_the_driver();
  const auto sim = run_toy(toy_experiment(3, "sim"), "sim", true);
  BOOST_TEST(sim["updates"]["applied"].get<std::uint64_t>() == 120u);  // every arrival applied
  BOOST_TEST(sim["max_staleness"].get<std::uint64_t>() > 0u);
  same_summary(run_toy(toy_experiment(3, "threads"), "threads", true), sim);
  // The schema is the row's: the toy has no keys of its own, and its name is taken.
  auto raw = hgrun::json::parse(R"({"name": "t", "data": {"dataset": "worst_case_quadratic"},
    "workers": {"count": 2}, "horizon": {"time": 10}, "eval_interval": 1,
    "methods": [{"label": "toy", "algorithm": "damped_asgd", "threshold": 3}]})");
  std::string refused;
  try {
    (void)hgrun::resolve(raw);
  } catch (const hgrun::config_error& e) {
    refused = e.what();
  }
  BOOST_TEST(refused.find("'methods[0].threshold'") != std::string::npos, refused);
  BOOST_TEST(refused.find("unknown key") != std::string::npos, refused);
  BOOST_CHECK_THROW(hgrun::add_algorithm(hgrun::runnable_algorithm("damped_asgd")), std::invalid_argument);
}

#if defined(HG_TOY_UNDER_MPIEXEC)
BOOST_AUTO_TEST_CASE(one_registry_row_runs_the_toy_through_the_driver_on_mpi_ranks_bitwise_as_under_the_simulator) {
  add_toy_to_the_driver();
  auto& c = mpi_test::world();
  BOOST_TEST_REQUIRE(c.size() >= 2);
  const auto workers = static_cast<std::size_t>(c.size() - 1);  // rank 0 serves
  const auto mpi = run_toy(toy_experiment(workers, "mpi"), "mpi-" + std::to_string(c.size()), c.rank() == 0);
  if (c.rank() != 0) return;  // only the server's rank writes a summary
  same_summary(mpi, run_toy(toy_experiment(workers, "sim"), "sim-" + std::to_string(c.size()), true));
}
#endif
#endif

BOOST_AUTO_TEST_SUITE_END()
