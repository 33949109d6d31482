// clock "real": the simulator's prediction of each real run and sim_vs_real.md (stages.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "experiment.hpp"
#include "files.hpp"
#include "report.hpp"
#include "run.hpp"
#include "stages.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace hgrun {

namespace {

// A number as %g writes it with 6 digits (40, not 40.0).
std::string number_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

std::string seconds_text(const json& x) {
  if (!x.is_number()) return "not reached";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x.get<double>());
  return buf;
}

// The page's head: how the prediction is made, the target and the columns.
std::string page_head(const json& resolved, double scale) {
  std::ostringstream md;
  md << "# Simulated vs real: " << resolved["name"].get<std::string>() << "\n\n"
     << "Real runs on runtime `" << resolved["runtime"].get<std::string>() << "`, clock real, "
     << (scale > 0 ? "injected time: real_scale " + seconds_text(scale) + " s per model unit; the prediction is the "
                     "same configuration on the simulated cluster, its times x real_scale."
                   : std::string("no injected time: the prediction replays each run's measured jobs (its "
                                 "real_jobs.csv as a trace worker-time model; each worker's mean seconds per "
                                 "gradient where the trace lacks a worker)."))
     << " Times to the target (" << resolved["target"]["metric"].get<std::string>()
     << (resolved["target"]["below"].get<bool>() ? " <= " : " >= ") << resolved["target"]["value"].dump()
     << ", held for target.window " << number_text(resolved["target"]["window"].get<double>())
     << " model units: the first evaluation after which every evaluation reaches it that long; measured and "
        "predicted alike) are wall seconds at the evaluation grid (eval_interval "
     << resolved["eval_interval"].dump() << " model units). Each run's first crossing is its summary.json's "
        "first_crossing.\n\n"
     << "| method | seed | predicted time to target (s) | measured (s) | measured / predicted | predicted speed-up | "
        "measured speed-up | predicted updates | measured updates | wall (s) | communication (s/worker) | "
        "evaluation (s) | model violations |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  return md.str();
}

// Without real_scale: the prediction's worker-time model from the run's measurements. The
// run's own trace when it measured every worker's jobs (real_jobs.csv; under MPI rank 0
// measured only its own rounds): each simulated job takes the duration of its worker's last
// measured job that started before it; else each worker's mean seconds per gradient.
void measured_time_model(json& t, const std::filesystem::path& dir, const std::vector<double>& spg) {
  json trace = json::array();
  std::vector<char> seen(spg.size(), 0);
  try {
    std::ifstream in(dir / "real_jobs.csv");
    for (const auto& r : heterograd::sim::trace_replay::parse_csv(in)) {
      trace.push_back(json{{"worker", r.worker}, {"start", r.start}, {"duration", std::max(r.duration, 1e-9)}});
      if (r.worker < seen.size()) seen[r.worker] = 1;
    }
  } catch (const std::invalid_argument&) {
    seen.assign(seen.size(), 0);  // a damaged file: the means instead
  }
  const bool traced = std::all_of(seen.begin(), seen.end(), [](char x) { return x != 0; });
  t["base"] = traced ? "trace" : "fixed";
  t["tau"] = traced ? json::array() : json(spg);
  t["trace"] = traced ? trace : json::array();
  t["permute"] = false;
  t["noise"] = "none";
  t["batch_scaling"] = false;
  t["outages"] = t["slowdowns"] = json::array();
  t["subset_delay"]["count"] = 0;
}

// One run's row: its prediction and measurement in wall seconds, and the rest of its cells.
struct comparison_row {
  std::string label;
  std::uint64_t seed;
  json predicted, measured;
  std::string rest, cells;
};

comparison_row compare(const json& real, const json& pred, std::uint64_t seed, double unit_s) {
  const json& rx = real["extra"]["real"];
  auto scaled = [&](const json& t) { return t.is_number() ? json(t.get<double>() * unit_s) : json(nullptr); };
  const json p_t = scaled(pred["time_to_target"]), m_t = scaled(real["time_to_target"]);
  std::string ratio = "-";
  if (p_t.is_number() && m_t.is_number() && p_t.get<double>() > 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", m_t.get<double>() / p_t.get<double>());
    ratio = buf;
  }
  auto upd = [](const json& s) {
    return s["extra"].contains("rounds") ? s["extra"]["rounds"].dump() : s["updates"]["applied"].dump();
  };
  std::ostringstream rest;
  rest << upd(pred) << " | " << upd(real) << " | " << seconds_text(rx["wall_seconds"]) << " | "
       << seconds_text(rx["mean_communication_seconds"]) << " | "
       << seconds_text(real["extra"].value("evaluation_seconds", json(0.0))) << " | " << rx["violations"].dump()
       << " (" << seconds_text(rx["overrun_seconds"]) << " s over) |";
  return {real["label"].get<std::string>(), seed, p_t, m_t, rest.str(),
          seconds_text(p_t) + " | " + seconds_text(m_t) + " | " + ratio};
}

