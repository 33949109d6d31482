// heterograd-run: runs a named experiment or a JSON configuration, compares its methods on a
// simulated heterogeneous cluster, and writes CSV / JSON of every metric, the resolved
// configuration (seed, git revision), charts (tools/plot/heterograd_plot.py) and Markdown
// tables; with a sweep, each method's best setting first (tuning), then the evaluation seeds.
//
//   heterograd-run demo                       the headline demo
//   heterograd-run e1_rescaled --tiny         a named experiment at test size
//   heterograd-run my.json --set workers.count=32 --seeds 1,2,3 --jobs 2
//   heterograd-run demo --resume              continue killed runs from their checkpoints
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "config.hpp"
#include "stages.hpp"
#include "files.hpp"
#include "folders.hpp"
#include "report.hpp"
#include "resume.hpp"
#include "run.hpp"
#include "sweep.hpp"
#include "heterograd/sim/worker_time.hpp"


namespace {

using namespace hgrun;

// Splits a --sweep list "0.1,0.01,[1,2]" at the commas outside brackets and quotes.
std::vector<std::string> split_values(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  bool quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '\\' && i + 1 < text.size()) cur += text[i++];
      else if (c == '"') quoted = false;
    } else if (c == '"') {
      quoted = true;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
      continue;
    }
    cur += c;
  }
  out.push_back(cur);
  return out;
}


// The command line.
struct cli {
  std::string experiment, out, methods, seeds_text, child_dir;
  std::string schema;  // "markdown" or "json": --schema, --schema=json
  std::vector<std::string> sets, sweeps;
  std::uint64_t seed = 0, halt_after = 0, checkpoint_every = 0;
  unsigned jobs = 1;
  bool list = false, tiny = false, resume = false, check = false, no_plots = false, quiet = false;
  bool child = false;
  std::size_t child_method = 0;
  long parent_pid = 0;
};

void add_options(CLI::App& app, cli& c) {
  app.add_option("experiment", c.experiment, "named experiment (examples/experiments/<name>.json) or a JSON file");
  app.add_flag("--list", c.list, "list the named experiments");
  app.add_flag("--schema{markdown}", c.schema,
               "print every configuration key: Markdown, or --schema=json a JSON Schema (draft 2020-12)");
  app.add_option("--set", c.sets, "override a key: --set workers.count=32 --set methods[1].threshold=8")
      ->allow_extra_args(false);
  app.add_option("--seed", c.seed, "seed (overrides the config's)");
  app.add_option("--sweep", c.sweeps,
                 "tune a method key over values for every method: --sweep optimizer.lr=0.1,0.03,0.01 (as the "
                 "config's \"sweep\"; repeatable)")
      ->allow_extra_args(false);
  app.add_option("--seeds", c.seeds_text, "several seeds, comma-separated: one run each, in parallel with --jobs");
  app.add_option("--out", c.out, "output directory (overrides the config's)");
  app.add_option("--methods", c.methods, "run only these methods (comma-separated labels)");
  app.add_option("--jobs,-j", c.jobs, "methods/seeds run in parallel processes")->check(CLI::Range(1u, 256u));
  app.add_flag("--tiny", c.tiny, "apply the experiment's 'tiny' overrides (test size)");
  app.add_flag("--resume", c.resume, "continue from the checkpoints in the output directory; skip finished runs");
  app.add_option("--checkpoint-every", c.checkpoint_every,
                 "evaluations between checkpoints (same as --set checkpoint_every=N)");
  app.add_flag("--check", c.check, "check the configuration, print it resolved, run nothing");
  app.add_flag("--no-plots", c.no_plots,
               "skip the charts (runs.json is written; tools/plot/heterograd_plot.py draws them later)");
  app.add_flag("--quiet,-q", c.quiet, "no progress output");
  app.add_flag("--child", c.child, "(internal) run one method")->group("");
  app.add_option("--method-index", c.child_method, "(internal)")->group("");
  app.add_option("--dir", c.child_dir, "(internal)")->group("");
  app.add_option("--parent-pid", c.parent_pid, "(internal) the parent's pid: the child ends when it does")->group("");
  app.add_option("--halt-after", c.halt_after, "stop as if killed after N evaluations (tests)")->group("");
}

