// runtime::run (runtime/run.hpp): a server policy and round methods (BSP, local SGD, eager-SGD) on real
// threads on the real clock, with the evaluation hook and checkpoints. Real-time runs are not deterministic: the checks are their
// invariants (the hook never stalls the workers, the grid and its horizon, Ringmaster's delay
// bound, rounds going on during an evaluation, replicas agreeing, a resumed run going on from
// its cut), not traces.

#include <algorithm>
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

#include <sched.h>

#include "heterograd/algorithms/async/asgd.hpp"
#include "heterograd/algorithms/async/ringmaster.hpp"
#include "heterograd/algorithms/sync/bsp.hpp"
#include "heterograd/algorithms/sync/eager.hpp"
#include "heterograd/algorithms/sync/local_sgd.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/runtime/measure.hpp"
#include "heterograd/runtime/run.hpp"
#include "heterograd/runtime/sim.hpp"
#include "heterograd/sim/worker_time.hpp"
#include "messages.hpp"

namespace hg = heterograd;
namespace hr = heterograd::runtime;
namespace sim = heterograd::sim;
namespace ha = heterograd::algorithms::async;
namespace hs = heterograd::algorithms::sync;
namespace ho = heterograd::optim;

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

// The same objective for the round methods' oracle (its loss is not used), counting gradients.
struct centres_oracle {
  std::atomic<std::uint64_t>* computed;
  double operator()(std::size_t w, std::uint64_t, std::size_t, hg::span<const float> x, hg::span<float> g) const {
    for (std::size_t j = 0; j < x.size(); ++j) g[j] = x[j] - static_cast<float>(w + 1);
    computed->fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    return 0.0;
  }
};
using bsp_method = hs::bsp<float, ho::sgd, centres_oracle>;
using local_method = hs::local_sgd<float, ho::sgd, centres_oracle>;
using eager_method = hs::eager_sgd<float, ho::sgd, centres_oracle>;

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
    return hg_test::invalid_argument_message([&] { (void)hr::run(hr::served{p, centres{d, &computed}}, w, o); });
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

// Core placement reaches the server (issue 50): ASGD whose every arrival records the mask of
// the thread that applies it, read with sched_getaffinity from inside. With
// placement.server set, that mask is the server set (the last core), while the workers run
// on theirs (the first core) and the calling thread's mask is untouched; without it, the
// server thread keeps the process's mask (the default is unchanged).
namespace {
struct affinity_asgd : ha::asgd<float> {
  using ha::asgd<float>::asgd;
  std::vector<hr::core_set>* seen = nullptr;
  template <class C, class A, class G>
  void on_arrival(C& c, const A& a, const G& g) {
    cpu_set_t set;
    CPU_ZERO(&set);
    BOOST_REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
    hr::core_set s;
    for (int k = 0; k < CPU_SETSIZE; ++k)
      if (CPU_ISSET(k, &set)) s.cores.push_back(k);
    seen->push_back(s);
    ha::asgd<float>::on_arrival(c, a, g);
  }
};
}  // namespace

BOOST_AUTO_TEST_CASE(the_server_thread_runs_on_the_placements_server_cores, *boost::unit_test::timeout(60)) {
  const auto have = hr::available_cores();
  const hr::core_set first{{have.cores.front()}}, last{{have.cores.back()}};
  const std::size_t n = 2, d = 4;
  std::atomic<std::uint64_t> computed{0};
  hr::run_options o;
  o.max_updates = 20;
  o.horizon = std::numeric_limits<double>::infinity();
  auto server_masks = [&](const hr::where::threads& w) {
    std::vector<hr::core_set> seen;
    affinity_asgd p(n, ha::model_server<float>(std::vector<float>(d, 0.0f)));
    p.seen = &seen;
    const auto r = hr::run(hr::served{p, centres{d, &computed}}, w, o);
    BOOST_TEST(r.updates_done == 20u);
    BOOST_TEST_REQUIRE(seen.size() == 20u);
    return seen;
  };
  const auto caller = hr::this_thread_cores();
  hr::where::threads w;
  w.placement = hr::placement_config::parse({have.str(), have.str()}, "k");
  for (const auto& s : server_masks(w)) BOOST_TEST((s == have), s.str());  // not pinned: as before
  w.placement = hr::placement_config::parse({first.str(), first.str()}, "k");
  w.placement.server = last;
  for (const auto& s : server_masks(w)) BOOST_TEST((s == last), s.str() << " against " << last.str());
  BOOST_TEST((hr::this_thread_cores() == caller));
  BOOST_TEST((w.placement.sharing_server() ==
              (first == last ? std::vector<std::size_t>{0, 1} : std::vector<std::size_t>{})));
  if (have.size() == 1) BOOST_TEST_MESSAGE("one core only: the server's mask cannot differ from the process's");
}

