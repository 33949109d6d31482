#include "report.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

#include "files.hpp"
#include "folders.hpp"
#include "sweep.hpp"

extern char** environ;

#ifndef HG_INSTALL_PLOT  // (tools/CMakeLists.txt sets it from GNUInstallDirs)
#define HG_INSTALL_PLOT "share/heterograd/heterograd_plot.py"
#endif

namespace hgrun {

namespace {

std::string num(double x, int digits = 4) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, x);
  return buf;
}

std::string time_text(const json& t) { return t.is_null() ? "not reached" : num(t.get<double>(), 5); }

// A summary's number under `key` (null when absent: summaries of older builds have no
// first_crossing).
json field(const json& s, const char* key) { return s.is_object() ? s.value(key, json(nullptr)) : json(nullptr); }

// "accuracy >= 0.85 held for 600": the target and its window (target.window).
std::string target_text(const json& c) {
  const json& t = c["target"];
  return t["metric"].get<std::string>() + (t["below"].get<bool>() ? " <= " : " >= ") + num(t["value"].get<double>()) +
         " held for " + num(t.value("window", 0.0));
}

// The sustained time's cell: the time, "not held" (crossed, but never for the window) or
// "not reached".
std::string sustained_text(const json& s) {
  const json t = field(s, "time_to_target");
  if (t.is_null() && !field(s, "first_crossing").is_null()) return "not held";
  return time_text(t);
}

// The speed-up of a run's sustained time t > 0 against a baseline that has none: a lower bound
// from the time the baseline's could be at the earliest in a longer run. A streak of reaching
// evaluations open at the end started after end_time - window (else it would have held) and
// not before the first crossing; one not yet started starts after end_time.
std::string bound_speedup(const json& base, double window, double t) {
  const double end = base.value("end_time", 0.0);
  const json first = field(base, "first_crossing");
  if (first.is_null()) return "> " + num(end / t, 3) + "x";
  return "≥ " + num(std::max(first.get<double>(), end - window) / t, 3) + "x";
}

std::string speedup_text(const json& s, const json* base, double window) {
  const json t = field(s, "time_to_target");
  if (t.is_null()) return "—";
  if (!base) return "n/a";
  if (&s == base) return "1.00x";
  const json tb = field(*base, "time_to_target");
  if (!(t.get<double>() > 0)) return "n/a";
  if (tb.is_null()) return bound_speedup(*base, window, t.get<double>());
  return num(tb.get<double>() / t.get<double>(), 3) + "x";
}

}  // namespace

std::string markdown_table(const json& c, const std::vector<method_result>& results,
                           const std::vector<std::string>& settings) {
  const std::string metric = c["target"]["metric"];
  const double window = c["target"].value("window", 0.0);
  const std::string base = c["baseline"];
  const json* base_sum = nullptr;
  for (const auto& r : results)
    if (r.summary["label"] == base) base_sum = &r.summary;
  const bool epochs = !results.empty() && results[0].summary["extra"].value("time_unit", "") == "epochs";
  std::ostringstream os;
  const bool real = c.value("clock", "virtual") == "real";
  const bool tuned = !settings.empty();
  os << "| method" << (tuned ? " | setting" : "") << " | time to " << target_text(c)
     << (epochs ? " (epochs)" : real ? " (model time; sim_vs_real.md has wall seconds)" : " (virtual time)")
     << " | first crossing | final " << metric << " | speed-up vs " << base << " |\n";
  os << (tuned ? "|---|---|---:|---:|---:|---:|\n" : "|---|---:|---:|---:|---:|\n");
  for (std::size_t k = 0; k < results.size(); ++k) {
    const json& s = results[k].summary;
    os << "| " << s["label"].get<std::string>() << " | ";
    if (tuned) os << (k < settings.size() ? settings[k] : std::string()) << " | ";
    os << sustained_text(s) << " | " << time_text(field(s, "first_crossing")) << " | ";
    os << (s["final"].contains(metric) ? num(s["final"][metric].get<double>()) : std::string("n/a")) << " | ";
    os << speedup_text(s, base_sum, window) << " |\n";
  }
  return os.str();
}

std::vector<std::vector<std::string>> read_csv(const std::filesystem::path& p) {
  std::vector<std::vector<std::string>> rows;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> row;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) row.push_back(cell);
    rows.push_back(std::move(row));
  }
  return rows;
}