// --list, --schema, or no experiment named: what to print and the exit code (none: a run).
std::optional<int> informational(const cli& c) {
  if (c.list) {
    for (const auto& n : list_experiments()) {
      const json j = load_experiment(n);
      std::printf("%-22s %s\n", n.c_str(), j.value("title", "").c_str());
    }
    return 0;
  }
  if (c.schema == "json") {
    std::printf("%s\n", schema_json().dump(2).c_str());
    return 0;
  }
  if (c.schema == "markdown") {
    std::printf("%s", schema_markdown().c_str());
    return 0;
  }
  if (!c.schema.empty()) {
    std::fprintf(stderr, "heterograd-run: --schema takes markdown or json, got '%s'\n", c.schema.c_str());
    return 2;
  }
  if (c.experiment.empty()) {
    std::fprintf(stderr, "heterograd-run: name an experiment or a JSON file (--list shows the named ones)\n");
    return 2;
  }
  return std::nullopt;
}

// --sweep key=v1,v2,...: the values into the configuration's "sweep".
void add_sweep(json& raw, const std::string& s) {
  const auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0)
    throw config_error("--sweep", "expected key=value,value,... (a method key such as optimizer.lr), got \"" + s + "\"");
  json values = json::array();
  for (const auto& v : split_values(s.substr(eq + 1))) {
    json one = json::object();
    apply_override(one, "v=" + v);  // a value as --set reads it: JSON when it is JSON, else text
    values.push_back(one["v"]);
  }
  if (!raw.contains("sweep") || !raw["sweep"].is_object()) raw["sweep"] = json::object();
  raw["sweep"][s.substr(0, eq)] = values;
}

// The experiment as named, with the command line's overrides, before resolve().
json raw_experiment(const cli& c) {
  json raw = load_experiment(c.experiment);
  if (!raw.is_object()) throw config_error("", "expected a JSON object (an experiment), got " + std::string(raw.type_name()));
  if (c.tiny) {
    if (!raw.contains("tiny") || !raw["tiny"].is_object())
      throw config_error("tiny", "--tiny needs a \"tiny\" object of overrides in " + c.experiment + ", which has none");
    raw.merge_patch(json(raw["tiny"]));
  }
  for (const auto& s : c.sets) apply_override(raw, s);
  for (const auto& s : c.sweeps) add_sweep(raw, s);
  if (c.checkpoint_every) raw["checkpoint_every"] = c.checkpoint_every;
  if (c.seed) raw["seed"] = c.seed;
  if (!c.out.empty()) raw["output"] = c.out;
  // --methods selects before the checks, so that the methods left out do not have to pass
  // the checks that depend on the others (e.g. runtime "threads" for a sim-only method).
  if (!c.methods.empty()) select_methods(raw, c.methods);
  return raw;
}

// A run's plan: the resolved configuration, the sweep's grids (tuning first when one has more
// than one setting) and the configuration of its tuning runs, the evaluation and tuning seeds.
struct plan {
  json raw, cfg, tuning_cfg;
  std::vector<sweep_grid> grids;
  std::vector<expanded_method> expanded;
  run_seeds seeds;
  bool sweeping = false;
};

void check_sweep_allowed(const json& cfg) {
  if (cfg["runtime"] == "mpi")
    throw config_error("sweep", "not available with runtime \"mpi\" (every rank would have to agree on the "
                                "chosen settings); tune on runtime \"sim\" or \"threads\" and set the chosen values");
  for (std::size_t m = 0; m < cfg["methods"].size(); ++m)
    if (slug(cfg["methods"][m]["label"]) == "tuning")
      throw config_error("methods[" + std::to_string(m) + "].label",
                         "expected a label whose folder name is not \"tuning\" (a sweep's tuning runs are in "
                         "the tuning folder beside the methods' folders)");
}

plan make_plan(const cli& c, json& seen) {
  plan p;
  p.raw = raw_experiment(c);
  p.cfg = resolve(p.raw);
  seen = p.cfg;
  p.grids = sweep_grids(p.raw);
  p.sweeping = std::any_of(p.grids.begin(), p.grids.end(), [](const sweep_grid& g) { return g.size() > 1; });
  // Evaluation seeds: --seeds, else the configuration's seeds, else its seed; tuning seeds.
  p.seeds = seeds_of(p.cfg, p.grids, c.seeds_text.empty() ? std::vector<std::uint64_t>{} : parse_seeds(c.seeds_text));
  if (p.sweeping) {
    check_sweep_allowed(p.cfg);
    p.tuning_cfg = resolve_expanded(expand_methods(p.raw, p.grids, p.expanded), p.raw, p.grids, p.expanded);
    preflight(p.tuning_cfg);
  } else if (std::any_of(p.grids.begin(), p.grids.end(), [](const sweep_grid& g) { return !g.keys.empty(); })) {
    // One value per key: a plain setting.
    p.cfg = resolve(apply_settings(p.raw, p.grids, std::vector<std::size_t>(p.grids.size(), 0)));
    seen = p.cfg;
  }
  preflight(p.cfg);
  return p;
}

