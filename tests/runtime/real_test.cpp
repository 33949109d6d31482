// The real-time runtime's building blocks: core placement (runtime/placement.hpp) and paced
// jobs (runtime/pacing.hpp). Timings are checked only where they are bounds (a paced job
// lasts at least its target; a compute that sleeps longer than its target is a violation),
// except that placement must really change speeds: a worker alone on a core runs at least
// 3x faster than one of 15 sharing another (expected 15x on a quiet machine; the test runs
// alone, RUN_SERIAL, and the 15 in a process of their own, as ranks would).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include "heterograd/runtime/pacing.hpp"
#include "heterograd/runtime/placement.hpp"
#include "messages.hpp"

namespace hr = heterograd::runtime;
using hg_test::invalid_argument_message;

BOOST_AUTO_TEST_SUITE(placement)

BOOST_AUTO_TEST_CASE(cpulists_parse_to_sorted_distinct_cores_and_print_back) {
  BOOST_TEST((hr::parse_core_set("3", "k").cores == std::vector<int>{3}));
  const auto s = hr::parse_core_set("6,0-3", "k");
  BOOST_TEST((s.cores == std::vector<int>{0, 1, 2, 3, 6}));
  BOOST_TEST(s.str() == "0-3,6");
  BOOST_TEST(hr::parse_core_set("1023", "k").str() == "1023");
  BOOST_TEST(hr::parse_core_set("0-1023", "k").size() == 1024u);
  BOOST_TEST(hr::parse_core_set("0,2,4-6,9", "k").str() == "0,2,4-6,9");
}

BOOST_AUTO_TEST_CASE(a_malformed_cpulist_is_refused_naming_the_key_and_the_text) {
  for (const std::string bad : {"", "-1", "1-", "3-1", "0,,1", ",0", "0,", "0,0", "0-2,1", " 1",
                                "1 ", "a", "1024", "99999999999", "+1", "1--2", "0x1", "1.5"}) {
    const auto m = invalid_argument_message([&] { hr::parse_core_set(bad, "workers.placement[3]"); });
    BOOST_TEST(m.find("'workers.placement[3]' = \"" + bad + "\"") != std::string::npos, m);
    BOOST_TEST(m.find("ranges a-b with a <= b") != std::string::npos, m);
  }
}

BOOST_AUTO_TEST_CASE(a_core_the_process_may_not_use_is_refused_before_anything_changes) {
  const auto have = hr::available_cores();
  BOOST_TEST_REQUIRE(!have.empty());
  const auto before = hr::this_thread_cores();
  int missing = 0;
  while (have.contains(missing)) ++missing;
  const hr::core_set bad{{missing}};
  const auto m = invalid_argument_message([&] { hr::pin_this_thread(bad, "workers.placement[1]"); });
  BOOST_TEST(m.find("'workers.placement[1]'") != std::string::npos, m);
  BOOST_TEST(m.find("core " + std::to_string(missing) + " is not available") != std::string::npos, m);
  BOOST_TEST(m.find("available: " + have.str()) != std::string::npos, m);
  BOOST_TEST((hr::this_thread_cores() == before));
  // A placement lists one set per worker.
  const auto p = hr::placement_config::parse({"0", "0"}, "workers.placement");
  const auto c = invalid_argument_message([&] { p.validate(3, "workers.placement"); });
  BOOST_TEST(c.find("one core set per worker (3)") != std::string::npos, c);
}

BOOST_AUTO_TEST_CASE(a_pinned_thread_runs_on_its_core_set_only) {
  const auto have = hr::available_cores();
  const hr::core_set last{{have.cores.back()}};
  hr::core_set seen;
  int cpu = -1;
  std::thread t([&] {
    hr::pin_this_thread(last, "k");
    seen = hr::this_thread_cores();
    cpu = sched_getcpu();
  });
  t.join();
  BOOST_TEST((seen == last));
  BOOST_TEST(cpu == last.cores[0]);
  const auto p = hr::placement_config::parse({"0", "0-1", "1", "1"}, "k");
  BOOST_TEST((p.sharing() == std::vector<std::size_t>{2, 4, 3, 3}));
}

