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

/// `text` as a gnuplot single-quoted string: every ' doubled, nothing else changed (gnuplot
/// substitutes nothing in single quotes: no `backquote` command, no @macro, no backslash
/// escape). Throws config_error at `key` for a control character (a newline would end the
/// string and start a command), whatever the config check let through.
std::string gnuplot_string(const std::string& text, const std::string& key);

/// Charts made with gnuplot in `out`: the target metric and the loss against time for all
/// methods, per-worker utilisation, staleness histograms. Their data and script go to
/// `out`/plot-data; user text reaches the script only through gnuplot_string(), with the
/// terminal noenhanced (^ _ @ { } drawn as they are). Each PNG is written under a temporary
/// name, checked whole and renamed. Returns the PNG paths written (empty when gnuplot is
/// missing; `why` then says so). Throws output_error naming the file when a write or gnuplot
/// fails, config_error for text gnuplot_string() refuses.
std::vector<std::filesystem::path> make_plots(const json& config, const std::vector<method_result>& results,
                                              const std::filesystem::path& out, std::string& why);

}  // namespace hgrun