// runtime "mpi": the session, checked against the ranks the methods need; "threads" with
// --jobs: a note when the worker threads outnumber the cores.
void start_runtime(const plan& p, cli& c, int& argc, char**& argv, std::optional<mpi_session>& mpi, int& rank) {
  const std::string runtime = p.cfg["runtime"];
  if (runtime == "mpi") {
    if (c.jobs > 1) throw config_error("--jobs", "expected 1 with runtime \"mpi\" (mpirun starts the processes)");
    if (c.resume && p.cfg["clock"] != "real")
      throw config_error("--resume", "not available with runtime \"mpi\" and clock \"virtual\" (no checkpoints; "
                                     "clock \"real\" has them)");
    const int need = mpi_ranks_needed(p.cfg);
    mpi.emplace(argc, argv);
    rank = mpi->rank();
    if (mpi->size() != need) throw mpi_ranks_mismatch(p.cfg, mpi->size());
    c.quiet = c.quiet || rank != 0;
  }
  if (runtime == "threads" && c.jobs > 1) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const std::size_t threads = c.jobs * experiment_of(p.cfg).workers.count;
    if (threads > cores && !c.quiet)
      std::fprintf(stderr,
                   "heterograd-run: note: --jobs %u with runtime \"threads\" runs up to %zu worker threads "
                   "on %u cores (each job runs workers.count of them); --jobs 1 avoids the oversubscription\n",
                   c.jobs, threads, cores);
  }
}

// A sweep's choice: tuning/summary.json, and each method's chosen setting as JSON and text.
struct tuning_choice {
  json summary = nullptr;
  std::vector<std::size_t> chosen;
  std::vector<json> chosen_json;
  std::vector<std::string> chosen_text;
};

// The summaries of the tuning runs of one setting (null where a seed's run failed, with why).
std::vector<json> setting_summaries(const stage& tune, std::size_t k, json& failures) {
  std::vector<json> sums;
  for (std::size_t i = 0; i < tune.units.size(); ++i) {
    if (tune.units[i].method != k) continue;
    if (!tune.failed[i].empty()) {
      sums.push_back(nullptr);
      failures.push_back({{"seed", tune.units[i].seed}, {"why", tune.failed[i].substr(0, 300)}});
    } else {
      sums.push_back(json::parse(read_file(tune.units[i].dir / "summary.json")));
    }
  }
  return sums;
}

// Method m's candidates, scored, and the index of the best.
json method_candidates(const plan& p, const stage& tune, std::size_t m, std::size_t& best) {
  const std::string criterion = p.cfg["tuning"]["criterion"];
  const experiment settings = experiment_of(p.cfg);
  std::vector<candidate_score> scores;
  json cands = json::array();
  for (std::size_t s = 0; s < p.grids[m].size(); ++s) {
    std::size_t k = 0;
    while (k < p.expanded.size() && !(p.expanded[k].method == m && p.expanded[k].setting == s)) ++k;
    json failures = json::array();
    scores.push_back(score_of(setting_summaries(tune, k, failures), settings.target.metric));
    const auto& c = scores.back();
    cands.push_back({{"setting", setting_json(p.grids[m], s)}, {"label", p.tuning_cfg["methods"][k]["label"]},
                     {"score", score_json(c, criterion)}, {"reached", c.reached}, {"seeds", c.seeds},
                     {"failed", c.failed}, {"time_to_target", c.time.to_json()}, {"crossed", c.crossed},
                     {"first_crossing", c.first.to_json()}, {"final", c.final_.to_json()}, {"failures", failures}});
  }
  best = best_candidate(scores, criterion, settings.target.below);
  return cands;
}

tuning_choice choose_settings(const plan& p, const stage& tune) {
  tuning_choice t;
  const auto& grids = p.grids;
  t.chosen.assign(grids.size(), 0);
  t.chosen_json.assign(p.cfg["methods"].size(), nullptr);
  t.summary = {{"criterion", p.cfg["tuning"]["criterion"]}, {"seeds", p.seeds.tuning}, {"keys", json::array()},
               {"methods", json::array()}};
  std::set<std::string> all_keys;
  for (std::size_t m = 0; m < grids.size(); ++m) {
    json cands = method_candidates(p, tune, m, t.chosen[m]);
    for (const auto& k : grids[m].keys) all_keys.insert(k);
    t.chosen_json[m] = grids[m].keys.empty() ? json(nullptr) : setting_json(grids[m], t.chosen[m]);
    t.chosen_text.push_back(grids[m].keys.empty() ? "—" : setting_text(grids[m], t.chosen[m]));
    t.summary["methods"].push_back({{"label", p.cfg["methods"][m]["label"]}, {"keys", grids[m].keys},
                                    {"chosen", t.chosen_json[m]}, {"chosen_index", t.chosen[m]},
                                    {"candidates", cands}});
  }
  t.summary["keys"] = std::vector<std::string>(all_keys.begin(), all_keys.end());
  write_file(tune.root / "summary.json", t.summary.dump(2) + "\n");
  write_file(tune.root / "table.md", tuning_table(p.cfg, t.summary));
  return t;
}