BOOST_AUTO_TEST_CASE(a_server_placement_is_refused_by_key_where_it_cannot_pin) {
  const auto message = [](auto&& f) { return hg_test::invalid_argument_message(f); };
  std::atomic<std::uint64_t> computed{0};
  hr::run_options o;
  o.horizon = 10;
  ha::asgd<float> p(2, ha::model_server<float>(std::vector<float>(4, 0.0f)));
  hr::where::threads w;
  w.placement.server = hr::core_set{{hr::max_cores - 1}};  // a core no test machine has
  const auto missing = message([&] { (void)hr::run(hr::served{p, centres{4, &computed}}, w, o); });
  BOOST_TEST(missing.find("'where::threads.placement.server'") != std::string::npos, missing);
  BOOST_TEST(missing.find("core 1023 is not available") != std::string::npos, missing);
  w.placement.server_key = "workers.server_placement";
  const auto named = message([&] { (void)hr::run(hr::served{p, centres{4, &computed}}, w, o); });
  BOOST_TEST(named.find("'workers.server_placement'") != std::string::npos, named);
  const std::vector<float> zero(4, 0.0f);
  bsp_method b(2, hg::span<const float>(zero), ho::sgd({.lr = 0.05}), centres_oracle{&computed},
               std::vector<std::size_t>(2, 1));
  w.placement.server = hr::core_set{{0}};
  const auto rounds = message([&] { (void)hr::run(b, w, o); });
  BOOST_TEST(rounds.find("'workers.server_placement' = \"0\"") != std::string::npos, rounds);
  BOOST_TEST(rounds.find("must be empty for a round method") != std::string::npos, rounds);
  BOOST_TEST(computed.load() == 0u);
  BOOST_TEST(p.version() == 0u);
}