// Speed-ups against the baseline method of the same seed (time to target of the baseline /
// the method's), measured and predicted, and the page's rows.
std::string page_rows(const std::vector<comparison_row>& rows, const std::string& baseline) {
  auto speedup = [](const json& base, const json& t) -> std::string {
    if (!base.is_number() || !t.is_number() || t.get<double>() <= 0) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2fx", base.get<double>() / t.get<double>());
    return buf;
  };
  std::ostringstream md;
  for (const auto& r : rows) {
    const comparison_row* b = nullptr;
    for (const auto& x : rows)
      if (x.seed == r.seed && x.label == baseline) b = &x;
    md << "| " << r.label << " | " << r.seed << " | " << r.cells << " | "
       << (b ? speedup(b->predicted, r.predicted) : "-") << " | " << (b ? speedup(b->measured, r.measured) : "-")
       << " | " << r.rest << "\n";
  }
  return md.str();
}

}  // namespace

// clock "real": the simulator's prediction of each real run, and the comparison. The same
// configuration on the simulated cluster (runtime sim, clock virtual) predicts the wall time
// to the target: its virtual time x real_scale. Without real_scale (the workers' speeds are
// whatever the cores give, e.g. with workers.placement), the prediction's worker-time model is
// the real run's trace of measured jobs (real_jobs.csv), or, when it lacks a worker, fixed at
// each worker's measured seconds per gradient. The predictions go to <method>/predicted/;
// sim_vs_real.md has one row per run.
void write_sim_vs_real(const json& resolved, const std::vector<unit>& units, const std::filesystem::path& root) {
  const double scale = resolved.value("real_scale", 0.0);
  std::string md = page_head(resolved, scale);
  std::vector<comparison_row> rows;
  for (const auto& u : units) {
    const json real = json::parse(read_file(u.dir / "summary.json"));
    json sim = resolved;
    sim["runtime"] = "sim";
    sim["clock"] = "virtual";
    sim.erase("real_scale");
    sim["workers"]["placement"] = json::array();
    sim["workers"]["server_placement"] = "";
    // membership (elastic.hpp): the simulator's churn is timed; a change counted in jobs or
    // updates has no simulated counterpart.
    if (const std::string why = untimed_change(experiment_of(resolved).membership); !why.empty()) {
      md += "| " + real["label"].get<std::string>() + " | " + std::to_string(u.seed) + " | no prediction: " + why +
            " |||||||||||\n";
      continue;
    }
    if (scale <= 0) {
      // A worker that finished no gradient has no measured speed (0 here): a fixed model
      // with a zero job time would make the prediction an endless run of instant jobs.
      const auto spg = real["extra"]["real"]["seconds_per_gradient"].get<std::vector<double>>();
      const auto slow = std::find_if(spg.begin(), spg.end(), [](double x) { return !(x > 0); });
      if (slow != spg.end()) {
        md += "| " + real["label"].get<std::string>() + " | " + std::to_string(u.seed) + " | no prediction: worker " +
              std::to_string(slow - spg.begin()) + " finished no gradient, so its speed was not measured |||||||||||\n";
        continue;
      }
      measured_time_model(sim["workers"]["time"], u.dir, spg);
    }
    run_request req{sim, u.method, u.seed, u.dir / "predicted", false, 0, {}, true};
    rows.push_back(compare(real, run_method(req), u.seed, scale > 0 ? scale : 1.0));
  }
  md += page_rows(rows, resolved["baseline"].get<std::string>());
  md += "\nCommunication: a worker's mean wall seconds receiving jobs and sending results (servers) or in "
        "the rounds' collectives, barrier waits included (round methods). Model violations: jobs whose compute "
        "alone took longer than the model's time (and by how much in all).\n";
  write_file(root / "sim_vs_real.md", md);
  std::printf("%s\n", md.c_str());
}

}  // namespace hgrun
