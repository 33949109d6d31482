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
#include <sstream>

#include "files.hpp"
#include "folders.hpp"

extern char** environ;

namespace hgrun {

namespace {

std::string num(double x, int digits = 4) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, x);
  return buf;
}

std::string time_text(const json& t) { return t.is_null() ? "not reached" : num(t.get<double>(), 5); }

int column(const std::vector<std::string>& header, const std::string& name) {
  const auto it = std::find(header.begin(), header.end(), name);
  return it == header.end() ? -1 : static_cast<int>(it - header.begin());
}

}  // namespace

std::string markdown_table(const json& c, const std::vector<method_result>& results) {
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
  os << "| method | time to " << target << (epochs ? " (epochs)" : real ? " (model time; sim_vs_real.md has wall seconds)" : " (virtual time)") << " | final " << metric
     << " | speed-up vs " << base << " |\n";
  os << "|---|---:|---:|---:|\n";
  for (const auto& r : results) {
    const json& s = r.summary;
    os << "| " << s["label"].get<std::string>() << " | " << time_text(s["time_to_target"]) << " | ";
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

// Runs gnuplot with `args` in the folder `dir`, its standard output to /dev/null and its
// standard error to `log` (a path relative to dir). No shell is involved: no path or text
// reaches a command line. Returns the exit status, -1 when gnuplot cannot be started (not
// installed), 128 + N when signal N ended it.
int run_gnuplot(const std::filesystem::path& dir, const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv_s{"gnuplot"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  if (posix_spawn_file_actions_init(&fa) != 0) return -1;
  int rc = posix_spawn_file_actions_addchdir_np(&fa, dir.c_str());
  if (rc == 0) rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (rc == 0) rc = posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  if (rc == 0) rc = posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  if (rc == 0) rc = posix_spawnp(&pid, "gnuplot", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// gnuplot's cairo terminal does not report a failed write (a full disk, a size limit): a
// complete PNG starts with the 8-byte signature and ends with the IEND chunk (length 0, type,
// CRC), so a short file shows here.
bool complete_png(const std::string& b) {
  static constexpr char sig[] = "\x89PNG\r\n\x1a\n";
  static constexpr char iend[] = "\0\0\0\0IEND\xae\x42\x60\x82";
  return b.size() >= 8 + 12 && b.compare(0, 8, sig, 8) == 0 && b.compare(b.size() - 12, 12, iend, 12) == 0;
}

// The PNGs gnuplot writes under temporary names in `out`; those not yet renamed into place are
// removed, so a failed chart leaves no partial file under a chart's name.
struct pending_pngs {
  std::filesystem::path out;
  std::vector<std::pair<std::string, std::filesystem::path>> items;  // temporary name, final path
  ~pending_pngs() {
    std::error_code ec;
    for (const auto& [tmp, png] : items) std::filesystem::remove(out / tmp, ec);
  }
  // The script's name (relative to out) for `png`'s temporary.
  std::string add(const std::filesystem::path& png) {
    items.emplace_back("." + png.filename().string() + ".tmp-" + std::to_string(::getpid()), png);
    return items.back().first;
  }
};

// The key path of the method labelled `label` (for an error about its text).
std::string label_key(const json& c, const std::string& label) {
  for (std::size_t i = 0; i < c["methods"].size(); ++i)
    if (c["methods"][i]["label"] == label) return "methods[" + std::to_string(i) + "].label";
  return "label";
}

}  // namespace

std::string gnuplot_string(const std::string& text, const std::string& key) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x20 || b == 0x7f) {
      std::string shown;
      for (char ch : text) {
        const auto u = static_cast<unsigned char>(ch);
        if (u < 0x20 || u == 0x7f) {
          char e[8];
          std::snprintf(e, sizeof e, "\\x%02x", u);
          shown += e;
        } else {
          shown += ch;
        }
      }
      char hb[8];
      std::snprintf(hb, sizeof hb, "0x%02x", b);
      throw config_error(key, "expected text without control characters (a newline would end the chart "
                              "script's string and start a gnuplot command), got byte " +
                                  std::string(hb) + " at offset " + std::to_string(i) + " of \"" + shown + "\"");
    }
  }
  std::string o = "'";
  for (char ch : text) o += ch == '\'' ? std::string("''") : std::string(1, ch);
  return o + "'";
}

std::vector<std::filesystem::path> make_plots(const json& c, const std::vector<method_result>& results,
                                              const std::filesystem::path& out, std::string& why) {
  std::vector<std::filesystem::path> pngs;
  if (run_gnuplot("/", {"--version"}, "/dev/null") != 0) {
    why = "gnuplot not found (Debian package gnuplot-nox: ./hg deps); no charts";
    return pngs;
  }
  // gnuplot runs in `out` and the script names only fixed relative paths, so no folder name
  // reaches it; user text (title, labels, metric) goes through gnuplot_string().
  const auto data = out / "plot-data";
  reset_folder(data);
  pending_pngs pending{out, {}};
  const std::string metric = c["target"]["metric"];
  const std::string metric_text = gnuplot_string(metric, "target.metric");
  const bool below = c["target"]["below"].get<bool>();
  const bool epochs = !results.empty() && results[0].summary["extra"].value("time_unit", "") == "epochs";
  const std::string xlabel = epochs                            ? "epochs"
                             : c.value("clock", "virtual") == "real" ? "model time (x real_scale wall seconds)"
                                                                     : "virtual time";
  auto label_text = [&](const method_result& r) {
    const std::string l = r.summary["label"].get<std::string>();
    return gnuplot_string(l, label_key(c, l));
  };
  std::ostringstream gp;
  gp << "set terminal pngcairo size 1400,560 font 'sans,10' noenhanced\nset datafile separator ' '\n"
     << "set grid\nset key inside bottom right\n";

  // 1. target metric and loss against time, all methods on one chart (two panels).
  std::string curves_metric, curves_loss;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto rows = read_csv(results[i].dir / "evaluations.csv");
    if (rows.size() < 2) continue;
    const int cm = column(rows[0], metric), cl = column(rows[0], "loss");
    const std::string name = "eval-" + std::to_string(i) + ".dat";
    std::ostringstream o;
    for (std::size_t r = 1; r < rows.size(); ++r)
      o << rows[r][0] << ' ' << (cm >= 0 ? rows[r][cm] : "nan") << ' ' << (cl >= 0 ? rows[r][cl] : "nan") << '\n';
    write_file(data / name, o.str());
    const std::string f = "'plot-data/" + name + "'";
    const std::string t = label_text(results[i]);
    if (cm >= 0) curves_metric += (curves_metric.empty() ? "" : ", ") + f + " using 1:2 with lines lw 2 title " + t;
    if (cl >= 0) curves_loss += (curves_loss.empty() ? "" : ", ") + f + " using 1:3 with lines lw 2 title " + t;
  }
  if (!curves_metric.empty()) {
    const auto png = out / "accuracy_loss.png";
    // Checked apart, so that an error names the key that holds the bad text.
    (void)gnuplot_string(c["name"].get<std::string>(), "name");
    (void)gnuplot_string(c["title"].get<std::string>(), "title");
    gp << "set output '" << pending.add(png) << "'\nset multiplot layout 1,2 title "
       << gnuplot_string(c["name"].get<std::string>() + ": " + c["title"].get<std::string>(), "title") << "\n";
    gp << "set xlabel '" << xlabel << "'\nset ylabel " << metric_text << "\n";
    gp << (below ? "set logscale y\n" : "unset logscale y\n");
    const double target = c["target"]["value"].get<double>();
    if (std::isfinite(target))
      gp << "set arrow 1 from graph 0, first " << num(target, 17) << " to graph 1, first " << num(target, 17)
         << " nohead dt 2 lc rgb 'gray40'\n";
    gp << "plot " << curves_metric << "\nunset arrow 1\n";
    gp << "set ylabel 'loss'\nset logscale y\nset key inside top right\n";
    if (!curves_loss.empty()) gp << "plot " << curves_loss << "\n";
    gp << "unset multiplot\nunset logscale y\nset key inside bottom right\n";
    pngs.push_back(png);
  }

  // 2. per-worker utilisation (busy / (busy + idle + waiting)).
  std::vector<std::vector<double>> util;
  std::vector<std::string> ulabels;
  std::size_t workers = 0;
  for (const auto& r : results) {
    const auto rows = read_csv(r.dir / "workers.csv");
    if (rows.size() < 2 || r.summary["extra"].value("time_unit", "") == "epochs") continue;
    const int b = column(rows[0], "busy"), i = column(rows[0], "idle"), w = column(rows[0], "waiting");
    std::vector<double> u;
    for (std::size_t k = 1; k < rows.size(); ++k) {
      const double busy = std::stod(rows[k][b]), tot = busy + std::stod(rows[k][i]) + std::stod(rows[k][w]);
      u.push_back(tot > 0 ? busy / tot : 0.0);
    }
    workers = std::max(workers, u.size());
    util.push_back(std::move(u));
    ulabels.push_back(label_text(r));
  }
  if (!util.empty()) {
    std::ostringstream o;
    for (std::size_t w = 0; w < workers; ++w) {
      o << w;
      for (const auto& u : util) o << ' ' << (w < u.size() ? u[w] : 0.0);
      o << '\n';
    }
    write_file(data / "utilisation.dat", o.str());
    const std::string f = "'plot-data/utilisation.dat'";
    const auto png = out / "utilisation.png";
    gp << "set terminal pngcairo size 1400,480 font 'sans,10' noenhanced\nset output '" << pending.add(png)
       << "'\nset title 'per-worker utilisation (busy / elapsed)'\nset xlabel 'worker'\nset ylabel 'utilisation'\n"
       << "set yrange [0:1.05]\nset key outside bottom center horizontal\n";
    if (workers <= 40) {
      gp << "set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
         << "set boxwidth 0.9\nset xtics 1\nplot ";
      for (std::size_t k = 0; k < util.size(); ++k)
        gp << (k ? ", " : "") << f << " using " << k + 2 << ":xtic(1) title " << ulabels[k];
    } else {
      gp << "set xtics auto\nplot ";
      for (std::size_t k = 0; k < util.size(); ++k)
        gp << (k ? ", " : "") << f << " using 1:" << k + 2 << " with lines title " << ulabels[k];
    }
    gp << "\nset style data lines\nunset yrange\nunset title\n";
    pngs.push_back(png);
  }

  // 3. staleness histograms (fraction of applied updates per delay), methods with any delay.
  std::string curves;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto rows = read_csv(results[i].dir / "staleness.csv");
    if (rows.size() < 3) continue;  // header + delay 0 only: no staleness
    const int a = column(rows[0], "applied");
    double total = 0;
    for (std::size_t k = 1; k < rows.size(); ++k) total += std::stod(rows[k][a]);
    if (total <= 0) continue;
    const std::string name = "staleness-" + std::to_string(i) + ".dat";
    std::ostringstream o;
    // x = staleness + 1 on a log axis: a worker back from an outage can be thousands of
    // updates stale, and the bulk of the histogram sits below n.
    for (std::size_t k = 1; k < rows.size(); ++k) {
      const double f = std::stod(rows[k][a]) / total;
      if (f > 0) o << std::stod(rows[k][0]) + 1 << ' ' << f << '\n';
    }
    write_file(data / name, o.str());
    curves += (curves.empty() ? "" : ", ") + std::string("'plot-data/") + name +
              "' using 1:2 with linespoints lw 2 pt 7 ps 0.5 title " + label_text(results[i]);
  }
  if (!curves.empty()) {
    const auto png = out / "staleness.png";
    gp << "set terminal pngcairo size 1000,520 font 'sans,10' noenhanced\nset output '" << pending.add(png)
       << "'\nset title 'staleness of applied updates'\nset xlabel 'staleness + 1 (server updates since the model was read, log scale)'"
       << "\nset ylabel 'fraction of applied updates (log scale)'\nset xtics auto\nset logscale xy\n"
       << "set key inside top right\nplot " << curves << "\nunset logscale xy\n";
    pngs.push_back(png);
  }
  // 4. clock "real": the target metric against wall seconds, measured (solid) and the
  // simulator's prediction (dashed, its time x real_scale; sim_vs_real.md's runs).
  const double unit = c.value("real_scale", 0.0) > 0 ? c["real_scale"].get<double>() : 1.0;
  std::string real_curves;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto rows = read_csv(results[i].dir / "evaluations.csv");
    const auto pred = std::filesystem::exists(results[i].dir / "predicted" / "evaluations.csv")
                          ? read_csv(results[i].dir / "predicted" / "evaluations.csv")
                          : std::vector<std::vector<std::string>>{};
    if (rows.size() < 2 || pred.size() < 2) continue;
    const int cw = column(rows[0], "wall_seconds"), cm = column(rows[0], metric), pm = column(pred[0], metric);
    if (cw < 0 || cm < 0 || pm < 0) continue;
    std::ostringstream o, q;
    for (std::size_t r = 1; r < rows.size(); ++r) o << rows[r][cw] << ' ' << rows[r][cm] << '\n';
    for (std::size_t r = 1; r < pred.size(); ++r) q << std::stod(pred[r][0]) * unit << ' ' << pred[r][pm] << '\n';
    const std::string a = "real-" + std::to_string(i) + ".dat", b = "predicted-" + std::to_string(i) + ".dat";
    write_file(data / a, o.str());
    write_file(data / b, q.str());
    const std::string t = label_text(results[i]);
    real_curves += (real_curves.empty() ? "" : ", ") + std::string("'plot-data/") + a +
                   "' using 1:2 with lines lw 2 lc " + std::to_string(i + 1) + " title " + t + ", 'plot-data/" + b +
                   "' using 1:2 with lines lw 1 dt 2 lc " + std::to_string(i + 1) + " notitle";
  }
  if (!real_curves.empty()) {
    const auto png = out / "sim_vs_real.png";
    gp << "set terminal pngcairo size 1000,560 font 'sans,10' noenhanced\nset output '" << pending.add(png)
       << "'\nset title 'measured on the wall clock (solid) and predicted by the simulator (dashed)'\n"
       << "set xlabel 'wall seconds'\nset ylabel " << metric_text << "\nset xtics auto\nunset logscale\n"
       << (below ? "set logscale y\n" : "") << "set key inside bottom right\nplot " << real_curves
       << "\nunset logscale y\n";
    pngs.push_back(png);
  }
  gp << "unset output\n";  // closes the last PNG before gnuplot exits
  write_file(data / "plots.gp", gp.str());
  const auto log = data / "gnuplot.log";
  const int rc = run_gnuplot(out, {"plot-data/plots.gp"}, "plot-data/gnuplot.log");
  if (rc != 0) {
    std::string text;
    try {
      text = read_file(log);
    } catch (const std::exception&) {
    }
    if (text.size() > 2000) text = "..." + text.substr(text.size() - 2000);
    throw output_error(pngs.empty() ? log : pngs.front(),
                       (rc < 0 ? std::string("gnuplot could not be started") : "gnuplot exited with status " + std::to_string(rc)) +
                           " (its messages, in " + log.string() + "):\n" + text);
  }
  // Each chart is checked whole and flushed before it takes its name.
  for (const auto& [tmp, png] : pending.items) {
    const auto t = out / tmp;
    std::string bytes;
    try {
      bytes = read_file(t);
    } catch (const std::exception&) {
      throw output_error(png, "gnuplot wrote no chart (see " + log.string() + ")");
    }
    if (!complete_png(bytes))
      throw output_error(png, "gnuplot wrote an incomplete PNG (" + std::to_string(bytes.size()) +
                                  " bytes: a full disk or a file size limit?)");
    const int fd = ::open(t.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) {
      const int e = errno;
      if (fd >= 0) ::close(fd);
      throw output_error(png, std::strerror(e));
    }
    ::close(fd);
    if (::rename(t.c_str(), png.c_str()) != 0) throw output_error(png, std::strerror(errno));
  }
  pending.items.clear();
  return pngs;
}
}  // namespace hgrun