// table.md: one seed's table, or the seeds' summary and then each seed's; and the tuning table.
std::string results_tables(const json& cfg, const std::vector<std::uint64_t>& seeds,
                           const std::vector<std::vector<method_result>>& runs, const tuning_choice& t, bool sweeping) {
  std::string tables, head = "## " + cfg["name"].get<std::string>() +
                             (cfg["title"].get<std::string>().empty() ? "" : ": " + cfg["title"].get<std::string>());
  const std::string paper =
      cfg["paper"].get<std::string>().empty() ? "" : "Paper: " + cfg["paper"].get<std::string>() + "\n\n";
  if (seeds.size() > 1) {
    std::string seeds_list;
    for (auto s : seeds) seeds_list += (seeds_list.empty() ? "" : ", ") + std::to_string(s);
    tables += head + " (" + std::to_string(seeds.size()) + " seeds: " + seeds_list + ")\n\n" + paper +
              seeds_table(cfg, runs, t.chosen_text) + "\n";
  }
  for (auto s : seeds) {
    std::vector<method_result> one;
    for (const auto& rs : runs)
      for (const auto& r : rs)
        if (r.seed == s) one.push_back(r);
    tables += (seeds.size() > 1 ? "### seed " + std::to_string(s) + "\n\n"
                                : head + " (seed " + std::to_string(s) + ")\n\n" + paper) +
              markdown_table(cfg, one, t.chosen_text) + "\n";
  }
  if (sweeping) tables += tuning_table(cfg, t.summary);
  return tables;
}

// The evaluation stage's outputs: sim_vs_real.md (clock real), table.md, summary.json,
// runs.json, the charts, and where they are.
void write_results(const json& cfg, const stage& eval, const tuning_choice& t, bool sweeping, bool no_plots) {
  const auto& root = eval.root;
  if (eval.resolved["clock"] == "real") write_sim_vs_real(eval.resolved, eval.units, root);
  const auto runs = stage_results(eval);
  const std::string tables = results_tables(cfg, eval.seeds, runs, t, sweeping);
  write_file(root / "table.md", tables);
  write_file(root / "summary.json", seeds_summary(cfg, runs, t.chosen_json).dump(2) + "\n");
  write_file(root / "runs.json", plot_manifest(cfg, runs, root, t.summary).dump(2) + "\n");
  std::printf("%s", tables.c_str());
  if (!no_plots) {
    std::string why;
    const auto charts = make_plots(root, why);
    if (!why.empty()) std::printf("(%s)\n", why.c_str());
    for (const auto& chart : charts) std::printf("chart: %s\n", chart.c_str());
  }
  // The folder that holds config.json and table.md (with several seeds, each seed's runs are
  // in its seed-N folder below it; a sweep's tuning runs in tuning/).
  std::printf("results: %s (config.json, table.md, summary.json, %s%s)\n\n", root.c_str(),
              eval.seeds.size() > 1 ? "seed-*/" : "*/evaluations.csv, */summary.json", sweeping ? ", tuning/" : "");
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    throw std::runtime_error(std::string("cannot write the standard output: ") + std::strerror(errno));
}

std::string command_line(int argc, char** argv) {
  std::string c;
  for (int i = 0; i < argc; ++i) c += (i ? " " : "") + std::string(argv[i]);
  return c;
}

int halted_exit(std::uint64_t halt_after) {
  std::fprintf(stderr, "heterograd-run: halted after %llu evaluations (resume with --resume)\n",
               static_cast<unsigned long long>(halt_after));
  return 3;
}

