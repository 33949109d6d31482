// runtime::run (runtime/run.hpp): a server policy on real threads on the real clock, with the
// evaluation hook and checkpoints. Real-time runs are not deterministic: the checks are their
// invariants (the hook never stalls the workers, the grid and its horizon, Ringmaster's delay
// bound, a resumed run going on from its cut), not traces.

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/algorithms/async/asgd.hpp"
#include "heterograd/algorithms/async/ringmaster.hpp"
#include "heterograd/runtime/run.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace hg = heterograd;
namespace hr = heterograd::runtime;
namespace ha = heterograd::algorithms::async;

namespace {

// f_w(x) = |x - c_w|^2 / 2 with c_w = w + 1 in every coordinate: the gradient is x - c_w.
struct centres {
  std::size_t d;
  std::atomic<std::uint64_t>* computed;
  void operator()(hr::worker_id w, std::uint64_t, std::uint64_t, std::size_t, hg::span<const float> x,
                  std::vector<float>& g) const {
    g.resize(d);
    for (std::size_t j = 0; j < d; ++j) g[j] = x[j] - static_cast<float>(w + 1);
    computed->fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
};

double distance_to(hg::span<const float> x, double c) {
  double s = 0;
  for (float v : x) s += (v - c) * (v - c);
  return std::sqrt(s);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(run_on_real_threads)

// The hook sleeps 50 ms at every evaluation: the workers go on meanwhile (gradients are
// computed during the hook), the grid is 0, 40, ..., the horizon, and Ringmaster's applied
// updates are never staler than its threshold.
BOOST_AUTO_TEST_CASE(a_ringmaster_server_is_evaluated_on_snapshots_while_its_workers_go_on,
                     *boost::unit_test::timeout(120)) {
  const std::size_t n = 4, d = 16;
  ha::ringmaster_asgd<float> p(n, ha::model_server<float>(std::vector<float>(d, 0.0f), ha::plain_sgd(0.05)),
                               {.threshold = 3});
  std::atomic<std::uint64_t> computed{0};
  std::vector<std::uint64_t> during;  // gradients computed while each hook slept
  hr::run_options o;
  o.horizon = 160;                 // model units of 2 ms: 0.32 s
  o.real_scale = 0.002;
  o.eval_interval = 40;
  o.evaluate = [&](const hr::snapshot& s) {
    const auto before = computed.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    during.push_back(computed.load() - before);
    return std::vector<double>{distance_to(s.params, 2.5)};
  };
  const hg::sim::fixed_times model({1.0, 1.0, 3.0, 3.0});  // workers 2 and 3 three times slower
  const auto r = hr::run(hr::served{p, centres{d, &computed}}, hr::where::threads{}, o, model);
  BOOST_REQUIRE_EQUAL(r.evaluations.size(), 5u);
  for (std::size_t k = 0; k < 5; ++k) {
    BOOST_TEST(r.evaluations[k].index == k);
    BOOST_TEST(r.evaluations[k].time == 40.0 * static_cast<double>(k));
  }
  for (std::size_t k = 1; k + 1 < during.size(); ++k) BOOST_TEST(during[k] > 0u, "evaluation " << k);
  BOOST_TEST(r.updates_done == p.version());
  BOOST_TEST(r.arrivals > 0u);
  const auto& applied = r.updates.staleness_histogram(hg::sim::update_outcome::applied);
  BOOST_TEST(applied.size() <= 3u);  // staleness 0, 1, 2 only: below the threshold R = 3
  BOOST_TEST(r.workers.size() == n);
  // Paced: every job lasts at least its model time (1 or 3 units of 2 ms), load only adds;
  // but the job in flight when the run ends is interrupted (its paced sleep stops at the
  // server's shutdown, worker_client::interrupted) and still counted: one job per worker may
  // be short (seen in CI: worker 2, a slow one with few jobs, below the mean otherwise).
  const double tau[] = {1.0, 1.0, 3.0, 3.0};
  for (std::size_t w = 0; w < n; ++w) {
    const auto& x = r.workers[w];
    if (x.jobs < 2) continue;
    BOOST_TEST(x.compute_seconds + x.paced_seconds >= 0.999 * tau[w] * o.real_scale * static_cast<double>(x.jobs - 1),
               "worker " << w << ": " << x.jobs << " jobs in " << x.compute_seconds + x.paced_seconds << " s");
  }
  BOOST_TEST(r.evaluations.back().values[0] < r.evaluations.front().values[0]);
  BOOST_TEST(r.params.size() == d);
}

// Checkpoints at every evaluation; halted after the second (as if killed there), then resumed
// from its payload by a fresh policy: it goes on from the last cut (same version and model
// hash), the grid continues at its next index up to the horizon, and the cuts and evaluations
// before the kill are in the resumed run's report.
BOOST_AUTO_TEST_CASE(a_run_halted_after_a_checkpoint_resumes_from_its_cut, *boost::unit_test::timeout(120)) {
  const std::size_t n = 3, d = 8;
  std::atomic<std::uint64_t> computed{0};
  auto make = [&] { return ha::asgd<float>(n, ha::model_server<float>(std::vector<float>(d, 0.0f), ha::plain_sgd(0.02))); };
  hr::run_options o;
  o.horizon = 100;
  o.real_scale = 0.002;
  o.eval_interval = 20;
  o.evaluate = [](const hr::snapshot& s) { return std::vector<double>{distance_to(s.params, 2.0)}; };
  o.checkpoint.every = 1;
  std::optional<std::vector<std::byte>> saved;
  o.checkpoint.write = [&](const std::vector<std::byte>& payload, const hr::cut_record&) { saved = payload; };
  o.halt_after = 2;
  auto p = make();
  BOOST_CHECK_THROW(hr::run(hr::served{p, centres{d, &computed}}, hr::where::threads{}, o), hr::halted);
  BOOST_REQUIRE(saved.has_value());
  auto q = make();
  o.halt_after = 0;
  o.checkpoint.resume = *saved;
  const auto r = hr::run(hr::served{q, centres{d, &computed}}, hr::where::threads{}, o);
  BOOST_REQUIRE(r.resumed_from.has_value());
  BOOST_REQUIRE(r.cuts.size() >= 2u);
  BOOST_TEST(r.resumed_from->version == r.cuts[1].version);
  BOOST_TEST(r.resumed_from->params_hash == r.cuts[1].params_hash);
  BOOST_TEST(r.resumed_from->time == r.cuts[1].time);
  BOOST_REQUIRE_EQUAL(r.evaluations.size(), 6u);  // 0, 20, ..., 100: two before the kill
  for (std::size_t k = 0; k < 6; ++k) BOOST_TEST(r.evaluations[k].index == k);
  BOOST_TEST(r.updates_done >= r.cuts[1].version);
  BOOST_TEST(r.evaluations.back().values[0] < r.evaluations.front().values[0]);
}

BOOST_AUTO_TEST_CASE(bad_options_are_refused_by_name_before_anything_runs) {
  const std::size_t n = 2, d = 4;
  std::atomic<std::uint64_t> computed{0};
  ha::asgd<float> p(n, ha::model_server<float>(std::vector<float>(d, 0.0f)));
  auto message = [&](const hr::run_options& o, const hr::where::threads& w = {}) {
    try {
      (void)hr::run(hr::served{p, centres{d, &computed}}, w, o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  hr::run_options o;
  BOOST_TEST(message(o).find("'horizon'") != std::string::npos);  // no rule: it would never end
  o.horizon = 10;
  o.max_epochs = 1;
  BOOST_TEST(message(o).find("run_options.train_samples") != std::string::npos);
  o.max_epochs = std::numeric_limits<double>::infinity();
  o.real_scale = -1;
  BOOST_TEST(message(o).find("run_options.real_scale") != std::string::npos);
  o.real_scale = 0;
  hr::where::threads w;
  w.placement = hr::placement_config::parse({"0"}, "w");
  BOOST_TEST(message(o, w).find("where::threads.placement") != std::string::npos);
  BOOST_TEST(computed.load() == 0u);
  BOOST_TEST(p.version() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
