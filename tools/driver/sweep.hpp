#pragma once
// Sweeps and seeds: the researcher's protocol. A sweep is a grid over keys of a method (the
// experiment's "sweep" for every method, a method's own "sweep" adding or replacing keys);
// tuning runs every setting on the tuning seeds, keeps each method's best by a named criterion,
// and the table's runs then use fresh evaluation seeds. Seeds are summarised by mean, standard
// deviation and a 95% confidence interval of the mean (Student t).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config.hpp"

namespace hgrun {

/// Most settings one method's grid may have (the product of its keys' value counts).
inline constexpr std::size_t max_sweep_settings = 10000;
/// Most values one key of a sweep may list.
inline constexpr std::size_t max_sweep_values = 1000;
/// Most runs one invocation may start: the methods x the evaluation seeds, and with a sweep
/// every setting of every method's grid x the tuning seeds. Each run's work is bounded
/// (max_gradients, max_evaluations: config.hpp); this bounds the invocation's, over all its
/// seeds and sweep points.
inline constexpr std::size_t max_runs = 10000;

/// One method's grid: the swept keys (paths inside a method object, "optimizer.lr") and
/// every setting of the cartesian product, values in the keys' order (alphabetical: a JSON
/// object's keys are), the first key slowest.
struct sweep_grid {
  std::vector<std::string> keys;
  std::vector<std::vector<json>> settings;  ///< empty keys: one empty setting
  std::size_t size() const { return settings.size(); }
};

/// The grid of every method of the raw configuration `raw` (after --tiny and --set). A key's
/// values are an array of 1 to max_sweep_values JSON values, or {"from", "to", "points",
/// "scale": "linear" | "log"} (points evenly spaced, log ones rounded to 4 significant
/// digits). Throws config_error naming "sweep.<key>" or "methods[i].sweep.<key>" for a bad
/// form; whether a value suits its key is resolve()'s check of the expanded methods.
std::vector<sweep_grid> sweep_grids(const json& raw);

/// "optimizer.lr=0.1, threshold=8": a setting as text (the keys in the grid's order).
std::string setting_text(const sweep_grid& g, std::size_t setting);
/// A setting as a JSON object {"optimizer.lr": 0.1, ...}.
json setting_json(const sweep_grid& g, std::size_t setting);

/// One expanded method of a tuning run: which method and which setting of its grid.
struct expanded_method {
  std::size_t method, setting;
};

/// `raw` with each method replaced by one method per setting of its grid (label "<label>
/// [<setting>]", the setting's values written over the method's keys) and every "sweep" key
/// removed, the baseline dropped. `which` receives the origin of each expanded method.
json expand_methods(const json& raw, const std::vector<sweep_grid>& grids, std::vector<expanded_method>& which);

/// `raw` with method i's keys set to setting chosen[i] of its grid, every "sweep" key removed
/// from the methods (the experiment's "sweep" stays, a record of what was swept).
json apply_settings(const json& raw, const std::vector<sweep_grid>& grids, const std::vector<std::size_t>& chosen);

/// resolve() of an expanded configuration; a config_error at "methods[k]..." is said of the
/// sweep (method, setting and key) that made method k.
json resolve_expanded(const json& expanded, const json& raw, const std::vector<sweep_grid>& grids,
                      const std::vector<expanded_method>& which);

/// --seeds: comma-separated integers in [0, max_seed] (config.hpp), each once. Throws
/// config_error naming "--seeds", the value and the rule.
std::vector<std::uint64_t> parse_seeds(const std::string& text);

/// The seeds of an invocation's runs.
struct run_seeds {
  std::vector<std::uint64_t> evaluation;
  std::vector<std::uint64_t> tuning;  ///< empty without a sweep
};

/// The seeds of resolved configuration `c` (its methods those --methods kept) with the grids
/// of sweep_grids(): evaluation seeds `cli` (--seeds) when given, else c's "seeds", else its
/// "seed"; with a sweep (a grid of more than one setting) tuning seeds c's "tuning.seeds", else
/// the largest evaluation seed + 1, disjoint from the evaluation seeds. Every seed is at most
/// max_seed, a derived one included (none wraps), and the runs are at most max_runs. Throws
/// config_error naming the key (or --seeds), the value and the rule.
run_seeds seeds_of(const json& c, const std::vector<sweep_grid>& grids, const std::vector<std::uint64_t>& cli);

/// The Student t quantile t_{0.975, df} (exact to 1e-6 for df <= 30 by table, Cornish-Fisher
/// above); df >= 1.
double t975(std::size_t df);

/// Mean, sample standard deviation and the half-width of a 95% confidence interval of the
/// mean (t_{0.975, n-1} sd / sqrt n) of finite values; n = 0 gives nulls, n = 1 sd and ci95 null.
struct seed_stats {
  std::size_t n = 0;
  double mean = 0, sd = 0, ci95 = 0;
  json to_json() const;
};
seed_stats stats_of(const std::vector<double>& xs);

/// How a sweep picks a setting, from the tuning runs' summaries (summary.json).
/// time_to_target: the most seeds reaching the target, then the smallest mean time to it (over
/// the seeds that reached it); when no setting reaches it, the best mean final value of the
/// target metric. final: the best mean final value of the target metric. A run that failed
/// (diverged) or ended with a non-finite metric ranks below every finite one. Ties go to the
/// earlier setting of the grid. Reaching is the summaries' time_to_target, the sustained time
/// (target.window), not the first crossing: a step size whose noisy curve touches the target
/// early and falls back would win on first crossings, and the evaluation seeds would then
/// report the sustained time of a setting chosen for a lucky evaluation.
struct candidate_score {
  std::size_t seeds = 0, reached = 0, failed = 0;
  std::size_t crossed = 0;  ///< seeds with a first crossing
  seed_stats time;    ///< of the seeds that reached the target
  seed_stats first;   ///< first crossings, of the seeds that crossed it (shown, not ranked)
  seed_stats final_;  ///< of the final target metric (finite values)
  std::size_t nonfinite = 0;
};
/// Scores one setting from its runs: the summaries (null for a failed run).
candidate_score score_of(const std::vector<json>& summaries, const std::string& metric);
/// The index of the best candidate under `criterion` ("time_to_target" or "final").
std::size_t best_candidate(const std::vector<candidate_score>& c, const std::string& criterion, bool below);
/// The score shown for a candidate under `criterion` (mean time or mean final metric).
json score_json(const candidate_score& c, const std::string& criterion);

}  // namespace hgrun