// A run after its plan: the tuning stage (a sweep) and its choice, then the evaluation stage
// and its outputs. heterograd-run writes only into folders it made or found empty
// (folders.hpp): a user's folder is refused before anything in it is touched.
int run_plan(plan& p, const cli& c, const stage_options& opts, const std::string& command, json& seen) {
  const std::filesystem::path root = p.cfg["output"].get<std::string>();
  const std::string revision = opts.writer ? git_revision() : "";
  stage eval{"", p.cfg, root, p.seeds.evaluation, make_units(p.cfg, p.seeds.evaluation, root), {}, 0};
  stage tune{"tuning", p.tuning_cfg, root / "tuning", p.seeds.tuning, {}, {}, 0};
  if (p.sweeping) tune.units = make_units(p.tuning_cfg, p.seeds.tuning, tune.root);
  if (opts.writer) {
    check_stage_folders(eval);
    if (p.sweeping) check_stage_folders(tune);
    claim_folder(root);
    if (!c.resume) clear_earlier_outputs(root);
  }
  tuning_choice t;
  t.chosen_json.assign(p.cfg["methods"].size(), nullptr);
  if (p.sweeping) {
    tune.resolved["resolved"] = {{"seeds", p.seeds.tuning}, {"git_revision", revision}, {"command", command}};
    run_stage(tune, opts, true);
    if (!opts.writer) return 0;
    if (tune.halts) return halted_exit(c.halt_after);
    t = choose_settings(p, tune);
    p.cfg = resolve(apply_settings(p.raw, p.grids, t.chosen));
    seen = p.cfg;
    // (as --methods does: the baseline stays among the methods run)
    if (!c.methods.empty() && !std::any_of(p.cfg["methods"].begin(), p.cfg["methods"].end(),
                                           [&](const json& m) { return m["label"] == p.cfg["baseline"]; }))
      p.cfg["baseline"] = p.cfg["methods"][0]["label"];
    eval.resolved = p.cfg;
  }
  eval.resolved["resolved"] = {{"seeds", p.seeds.evaluation}, {"git_revision", revision}, {"command", command}};
  if (p.sweeping) eval.resolved["resolved"]["tuning"] = t.summary;
  run_stage(eval, opts, false);
  if (!opts.writer) return 0;  // MPI ranks other than 0: rank 0 writes the table and charts
  if (eval.halts) return halted_exit(c.halt_after);
  write_results(p.cfg, eval, t, p.sweeping, c.no_plots);
  return 0;
}

// Everything after the command line is parsed; `mpi`, `rank` and `seen` (the resolved
// configuration, for errors the library raises while it runs) are main's, for its handlers.
int run_command(cli& c, int argc, char** argv, std::optional<mpi_session>& mpi, int& rank, json& seen) {
  if (c.child && !follow_parent(c.parent_pid)) return 1;  // the parent is gone already
  if (c.child) return child_main(c.experiment, c.child_method, c.seed, c.child_dir, c.resume, c.halt_after);
  if (auto code = informational(c)) return *code;
  plan p = make_plan(c, seen);
  if (c.check) {
    std::printf("%s\n", p.cfg.dump(2).c_str());
    if (p.sweeping)
      std::printf("(a sweep of %zu runs first: %zu settings x %zu tuning seed(s))\n",
                  p.tuning_cfg["methods"].size() * p.seeds.tuning.size(), p.tuning_cfg["methods"].size(),
                  p.seeds.tuning.size());
    return 0;
  }
  const std::string command = command_line(argc, argv);
  start_runtime(p, c, argc, argv, mpi, rank);
  const stage_options opts{c.jobs, c.resume, c.quiet, rank == 0, c.halt_after, experiment_of(p.cfg).target.metric};
  return run_plan(p, c, opts, command, seen);
}

}  // namespace

int main(int argc, char** argv) {
  // A file size limit then fails the write (EFBIG, an output_error naming the file) instead of
  // killing the process before it can say which file.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"heterograd-run: heterogeneous-training experiments on a simulated cluster"};
  cli c;
  add_options(app, c);
  CLI11_PARSE(app, argc, argv);
  std::optional<mpi_session> mpi;
  int rank = launcher_rank();
  json seen;  // the resolved configuration, for errors the library raises while it runs
  try {
    return run_command(c, argc, argv, mpi, rank, seen);
  } catch (const run_failed&) {
    return 1;
  } catch (const config_error& e) {
    // Every rank meets a configuration error alike: rank 0 says it, all end normally.
    if (rank == 0) std::fprintf(stderr, "heterograd-run: %s\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    // A library's argument check that preflight() did not foresee: said in the config's terms.
    std::fprintf(stderr, "heterograd-run: %s\n", from_library_error(e, seen, -1, "<config>").what());
    if (mpi) mpi->abort(2);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "heterograd-run: error%s: %s\n",
                 mpi ? (" on rank " + std::to_string(rank)).c_str() : "", e.what());
    if (mpi) mpi->abort(1);
    return 1;
  }
}
