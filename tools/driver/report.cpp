#include "report.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

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


}  // namespace

std::string markdown_table(const json& c, const std::vector<method_result>& results,
                           const std::vector<std::string>& settings) {
  const std::string metric = c["target"]["metric"];
  const bool below = c["target"]["below"].get<bool>();
  const std::string cmp = below ? " <= " : " >= ";
  const std::string target = metric + cmp + num(c["target"]["value"].get<double>());
  const std::string base = c["baseline"];
  const json* base_sum = nullptr;
  for (const auto& r : results)
    if (r.summary["label"] == base) base_sum = &r.summary;
  const bool epochs = !results.empty() && results[0].summary["extra"].value("time_unit", "") == "epochs";
  std::ostringstream os;
  const bool real = c.value("clock", "virtual") == "real";
  const bool tuned = !settings.empty();
  os << "| method" << (tuned ? " | setting" : "") << " | time to " << target << (epochs ? " (epochs)" : real ? " (model time; sim_vs_real.md has wall seconds)" : " (virtual time)") << " | final " << metric
     << " | speed-up vs " << base << " |\n";
  os << (tuned ? "|---|---|---:|---:|---:|\n" : "|---|---:|---:|---:|\n");
  for (std::size_t k = 0; k < results.size(); ++k) {
    const json& s = results[k].summary;
    os << "| " << s["label"].get<std::string>() << " | ";
    if (tuned) os << (k < settings.size() ? settings[k] : std::string()) << " | ";
    os << time_text(s["time_to_target"]) << " | ";
    os << (s["final"].contains(metric) ? num(s["final"][metric].get<double>()) : std::string("n/a")) << " | ";
    std::string up = "n/a";
    if (base_sum && !s["time_to_target"].is_null()) {
      const double t = s["time_to_target"].get<double>();
      const json& tb = (*base_sum)["time_to_target"];
      if (&s == base_sum) up = "1.00x";
      else if (!tb.is_null() && t > 0) up = num(tb.get<double>() / t, 3) + "x";
      else if (tb.is_null() && t > 0) up = "> " + num((*base_sum).value("end_time", 0.0) / t, 3) + "x";
    } else if (!s["time_to_target"].is_null() && !base_sum) {
      up = "n/a";
    } else {
      up = "—";
    }
    os << up << " |\n";
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

seed_stats time_stats(const std::vector<method_result>& rs) {
  std::vector<double> t;
  for (const auto& r : rs)
    if (r.summary["time_to_target"].is_number()) t.push_back(r.summary["time_to_target"].get<double>());
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
std::size_t reached_count(const std::vector<method_result>& rs) {
  std::size_t k = 0;
  for (const auto& r : rs) k += r.summary["time_to_target"].is_number();
  return k;
}

}  // namespace

std::string seeds_table(const json& c, const std::vector<std::vector<method_result>>& runs,
                        const std::vector<std::string>& settings) {
  const std::string metric = c["target"]["metric"];
  const std::string target = metric + (c["target"]["below"].get<bool>() ? " <= " : " >= ") +
                             num(c["target"]["value"].get<double>());
  const std::string base = c["baseline"];
  const bool tuned = !settings.empty();
  std::size_t b = runs.size();
  for (std::size_t m = 0; m < runs.size(); ++m)
    if (!runs[m].empty() && runs[m][0].summary["label"] == base) b = m;
  const seed_stats tb = b < runs.size() ? time_stats(runs[b]) : seed_stats{};
  std::ostringstream os;
  os << "| method" << (tuned ? " | setting" : "") << " | reached " << target << " | time to it ("
     << time_unit_text(c, runs) << "), mean ± 95% CI | sd | final " << metric << ", mean ± 95% CI | sd | speed-up vs "
     << base << " (mean times) |\n"
     << (tuned ? "|---|---|---:|---:|---:|---:|---:|---:|\n" : "|---|---:|---:|---:|---:|---:|---:|\n");
  for (std::size_t m = 0; m < runs.size(); ++m) {
    if (runs[m].empty()) continue;
    const seed_stats t = time_stats(runs[m]), f = final_stats(runs[m], metric);
    std::string up = "—";
    if (m == b && t.n > 0) up = "1.00x";
    else if (tb.n > 0 && t.n > 0 && t.mean > 0) up = num(tb.mean / t.mean, 3) + "x";
    os << "| " << runs[m][0].summary["label"].get<std::string>() << " | ";
    if (tuned) os << (m < settings.size() ? settings[m] : std::string()) << " | ";
    os << reached_count(runs[m]) << " of " << runs[m].size() << " | " << mean_ci(t) << " | " << sd_text(t) << " | "
       << mean_ci(f) << " | " << sd_text(f) << " | " << up << " |\n";
  }
  os << "\nTimes to the target are over the seeds that reached it; a 95% CI is t(0.975, n-1) sd / sqrt(n) "
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
                               {"time_to_target", r.summary["time_to_target"]},
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

namespace {

// Runs argv (no shell: no path or text reaches a command line) with its standard input from
// /dev/null and its output to `log` (or /dev/null). Returns the exit status, -1 when it cannot
// be started, 128 + N when signal N ended it.
int run_program(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv_s = args;
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  if (posix_spawn_file_actions_init(&fa) != 0) return -1;
  const char* out = log.empty() ? "/dev/null" : log.c_str();
  int rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (rc == 0) rc = posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  if (rc == 0) rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// The first Python 3 that imports matplotlib: HG_PYTHON, python3 on the PATH, /usr/bin/python3
// (Debian's python3-matplotlib is for the system Python; a PATH may put another first).
std::string plotting_python() {
  static const std::string found = [] {
    std::vector<std::string> c;
    if (const char* e = std::getenv("HG_PYTHON")) c.push_back(e);
    c.push_back("python3");
    c.push_back("/usr/bin/python3");
    for (const auto& p : c)
      if (run_program({p, "-c", "import matplotlib"}, "") == 0) return p;
    return std::string();
  }();
  return found;
}

}  // namespace

std::vector<std::filesystem::path> make_plots(const std::filesystem::path& root, std::string& why) {
  std::vector<std::filesystem::path> charts;
  const std::string py = plotting_python();
  if (py.empty()) {
    why = "no Python 3 with matplotlib found (Debian package python3-matplotlib: ./hg deps; or set HG_PYTHON); "
          "no charts";
    return charts;
  }
  const auto log = root / "charts.log";
  const int rc = run_program({py, plot_script().string(), root.string()}, log.string());
  std::string text;
  try {
    text = read_file(log);
  } catch (const std::exception&) {
  }
  if (rc != 0) {
    // A file the program could not write, as it names it ("cannot write <path>: <why>").
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      const auto at = line.find("cannot write ");
      const auto colon = at == std::string::npos ? at : line.find(": ", at + 13);
      if (colon != std::string::npos)
        throw output_error(line.substr(at + 13, colon - at - 13),
                           line.substr(colon + 2) + " (the plotting program; its messages are in " + log.string() + ")");
    }
    if (text.size() > 4000) text = "..." + text.substr(text.size() - 4000);
    throw output_error(root, "the plotting program " + plot_script().string() +
                                 (rc < 0 ? std::string(" could not be started") : " exited with status " + std::to_string(rc)) +
                                 " (its messages, in " + log.string() + "):\n" + text);
  }
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
             ? "Chosen: the most seeds reaching the target, then the least mean time to it; without any setting "
               "reaching it, the best mean final "
             : "Chosen: the best mean final ")
     << metric << ". A failed run (e.g. diverged) ranks last.\n\n"
     << "| method | setting | reached | time to target, mean ± 95% CI | final " << metric
     << ", mean ± 95% CI | failed |\n|---|---|---:|---:|---:|---:|\n";
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
         << stat_text(cand["final"]) << " | " << cand["failed"].dump() << " |\n";
    }
  }
  os << "\n";
  return os.str();
}

}  // namespace hgrun