// Membership through runtime::run (issue 46; docs/elastic.md): Ringmaster on 4 slots, slot 3
// a spare absent at the start. Worker 1's compute throws leave_run at its 20th job; the spare
// joins once the model has 100 updates and slot 1 restarts on a new thread at 200. The run
// reaches its 400 updates; every result handed over has one outcome and the version counts
// the applied ones (nothing applied twice); the changes are the leave and the two joins, each
// joiner's model hash-equal to the server's; Ringmaster's delay bound holds across them.
BOOST_AUTO_TEST_CASE(a_ringmaster_run_goes_on_when_a_worker_leaves_and_a_spare_and_the_restarted_slot_join,
                     *boost::unit_test::timeout(120)) {
  const std::size_t n = 4, d = 8, threshold = 3;
  const std::uint64_t updates = 400;
  ha::ringmaster_asgd<float> p(n, ha::model_server<float>(std::vector<float>(d, 0.0f), ha::plain_sgd(0.05)),
                               {.threshold = threshold});
  std::atomic<std::uint64_t> computed{0}, first_of_1{0};
  std::atomic<bool> left{false};
  const centres grad{d, &computed};
  auto compute = [&](hr::worker_id w, std::uint64_t v, std::uint64_t k, std::size_t b, hg::span<const float> x,
                     std::vector<float>& g) {
    if (w == 1 && !left && ++first_of_1 == 20) {
      left = true;
      throw hr::leave_run();
    }
    grad(w, v, k, b, x, g);
  };
  hr::run_options o;
  o.max_updates = updates;
  o.timeout = hg::seconds{30};
  o.membership.elastic = true;
  o.membership.absent = {3};
  o.membership.deadline.floor = 5.0;  // leaves and joins here, not deadlines
  hr::where::threads where;
  where.joins = {{.worker = 3, .after_updates = 100}, {.worker = 1, .after_updates = 200}};
  const auto r = hr::run(hr::served{p, compute}, where, o);

  BOOST_TEST_MESSAGE("elastic ringmaster: " << r.arrivals << " results, lost " << r.lost << ", events at versions "
                     << (r.membership.size() > 2 ? r.membership[0].version : 0) << ", "
                     << (r.membership.size() > 2 ? r.membership[1].version : 0) << ", "
                     << (r.membership.size() > 2 ? r.membership[2].version : 0) << "; " << r.wall_seconds << " s");
  BOOST_TEST(r.updates_done == updates);
  BOOST_TEST(p.version() == updates);
  const auto applied = r.updates.count(sim::update_outcome::applied);
  BOOST_TEST(applied + r.updates.count(sim::update_outcome::buffered) + r.updates.count(sim::update_outcome::discarded) ==
             r.arrivals);
  BOOST_TEST(applied == r.updates_done);
  std::uint64_t handed = 0;
  for (auto k : r.results) handed += k;
  BOOST_TEST(handed == r.arrivals);
  BOOST_TEST(r.updates.staleness_histogram(sim::update_outcome::applied).size() <= threshold);  // delays < R
  BOOST_TEST(r.refused == 0u);
  BOOST_TEST(r.refused_late == 0u);  // a drain leaves no late result
  BOOST_TEST(r.lost <= 1u);          // at most the job sent after worker 1's last push
  BOOST_TEST(r.workers[1].left);
  BOOST_TEST(r.workers[1].jobs == 19u);  // its 20th job was the leave, never pushed
  BOOST_TEST(r.workers[3].jobs == 0u);   // the spare's slot had no first thread
  BOOST_TEST(r.results[3] > 0u);         // it took part once joined
  BOOST_TEST_REQUIRE(r.membership.size() == 3u);
  BOOST_TEST((r.membership[0].what == hr::membership_event::kind::leave && r.membership[0].worker == 1u));
  std::vector<std::uint32_t> joined;
  for (std::size_t i = 1; i < 3; ++i) {
    BOOST_TEST((r.membership[i].what == hr::membership_event::kind::join));
    joined.push_back(r.membership[i].worker);
  }
  std::sort(joined.begin(), joined.end());
  BOOST_TEST((joined == std::vector<std::uint32_t>{1, 3}));
  BOOST_TEST_REQUIRE(r.joiners.size() == 2u);
  for (std::size_t i = 1; i < 3; ++i) {
    const auto& e = r.membership[i];
    BOOST_TEST(e.version >= (e.worker == 3 ? 100u : 200u));  // not before its schedule
    const bool checked = std::any_of(r.joiners.begin(), r.joiners.end(), [&](const hr::worker_report& j) {
      return j.joined_hash == e.params_hash && j.joined_version == e.version;
    });
    BOOST_TEST(checked, "the joiner of slot " << e.worker << " holds the server's model");
  }
}