namespace {

std::string time_unit_text(const json& c, const std::vector<std::vector<method_result>>& runs) {
  const bool epochs = !runs.empty() && !runs[0].empty() &&
                      runs[0][0].summary["extra"].value("time_unit", "") == "epochs";
  if (epochs) return "epochs";
  return c.value("clock", "virtual") == "real" ? "model time" : "virtual time";
}

// "12.3 ± 1.4" (n = 1: the value alone), and the sd.
std::string mean_ci(const seed_stats& s) {
  if (s.n == 0) return "—";
  return s.n > 1 ? num(s.mean) + " ± " + num(s.ci95, 2) : num(s.mean);
}
std::string sd_text(const seed_stats& s) { return s.n > 1 ? num(s.sd, 2) : "—"; }

// The statistics of the runs' `key` (time_to_target: the sustained times; first_crossing),
// over the runs that have one, and how many do.
seed_stats time_stats(const std::vector<method_result>& rs, const char* key = "time_to_target") {
  std::vector<double> t;
  for (const auto& r : rs)
    if (const json x = field(r.summary, key); x.is_number()) t.push_back(x.get<double>());
  return stats_of(t);
}
seed_stats final_stats(const std::vector<method_result>& rs, const std::string& metric) {
  std::vector<double> v;
  for (const auto& r : rs)
    v.push_back(r.summary["final"].contains(metric) && r.summary["final"][metric].is_number()
                    ? r.summary["final"][metric].get<double>()
                    : std::numeric_limits<double>::quiet_NaN());
  return stats_of(v);
}
std::size_t reached_count(const std::vector<method_result>& rs, const char* key = "time_to_target") {
  std::size_t k = 0;
  for (const auto& r : rs) k += field(r.summary, key).is_number();
  return k;
}

// The first crossings' cell: mean ± 95% CI, with how many seeds crossed where that differs from
// how many held the target.
std::string first_text(const std::vector<method_result>& rs) {
  const std::size_t k = reached_count(rs, "first_crossing");
  const std::string n =
      k == reached_count(rs) ? "" : " (" + std::to_string(k) + " of " + std::to_string(rs.size()) + ")";
  return mean_ci(time_stats(rs, "first_crossing")) + n;
}

}  // namespace

std::string seeds_table(const json& c, const std::vector<std::vector<method_result>>& runs,
                        const std::vector<std::string>& settings) {
  const std::string metric = c["target"]["metric"];
  const std::string base = c["baseline"];
  const bool tuned = !settings.empty();
  std::size_t b = runs.size();
  for (std::size_t m = 0; m < runs.size(); ++m)
    if (!runs[m].empty() && runs[m][0].summary["label"] == base) b = m;
  const seed_stats tb = b < runs.size() ? time_stats(runs[b]) : seed_stats{};
  std::ostringstream os;
  os << "| method" << (tuned ? " | setting" : "") << " | reached " << target_text(c) << " | time to it ("
     << time_unit_text(c, runs) << "), mean ± 95% CI | sd | first crossing, mean ± 95% CI | final " << metric
     << ", mean ± 95% CI | sd | speed-up vs " << base << " (mean times) |\n"
     << (tuned ? "|---|---|---:|---:|---:|---:|---:|---:|---:|\n" : "|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (std::size_t m = 0; m < runs.size(); ++m) {
    if (runs[m].empty()) continue;
    const seed_stats t = time_stats(runs[m]), f = final_stats(runs[m], metric);
    std::string up = "—";
    if (m == b && t.n > 0) up = "1.00x";
    else if (tb.n > 0 && t.n > 0 && t.mean > 0) up = num(tb.mean / t.mean, 3) + "x";
    os << "| " << runs[m][0].summary["label"].get<std::string>() << " | ";
    if (tuned) os << (m < settings.size() ? settings[m] : std::string()) << " | ";
    os << reached_count(runs[m]) << " of " << runs[m].size() << " | " << mean_ci(t) << " | " << sd_text(t) << " | "
       << first_text(runs[m]) << " | " << mean_ci(f) << " | " << sd_text(f) << " | " << up << " |\n";
  }
  os << "\nA seed reaches the target at the first evaluation after which every evaluation reaches it for "
        "target.window; times to it are over the seeds that reached it, first crossings (its first evaluation "
        "at the target) over the seeds that crossed it. A 95% CI is t(0.975, n-1) sd / sqrt(n) "
        "(Student t, n seeds). Each seed's runs are in its seed-N folder.\n";
  return os.str();
}