namespace {
// About `units` of CPU work; returns a value so that it is not optimised away.
double spin(std::uint64_t units) {
  double x = 1.0;
  for (std::uint64_t i = 0; i < units * 200000; ++i) x = x * 1.0000001 + 1e-9;
  return x;
}

// Workers w of `p` in [first, last), each on its own thread pinned by the placement: the
// median time of their jobs.
std::vector<double> median_job_times(const hr::placement_config& p, std::size_t first,
                                     std::size_t last) {
  std::vector<double> job(last - first, 0.0), sink(last - first, 0.0);
  std::vector<std::thread> ts;
  for (std::size_t w = first; w < last; ++w)
    ts.emplace_back([&, w] {
      p.pin(w, "workers.placement");
      std::vector<double> times;
      for (int k = 0; k < 6; ++k) {
        const auto t0 = std::chrono::steady_clock::now();
        sink[w - first] += spin(20);
        times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(times.begin(), times.end());
      job[w - first] = sink[w - first] > 0 ? times[times.size() / 2] : 0.0;
    });
  for (auto& t : ts) t.join();
  return job;
}
}  // namespace

BOOST_AUTO_TEST_CASE(workers_sharing_a_core_are_really_slower_than_a_worker_alone) {
  const auto have = hr::available_cores();
  if (have.size() < 2) {
    BOOST_TEST_MESSAGE("one core only: nothing to compare");
    return;
  }
  // Worker 0 alone on the first core, workers 1..15 on the second. The 15 run in a child
  // process of their own session, as ranks would: the kernel's group scheduling (autogroup)
  // splits a session's weight over the cores by its load there, so inside one process a
  // lone thread would get 1/16 of the process's weight on its core and lose it to any other
  // busy session there, while its core share is what this test is about.
  const std::size_t n = 16;
  std::vector<std::string> sets{std::to_string(have.cores[0])};
  while (sets.size() < n) sets.push_back(std::to_string(have.cores[1]));
  const auto p = hr::placement_config::parse(sets, "workers.placement");
  p.validate(n, "workers.placement");
  int fd[2];
  BOOST_TEST_REQUIRE(pipe(fd) == 0);
  const pid_t child = fork();
  BOOST_TEST_REQUIRE(child >= 0);
  if (child == 0) {
    close(fd[0]);
    setsid();
    const auto shared = median_job_times(p, 1, n);
    const double fastest = *std::min_element(shared.begin(), shared.end());
    const bool ok = write(fd[1], &fastest, sizeof fastest) == static_cast<ssize_t>(sizeof fastest);
    _exit(ok ? 0 : 1);
  }
  close(fd[1]);
  const double lone = median_job_times(p, 0, 1)[0];
  double shared = 0;
  const bool got = read(fd[0], &shared, sizeof shared) == static_cast<ssize_t>(sizeof shared);
  close(fd[0]);
  int status = 0;
  waitpid(child, &status, 0);
  BOOST_TEST_REQUIRE(got);
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST_MESSAGE("lone job " << lone << " s, fastest shared job " << shared << " s");
  BOOST_TEST(lone > 0.0);
  BOOST_TEST(shared >= 3.0 * lone);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(pacing)

BOOST_AUTO_TEST_CASE(a_paced_job_lasts_at_least_its_model_time_and_counts_no_violation) {
  hr::job_pacer p(0.002);  // 2 ms per model unit
  for (int k = 0; k < 3; ++k) {
    p.start();
    const auto j = p.finish(10.0);  // 20 ms
    BOOST_TEST(j.target == 0.02, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(j.wall >= j.target);
    BOOST_TEST(!j.violated);
  }
  BOOST_TEST(p.jobs() == 3u);
  BOOST_TEST(p.violations() == 0u);
  BOOST_TEST(p.slept_seconds() + p.compute_seconds() >= 0.06);
  BOOST_TEST(p.model_now() >= 30.0);  // 60 ms of wall time = 30 units
}

BOOST_AUTO_TEST_CASE(a_compute_longer_than_the_model_time_is_a_counted_violation) {
  hr::job_pacer p(0.001);
  p.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const auto j = p.finish(10.0);  // 10 ms target, 30 ms compute
  BOOST_TEST(j.violated);
  BOOST_TEST(j.compute >= 0.03);
  BOOST_TEST(p.violations() == 1u);
  BOOST_TEST(p.overrun_seconds() >= 0.02 - 1e-9);
  BOOST_TEST(p.overrun_seconds() == j.compute - j.target);
}

BOOST_AUTO_TEST_CASE(a_stopped_job_ends_before_its_model_time) {
  hr::job_pacer p(1.0);
  p.start();
  const auto j = p.finish(10.0, [] { return true; });  // 10 s target, stopped at once
  BOOST_TEST(j.wall < 5.0);
  BOOST_TEST(!j.violated);
}

BOOST_AUTO_TEST_CASE(a_bad_real_scale_or_duration_is_refused_naming_it) {
  for (double s : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    const auto m = invalid_argument_message([&] { hr::job_pacer p(s); });
    BOOST_TEST(m.find("'real_scale'") != std::string::npos, m);
  }
  hr::job_pacer p(1.0);
  p.start();
  const auto m = invalid_argument_message([&] { p.finish(-1.0); });
  BOOST_TEST(m.find("'job_pacer.model_units' = -1") != std::string::npos, m);
  // A duration past the pacer's range is refused, not slept (nor overflowing the clock).
  for (double d : {2e6, 1e300}) {
    const auto big = invalid_argument_message([&] { p.finish(d); });
    BOOST_TEST(big.find("at most 1e6 wall seconds a job") != std::string::npos, big);
  }
}

BOOST_AUTO_TEST_SUITE_END()