// A join due just as the run ends (20 times): it is welcomed, told to stop, or let go
// unanswered; either way the run ends at its horizon well within the 30 s timeout a joiner
// waits for its answer, and a welcomed joiner holds the server's model.
BOOST_AUTO_TEST_CASE(a_join_due_as_the_run_ends_never_holds_it_up, *boost::unit_test::timeout(120)) {
  const std::size_t n = 3, d = 4;
  int welcomed_runs = 0;
  for (int trial = 0; trial < 20; ++trial) {
    std::atomic<std::uint64_t> computed{0};
    ha::asgd<float> p(n, ha::model_server<float>(std::vector<float>(d, 0.0f), ha::plain_sgd(0.05)));
    hr::run_options o;
    o.max_updates = 60;
    o.timeout = hg::seconds{30};
    o.membership.elastic = true;
    o.membership.absent = {2};
    hr::where::threads where;
    where.joins = {{.worker = 2, .after_updates = 56}};
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = hr::run(hr::served{p, centres{d, &computed}}, where, o);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    BOOST_TEST(r.updates_done == 60u);
    BOOST_TEST(wall < 10.0);
    BOOST_TEST(r.joiners.size() <= 1u);
    const bool welcomed = !r.joiners.empty() && r.joiners[0].joined_hash.has_value();
    BOOST_TEST(r.membership.size() == (welcomed ? 1u : 0u));
    if (welcomed) BOOST_TEST(*r.joiners[0].joined_hash == r.membership[0].params_hash);
    welcomed_runs += welcomed;
  }
  BOOST_TEST_MESSAGE("joins due at the end: " << welcomed_runs << " of 20 welcomed");
}

