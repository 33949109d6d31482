// The event engine and the recorder: ordering, determinism, cancellation, waiting,
// accounting, allocation-free hot path, validation, CSV/JSON output.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "hg_test.hpp"
#include "heterograd/sim/engine.hpp"
#include "heterograd/sim/recorder.hpp"
#include "heterograd/sim/worker_time.hpp"

// Counts heap allocations while `counting` is set (this test executable only).
namespace {
std::atomic<bool> counting{false};
std::atomic<std::uint64_t> allocations{0};
}  // namespace
// GCC pairs the malloc inside the replacement new with the free inside the replacement
// delete and warns at inlined call sites; the pairing is correct by construction.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// The nothrow form too (std::stable_sort's temporary buffer uses it): otherwise a sanitizer's
// own nothrow new would allocate what the replacement delete frees.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace hg = heterograd;
namespace sim = heterograd::sim;

namespace {

template <class Model>
std::uint64_t ringmaster_style_run(std::size_t n, const Model& model, std::uint64_t events) {
  sim::engine e(n);
  for (sim::worker_id w = 0; w < n; ++w) e.start(w, model, 0);
  sim::event ev;
  std::uint64_t version = 0;
  for (std::uint64_t i = 0; i < events && e.next(ev); ++i) {
    ++version;
    e.start(ev.worker, model, version);
  }
  return e.trace_hash();
}

bool message_names(const std::invalid_argument& ex, const std::string& field) {
  return std::string(ex.what()).find("'" + field) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(engine)

BOOST_AUTO_TEST_CASE(same_seed_and_configuration_give_the_same_trace_hash_and_another_seed_does_not) {
  const std::uint64_t seed = hg_test::seed();
  auto model = [](std::uint64_t s) {
    return sim::plus(sim::sqrt_times(200, s), sim::half_normal_noise(s));
  };
  const auto a = ringmaster_style_run(200, model(seed), 20000);
  const auto b = ringmaster_style_run(200, model(seed), 20000);
  const auto c = ringmaster_style_run(200, model(seed + 1), 20000);
  BOOST_TEST(a == b);
  BOOST_TEST(a != c);
  // A copy of the engine is an independent value: forking a run replays the same trace.
  sim::engine e(3);
  for (sim::worker_id w = 0; w < 3; ++w) e.start(w, 1.0 + w, w);
  sim::engine fork = e;
  sim::event ev;
  while (e.next(ev)) {}
  while (fork.next(ev)) {}
  BOOST_TEST(e.trace_hash() == fork.trace_hash());
  BOOST_TEST(e.now() == 3.0);
}

BOOST_AUTO_TEST_CASE(events_come_in_time_order_and_ties_break_by_scheduling_order) {
  // Equal finish times: delivered in the order the jobs were started.
  sim::engine e(4);
  const sim::worker_id order[] = {3, 1, 2, 0};
  for (auto w : order) e.start(w, 1.0, w);
  const auto timer = e.schedule_at(1.0, 99);  // scheduled last: delivered last
  sim::event ev;
  std::vector<sim::worker_id> seen;
  while (e.next(ev)) {
    BOOST_TEST(ev.time == 1.0);
    if (ev.kind == sim::event_kind::timer) {
      BOOST_TEST(ev.timer == timer);
      BOOST_TEST(ev.tag == 99u);
      seen.push_back(100);
    } else {
      seen.push_back(ev.worker);
    }
  }
  BOOST_TEST((seen == std::vector<sim::worker_id>{3, 1, 2, 0, 100}));

  // Many ties on a coarse grid: time never decreases, and among equal times the start
  // sequence number (stored in the tag) increases.
  const std::uint64_t seed = hg_test::seed();
  const hg::counter_rng rng(seed);
  sim::engine f(500);
  std::uint64_t seq = 0, draw = 0;
  for (sim::worker_id w = 0; w < 500; ++w)
    f.start(w, 0.5 * static_cast<double>(rng.below(draw++, 4)), seq++);
  double last_time = 0;
  std::uint64_t last_seq = 0;
  for (int i = 0; i < 50000 && f.next(ev); ++i) {
    BOOST_REQUIRE(ev.time >= last_time);
    if (ev.time == last_time && i > 0) BOOST_REQUIRE(ev.tag > last_seq);
    last_time = ev.time;
    last_seq = ev.tag;
    f.start(ev.worker, 0.5 * static_cast<double>(rng.below(draw++, 4)), seq++);
  }
}

BOOST_AUTO_TEST_CASE(a_cancelled_job_never_delivers) {
  sim::engine e(3);
  e.start(0, 5.0, 10);
  e.start(1, 2.0, 11);
  e.start(2, 7.0, 12);
  sim::event ev;
  BOOST_TEST(e.next(ev));
  BOOST_TEST(ev.worker == 1u);
  BOOST_TEST(e.now() == 2.0);
  // Calculation stops: worker 0 is interrupted at t = 2 and restarted with a 1 s job.
  const sim::job cancelled = e.cancel(0);
  BOOST_TEST(cancelled.tag == 10u);
  BOOST_TEST(e.jobs_in_flight() == 1u);
  e.start(0, 1.0, 20);
  std::vector<std::uint64_t> tags;
  while (e.next(ev)) tags.push_back(ev.job.tag);
  BOOST_TEST((tags == std::vector<std::uint64_t>{20, 12}));  // 10 never arrives
  const auto s = e.stats(0);
  BOOST_TEST(s.jobs_started == 2u);
  BOOST_TEST(s.jobs_finished == 1u);
  BOOST_TEST(s.jobs_cancelled == 1u);
  BOOST_TEST(s.wasted == 2.0);
  BOOST_TEST(s.busy == 3.0);
  BOOST_TEST(s.idle == 4.0);  // from t = 3 to t = 7
  // A cancelled timer never fires either, and a stale handle is refused.
  sim::engine g(1);
  const auto t1 = g.schedule_at(1.0, 1);
  const auto t2 = g.schedule_at(2.0, 2);
  BOOST_TEST(g.cancel_timer(t1));
  BOOST_TEST(!g.cancel_timer(t1));
  BOOST_TEST(g.next(ev));
  BOOST_TEST(ev.tag == 2u);
  BOOST_TEST(!g.cancel_timer(t2));
  BOOST_TEST(!g.next(ev));
}

BOOST_AUTO_TEST_CASE(a_waiting_worker_resumes_exactly_when_released) {
  sim::engine e(2);
  e.start(0, 1.0, 0);
  e.start(1, 5.25, 0);
  sim::event ev;
  BOOST_TEST(e.next(ev));
  BOOST_TEST(ev.worker == 0u);
  e.wait(0);  // SSP: worker 0 is too far ahead
  BOOST_TEST((e.state(0) == sim::worker_state::waiting));
  BOOST_CHECK_THROW(e.start(0, 1.0, 1), std::invalid_argument);
  BOOST_TEST(e.next(ev));
  BOOST_TEST(ev.worker == 1u);
  BOOST_TEST(ev.time == 5.25);
  e.release(0);
  const sim::job& j = e.start(0, 1.0, 1);
  BOOST_TEST(j.start == 5.25);
  BOOST_TEST(j.finish == 6.25);
  e.start(1, 1.0, 1);
  while (e.next(ev)) {}
  const auto s = e.stats(0);
  BOOST_TEST(s.waiting == 4.25);
  BOOST_TEST(s.busy == 2.0);
  BOOST_TEST(s.idle == 0.0);
}

BOOST_AUTO_TEST_CASE(busy_idle_and_waiting_add_up_to_the_virtual_time_for_every_worker) {
  const std::uint64_t seed = hg_test::seed();
  const auto model = sim::plus(sim::linear_times(64, seed), sim::half_normal_noise(seed));
  const hg::counter_rng rng(seed, 7);
  sim::engine e(64);
  for (sim::worker_id w = 0; w < 64; ++w) e.start(w, model, 0);
  sim::event ev;
  std::uint64_t d = 0;
  std::vector<sim::worker_id> waiting;
  while (e.next(ev, 2000.0)) {
    // A random third of arrivals wait until the next arrival; a random tenth cancels
    // someone else's job.
    for (auto w : waiting) {
      e.release(w);
      e.start(w, model, 0);
    }
    waiting.clear();
    const auto u = rng.below(d++, 30);
    if (u < 10) {
      e.wait(ev.worker);
      waiting.push_back(ev.worker);
    } else {
      e.start(ev.worker, model, 0);
    }
    if (u == 29) {
      const auto victim = static_cast<sim::worker_id>(rng.below(d++, 64));
      if (e.busy(victim)) {
        e.cancel(victim);
        e.start(victim, model, 0);
      }
    }
  }
  BOOST_TEST(e.now() == 2000.0);
  for (sim::worker_id w = 0; w < 64; ++w) {
    const auto s = e.stats(w);
    BOOST_TEST(s.busy + s.idle + s.waiting == 2000.0, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(s.wasted <= s.busy);
    BOOST_TEST(s.throughput == static_cast<double>(s.jobs_finished) / 2000.0);
  }
}

BOOST_AUTO_TEST_CASE(the_hot_path_allocates_nothing_and_memory_stays_bounded_by_workers) {
  const auto model = sim::sqrt_times(1000, 3);
  sim::engine e(1000);
  for (sim::worker_id w = 0; w < 1000; ++w) e.start(w, model, 0);
  e.schedule_at(10.0);  // one timer slot, reused below
  sim::event ev;
  allocations = 0;
  counting = true;
  for (int i = 0; i < 100000 && e.next(ev); ++i) {
    if (ev.kind == sim::event_kind::timer) {
      e.schedule_after(10.0);
      continue;
    }
    e.start(ev.worker, model, 1);
    if (i % 7 == 0) {  // cancel and restart a job now and then
      const auto victim = static_cast<sim::worker_id>((i * 31) % 1000);
      e.cancel(victim);
      e.start(victim, model, 2);
    }
  }
  counting = false;
  BOOST_TEST(allocations.load() == 0u);
  BOOST_TEST(e.jobs_in_flight() == 1000u);
  BOOST_TEST(e.timers_pending() == 1u);
}

BOOST_AUTO_TEST_CASE(bad_arguments_throw_naming_the_field_and_change_nothing) {
  try {
    sim::engine bad(0);
    BOOST_FAIL("an empty worker list was accepted");
  } catch (const std::invalid_argument& ex) {
    BOOST_TEST(message_names(ex, "engine.workers"));
  }
  sim::engine e(2);
  e.start(0, 1.0, 0);
  const auto h = e.trace_hash();
  try {
    e.start(1, -1.0, 0);
    BOOST_FAIL("a negative duration was accepted");
  } catch (const std::invalid_argument& ex) {
    BOOST_TEST(message_names(ex, "duration"));
  }
  BOOST_CHECK_THROW(e.start(1, std::nan(""), 0), std::invalid_argument);
  BOOST_CHECK_THROW(e.start(0, 1.0, 0), std::invalid_argument);  // busy
  BOOST_CHECK_THROW(e.start(2, 1.0, 0), std::invalid_argument);  // no such worker
  BOOST_CHECK_THROW(e.cancel(1), std::invalid_argument);         // idle
  BOOST_CHECK_THROW(e.release(1), std::invalid_argument);        // not waiting
  BOOST_CHECK_THROW(e.wait(0), std::invalid_argument);           // busy
  sim::event ev;
  e.next(ev);
  try {
    e.schedule_at(0.5);
    BOOST_FAIL("a timer in the past was accepted");
  } catch (const std::invalid_argument& ex) {
    BOOST_TEST(message_names(ex, "at"));
  }
  BOOST_CHECK_THROW(e.schedule_after(-1.0), std::invalid_argument);
  BOOST_CHECK_THROW(e.advance_to(0.5), std::invalid_argument);
  BOOST_TEST(e.jobs_in_flight() == 0u);
  BOOST_TEST(e.timers_pending() == 0u);
  BOOST_TEST(e.now() == 1.0);
  BOOST_TEST(e.trace_hash() != h);  // only the delivered event changed it
}

BOOST_AUTO_TEST_CASE(a_job_that_never_finishes_is_never_delivered_but_can_be_cancelled) {
  sim::engine e(2);
  e.start(0, sim::never, 0);
  e.start(1, 3.0, 0);
  sim::event ev;
  BOOST_TEST(e.next(ev));
  BOOST_TEST(!e.next(ev));
  BOOST_TEST(e.now() == 3.0);
  BOOST_TEST(!e.next(ev, 10.0));
  BOOST_TEST(e.now() == 10.0);
  e.cancel(0);
  BOOST_TEST(e.stats(0).wasted == 10.0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(recorder)

BOOST_AUTO_TEST_CASE(staleness_histograms_and_outcome_counts_add_up) {
  sim::recorder r(3);
  r.record_update(0, 0, sim::update_outcome::applied);
  r.record_update(1, 2, sim::update_outcome::applied);
  r.record_update(1, 2, sim::update_outcome::applied);
  r.record_update(2, 7, sim::update_outcome::discarded);
  r.record_update(2, 1, sim::update_outcome::buffered);
  r.record_update(0, 4, sim::update_outcome::interrupted);
  BOOST_TEST(r.count(sim::update_outcome::applied) == 3u);
  BOOST_TEST(r.count(sim::update_outcome::discarded) == 1u);
  BOOST_TEST(r.count(1, sim::update_outcome::applied) == 2u);
  BOOST_TEST((r.staleness_histogram(sim::update_outcome::applied) ==
              std::vector<std::uint64_t>{1, 0, 2}));
  BOOST_TEST(r.mean_staleness(sim::update_outcome::applied) == 4.0 / 3.0);
  BOOST_TEST(r.max_staleness() == 7u);
  BOOST_CHECK_THROW(r.record_update(3, 0, sim::update_outcome::applied), std::invalid_argument);
  BOOST_CHECK_THROW(sim::recorder(0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(csv_and_json_carry_the_configuration_seed_and_trace_hash) {
  sim::engine e(2);
  e.start(0, 1.5, 0);
  e.start(1, 4.0, 0);
  sim::event ev;
  while (e.next(ev, 3.0)) {}
  sim::recorder r(2);
  r.set_seed(42);
  r.set("model", "sqrt_times+half_normal");
  r.set("workers", 2);
  r.set("gamma", 0.25);
  r.set_metrics({"loss", "accuracy"});
  r.record_update(0, 1, sim::update_outcome::applied);
  r.record_evaluation(0.0, {2.5, 0.1});
  r.record_evaluation(1.0, {1.25, 0.5});
  BOOST_CHECK_THROW(r.record_evaluation(0.5, {1.0, 1.0}), std::invalid_argument);  // backwards
  BOOST_CHECK_THROW(r.record_evaluation(2.0, {1.0}), std::invalid_argument);       // one value short
  r.capture(e);

  std::ostringstream w, s, v, j;
  r.write_csv(w, sim::recorder::table::workers);
  r.write_csv(s, sim::recorder::table::staleness);
  r.write_csv(v, sim::recorder::table::evaluations);
  r.write_json(j);
  char hash[32];
  std::snprintf(hash, sizeof hash, "0x%016llx", static_cast<unsigned long long>(e.trace_hash()));
  for (const auto* os : {&w, &s, &v}) {
    const std::string t = os->str();
    BOOST_TEST(t.find("# seed=42\n") != std::string::npos);
    BOOST_TEST(t.find("# model=sqrt_times+half_normal\n") != std::string::npos);
    BOOST_TEST(t.find("# gamma=0.25\n") != std::string::npos);
    BOOST_TEST(t.find(std::string("# trace_hash=") + hash) != std::string::npos);
  }
  BOOST_TEST(w.str().find("worker,jobs_started,jobs_finished,jobs_cancelled,busy,idle,waiting,"
                          "wasted,throughput,applied,buffered,discarded,interrupted\n"
                          "0,1,1,0,1.5,1.5,0,0,0.33333333333333331,1,0,0,0\n"
                          "1,1,0,0,3,0,0,0,0,0,0,0,0\n") != std::string::npos);
  BOOST_TEST(s.str().find("staleness,applied,buffered,discarded,interrupted\n0,0,0,0,0\n1,1,0,0,0\n") !=
             std::string::npos);
  BOOST_TEST(v.str().find("time,loss,accuracy\n0,2.5,0.10000000000000001\n1,1.25,0.5\n") !=
             std::string::npos);
  const std::string js = j.str();
  BOOST_TEST(js.find("\"config\": {\"seed\": 42, \"model\": \"sqrt_times+half_normal\"") !=
             std::string::npos);
  BOOST_TEST(js.find(std::string("\"trace_hash\": \"") + hash + "\"") != std::string::npos);
  BOOST_TEST(js.find("\"metrics\": [\"loss\", \"accuracy\"]") != std::string::npos);
  BOOST_TEST(js.find("\"applied\": [0, 1]") != std::string::npos);
  BOOST_TEST(std::count(js.begin(), js.end(), '{') == std::count(js.begin(), js.end(), '}'));
  BOOST_TEST(std::count(js.begin(), js.end(), '[') == std::count(js.begin(), js.end(), ']'));
}

BOOST_AUTO_TEST_SUITE_END()
