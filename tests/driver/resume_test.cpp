// heterograd-run --resume through the executable: runs started with --jobs N resume (the
// checkpoint's identity is the run's inputs, not the command line), children die with a killed
// parent, a changed configuration or a damaged summary.json from the earlier run is refused
// with the key paths or the file, and kill -9 at random moments never leaves a run that cannot
// resume or that resumes to other numbers than the uninterrupted run.
//
// The kill trials are disabled by default and run by name (tests/driver/CMakeLists.txt: label
// slow, one CTest entry per --jobs).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "config.hpp"
#include "files.hpp"

extern char** environ;

namespace fs = std::filesystem;
using hgrun::json;
using namespace std::chrono_literals;

namespace {

fs::path scratch(const std::string& name) {
  const auto p = fs::temp_directory_path() / ("hg-resume-test-" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Three methods of both families on four workers with noisy job times: a run of about 0.5 s
// (mostly the fsync of a checkpoint at every one of its 16 evaluations per method).
json tiny_experiment() {
  return json::parse(R"({
    "name": "resume", "seed": 11,
    "data": {"dataset": "worst_case_quadratic", "dim": 2000, "noise": 0.1},
    "optimizer": {"kind": "momentum", "lr": 0.1, "momentum": 0.5},
    "workers": {"count": 4, "time": {"base": "linear", "noise": "half_normal", "noise_scale": 0.5}},
    "horizon": {"time": 150}, "eval_interval": 10, "checkpoint_every": 1,
    "target": {"metric": "loss", "value": 0.01, "below": true},
    "methods": [{"label": "ASGD", "algorithm": "asgd"},
                {"label": "Ringmaster", "algorithm": "ringmaster", "threshold": 2, "variant": "interrupt"},
                {"label": "BSP", "algorithm": "bsp"}]})");
}

fs::path write_config(const fs::path& dir, const json& j) {
  const auto p = dir / "experiment.json";
  std::ofstream(p) << j.dump(2);
  return p;
}

// heterograd-run with `args`, stdout and stderr into `log`.
pid_t start(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<std::string> a{HG_RUN_EXE};
  a.insert(a.end(), args.begin(), args.end());
  std::vector<char*> av;
  for (auto& s : a) av.push_back(s.data());
  av.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, av[0], &fa, nullptr, av.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  BOOST_TEST_REQUIRE(rc == 0);
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct outcome {
  int rc;
  std::string log;
};
outcome run(const std::vector<std::string>& args, const fs::path& log) {
  const int rc = wait_for(start(args, log));
  return {rc, hgrun::read_file(log)};
}

// Processes alive (not zombies) whose command line mentions `text`: the children of a run
// whose --dir lies under the run's output folder.
std::vector<pid_t> processes_mentioning(const std::string& text) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cl(e.path() / "cmdline");
    std::string cmd((std::istreambuf_iterator<char>(cl)), {});
    if (cmd.find(text) == std::string::npos) continue;
    std::ifstream st(e.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(st)), {});
    const auto close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z') continue;
    out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

// Waits up to `limit` for no process to mention `text`; kills what is left (so a failing test
// leaves nothing running) and says whether it had to.
bool gone_within(const std::string& text, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const auto left = processes_mentioning(text);
    if (left.empty()) return true;
    if (std::chrono::steady_clock::now() > until) {
      for (pid_t p : left) ::kill(p, SIGKILL);
      return false;
    }
    std::this_thread::sleep_for(20ms);
  }
}

std::vector<std::string> labels() { return {"asgd", "ringmaster", "bsp"}; }

// The numbers of each method's summary that a resume must reproduce.
json results(const fs::path& out) {
  json r = json::object();
  for (const auto& l : labels()) {
    const json s = json::parse(hgrun::read_file(out / l / "summary.json"));
    r[l] = {{"trace_hash", s["trace_hash"]}, {"params_hash", s["params_hash"]}, {"events", s["events"]},
            {"final", s["final"]}, {"updates", s["updates"]}};
  }
  return r;
}

std::vector<std::string> args_of(const fs::path& cfg, const fs::path& out, unsigned jobs,
                                 std::vector<std::string> more = {}) {
  std::vector<std::string> a{cfg.string(), "--out", out.string(), "--quiet", "--no-plots", "--jobs",
                             std::to_string(jobs)};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// The uninterrupted run's results (with --jobs 1), made once per test process.
const json& reference() {
  static const json r = [] {
    const auto d = scratch("reference");
    const auto o = run(args_of(write_config(d, tiny_experiment()), d / "out", 1), d / "log.txt");
    BOOST_TEST_REQUIRE(o.rc == 0, o.log);
    return results(d / "out");
  }();
  return r;
}

// kill -9 at a random moment of a run and then of its resume, then resume to the end: the
// results are the uninterrupted run's, and no child outlives a killed parent.
void kill_trials(unsigned jobs, int trials) {
  const auto d = scratch("kills-" + std::to_string(jobs));
  const auto cfg = write_config(d, tiny_experiment());
  const json& want = reference();
  // The delays cover a whole run: measured here, with this --jobs, on this (busy) machine, and
  // shortened whenever a run ends before its kill (the machine got quieter: ctest's neighbours
  // finished), so that the kills keep landing inside runs whatever the load does.
  const auto t0 = std::chrono::steady_clock::now();
  BOOST_TEST_REQUIRE(run(args_of(cfg, d / "timed", jobs), d / "timed.txt").rc == 0);
  double whole = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto seed = static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  BOOST_TEST_MESSAGE("--jobs " << jobs << ": " << trials << " trials, delays in [0, " << 1.1 * whole
                               << " s] from seed " << seed);
  std::mt19937_64 rng(seed);
  int mid_run = 0, from_checkpoint = 0, halted_checkpoints = 0;
  for (int t = 0; t < trials; ++t) {
    const auto out = d / ("trial-" + std::to_string(t));
    const std::string at = "--jobs " + std::to_string(jobs) + ", trial " + std::to_string(t) + ", seed " +
                           std::to_string(seed);
    // One trial in four starts from a halt after a few evaluations, so that resumes from a
    // checkpoint are tested whatever the machine's speed does to the random delays.
    const bool halt_first = t % 4 == 1;
    if (halt_first) {
      const auto h = run(args_of(cfg, out, jobs, {"--halt-after", std::to_string(2 + t % 3)}), d / "halt.txt");
      BOOST_TEST_REQUIRE(h.rc == 3, at << ": " << h.log);
      for (const auto& l : labels()) halted_checkpoints += fs::exists(out / l / "checkpoint.bin");
    }
    for (int kill = halt_first ? 1 : 0; kill < 2; ++kill) {
      const pid_t pid = start(args_of(cfg, out, jobs, kill ? std::vector<std::string>{"--resume"}
                                                           : std::vector<std::string>{}),
                              d / "killed.txt");
      const double wait = std::uniform_real_distribution<double>(0.0, 1.1 * whole)(rng);
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      ::kill(pid, SIGKILL);
      const int rc = wait_for(pid);
      mid_run += rc == 128 + SIGKILL;
      if (rc == 0 && !kill) whole = std::min(whole, wait);  // a whole run fit in `wait`
      BOOST_TEST_REQUIRE(gone_within(out.string(), 5000ms), at << ": children outlived their parent");
    }
    for (const auto& l : labels()) from_checkpoint += fs::exists(out / l / "checkpoint.bin");
    const auto o = run(args_of(cfg, out, jobs, {"--resume"}), d / "resume.txt");
    BOOST_TEST_REQUIRE(o.rc == 0, at << ": " << o.log);
    BOOST_TEST(results(out) == want, at << ": " << results(out).dump() << " vs " << want.dump());
  }
  BOOST_TEST_MESSAGE("--jobs " << jobs << ": " << mid_run << " kills landed before the end, "
                               << from_checkpoint << " resumes of a method started from a checkpoint left by a "
                               << "kill, " << halted_checkpoints << " from one left by a halt");
  // The delays did land inside runs (else nothing was tested), and every halt left each
  // method's checkpoint.
  BOOST_TEST(mid_run >= trials / 2);
  BOOST_TEST(halted_checkpoints == static_cast<int>(labels().size()) * ((trials + 2) / 4));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(resume)

BOOST_AUTO_TEST_CASE(a_run_halted_with_jobs_2_resumes_with_jobs_2_or_1_to_the_uninterrupted_run) {
  const json& want = reference();
  const auto d = scratch("jobs");
  const auto cfg = write_config(d, tiny_experiment());
  for (const unsigned again : {2u, 1u}) {
    const auto out = d / ("out-" + std::to_string(again));
    const auto halted = run(args_of(cfg, out, 2, {"--halt-after", "5"}), d / "halt.txt");
    BOOST_TEST_REQUIRE(halted.rc == 3, halted.log);
    for (const auto& l : labels()) BOOST_TEST(fs::exists(out / l / "checkpoint.bin"), l);
    const auto resumed = run(args_of(cfg, out, again, {"--resume"}), d / "resume.txt");
    BOOST_TEST_REQUIRE(resumed.rc == 0, resumed.log);
    BOOST_TEST(results(out) == want, results(out).dump() << " vs " << want.dump());
  }
  // And the other way: halted with --jobs 1, resumed with --jobs 2.
  const auto out = d / "out-1-2";
  BOOST_TEST_REQUIRE(run(args_of(cfg, out, 1, {"--halt-after", "7"}), d / "halt.txt").rc == 3);
  const auto resumed = run(args_of(cfg, out, 2, {"--resume"}), d / "resume.txt");
  BOOST_TEST_REQUIRE(resumed.rc == 0, resumed.log);
  BOOST_TEST(results(out) == want);
}

BOOST_AUTO_TEST_CASE(killing_the_parent_with_sigkill_ends_its_children_within_seconds) {
  const auto d = scratch("orphans");
  json j = tiny_experiment();
  j["horizon"]["time"] = 4e5;  // minutes of work: the children would outlive the test
  j["eval_interval"] = 1000;
  const auto cfg = write_config(d, j);
  const auto out = d / "out";
  const pid_t pid = start(args_of(cfg, out, 2), d / "log.txt");
  // Both children running (their --dir lies under out).
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (processes_mentioning(out.string()).size() < 3 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(20ms);
  BOOST_TEST_REQUIRE(processes_mentioning(out.string()).size() == 3u);  // parent + 2 children
  std::this_thread::sleep_for(300ms);  // past their start
  ::kill(pid, SIGKILL);
  BOOST_TEST(wait_for(pid) == 128 + SIGKILL);
  BOOST_TEST(gone_within(out.string(), 3000ms), "children still running 3 s after their parent was killed");
}

BOOST_AUTO_TEST_CASE(resume_with_another_configuration_is_refused_naming_the_keys_that_differ) {
  const auto d = scratch("changed");
  const auto out = d / "out";
  const auto cfg = write_config(d, tiny_experiment());
  BOOST_TEST_REQUIRE(run(args_of(cfg, out, 1, {"--halt-after", "4"}), d / "log.txt").rc == 3);
  auto refused = [&](const std::vector<std::string>& sets) {
    std::vector<std::string> more{"--resume"};
    more.insert(more.end(), sets.begin(), sets.end());
    const auto o = run(args_of(cfg, out, 1, more), d / "log.txt");
    BOOST_TEST(o.rc == 2, o.log);
    BOOST_TEST(o.log.find((out / "config.json").string()) != std::string::npos, o.log);
    return o.log;
  };
  std::string log = refused({"--set", "methods[1].threshold=3"});
  BOOST_TEST(log.find("methods[1].threshold: 2 -> 3") != std::string::npos, log);
  log = refused({"--set", "horizon.time=500", "--set", "optimizer.lr=0.2"});
  BOOST_TEST(log.find("horizon.time: 150 -> 500") != std::string::npos, log);
  BOOST_TEST(log.find("optimizer.lr: 0.1 -> 0.2") != std::string::npos, log);
  log = refused({"--methods", "ASGD,BSP"});
  BOOST_TEST(log.find("methods: ") != std::string::npos, log);
  // What does not determine the results may change: --jobs, --checkpoint-every.
  const auto o = run(args_of(cfg, out, 2, {"--resume", "--checkpoint-every", "3"}), d / "log.txt");
  BOOST_TEST_REQUIRE(o.rc == 0, o.log);
  BOOST_TEST(results(out) == reference());
}

BOOST_AUTO_TEST_CASE(resume_reports_a_truncated_or_unparsable_summary_of_the_earlier_run_with_its_path) {
  const auto d = scratch("summary");
  const auto out = d / "out";
  const auto cfg = write_config(d, tiny_experiment());
  BOOST_TEST_REQUIRE(run(args_of(cfg, out, 1), d / "log.txt").rc == 0);
  const auto summary = out / "ringmaster" / "summary.json";
  const std::string whole = hgrun::read_file(summary);
  for (const std::string& bad : {whole.substr(0, whole.size() / 2), std::string("[1, 2]"), std::string()}) {
    hgrun::write_file(summary, bad);
    const auto o = run(args_of(cfg, out, 1, {"--resume"}), d / "log.txt");
    BOOST_TEST(o.rc == 1, o.log);
    BOOST_TEST(o.log.find(summary.string() + " from the earlier run is damaged") != std::string::npos, o.log);
  }
  hgrun::write_file(summary, whole);
  BOOST_TEST(run(args_of(cfg, out, 1, {"--resume"}), d / "log.txt").rc == 0);
  BOOST_TEST(results(out) == reference());
}

// A method's log.txt (a child's messages under --jobs 2) replaced by a link to a file of the
// user's, and a hard link: --jobs 2 --resume gives the child a new log.txt and truncates
// neither file (it used to open the name with O_TRUNC, through the link).
BOOST_AUTO_TEST_CASE(resume_with_jobs_2_replaces_a_linked_log_and_never_truncates_the_file_it_points_to) {
  const auto d = scratch("log-link");
  const auto out = d / "out";
  const auto cfg = write_config(d, tiny_experiment());
  BOOST_TEST_REQUIRE(run(args_of(cfg, out, 2, {"--halt-after", "3"}), d / "log.txt").rc == 3);
  const auto victim = d / "thesis.tex";
  hgrun::write_file(victim, "years of work");
  fs::remove(out / "asgd" / "log.txt");
  fs::create_symlink(victim, out / "asgd" / "log.txt");
  fs::remove(out / "bsp" / "log.txt");
  BOOST_TEST_REQUIRE(::link(victim.c_str(), (out / "bsp" / "log.txt").c_str()) == 0);
  const auto o = run(args_of(cfg, out, 2, {"--resume"}), d / "log.txt");
  BOOST_TEST_REQUIRE(o.rc == 0, o.log);
  BOOST_TEST(hgrun::read_file(victim) == "years of work");
  BOOST_TEST(!fs::is_symlink(out / "asgd" / "log.txt"));
  BOOST_TEST(fs::hard_link_count(victim) == 1u);
  BOOST_TEST(results(out) == reference());
}

BOOST_AUTO_TEST_SUITE_END()

// Run by name (disabled by default): 20 trials each, about 30 s on an idle 2-core machine.
BOOST_AUTO_TEST_SUITE(kill_trials_suite, *boost::unit_test::disabled())

BOOST_AUTO_TEST_CASE(kill_9_at_random_moments_with_jobs_1_never_breaks_resume) { kill_trials(1, 20); }
BOOST_AUTO_TEST_CASE(kill_9_at_random_moments_with_jobs_2_never_breaks_resume) { kill_trials(2, 20); }

BOOST_AUTO_TEST_SUITE_END()
