// heterograd-run's outputs under hostile text and faults: chart labels reach the plotting
// program as data, never as code; a user's folder is never written into or deleted; a write that fails
// (a file size limit standing in for a full disk) ends the run naming the file and leaves no
// partial file under its name. The last two go through the executable (HG_RUN_EXE).
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "config.hpp"
#include "files.hpp"
#include "report.hpp"

namespace fs = std::filesystem;
using hgrun::json;

namespace {

fs::path scratch(const std::string& name) {
  const auto p = fs::temp_directory_path() / ("hg-outputs-test-" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// A Python 3 with matplotlib, as heterograd-run looks for one (report.cpp: HG_PYTHON, python3,
// /usr/bin/python3).
bool plotting_available() {
  for (const char* py : {static_cast<const char*>(std::getenv("HG_PYTHON")), "python3", "/usr/bin/python3"})
    if (py && std::system((std::string(py) + " -c 'import matplotlib' > /dev/null 2>&1").c_str()) == 0) return true;
  return false;
}

boost::test_tools::assertion_result have_plotting(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result r(plotting_available());
  if (!r) r.message() << "no Python 3 with matplotlib (Debian package python3-matplotlib: ./hg deps)";
  return r;
}

bool complete_png(const fs::path& p) {
  const std::string b = hgrun::read_file(p);
  return b.size() > 20 && b.compare(0, 4, "\x89PNG") == 0 && b.compare(b.size() - 8, 4, "IEND") == 0;
}

struct outcome {
  int code = -1;
  std::string err;
};

// Runs heterograd-run with `args`; with `fsize` > 0 under RLIMIT_FSIZE = fsize bytes (what a
// full disk looks like to write(2): EFBIG part-way). Its output comes back through a pipe,
// which the limit does not cut short. `env`: NAME=value settings added to its environment;
// `limit_s` > 0: SIGALRM ends it after that many seconds (a hang fails the test, not CTest).
outcome run_exe(const std::vector<std::string>& args, rlim_t fsize = 0, const std::vector<std::string>& env = {},
                unsigned limit_s = 0) {
  std::vector<std::string> a{HG_RUN_EXE};
  a.insert(a.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  int fds[2];
  BOOST_REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  BOOST_REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    if (fsize > 0) {
      const rlimit lim{fsize, fsize};
      if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) ::_exit(121);
    }
    for (const auto& e : env) ::putenv(::strdup(e.c_str()));
    if (limit_s > 0) ::alarm(limit_s);  // (kept across exec)
    ::execv(argv[0], argv.data());
    ::_exit(122);
  }
  ::close(fds[1]);
  outcome o;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) o.err.append(buf, static_cast<std::size_t>(n));
    else if (n == 0 || errno != EINTR) break;
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  // A signal (SIGXFSZ not ignored) counts as a failure without a message.
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return o;
}

// A small experiment (E1 at test size, two asynchronous methods: evaluations, worker and
// staleness tables, three charts) into `out`.
std::vector<std::string> tiny_e1(const fs::path& out, bool plots = false) {
  std::vector<std::string> a{"e1_rescaled", "--tiny", "--quiet", "--methods", "vanilla ASGD,Rescaled ASGD",
                             "--out", out.string()};
  if (!plots) a.push_back("--no-plots");
  return a;
}

// A stand-in for the Python that heterograd-run looks for (HG_PYTHON): it answers the probe
// (-c "import matplotlib") and runs the plotting program (HG_PLOT_SCRIPT), here the shell
// script `script`. Returns the environment that points heterograd-run at both, with
// HG_PLOT_TIMEOUT = `timeout` when it is given.
std::vector<std::string> fake_plotter(const fs::path& dir, const std::string& script, const std::string& timeout = "") {
  const auto py = dir / "python", plot = dir / "plot.sh";
  hgrun::write_file(py, "#!/bin/sh\nif [ \"$1\" = -c ]; then exit 0; fi\nexec /bin/sh \"$@\"\n");
  fs::permissions(py, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  hgrun::write_file(plot, script);
  std::vector<std::string> env{"HG_PYTHON=" + py.string(), "HG_PLOT_SCRIPT=" + plot.string()};
  if (!timeout.empty()) env.push_back("HG_PLOT_TIMEOUT=" + timeout);
  return env;
}

// Whether process `pid` runs (a zombie does not).
bool alive(pid_t pid) {
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(st)), {});
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

// Whether the process whose pid the file `pid_file` holds has ended within 5 s.
bool ends_within_5s(const fs::path& pid_file) {
  const pid_t pid = static_cast<pid_t>(std::stol(hgrun::read_file(pid_file)));
  for (int k = 0; k < 250 && alive(pid); ++k) ::usleep(20000);
  if (!alive(pid)) return true;
  ::kill(pid, SIGKILL);  // (a failing test leaves nothing running)
  return false;
}

std::map<std::string, std::uintmax_t> files_under(const fs::path& d) {
  std::map<std::string, std::uintmax_t> m;
  for (const auto& e : fs::recursive_directory_iterator(d))
    if (e.is_regular_file()) m[fs::relative(e.path(), d).string()] = e.file_size();
  return m;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(charts, *boost::unit_test::precondition(have_plotting) * boost::unit_test::timeout(120))

// Labels and a title reach the plotting program as JSON data (runs.json), never as code: TeX
// ($...$ is drawn literally), quotes, backslashes, format directives and shell words are drawn
// as they are, and no command runs. The charts are whole PNGs and no temporary is left.
BOOST_AUTO_TEST_CASE(hostile_labels_and_titles_are_drawn_literally_and_run_nothing) {
  const auto dir = scratch("literal");
  const auto x = dir / "X";
  const std::vector<std::string> labels{"$\\frac{a}{b}$ `touch " + x.string() + "`",
                                        "it's'; __import__('os').system('touch " + x.string() + "') # %s %n {0}",
                                        "back\\slash\\ \"dq\" $(touch " + x.string() + ")"};
  const auto out = dir / "out";
  auto a = tiny_e1(out, true);
  for (std::size_t k = 0; k < 2; ++k) a.insert(a.end(), {"--set", "methods[" + std::to_string(k) + "].label=" + labels[k]});
  a[4] = labels[0] + "," + labels[1];  // --methods
  a.insert(a.end(), {"--set", "title=" + labels[2]});
  const auto r = run_exe(a);
  BOOST_TEST_REQUIRE(r.code == 0, r.err);
  BOOST_TEST(!fs::exists(x));
  const json charts = json::parse(hgrun::read_file(out / "charts.json"));
  BOOST_TEST(charts.size() >= 3u);  // the metric, utilisation, staleness
  std::set<std::string> seen;
  for (const auto& c : charts) {
    BOOST_TEST(complete_png(out / c["file"].get<std::string>()), c["file"]);
    for (const auto& p : c["panels"])
      for (const auto& s : p["series"]) seen.insert(s["label"].get<std::string>());
  }
  // (A legend shows a label's first 48 characters.)
  for (std::size_t k = 0; k < 2; ++k)
    BOOST_TEST(std::any_of(seen.begin(), seen.end(), [&](const std::string& l) { return l.rfind(labels[k].substr(0, 40), 0) == 0; }),
               labels[k]);
  for (const auto& e : fs::directory_iterator(out))
    BOOST_TEST(e.path().filename().string().find(".tmp") == std::string::npos, e.path());
  fs::remove_all(dir);
}

// The run folder's name reaches the plotting program as an argument (no shell): quotes, spaces
// and shell words in it change nothing (a newline is refused with the key "output").
BOOST_AUTO_TEST_CASE(an_output_folder_with_quotes_and_shell_words_gets_its_charts) {
  const auto dir = scratch("odd");
  const auto x = dir / "X";
  const auto odd = dir / ("it's \"$(touch " + x.string() + ")\"; #");
  const auto r = run_exe(tiny_e1(odd, true));
  BOOST_TEST_REQUIRE(r.code == 0, r.err);
  BOOST_TEST(complete_png(odd / "metric.png"));
  BOOST_TEST(!fs::exists(x));
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(folders, *boost::unit_test::timeout(60))

// The output folder is heterograd-run's (an earlier run of one method made it); the user made
// the folder of another method in it.
BOOST_AUTO_TEST_CASE(a_user_file_in_a_method_folder_survives_and_the_run_fails_naming_the_folder) {
  const auto dir = scratch("user-method");
  const auto out = dir / "out";
  auto one = tiny_e1(out);
  one[4] = "vanilla ASGD";  // --methods
  BOOST_TEST_REQUIRE(run_exe(one).code == 0);
  const std::string before = hgrun::read_file(out / "vanilla-asgd" / "summary.json");
  fs::create_directories(out / "rescaled-asgd");
  std::ofstream(out / "rescaled-asgd" / "thesis.tex") << "years of work";
  const auto r = run_exe(tiny_e1(out));
  BOOST_TEST(r.code != 0);
  BOOST_TEST(r.err.find((out / "rescaled-asgd").string()) != std::string::npos, r.err);
  BOOST_TEST(r.err.find("not empty") != std::string::npos, r.err);
  BOOST_TEST(hgrun::read_file(out / "rescaled-asgd" / "thesis.tex") == "years of work");
  BOOST_TEST(files_under(out / "rescaled-asgd").size() == 1u);
  // Every folder is checked before any is touched: the other method's results are as they were.
  BOOST_TEST(hgrun::read_file(out / "vanilla-asgd" / "summary.json") == before);
  // --resume (which deletes nothing) still writes into no folder of the user's.
  auto resume = tiny_e1(out);
  resume.push_back("--resume");
  const auto rr = run_exe(resume);
  BOOST_TEST(rr.code != 0);
  BOOST_TEST(rr.err.find((out / "rescaled-asgd").string()) != std::string::npos, rr.err);
  BOOST_TEST(files_under(out / "rescaled-asgd").size() == 1u);
  fs::remove_all(dir);
}

// `--out ~`: the root folder is the user's.
BOOST_AUTO_TEST_CASE(a_non_empty_output_folder_it_did_not_make_is_refused_and_left_as_it_was) {
  const auto dir = scratch("user-root");
  const auto home = dir / "home";
  fs::create_directories(home);
  std::ofstream(home / "config.json") << "{\"mine\": true}";
  const auto r = run_exe(tiny_e1(home));
  BOOST_TEST(r.code != 0);
  BOOST_TEST(r.err.find(home.string()) != std::string::npos, r.err);
  BOOST_TEST(hgrun::read_file(home / "config.json") == "{\"mine\": true}");
  BOOST_TEST(files_under(home).size() == 1u);
  // A file where the folder should be is refused too.
  std::ofstream(dir / "plain") << "x";
  const auto f = run_exe(tiny_e1(dir / "plain"));
  BOOST_TEST(f.code != 0);
  BOOST_TEST(f.err.find((dir / "plain").string()) != std::string::npos, f.err);
  BOOST_TEST(hgrun::read_file(dir / "plain") == "x");
  fs::remove_all(dir);
}

// A fresh run never mixes an earlier run's outputs with its own: the method and seed folders
// the earlier run made and its tables go; a file of the user's in the run folder stays.
BOOST_AUTO_TEST_CASE(a_fresh_run_removes_an_earlier_runs_folders_and_tables_and_keeps_the_users_files) {
  const auto dir = scratch("mixed");
  const auto out = dir / "out";
  BOOST_TEST_REQUIRE(run_exe(tiny_e1(out)).code == 0);
  BOOST_TEST_REQUIRE(fs::exists(out / "rescaled-asgd" / "summary.json"));
  std::ofstream(out / "notes.txt") << "mine";
  auto one = tiny_e1(out);
  one[4] = "vanilla ASGD";  // --methods
  const auto r = run_exe(one);
  BOOST_TEST_REQUIRE(r.code == 0, r.err);
  BOOST_TEST(!fs::exists(out / "rescaled-asgd"));
  BOOST_TEST(fs::exists(out / "notes.txt"));
  const json s = json::parse(hgrun::read_file(out / "summary.json"));
  BOOST_TEST(s["methods"].size() == 1u);
  auto seeds = one;
  seeds.insert(seeds.end(), {"--seeds", "1,2"});
  BOOST_TEST_REQUIRE(run_exe(seeds).code == 0);
  BOOST_TEST(!fs::exists(out / "vanilla-asgd"));  // the one-seed layout's folder
  BOOST_TEST(fs::exists(out / "seed-2" / "vanilla-asgd" / "summary.json"));
  BOOST_TEST(fs::exists(out / "notes.txt"));
  // --resume continues the run in the folder: nothing of it is removed.
  seeds.push_back("--resume");
  BOOST_TEST_REQUIRE(run_exe(seeds).code == 0);
  BOOST_TEST(fs::exists(out / "seed-1" / "vanilla-asgd" / "summary.json"));
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_rerun_over_its_own_output_replaces_it_and_an_empty_folder_is_adopted) {
  const auto dir = scratch("rerun");
  const auto out = dir / "out";
  fs::create_directories(out);  // empty: adopted
  const auto first = run_exe(tiny_e1(out));
  BOOST_TEST_REQUIRE(first.code == 0, first.err);
  for (const auto* d : {"", "vanilla-asgd", "rescaled-asgd"}) BOOST_TEST(fs::exists(out / d / ".heterograd-run"), d);
  const std::string summary = hgrun::read_file(out / "vanilla-asgd" / "summary.json");
  {
    // Each worker's model time (E1's tau = 1, 2, 4, 8) and speed rank, in workers.csv and run.json.
    const auto rows = hgrun::read_csv(out / "vanilla-asgd" / "workers.csv");
    BOOST_TEST_REQUIRE(rows.size() == 5u);
    const auto t = static_cast<std::size_t>(std::find(rows[0].begin(), rows[0].end(), "model_time") - rows[0].begin());
    BOOST_TEST_REQUIRE(t + 1 < rows[0].size());
    BOOST_TEST(rows[0][t + 1] == "speed_rank");
    const json run = json::parse(hgrun::read_file(out / "vanilla-asgd" / "run.json"));
    for (std::size_t w = 0; w < 4; ++w) {
      const double tau = static_cast<double>(1u << w);
      BOOST_TEST(std::stod(rows[w + 1][t]) == tau, "worker " << w);
      BOOST_TEST(rows[w + 1][t + 1] == std::to_string(w), "worker " << w);
      BOOST_TEST(run["workers"][w]["model_time"].get<double>() == tau);
      BOOST_TEST(run["workers"][w]["speed_rank"].get<std::size_t>() == w);
    }
  }
  std::ofstream(out / "vanilla-asgd" / "stale.csv") << "from an older run";
  const auto second = run_exe(tiny_e1(out));
  BOOST_TEST_REQUIRE(second.code == 0, second.err);
  BOOST_TEST(!fs::exists(out / "vanilla-asgd" / "stale.csv"));  // its own folder: emptied
  const json a = json::parse(summary), b = json::parse(hgrun::read_file(out / "vanilla-asgd" / "summary.json"));
  BOOST_TEST(a["trace_hash"] == b["trace_hash"]);
  BOOST_TEST(fs::exists(out / "table.md"));
  // Several seeds: seed-N folders are its own as well, and a rerun works over them.
  auto seeds = tiny_e1(dir / "seeds");
  seeds.insert(seeds.end(), {"--seeds", "1,2"});
  const auto several = run_exe(seeds);
  BOOST_TEST_REQUIRE(several.code == 0);
  // "results:" names the folder that holds config.json and table.md, the seeds' folders below.
  BOOST_TEST(several.err.find("results: " + (dir / "seeds").string() + " (config.json, table.md, summary.json, seed-*/)") !=
                 std::string::npos, several.err);
  BOOST_TEST(fs::exists(dir / "seeds" / "config.json"));
  BOOST_TEST(fs::exists(dir / "seeds" / "table.md"));
  BOOST_TEST(fs::exists(dir / "seeds" / "seed-2" / ".heterograd-run"));
  BOOST_TEST(fs::exists(dir / "seeds" / "seed-2" / "rescaled-asgd" / "summary.json"));
  const auto again = run_exe(seeds);
  BOOST_TEST(again.code == 0, again.err);
  fs::remove_all(dir);
}

// The root of heterograd-run's folder holds the user's figures too: a fresh run (--no-plots or
// not) deletes only the charts that its charts.json lists, as plain files in the folder with
// the plotting program's names. A hostile charts.json (paths out of the folder, links, folders,
// other names, a damaged file) deletes nothing else.
BOOST_AUTO_TEST_CASE(a_fresh_run_keeps_the_users_figures_and_deletes_only_the_charts_its_charts_json_lists) {
  const auto dir = scratch("user-charts");
  const auto out = dir / "out";
  BOOST_TEST_REQUIRE(run_exe(tiny_e1(out)).code == 0);
  const auto victim = dir / "victim.png";
  hgrun::write_file(victim, "the user's");
  for (const char* f : {"metric.png", "tuning.svg"}) hgrun::write_file(out / f, "an earlier chart");
  for (const char* f : {"figure.png", "paper.pdf", "diagram.svg", "staleness.pdf"}) hgrun::write_file(out / f, "mine");
  fs::create_symlink(victim, out / "utilisation.png");
  fs::create_directories(out / "sim_vs_real.png");
  hgrun::write_file(out / "sim_vs_real.png" / "inside.txt", "mine");
  const json listed = json::array({json{{"file", "metric.png"}}, json{{"file", "tuning.svg"}}, json{{"file", "figure.png"}},
                                   json{{"file", "utilisation.png"}}, json{{"file", "sim_vs_real.png"}},
                                   json{{"file", "../victim.png"}}, json{{"file", victim.string()}},
                                   json{{"file", "metric.png/../../victim.png"}}, json{{"file", 7}}, 42, "metric.png"});
  hgrun::write_file(out / "charts.json", listed.dump());
  const auto r = run_exe(tiny_e1(out));
  BOOST_TEST_REQUIRE(r.code == 0, r.err);
  BOOST_TEST(!fs::exists(out / "metric.png"));
  BOOST_TEST(!fs::exists(out / "tuning.svg"));
  for (const char* f : {"figure.png", "paper.pdf", "diagram.svg", "staleness.pdf"})
    BOOST_TEST(hgrun::read_file(out / f) == "mine", f);
  BOOST_TEST(fs::is_symlink(out / "utilisation.png"));
  BOOST_TEST(hgrun::read_file(victim) == "the user's");
  BOOST_TEST(hgrun::read_file(out / "sim_vs_real.png" / "inside.txt") == "mine");
  // A damaged charts.json names nothing: a chart-named file stays.
  hgrun::write_file(out / "charts.json", "[{\"file\": \"metric.png\"");
  hgrun::write_file(out / "metric.png", "mine now");
  BOOST_TEST_REQUIRE(run_exe(tiny_e1(out)).code == 0);
  BOOST_TEST(hgrun::read_file(out / "metric.png") == "mine now");
  fs::remove_all(dir);
}

// A method folder or a seed folder replaced by a link to an empty folder elsewhere is refused
// by name, by a fresh run and by --resume, and the folder it points to stays empty (it was
// adopted and filled).
BOOST_AUTO_TEST_CASE(a_method_or_seed_folder_replaced_by_a_link_is_refused_by_name_and_nothing_lands_where_it_points) {
  const auto dir = scratch("linked-method");
  const auto out = dir / "out", elsewhere = dir / "elsewhere";
  fs::create_directories(elsewhere);
  BOOST_TEST_REQUIRE(run_exe(tiny_e1(out)).code == 0);
  auto seeds = tiny_e1(dir / "seeds");
  seeds.insert(seeds.end(), {"--seeds", "1,2"});
  BOOST_TEST_REQUIRE(run_exe(seeds).code == 0);
  fs::remove_all(out / "rescaled-asgd");
  fs::create_symlink(elsewhere, out / "rescaled-asgd");
  fs::remove_all(dir / "seeds" / "seed-2");
  fs::create_symlink(elsewhere, dir / "seeds" / "seed-2");
  auto resumed = tiny_e1(out);
  resumed.push_back("--resume");
  auto seeds_resumed = seeds;
  seeds_resumed.push_back("--resume");
  const std::vector<std::pair<std::vector<std::string>, fs::path>> runs{
      {tiny_e1(out), out / "rescaled-asgd"}, {resumed, out / "rescaled-asgd"},
      {seeds, dir / "seeds" / "seed-2"}, {seeds_resumed, dir / "seeds" / "seed-2"}};
  for (const auto& [args, link] : runs) {
    const auto r = run_exe(args);
    BOOST_TEST(r.code == 1, r.err);
    BOOST_TEST(r.err.find("cannot write " + link.string() + ": it is a symbolic link") != std::string::npos, r.err);
    BOOST_TEST(fs::is_symlink(link));
    BOOST_TEST(fs::is_empty(elsewhere));
  }
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(writes, *boost::unit_test::timeout(60))

// Limits between the sizes of the run's files: each makes a different first write fail (the
// marker, config.json, a method's evaluations.csv and run.json, a chart). The failed file must
// be named, must not exist under its name (no partial file), and no file of at least the
// limit's size (a truncated one) or temporary may be left.
BOOST_AUTO_TEST_CASE(a_file_size_limit_fails_the_run_naming_the_file_and_leaves_no_partial_file) {
  const auto dir = scratch("fsize");
  const bool plots = plotting_available();
  auto args = [&](const fs::path& out) {
    auto a = tiny_e1(out, plots);
    a.insert(a.end(), {"--set", "eval_interval=1000"});  // tables larger than config.json
    return a;
  };
  const auto ref = run_exe(args(dir / "ref"));
  BOOST_TEST_REQUIRE(ref.code == 0, ref.err);
  const auto ref_files = files_under(dir / "ref");
  std::vector<std::uintmax_t> sizes;
  for (const auto& [name, size] : ref_files) sizes.push_back(size);
  std::sort(sizes.begin(), sizes.end());
  // Midpoints of the widest gaps between file sizes (the limit stays away from every size, so a
  // size that varies a little from run to run, such as summary.json's wall time, cannot cross it).
  std::vector<std::pair<std::uintmax_t, std::uintmax_t>> gaps;  // (width, midpoint)
  for (std::size_t i = 0; i + 1 < sizes.size(); ++i)
    if (sizes[i + 1] - sizes[i] > 64) gaps.push_back({sizes[i + 1] - sizes[i], (sizes[i] + sizes[i + 1]) / 2});
  std::sort(gaps.rbegin(), gaps.rend());
  gaps.resize(std::min<std::size_t>(gaps.size(), 8));
  gaps.push_back({0, 40});  // below every file: the first write (the output folder's marker) fails
  std::set<std::string> failed;
  for (const auto& [width, limit] : gaps) {
    const auto out = dir / ("limit-" + std::to_string(limit));
    const auto r = run_exe(args(out), limit);
    BOOST_TEST_CONTEXT("limit " << limit << " bytes:\n" << r.err) {
      BOOST_TEST(r.code == 1);
      const auto at = r.err.find("cannot write ");
      BOOST_TEST_REQUIRE(at != std::string::npos);
      const auto end = r.err.find(": ", at + 13);
      const fs::path named = r.err.substr(at + 13, end - at - 13);
      BOOST_TEST_REQUIRE(named.string().rfind(out.string() + "/", 0) == 0u);
      const auto rel = fs::relative(named, out).string();
      BOOST_TEST(ref_files.count(rel) == 1u, rel);
      if (ref_files.count(rel)) BOOST_TEST(ref_files.at(rel) > limit, rel);
      BOOST_TEST(!fs::exists(named));
      // The cause: EFBIG from write(2) (the plotting program's too, a chart named by it).
      BOOST_TEST(r.err.find("File too large") != std::string::npos);
      failed.insert(named.filename().string());
      if (fs::exists(out))
        for (const auto& [name, size] : files_under(out)) {
          BOOST_TEST(size < limit, name);
          BOOST_TEST(name.find(".tmp-") == std::string::npos, name);
        }
    }
  }
  for (const char* f : {".heterograd-run", "config.json", "evaluations.csv", "run.json"}) BOOST_TEST(failed.count(f), f);
  if (plots) BOOST_TEST(failed.count("metric.png"));
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()

// The plotting program heterograd-run runs at the end (report.cpp: make_plots), stood in for
// by a shell script (fake_plotter): its time limit, its log, and the names of its charts.
BOOST_AUTO_TEST_SUITE(plotting_program, *boost::unit_test::timeout(120))

// A plotting program that hangs (and has started a program of its own) is killed with its
// process group at HG_PLOT_TIMEOUT; the run fails as a failed plot does (status 1) naming
// charts.log, and its results are written.
BOOST_AUTO_TEST_CASE(a_hung_plotting_program_is_killed_at_its_time_limit_with_what_it_started_and_the_results_stay) {
  const auto dir = scratch("hung-plot");
  const auto out = dir / "out";
  const auto env = fake_plotter(dir,
                                "echo drawing\nsleep 300 &\necho $! > '" + (dir / "child.pid").string() +
                                    "'\necho $$ > '" + (dir / "plotter.pid").string() + "'\nwait\n",
                                "1");
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_exe(tiny_e1(out, true), 0, env, 90);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST(r.code == 1, r.err);
  BOOST_TEST(r.err.find("did not finish within 1 s (HG_PLOT_TIMEOUT)") != std::string::npos, r.err);
  BOOST_TEST(r.err.find((out / "charts.log").string()) != std::string::npos, r.err);
  BOOST_TEST(took < 60.0);
  for (const char* f : {"table.md", "summary.json", "runs.json", "vanilla-asgd/summary.json"})
    BOOST_TEST(fs::exists(out / f), f);
  BOOST_TEST(hgrun::read_file(out / "charts.log").find("drawing") != std::string::npos);
  BOOST_TEST_REQUIRE(fs::exists(dir / "child.pid"));
  BOOST_TEST(ends_within_5s(dir / "plotter.pid"));
  BOOST_TEST(ends_within_5s(dir / "child.pid"));
  fs::remove_all(dir);
}

// heterograd-run interrupted (SIGTERM, or Ctrl-C's SIGINT, which a program in a process group
// of its own does not get) while it waits for the plotting program: the program's group ends
// first, then heterograd-run, by the same signal.
BOOST_AUTO_TEST_CASE(an_interrupted_run_ends_the_plotting_program_it_waits_for) {
  const auto dir = scratch("interrupted-plot");
  const auto env = fake_plotter(dir, "echo $$ > '" + (dir / "plotter.pid").string() + "'\nsleep 300\n");
  auto args = tiny_e1(dir / "out", true);
  args.insert(args.begin(), HG_RUN_EXE);
  const pid_t pid = ::fork();
  BOOST_REQUIRE(pid >= 0);
  if (pid == 0) {
    for (const auto& e : env) ::putenv(::strdup(e.c_str()));
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::alarm(90);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(122);
  }
  for (int k = 0; k < 3000 && !fs::exists(dir / "plotter.pid"); ++k) ::usleep(20000);
  BOOST_TEST_REQUIRE(fs::exists(dir / "plotter.pid"));
  ::usleep(100000);  // (the pid written: the file is complete)
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  BOOST_TEST(WIFSIGNALED(status));
  BOOST_TEST((WIFSIGNALED(status) ? WTERMSIG(status) : 0) == SIGTERM);
  BOOST_TEST(ends_within_5s(dir / "plotter.pid"));
  fs::remove_all(dir);
}

// --resume over a run whose charts.log was replaced by a link to a file of the user's: the
// plotting program's messages go to a new charts.log; the file the link named is untouched.
BOOST_AUTO_TEST_CASE(a_link_planted_as_charts_log_is_replaced_and_the_file_it_points_to_is_untouched) {
  const auto dir = scratch("charts-log-link");
  const auto out = dir / "out";
  const auto env = fake_plotter(dir, "echo the plotter ran\n");
  BOOST_TEST_REQUIRE(run_exe(tiny_e1(out, true), 0, env).code == 0);
  BOOST_TEST_REQUIRE(hgrun::read_file(out / "charts.log") == "the plotter ran\n");
  const auto victim = dir / "thesis.tex";
  hgrun::write_file(victim, "years of work");
  fs::remove(out / "charts.log");
  fs::create_symlink(victim, out / "charts.log");
  auto resumed = tiny_e1(out, true);
  resumed.push_back("--resume");
  const auto r = run_exe(resumed, 0, env);
  BOOST_TEST_REQUIRE(r.code == 0, r.err);
  BOOST_TEST(hgrun::read_file(victim) == "years of work");
  BOOST_TEST(!fs::is_symlink(out / "charts.log"));
  BOOST_TEST(hgrun::read_file(out / "charts.log") == "the plotter ran\n");
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_plot_time_limit_that_is_not_a_positive_number_is_refused_naming_it) {
  ::unsetenv("HG_PLOT_TIMEOUT");
  BOOST_TEST(hgrun::plot_timeout() == 600.0);
  ::setenv("HG_PLOT_TIMEOUT", "2.5", 1);
  BOOST_TEST(hgrun::plot_timeout() == 2.5);
  for (const char* bad : {"", "abc", "0", "-3", "5s", "nan", "inf"}) {
    ::setenv("HG_PLOT_TIMEOUT", bad, 1);
    BOOST_CHECK_EXCEPTION(hgrun::plot_timeout(), std::runtime_error, [&](const std::runtime_error& e) {
      return std::string(e.what()).find("HG_PLOT_TIMEOUT is \"" + std::string(bad) + "\"") != std::string::npos;
    });
  }
  ::unsetenv("HG_PLOT_TIMEOUT");
}

// What a fresh run may delete as a chart (is_chart_name) is what the plotting program writes:
// its CHART_NAMES in each of its --format choices, and nothing with a path.
BOOST_AUTO_TEST_CASE(the_chart_names_are_the_plotting_programs) {
  const std::string py = hgrun::read_file(hgrun::plot_script());
  std::smatch names, formats;
  BOOST_TEST_REQUIRE(std::regex_search(py, names, std::regex(R"(CHART_NAMES = \(([^)]*)\))")));
  BOOST_TEST_REQUIRE(std::regex_search(py, formats, std::regex(R"(--format", choices=\[([^\]]*)\])")));
  const auto quoted = [](const std::string& text) {
    std::vector<std::string> out;
    const std::regex q("\"([^\"]*)\"");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), q); it != std::sregex_iterator(); ++it)
      out.push_back((*it)[1]);
    return out;
  };
  const auto charts = quoted(names[1]), exts = quoted(formats[1]);
  BOOST_TEST(charts.size() == 5u);
  BOOST_TEST(exts.size() == 3u);
  for (const auto& c : charts)
    for (const auto& f : exts) BOOST_TEST(hgrun::is_chart_name(c + "." + f), c + "." + f);
  for (const char* no : {"figure.png", "metric.png.bak", "../metric.png", "/tmp/metric.png", "metric", "metric.jpg",
                         "x/metric.png", ""})
    BOOST_TEST(!hgrun::is_chart_name(no), no);
}

BOOST_AUTO_TEST_SUITE_END()
