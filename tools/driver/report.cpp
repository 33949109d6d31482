#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace hgrun {

namespace {

std::string num(double x, int digits = 4) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, x);
  return buf;
}

std::string time_text(const json& t) { return t.is_null() ? "not reached" : num(t.get<double>(), 5); }

std::string quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("''") : std::string(1, c);
  return o + "'";
}

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
  os << "| method | time to " << target << (epochs ? " (epochs)" : " (virtual time)") << " | final " << metric
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

std::vector<std::filesystem::path> make_plots(const json& c, const std::vector<method_result>& results,
                                              const std::filesystem::path& out, std::string& why) {
  std::vector<std::filesystem::path> pngs;
  if (std::system("gnuplot --version > /dev/null 2>&1") != 0) {
    why = "gnuplot not found (Debian package gnuplot-nox: ./hg deps); no charts";
    return pngs;
  }
  const auto data = out / "plot-data";
  std::filesystem::create_directories(data);
  const std::string metric = c["target"]["metric"];
  const bool below = c["target"]["below"].get<bool>();
  const bool epochs = !results.empty() && results[0].summary["extra"].value("time_unit", "") == "epochs";
  const std::string xlabel = epochs ? "epochs" : "virtual time";
  std::ostringstream gp;
  gp << "set terminal pngcairo size 1400,560 font 'sans,10' noenhanced\nset datafile separator ' '\n"
     << "set grid\nset key inside bottom right\n";

  // 1. target metric and loss against time, all methods on one chart (two panels).
  std::string curves_metric, curves_loss;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto rows = read_csv(results[i].dir / "evaluations.csv");
    if (rows.size() < 2) continue;
    const int cm = column(rows[0], metric), cl = column(rows[0], "loss");
    const auto f = data / ("eval-" + std::to_string(i) + ".dat");
    std::ofstream o(f);
    for (std::size_t r = 1; r < rows.size(); ++r)
      o << rows[r][0] << ' ' << (cm >= 0 ? rows[r][cm] : "nan") << ' ' << (cl >= 0 ? rows[r][cl] : "nan") << '\n';
    const std::string t = quote(results[i].summary["label"].get<std::string>());
    if (cm >= 0) curves_metric += (curves_metric.empty() ? "" : ", ") + quote(f.string()) + " using 1:2 with lines lw 2 title " + t;
    if (cl >= 0) curves_loss += (curves_loss.empty() ? "" : ", ") + quote(f.string()) + " using 1:3 with lines lw 2 title " + t;
  }
  if (!curves_metric.empty()) {
    const auto png = out / "accuracy_loss.png";
    gp << "set output " << quote(png.string()) << "\nset multiplot layout 1,2 title "
       << quote(c["name"].get<std::string>() + ": " + c["title"].get<std::string>()) << "\n";
    gp << "set xlabel '" << xlabel << "'\nset ylabel '" << metric << "'\n";
    gp << (below ? "set logscale y\n" : "unset logscale y\n");
    gp << "set arrow 1 from graph 0, first " << c["target"]["value"].get<double>()
       << " to graph 1, first " << c["target"]["value"].get<double>() << " nohead dt 2 lc rgb 'gray40'\n";
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
    ulabels.push_back(r.summary["label"]);
  }
  if (!util.empty()) {
    const auto f = data / "utilisation.dat";
    std::ofstream o(f);
    for (std::size_t w = 0; w < workers; ++w) {
      o << w;
      for (const auto& u : util) o << ' ' << (w < u.size() ? u[w] : 0.0);
      o << '\n';
    }
    o.close();
    const auto png = out / "utilisation.png";
    gp << "set terminal pngcairo size 1400,480 font 'sans,10' noenhanced\nset output " << quote(png.string())
       << "\nset title 'per-worker utilisation (busy / elapsed)'\nset xlabel 'worker'\nset ylabel 'utilisation'\n"
       << "set yrange [0:1.05]\nset key outside bottom center horizontal\n";
    if (workers <= 40) {
      gp << "set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
         << "set boxwidth 0.9\nset xtics 1\nplot ";
      for (std::size_t k = 0; k < util.size(); ++k)
        gp << (k ? ", " : "") << quote(f.string()) << " using " << k + 2 << ":xtic(1) title " << quote(ulabels[k]);
    } else {
      gp << "set xtics auto\nplot ";
      for (std::size_t k = 0; k < util.size(); ++k)
        gp << (k ? ", " : "") << quote(f.string()) << " using 1:" << k + 2 << " with lines title " << quote(ulabels[k]);
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
    const auto f = data / ("staleness-" + std::to_string(i) + ".dat");
    std::ofstream o(f);
    // x = staleness + 1 on a log axis: a worker back from an outage can be thousands of
    // updates stale, and the bulk of the histogram sits below n.
    for (std::size_t k = 1; k < rows.size(); ++k) {
      const double f = std::stod(rows[k][a]) / total;
      if (f > 0) o << std::stod(rows[k][0]) + 1 << ' ' << f << '\n';
    }
    curves += (curves.empty() ? "" : ", ") + quote(f.string()) + " using 1:2 with linespoints lw 2 pt 7 ps 0.5 title " +
              quote(results[i].summary["label"].get<std::string>());
  }
  if (!curves.empty()) {
    const auto png = out / "staleness.png";
    gp << "set terminal pngcairo size 1000,520 font 'sans,10' noenhanced\nset output " << quote(png.string())
       << "\nset title 'staleness of applied updates'\nset xlabel 'staleness + 1 (server updates since the model was read, log scale)'"
       << "\nset ylabel 'fraction of applied updates (log scale)'\nset xtics auto\nset logscale xy\n"
       << "set key inside top right\nplot " << curves << "\nunset logscale xy\n";
    pngs.push_back(png);
  }
  const auto script = data / "plots.gp";
  std::ofstream(script) << gp.str();
  const std::string cmd = "gnuplot " + quote(script.string()) + " 2> " + quote((data / "gnuplot.log").string());
  if (std::system(cmd.c_str()) != 0) {
    why = "gnuplot failed (see " + (data / "gnuplot.log").string() + ")";
    return {};
  }
  return pngs;
}

}  // namespace hgrun
