#pragma once
// What heterograd-run writes after the runs: the Markdown tables (one seed, or several seeds
// summarised), summary.json of the seeds, the charts' manifest (runs.json) and the charts,
// which the plotting program tools/plot/heterograd_plot.py draws from the CSVs.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "config.hpp"

namespace hgrun {

/// One finished run of a method: its summary.json, its directory (evaluations.csv,
/// workers.csv, staleness.csv) and its seed.
struct method_result {
  json summary;
  std::filesystem::path dir;
  std::uint64_t seed = 0;
};

/// The Markdown table of one seed: method, time to the target, final value of the target
/// metric, speed-up against the baseline (time to target of the baseline / the method's).
/// `settings` (one per method, may be empty): a sweep's chosen setting, as a column.
std::string markdown_table(const json& config, const std::vector<method_result>& results,
                           const std::vector<std::string>& settings = {});

/// Several seeds, per method (runs[m] = method m's runs, one per seed): the count reaching the
/// target, mean +- 95% interval (and sd) of the time to the target over the seeds that reached
/// it and of the final target metric, and the speed-up of mean times against the baseline.
std::string seeds_table(const json& config, const std::vector<std::vector<method_result>>& runs,
                        const std::vector<std::string>& settings = {});

/// summary.json of a run's folder: per method, its runs' count, how many reached the target,
/// the statistics (n, mean, sd, ci95) of the time to the target and of every final metric,
/// each seed's values, and (when tuned) the chosen setting.
json seeds_summary(const json& config, const std::vector<std::vector<method_result>>& runs,
                   const std::vector<json>& settings = {});

/// runs.json, what the plotting program reads: the target, the time axis, the outages, each
/// method's runs as folders relative to `root`, and a sweep's candidates (`tuning`, or null).
json plot_manifest(const json& config, const std::vector<std::vector<method_result>>& runs,
                   const std::filesystem::path& root, const json& tuning);

/// A sweep's tuning as Markdown: per method, each setting's runs reaching the target, its score
/// under the criterion (mean +- 95% interval) and final metric, the chosen one marked.
std::string tuning_table(const json& config, const json& tuning);

/// Rows of a CSV written by sim::recorder ('#' lines skipped, header kept as row 0).
std::vector<std::vector<std::string>> read_csv(const std::filesystem::path& p);

/// The plotting program: HG_PLOT_SCRIPT, else beside an installed heterograd-run
/// (<prefix>/share/heterograd/heterograd_plot.py), else the source tree's tools/plot.
std::filesystem::path plot_script();

/// How long the plotting program may run, in seconds: HG_PLOT_TIMEOUT, else 600. Throws
/// std::runtime_error naming the variable and its value unless it is a number > 0.
double plot_timeout();

/// Draws the charts of the run folder `root` (its runs.json) with the plotting program, run
/// without a shell by a Python 3 that has matplotlib (HG_PYTHON, else python3, else
/// /usr/bin/python3), its messages in root/charts.log (a new file). Returns the charts
/// written; when no such Python is found, none, and `why` says so. Throws output_error naming
/// the chart (or the folder) when the program fails, with its messages; and naming charts.log
/// when it runs past plot_timeout() (it is killed with its process group).
std::vector<std::filesystem::path> make_plots(const std::filesystem::path& root, std::string& why);

/// Whether `file` is a name the plotting program gives a chart: <chart>.png, .pdf or .svg, for
/// <chart> among tools/plot/heterograd_plot.py's CHART_NAMES.
bool is_chart_name(const std::string& file);

/// The charts that the charts.json in `root` (the plotting program's list of what it drew)
/// names and that a fresh run may delete: plain files in `root` (no link, no folder) whose
/// names are chart names (is_chart_name: no path, nothing outside `root`). A charts.json that
/// is missing, a link, over 1 MiB or not such a list names none.
std::vector<std::filesystem::path> listed_charts(const std::filesystem::path& root);

}  // namespace hgrun