json seeds_summary(const json& c, const std::vector<std::vector<method_result>>& runs,
                   const std::vector<json>& settings) {
  const std::string metric = c["target"]["metric"];
  json out = {{"name", c["name"]},
              {"target", c["target"]},
              {"baseline", c["baseline"]},
              {"methods", json::array()}};
  for (std::size_t m = 0; m < runs.size(); ++m) {
    if (runs[m].empty()) continue;
    json j = {{"label", runs[m][0].summary["label"]},
              {"runs", runs[m].size()},
              {"reached", reached_count(runs[m])},
              {"time_to_target", time_stats(runs[m]).to_json()},
              {"crossed", reached_count(runs[m], "first_crossing")},
              {"first_crossing", time_stats(runs[m], "first_crossing").to_json()},
              {"final", json::object()},
              {"per_seed", json::array()}};
    if (m < settings.size() && !settings[m].is_null()) j["setting"] = settings[m];
    std::set<std::string> metrics;
    for (const auto& r : runs[m])
      if (r.summary["final"].is_object())
        for (auto it = r.summary["final"].begin(); it != r.summary["final"].end(); ++it) metrics.insert(it.key());
    metrics.insert(metric);
    for (const auto& k : metrics) j["final"][k] = final_stats(runs[m], k).to_json();
    for (const auto& r : runs[m])
      j["per_seed"].push_back({{"seed", r.seed},
                               {"time_to_target", field(r.summary, "time_to_target")},
                               {"first_crossing", field(r.summary, "first_crossing")},
                               {"final", r.summary["final"]}});
    out["methods"].push_back(std::move(j));
  }
  return out;
}

json plot_manifest(const json& c, const std::vector<std::vector<method_result>>& runs,
                   const std::filesystem::path& root, const json& tuning) {
  const double target = c["target"]["value"].get<double>();
  const bool epochs = time_unit_text(c, runs) == "epochs";
  json j = {{"name", c["name"]},
            {"title", c["title"]},
            {"metric", c["target"]["metric"]},
            {"below", c["target"]["below"]},
            {"target", std::isfinite(target) ? json(target) : json(nullptr)},
            {"time_axis", epochs ? "epochs" : c.value("clock", "virtual") == "real" ? "real" : "virtual"},
            {"real_scale", c.value("real_scale", 0.0)},
            {"methods", json::array()},
            {"outages", c["workers"]["time"].value("outages", json::array())},
            {"tuning", tuning}};
  for (const auto& rs : runs) {
    if (rs.empty()) continue;
    json m = {{"label", rs[0].summary["label"]}, {"runs", json::array()}};
    for (const auto& r : rs) m["runs"].push_back({{"seed", r.seed}, {"dir", r.dir.lexically_relative(root).string()}});
    j["methods"].push_back(std::move(m));
  }
  return j;
}

std::filesystem::path plot_script() {
  return shipped_path("HG_PLOT_SCRIPT", HG_INSTALL_PLOT, "tools/plot/heterograd_plot.py");
}

double plot_timeout() {
  const char* e = std::getenv("HG_PLOT_TIMEOUT");
  if (!e) return 600;
  char* end = nullptr;
  const double s = std::strtod(e, &end);
  if (end == e || *end != '\0' || !std::isfinite(s) || !(s > 0))
    throw std::runtime_error(std::string("HG_PLOT_TIMEOUT is \"") + e +
                             "\": expected the plotting program's time limit in seconds, a number > 0 (unset: 600)");
  return s;
}

bool is_chart_name(const std::string& file) {
  // tools/plot/heterograd_plot.py's CHART_NAMES and --format choices (outputs_test compares).
  for (const char* c : {"metric", "utilisation", "staleness", "sim_vs_real", "tuning"})
    for (const char* f : {".png", ".pdf", ".svg"})
      if (file == std::string(c) + f) return true;
  return false;
}

std::vector<std::filesystem::path> listed_charts(const std::filesystem::path& root) {
  namespace fs = std::filesystem;
  std::vector<fs::path> out;
  const auto list = root / "charts.json";
  std::error_code ec;
  if (fs::symlink_status(list, ec).type() != fs::file_type::regular || fs::file_size(list, ec) > (1u << 20) || ec)
    return out;
  json j;
  try {
    j = json::parse(read_file(list), nullptr, false);
  } catch (const std::exception&) {
    return out;  // (unreadable: names nothing)
  }
  if (!j.is_array()) return out;
  for (const auto& e : j) {
    if (!e.is_object() || !e.contains("file") || !e["file"].is_string()) continue;
    const std::string name = e["file"].get<std::string>();
    if (is_chart_name(name) && fs::symlink_status(root / name, ec).type() == fs::file_type::regular)
      out.push_back(root / name);
  }
  return out;
}

