// A server policy written outside the library and the driver (tests/support/toy_policy.hpp)
// reaches heterograd-run through one registry row (add_algorithm, server_row): the schema,
// the runners and checkpointability come from that row, and the driver runs it on threads
// (and under mpirun, on MPI ranks) bitwise as on the simulator. The library half of the toy's
// tests (sim == threads == MPI without the driver) is tests/runtime/toy_policy_test.cpp.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>

#include <boost/test/unit_test.hpp>

#include "config.hpp"
#include "hg_mpi.hpp"
#include "run.hpp"
#include "servers.hpp"
#include "toy_policy.hpp"

using hg_test::damped_asgd;

namespace {

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

}  // namespace

#if defined(HG_TOY_UNDER_MPIEXEC)
using mpi_test::mpi_session;
BOOST_TEST_GLOBAL_FIXTURE(mpi_session);
#endif

BOOST_AUTO_TEST_SUITE(driver_toy_row)

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
BOOST_AUTO_TEST_SUITE_END()