// Membership on a clock or a method where it is not built is refused naming the key: the
// simulator (virtual_time order, the server's own rule), a round method, joins without it.
BOOST_AUTO_TEST_CASE(membership_where_it_is_not_built_is_refused_by_name) {
  const auto message = [](auto&& f) { return hg_test::invalid_argument_message(f); };
  hr::run_options o;
  o.horizon = 10;
  o.membership.elastic = true;
  struct none {} h;
  sim::engine e(2);
  const auto simulated = message([&] { (void)hr::run(e, h, o); });
  BOOST_TEST(simulated.find("'run_options.membership.elastic'") != std::string::npos, simulated);
  BOOST_TEST(simulated.find("needs real_time order") != std::string::npos, simulated);
  std::atomic<std::uint64_t> computed{0};
  const std::vector<float> zero(4, 0.0f);
  bsp_method b(2, hg::span<const float>(zero), ho::sgd({.lr = 0.05}), centres_oracle{&computed},
               std::vector<std::size_t>(2, 1));
  const auto rounds = message([&] { (void)hr::run(b, hr::where::threads{}, o); });
  BOOST_TEST(rounds.find("'run_options.membership.elastic'") != std::string::npos, rounds);
  ha::asgd<float> p(2, ha::model_server<float>(std::vector<float>(4, 0.0f)));
  o.membership.elastic = false;
  hr::where::threads w;
  w.joins = {{.worker = 1, .after_updates = 5}};
  const auto joins = message([&] { (void)hr::run(hr::served{p, centres{4, &computed}}, w, o); });
  BOOST_TEST(joins.find("'where::threads.joins[0].worker'") != std::string::npos, joins);
  // A round method has no membership: joins and leaves on threads are refused by key, not
  // ignored.
  const auto round_joins = message([&] { (void)hr::run(b, w, o); });
  BOOST_TEST(round_joins.find("'where::threads.joins'") != std::string::npos, round_joins);
  hr::where::threads l;
  l.leaves = {{.worker = 0, .after_jobs = 3}};
  const auto round_leaves = message([&] { (void)hr::run(b, l, o); });
  BOOST_TEST(round_leaves.find("'where::threads.leaves'") != std::string::npos, round_leaves);
  BOOST_TEST(round_leaves.find("must be empty for a round method") != std::string::npos, round_leaves);
  o.membership.absent = {1};
  const auto absent = message([&] { (void)hr::run(hr::served{p, centres{4, &computed}}, hr::where::threads{}, o); });
  BOOST_TEST(absent.find("'membership.absent'") != std::string::npos, absent);
  BOOST_TEST(computed.load() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(round_methods_on_real_threads)

namespace {
std::uint64_t hash_of(hg::span<const float> x) { return hr::fnv1a(x.data(), x.size() * sizeof(float)); }
bool replicas_agree(const auto& p, std::size_t n) {
  for (std::size_t w = 1; w < n; ++w) {
    const auto a = p.params(0), b = p.params(w);
    if (hash_of(a) != hash_of(b) || !std::equal(a.begin(), a.end(), b.begin())) return false;
  }
  return true;
}
// 4 workers, workers 2 and 3 paced three times slower (model units of 2 ms); evaluations every
// 0.2 s up to 0.6 s, the hook sleeping 0.2 s and counting the rounds (or gradients) meanwhile.
hr::run_options sleepy_options(const std::atomic<std::uint64_t>& progress, std::vector<std::uint64_t>& during) {
  hr::run_options o;
  o.horizon = 300;
  o.real_scale = 0.002;
  o.eval_interval = 100;
  o.evaluate = [&progress, &during](const hr::snapshot& s) {
    const auto before = progress.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    during.push_back(progress.load() - before);
    return std::vector<double>{distance_to(s.params, 2.5)};
  };
  return o;
}
}  // namespace

// BSP: between_rounds sees every round (the measured busy times never decrease), the hook's
// 0.2 s sleeps never stall the rounds, the replicas are bitwise equal at the end, and the
// report's rounds are the published ones.
BOOST_AUTO_TEST_CASE(bsp_rounds_go_on_while_the_hook_sleeps_and_the_replicas_agree, *boost::unit_test::timeout(120)) {
  const std::size_t n = 4, d = 8;
  std::atomic<std::uint64_t> computed{0}, rounds{0};
  bsp_method p(n, hg::span<const float>(std::vector<float>(d, 0.0f)), ho::sgd({.lr = 0.05}), centres_oracle{&computed},
               std::vector<std::size_t>(n, 1));
  std::vector<std::uint64_t> during;
  const auto o = sleepy_options(rounds, during);
  std::vector<double> last_busy(n, 0.0);
  bool busy_monotone = true;
  auto between = [&](std::uint64_t r, const hr::round_measurements& m) {
    busy_monotone = busy_monotone && m.round == r && m.busy.size() == n;
    for (std::size_t w = 0; w < n && w < m.busy.size(); ++w) {
      busy_monotone = busy_monotone && m.busy[w] >= last_busy[w];
      last_busy[w] = m.busy[w];
    }
    rounds = r + 1;
  };
  const hg::sim::fixed_times model({1.0, 1.0, 3.0, 3.0});
  const auto r = hr::run(hr::rounds_of{p, [&p] { return p.params(0); }, between}, hr::where::threads{}, o, model);
  BOOST_REQUIRE_EQUAL(r.evaluations.size(), 4u);  // 0, 100, 200, 300
  BOOST_REQUIRE_EQUAL(during.size(), 4u);
  // ~30 rounds of 6 ms fit in a 0.2 s sleep; a loop that held the model (or the rounds) while
  // its hook ran would let at most one more round end, the one waiting to publish.
  for (std::size_t k = 1; k + 1 < during.size(); ++k) BOOST_TEST(during[k] >= 3u, "evaluation " << k);
  BOOST_TEST(busy_monotone);
  BOOST_TEST(replicas_agree(p, n));
  BOOST_TEST(r.rounds > 0u);
  BOOST_TEST(r.rounds <= rounds.load());
  BOOST_TEST(r.updates_done == r.rounds);
  BOOST_TEST(r.workers.size() == n);
  // paced: a round of worker 2 or 3 lasts at least its 3 model units
  for (std::size_t w = 2; w < n; ++w)
    BOOST_TEST(r.workers[w].compute_seconds + r.workers[w].paced_seconds >=
               0.999 * 3.0 * o.real_scale * static_cast<double>(r.workers[w].jobs));
  BOOST_TEST(r.gradients[0] >= r.rounds);  // one gradient per round per worker
  BOOST_TEST(r.evaluations.back().values[0] < r.evaluations.front().values[0]);
}

// Local SGD (H_i = 3, 2, 2, 1), given to runtime::run as it is: its gradients go on while the
// hook sleeps, and after the last round every replica is the anchor, bit for bit.
BOOST_AUTO_TEST_CASE(local_sgd_rounds_go_on_while_the_hook_sleeps_and_the_replicas_agree,
                     *boost::unit_test::timeout(120)) {
  const std::size_t n = 4, d = 8;
  std::atomic<std::uint64_t> computed{0};
  hs::local_sgd_config cfg;
  cfg.local_steps = {3, 2, 2, 1};
  local_method p(n, hg::span<const float>(std::vector<float>(d, 0.0f)), ho::sgd({.lr = 0.05}), centres_oracle{&computed},
                 std::vector<std::size_t>(n, 1), cfg);
  std::vector<std::uint64_t> during;
  const auto o = sleepy_options(computed, during);
  const auto model = hs::steps_time<hg::sim::fixed_times>(hg::sim::fixed_times({1.0, 1.0, 3.0, 3.0}), p.schedule());
  const auto r = hr::run(p, hr::where::threads{}, o, model);
  BOOST_REQUIRE_EQUAL(during.size(), 4u);
  // 8 gradients a round: more than three rounds' worth while each hook slept
  for (std::size_t k = 1; k + 1 < during.size(); ++k) BOOST_TEST(during[k] > 24u, "evaluation " << k);
  BOOST_TEST(replicas_agree(p, n));
  const auto a = p.anchor();
  BOOST_TEST(hash_of(p.params(0)) == hash_of(hg::span<const float>(a)));
  BOOST_TEST(r.rounds > 0u);
  BOOST_TEST(r.gradients[0] == 3 * r.gradients[3]);  // H_0 = 3, H_3 = 1 in every round
}

// Checkpoints at every evaluation, halted after the second (as if killed there), then resumed
// by a fresh method from the payload: the resumed model is the cut's (same round, same hash of
// the parameters, not the initial model's), and the grid goes on to the horizon.
BOOST_AUTO_TEST_CASE(a_round_run_halted_after_a_checkpoint_resumes_from_its_cut, *boost::unit_test::timeout(120)) {
  const std::size_t n = 4, d = 8;
  std::atomic<std::uint64_t> computed{0};
  auto make = [&] {
    return bsp_method(n, hg::span<const float>(std::vector<float>(d, 0.0f)), ho::sgd({.lr = 0.02}),
                      centres_oracle{&computed}, std::vector<std::size_t>(n, 1));
  };
  const std::uint64_t initial = hash_of(hg::span<const float>(std::vector<float>(d, 0.0f)));
  hr::run_options o;
  o.horizon = 100;
  o.real_scale = 0.002;
  o.eval_interval = 20;
  o.evaluate = [](const hr::snapshot& s) { return std::vector<double>{distance_to(s.params, 2.5)}; };
  o.checkpoint.every = 1;
  std::optional<std::vector<std::byte>> saved;
  o.checkpoint.write = [&](const std::vector<std::byte>& payload, const hr::cut_record&) { saved = payload; };
  o.halt_after = 2;
  const hg::sim::fixed_times model({1.0, 1.0, 2.0, 2.0});
  auto p = make();
  BOOST_CHECK_THROW(hr::run(p, hr::where::threads{}, o, model), hr::halted);
  BOOST_REQUIRE(saved.has_value());
  auto q = make();
  o.halt_after = 0;
  o.checkpoint.resume = *saved;
  const auto r = hr::run(q, hr::where::threads{}, o, model);
  BOOST_REQUIRE(r.resumed_from.has_value());
  BOOST_REQUIRE(r.cuts.size() >= 2u);
  BOOST_TEST(r.resumed_from->version == r.cuts[1].version);
  BOOST_TEST(r.resumed_from->params_hash == r.cuts[1].params_hash);
  BOOST_TEST(r.resumed_from->time == r.cuts[1].time);
  BOOST_TEST(r.cuts[1].version > 0u);
  BOOST_TEST(r.resumed_from->params_hash != initial);
  BOOST_REQUIRE_EQUAL(r.evaluations.size(), 6u);  // 0, 20, ..., 100: two before the kill
  for (std::size_t k = 0; k < 6; ++k) BOOST_TEST(r.evaluations[k].index == k);
  BOOST_TEST(r.rounds >= r.cuts[1].version);
  BOOST_TEST(replicas_agree(q, n));
}

// eager-SGD (majority, B = 2) on 4 threads, workers 2 and 3 paced three times slower: the
// rounds go on while the hook sleeps, the run ends for every rank at one flush round (rank 0's
// vote at the horizon), so the replicas are bitwise equal and the applied results sum to the
// computed gradients. Each rank takes every round, fresh or late: fresh + late = rounds per
// worker, every late contribution is folded in by a later round (buffered, lag <= B), the
// method's own count of late contributions is the report's, and the slow workers are late.
BOOST_AUTO_TEST_CASE(eager_sgd_rounds_on_real_threads_keep_the_replicas_equal_and_apply_every_gradient,
                     *boost::unit_test::timeout(120)) {
  const std::size_t n = 4, d = 8;
  std::atomic<std::uint64_t> computed{0};
  hs::eager_config cfg;
  cfg.staleness_bound = 2;
  eager_method p(n, hg::span<const float>(std::vector<float>(d, 0.0f)), ho::sgd({.lr = 0.05}), centres_oracle{&computed},
                 std::vector<std::size_t>(n, 1), cfg);
  std::vector<std::uint64_t> during;
  const auto o = sleepy_options(computed, during);
  const hg::sim::fixed_times model({1.0, 1.0, 3.0, 3.0});
  const auto r = hr::run(p, hr::where::threads{}, o, model);
  BOOST_REQUIRE_EQUAL(r.evaluations.size(), 4u);  // 0, 100, 200, 300
  BOOST_REQUIRE_EQUAL(during.size(), 4u);
  for (std::size_t k = 1; k + 1 < during.size(); ++k) BOOST_TEST(during[k] >= 12u, "evaluation " << k);
  BOOST_TEST(replicas_agree(p, n));
  BOOST_TEST(r.partial.replicas_agree);
  BOOST_TEST(r.partial.conservation_error <= 1e-6);
  BOOST_TEST(hash_of(hg::span<const float>(r.params)) == hash_of(p.params(0)));  // the flush round's model
  BOOST_TEST(r.rounds > 0u);
  BOOST_TEST(r.partial.rounds.size() == r.rounds);
  BOOST_REQUIRE_EQUAL(r.partial.late_per_worker.size(), n);
  BOOST_TEST_MESSAGE("eager on threads: " << r.rounds << " rounds, late per worker " << r.partial.late_per_worker[0]
                                          << ' ' << r.partial.late_per_worker[1] << ' ' << r.partial.late_per_worker[2]
                                          << ' ' << r.partial.late_per_worker[3] << ", conservation error "
                                          << r.partial.conservation_error << ", gradients during the hook's sleeps "
                                          << during[1] << ' ' << during[2]);
  std::uint64_t late = 0, fresh = 0;
  for (std::size_t w = 0; w < n; ++w) {
    const auto id = static_cast<hr::worker_id>(w);
    const auto lw = r.partial.late_per_worker[w];
    BOOST_TEST(r.updates.count(id, sim::update_outcome::applied) + lw == r.rounds, "worker " << w);
    BOOST_TEST(r.updates.count(id, sim::update_outcome::buffered) == lw, "worker " << w);
    BOOST_TEST(r.workers[w].jobs == r.rounds, "worker " << w);
    BOOST_TEST(r.gradients[w] == r.rounds, "worker " << w);
    late += lw;
    fresh += r.updates.count(id, sim::update_outcome::applied);
  }
  std::uint64_t fresh_in_reports = 0;
  for (const auto& rep : r.partial.rounds) fresh_in_reports += rep.fresh.size();
  BOOST_TEST(fresh_in_reports == fresh);
  BOOST_TEST(late == p.late_contributions());
  BOOST_TEST(computed.load() == r.rounds * n);
  BOOST_TEST(r.partial.late_per_worker[2] > 0u);
  BOOST_TEST(r.partial.late_per_worker[3] > 0u);
  BOOST_TEST(r.updates.max_staleness() <= 2u);
  BOOST_TEST(r.evaluations.back().values[0] < r.evaluations.front().values[0]);
}

// eager-SGD's real-clock checkpoints are not built: refused by name before anything runs.
BOOST_AUTO_TEST_CASE(eager_sgd_checkpoints_on_the_real_clock_are_refused_by_name) {
  const std::size_t n = 2, d = 4;
  std::atomic<std::uint64_t> computed{0};
  eager_method p(n, hg::span<const float>(std::vector<float>(d, 0.0f)), ho::sgd({.lr = 0.05}), centres_oracle{&computed},
                 std::vector<std::size_t>(n, 1));
  hr::run_options o;
  o.horizon = 10;
  o.checkpoint.every = 1;
  std::string m = "no error";
  try {
    (void)hr::run(p, hr::where::threads{}, o);
  } catch (const std::invalid_argument& e) {
    m = e.what();
  }
  BOOST_TEST(m.find("run_options.checkpoint") != std::string::npos, m);
  BOOST_TEST(computed.load() == 0u);
}

BOOST_AUTO_TEST_CASE(a_paced_round_run_without_a_worker_time_model_is_refused_by_name) {
  const std::size_t n = 2, d = 4;
  std::atomic<std::uint64_t> computed{0};
  bsp_method p(n, hg::span<const float>(std::vector<float>(d, 0.0f)), ho::sgd({.lr = 0.05}), centres_oracle{&computed},
               std::vector<std::size_t>(n, 1));
  hr::run_options o;
  o.horizon = 10;
  o.real_scale = 0.001;
  std::string m = "no error";
  try {
    (void)hr::run(p, hr::where::threads{}, o);
  } catch (const std::invalid_argument& e) {
    m = e.what();
  }
  BOOST_TEST(m.find("run_options.real_scale") != std::string::npos, m);
  BOOST_TEST(computed.load() == 0u);
}

// runtime::measure_seconds_per_gradient: every worker's gradient at once for the window; a
// gradient that sleeps 2 ms (worker 1: 6 ms) takes at least that, and far less than 10x it.
BOOST_AUTO_TEST_CASE(measured_seconds_per_gradient_are_the_gradients_own_times, *boost::unit_test::timeout(60)) {
  const std::vector<double> sleep_ms{2.0, 6.0, 2.0};
  std::vector<std::uint64_t> calls(3, 0);
  std::atomic<int> inits{0};
  const auto tau = hr::measure_seconds_per_gradient(
      hr::where::threads{}, 3,
      [&](std::size_t w) {
        ++calls[w];
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(sleep_ms[w]));
      },
      0.1, [&] { ++inits; });
  BOOST_REQUIRE_EQUAL(tau.size(), 3u);
  BOOST_TEST(inits.load() == 3);
  for (std::size_t w = 0; w < 3; ++w) {
    BOOST_TEST(calls[w] >= 1u);
    BOOST_TEST(tau[w] >= sleep_ms[w] / 1000.0, "worker " << w << ": " << tau[w]);
    BOOST_TEST(tau[w] < 10 * sleep_ms[w] / 1000.0, "worker " << w << ": " << tau[w]);
  }
  BOOST_TEST(tau[1] > tau[0]);
  std::string m = "no error";
  try {
    (void)hr::measure_seconds_per_gradient(hr::where::threads{}, 2, [](std::size_t) {}, 0.0);
  } catch (const std::invalid_argument& e) {
    m = e.what();
  }
  BOOST_TEST(m.find("measure.window") != std::string::npos, m);
}

BOOST_AUTO_TEST_SUITE_END()