namespace {

// The signal that interrupted heterograd-run while it waited for a program (0: none).
volatile std::sig_atomic_t interrupted_by = 0;
extern "C" void note_interrupt(int sig) { interrupted_by = sig; }

// While it lives, SIGINT, SIGTERM and SIGHUP (those not ignored) are noted instead of ending
// heterograd-run: a program in a process group of its own does not get the terminal's Ctrl-C,
// so heterograd-run ends it first. At the end the noted signal is raised again, as it came.
class interrupts_noted {
 public:
  interrupts_noted() {
    interrupted_by = 0;
    struct sigaction sa {};
    sa.sa_handler = note_interrupt;
    sigemptyset(&sa.sa_mask);
    for (std::size_t i = 0; i < 3; ++i) {
      ::sigaction(signals_[i], nullptr, &old_[i]);
      set_[i] = old_[i].sa_handler != SIG_IGN && ::sigaction(signals_[i], &sa, nullptr) == 0;
    }
  }
  interrupts_noted(const interrupts_noted&) = delete;
  interrupts_noted& operator=(const interrupts_noted&) = delete;
  ~interrupts_noted() {
    for (std::size_t i = 0; i < 3; ++i)
      if (set_[i]) ::sigaction(signals_[i], &old_[i], nullptr);
    if (interrupted_by) ::raise(interrupted_by);
  }

 private:
  static constexpr int signals_[3] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old_[3] {};
  bool set_[3] = {false, false, false};
};

// How a program ended: its exit status (-1: it could not be started; 128 + N: signal N ended
// it), and whether it ran past its time limit (then killed with its process group).
struct program_end {
  int status = -1;
  bool timed_out = false;
};

// Starts argv (no shell: no path or text reaches a command line) in a process group of its
// own, its standard input from /dev/null, its output to `out` (/dev/null when -1). -1 when it
// cannot be started.
pid_t start_program(const std::vector<std::string>& args, int out) {
  std::vector<std::string> argv_s = args;
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  if (posix_spawn_file_actions_init(&fa) != 0) return -1;
  if (posix_spawnattr_init(&at) != 0) {
    posix_spawn_file_actions_destroy(&fa);
    return -1;
  }
  int rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (rc == 0)
    rc = out >= 0 ? posix_spawn_file_actions_adddup2(&fa, out, 1)
                  : posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&fa, 1, 2);
  if (rc == 0) rc = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
  if (rc == 0) rc = posix_spawnattr_setpgroup(&at, 0);
  pid_t pid = 0;
  if (rc == 0) rc = posix_spawnp(&pid, argv[0], &fa, &at, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  return rc == 0 ? pid : -1;
}

int exit_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// Runs argv as start_program() does and waits for it, at most `limit` seconds: then (or when
// heterograd-run is interrupted meanwhile) its process group is killed, the program and
// whatever it started.
program_end run_program(const std::vector<std::string>& args, int out, double limit) {
  program_end end;
  interrupts_noted noted;  // (before the start: a Ctrl-C in between is not lost)
  const pid_t pid = start_program(args, out);
  if (pid < 0) return end;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
  auto nap = std::chrono::milliseconds(1);
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return end;
    if (interrupted_by || std::chrono::steady_clock::now() >= until) {
      end.timed_out = interrupted_by == 0;
      ::kill(-pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(nap);  // (1 ms, doubling to 50 ms: a quick program is not held up)
    nap = std::min(nap * 2, std::chrono::milliseconds(50));
  }
  end.status = exit_status(status);
  return end;
}

// The first Python 3 that imports matplotlib: HG_PYTHON, python3 on the PATH, /usr/bin/python3
// (Debian's python3-matplotlib is for the system Python; a PATH may put another first). A
// candidate that does not answer within the plotting program's time limit is passed over.
std::string plotting_python(double limit) {
  static const std::string found = [limit] {
    std::vector<std::string> c;
    if (const char* e = std::getenv("HG_PYTHON")) c.push_back(e);
    c.push_back("python3");
    c.push_back("/usr/bin/python3");
    for (const auto& p : c)
      if (run_program({p, "-c", "import matplotlib"}, -1, limit).status == 0) return p;
    return std::string();
  }();
  return found;
}

// The plotting program's failure as an output_error: the file it could not write, as it names
// it ("cannot write <path>: <why>"), else the folder with the end of its messages.
output_error plot_failure(const std::filesystem::path& root, const std::filesystem::path& log, int rc,
                          std::string text) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto at = line.find("cannot write ");
    const auto colon = at == std::string::npos ? at : line.find(": ", at + 13);
    if (colon != std::string::npos)
      return output_error(line.substr(at + 13, colon - at - 13),
                          line.substr(colon + 2) + " (the plotting program; its messages are in " + log.string() + ")");
  }
  if (text.size() > 4000) text = "..." + text.substr(text.size() - 4000);
  return output_error(root, "the plotting program " + plot_script().string() +
                                (rc < 0 ? std::string(" could not be started") : " exited with status " + std::to_string(rc)) +
                                " (its messages, in " + log.string() + "):\n" + text);
}

}  // namespace

