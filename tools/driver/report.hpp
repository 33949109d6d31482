#pragma once
// What heterograd-run writes after the runs: the Markdown table and the gnuplot charts.

#include <filesystem>
#include <string>
#include <vector>

#include "config.hpp"

namespace hgrun {

/// One finished method: its summary.json and its directory (evaluations.csv, workers.csv,
/// staleness.csv).
struct method_result {
  json summary;
  std::filesystem::path dir;
};

/// The Markdown table: method, time to the target, final value of the target metric, speed-up
/// against the baseline (time to target of the baseline / the method's).
std::string markdown_table(const json& config, const std::vector<method_result>& results);

/// Rows of a CSV written by sim::recorder ('#' lines skipped, header kept as row 0).
std::vector<std::vector<std::string>> read_csv(const std::filesystem::path& p);

/// Charts made with gnuplot in `out`: the target metric and the loss against time for all
/// methods, per-worker utilisation, staleness histograms. Returns the PNG paths written
/// (empty when gnuplot is missing; `why` then says so).
std::vector<std::filesystem::path> make_plots(const json& config, const std::vector<method_result>& results,
                                              const std::filesystem::path& out, std::string& why);

}  // namespace hgrun