std::vector<std::filesystem::path> make_plots(const std::filesystem::path& root, std::string& why) {
  std::vector<std::filesystem::path> charts;
  const double limit = plot_timeout();
  const std::string py = plotting_python(limit);
  if (py.empty()) {
    why = "no Python 3 with matplotlib found (Debian package python3-matplotlib: ./hg deps; or set HG_PYTHON); "
          "no charts";
    return charts;
  }
  // A new file (an earlier charts.log, or a link planted in its place, is replaced, never
  // written through), which the program writes as it runs.
  const auto log = root / "charts.log";
  const int fd = create_fresh(log);
  const program_end end = run_program({py, plot_script().string(), root.string()}, fd, limit);
  ::close(fd);
  std::string text;
  try {
    text = read_file(log);
  } catch (const std::exception&) {
  }
  if (end.timed_out) {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", limit);
    throw output_error(root, std::string("the plotting program ") + plot_script().string() + " did not finish within " +
                                 secs + " s (HG_PLOT_TIMEOUT) and was stopped with its process group (its messages, in " +
                                 log.string() + "); the results are written: draw the charts later with " + py + " " +
                                 plot_script().string() + " " + root.string());
  }
  if (end.status != 0) throw plot_failure(root, log, end.status, std::move(text));
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("chart: ", 0) == 0) charts.emplace_back(line.substr(7));
  return charts;
}

}  // namespace hgrun

namespace hgrun {

std::string tuning_table(const json& c, const json& tuning) {
  const std::string metric = c["target"]["metric"];
  const std::string criterion = tuning["criterion"];
  std::string seeds;
  for (const auto& s : tuning["seeds"]) seeds += (seeds.empty() ? "" : ", ") + s.dump();
  std::ostringstream os;
  os << "## Tuning (criterion " << criterion << ", tuning seeds " << seeds << ")\n\n"
     << "Each method's settings, run on the tuning seeds; the chosen one (**bold**) is what the table above "
        "ran on the evaluation seeds. "
     << (criterion == "time_to_target"
             ? "Chosen: the most seeds reaching the target (" + target_text(c) + "), then the least mean time to "
               "it (first crossings are shown, not ranked); without any setting reaching it, the best mean final "
             : "Chosen: the best mean final ")
     << metric << ". A failed run (e.g. diverged) ranks last.\n\n"
     << "| method | setting | reached | time to target, mean ± 95% CI | first crossing, mean ± 95% CI | final "
     << metric << ", mean ± 95% CI | failed |\n|---|---|---:|---:|---:|---:|---:|\n";
  auto stat_text = [](const json& s) {
    if (!s.is_object() || !s["mean"].is_number()) return std::string("—");
    return num(s["mean"].get<double>()) + (s["ci95"].is_number() ? " ± " + num(s["ci95"].get<double>(), 2) : "");
  };
  for (const auto& m : tuning["methods"]) {
    const auto best = m["chosen_index"].get<std::size_t>();
    for (std::size_t k = 0; k < m["candidates"].size(); ++k) {
      const json& cand = m["candidates"][k];
      std::string setting;
      for (auto it = cand["setting"].begin(); it != cand["setting"].end(); ++it)
        setting += (setting.empty() ? "" : ", ") + it.key() + "=" +
                   (it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
      if (setting.empty()) setting = "(as configured)";
      const std::string time = stat_text(cand["time_to_target"]);
      os << "| " << m["label"].get<std::string>() << " | " << (k == best ? "**" + setting + "**" : setting) << " | "
         << cand["reached"].dump() << " of " << cand["seeds"].dump() << " | " << time << " | "
         << stat_text(field(cand, "first_crossing")) << " | " << stat_text(cand["final"]) << " | "
         << cand["failed"].dump() << " |\n";
    }
  }
  os << "\n";
  return os.str();
}

}  // namespace hgrun
