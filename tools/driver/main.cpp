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
#ifdef HG_HAS_MPI
#include <mpi.h>
#endif

#include "config.hpp"
#include "files.hpp"
#include "folders.hpp"
#include "report.hpp"
#include "resume.hpp"
#include "run.hpp"
#include "sweep.hpp"
#include "heterograd/sim/worker_time.hpp"

extern char** environ;

namespace {

using namespace hgrun;
using clock_type = std::chrono::steady_clock;

std::string git_revision() {
  std::string out;
  const std::string cmd = std::string("git -C '") + HG_SOURCE_DIR + "' rev-parse HEAD 2>/dev/null";
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[128];
    while (std::fgets(buf, sizeof buf, f)) out += buf;
    pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  if (out.empty()) return "unknown";
  const std::string dirty = std::string("git -C '") + HG_SOURCE_DIR + "' diff --quiet HEAD 2>/dev/null";
  if (std::system(dirty.c_str()) != 0) out += "-dirty";
  return out;
}

std::string human(double x) {
  char buf[32];
  if (x >= 1e6) std::snprintf(buf, sizeof buf, "%.1fM", x / 1e6);
  else if (x >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", x / 1e3);
  else std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

// Progress: a bar per running method on a terminal, plain periodic lines otherwise.
// Progress of a run's units (method x seed), one row each in the order of the configuration.
// On a terminal the rows are redrawn in place under a header "k of N done, about T left";
// without one, each unit prints a line when it starts, every 10 s, and once when it is done.
class display {
 public:
  /// `keys`: the units' row names in order; `jobs`: how many run at once (the estimate).
  display(bool quiet, std::string metric, std::vector<std::string> keys, unsigned jobs)
      : quiet_(quiet), tty_(isatty(2) != 0), metric_(std::move(metric)), jobs_(std::max(1u, jobs)) {
    for (auto& k : keys) rows_.push_back(row{std::move(k), {}, false, false, {}});
  }
  /// Unit i's progress (its label replaced by the unit's row name).
  void update(std::size_t i, progress_info p) {
    std::lock_guard lock(mu_);
    if (quiet_ || i >= rows_.size()) return;
    auto& s = rows_[i];
    if (s.done_seen) return;  // a unit is done once (a child's last progress.json is read again)
    p.label = s.key;
    const bool first = !s.seen;
    s.info = p;
    s.seen = true;
    s.done_seen = p.done;
    const auto now = clock_type::now();
    if (tty_) {
      if (!p.done && !first && now - last_draw_ < std::chrono::milliseconds(200)) return;
      last_draw_ = now;
      draw();
    } else if (first || p.done || now - s.printed > std::chrono::seconds(10)) {
      s.printed = now;
      std::fprintf(stderr, "%s%s\n", line(p).c_str(), p.done ? ("  (" + header() + ")").c_str() : "");
    }
  }
  /// Unit i was done before this run (--resume skips it): counted done, not drawn.
  void skipped(std::size_t i) {
    std::lock_guard lock(mu_);
    if (i < rows_.size()) rows_[i].done_seen = true;
  }
  void finish() {
    std::lock_guard lock(mu_);
    if (tty_ && !quiet_ && drawn_) std::fprintf(stderr, "\n");
    drawn_ = 0;
  }

 private:
  struct row {
    std::string key;
    progress_info info;
    bool seen = false, done_seen = false;
    clock_type::time_point printed{};
  };
  // "k of N done, about T left": a running unit's time left from its pace (wall / fraction),
  // a unit not started yet at the mean of those estimates, the total shared by the jobs.
  std::string header() const {
    std::size_t done = 0, waiting = 0, paced = 0;
    double left = 0, total = 0;
    for (const auto& r : rows_) {
      if (r.done_seen) {
        ++done;
        if (r.seen) {  // (a unit skipped by --resume has no pace)
          total += r.info.wall_seconds;
          ++paced;
        }
      } else if (r.seen && r.info.fraction > 0.02) {
        const double est = r.info.wall_seconds / r.info.fraction;
        left += std::max(0.0, est - r.info.wall_seconds);
        total += est;
        ++paced;
      } else {
        ++waiting;
      }
    }
    std::string h = std::to_string(done) + " of " + std::to_string(rows_.size()) + " done";
    if (done < rows_.size() && paced > 0) {
      left = (left + static_cast<double>(waiting) * total / static_cast<double>(paced)) / jobs_;
      h += ", about " + human(left) + " s left";
    }
    return h;
  }
  std::string line(const progress_info& p) const {
    char buf[256];
    const double evs = p.wall_seconds > 0 ? static_cast<double>(p.events) / p.wall_seconds : 0.0;
    std::snprintf(buf, sizeof buf, "%-24.24s %3.0f%%  virtual %-9s wall %6.1fs  best %s %s  %s ev/s%s",
                  p.label.c_str(), 100 * p.fraction, human(p.virtual_time).c_str(), p.wall_seconds,
                  metric_.c_str(), p.has_best ? std::to_string(p.best).substr(0, 6).c_str() : "-",
                  human(evs).c_str(), p.done ? "  done" : "");
    return buf;
  }
  void draw() {
    if (drawn_) std::fprintf(stderr, "\033[%zuA", drawn_);
    std::fprintf(stderr, "\r\033[K%s\n", header().c_str());
    std::size_t n = 1;
    for (const auto& r : rows_) {
      if (!r.seen) continue;
      const int width = 20;
      const int fill = static_cast<int>(std::lround(r.info.fraction * width));
      std::string bar = "[" + std::string(fill, '#') + std::string(width - fill, '.') + "] ";
      std::fprintf(stderr, "\r\033[K%s%s\n", bar.c_str(), line(r.info).c_str());
      ++n;
    }
    drawn_ = n;
  }
  bool quiet_, tty_;
  std::string metric_;
  double jobs_;
  std::mutex mu_;
  std::vector<row> rows_;
  std::size_t drawn_ = 0;
  clock_type::time_point last_draw_{};
};

// A child process writes its progress here; the parent reads it.
void write_progress(const std::filesystem::path& dir, const progress_info& p) {
  json j{{"label", p.label}, {"virtual_time", p.virtual_time}, {"fraction", p.fraction}, {"best", p.best},
         {"has_best", p.has_best}, {"events", p.events}, {"wall_seconds", p.wall_seconds}, {"done", p.done}};
  write_file(dir / "progress.json", j.dump());
}

std::optional<progress_info> read_progress(const std::filesystem::path& dir) {
  json j;
  try {
    j = json::parse(read_file(dir / "progress.json"), nullptr, false);  // (a regular file only: a FIFO would block)
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (j.is_discarded()) return std::nullopt;
  progress_info p;
  p.label = j.value("label", "");
  p.virtual_time = j.value("virtual_time", 0.0);
  p.fraction = j.value("fraction", 0.0);
  p.best = j.value("best", 0.0);
  p.has_best = j.value("has_best", false);
  p.events = j.value("events", std::uint64_t{0});
  p.wall_seconds = j.value("wall_seconds", 0.0);
  p.done = j.value("done", false);
  return p;
}

// runtime "mpi": MPI is initialised here only (sim and threads never touch it). Thread
// support: the asynchronous server runs on a thread beside rank 0's evaluation loop, so MPI
// calls come from a thread other than main (one at a time, at least).
class mpi_session {
 public:
  mpi_session(int& argc, char**& argv) {
#ifdef HG_HAS_MPI
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    active_ = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (provided < MPI_THREAD_SERIALIZED)
      throw std::runtime_error("runtime \"mpi\" needs MPI_THREAD_SERIALIZED or better; this MPI provides level " +
                               std::to_string(provided));
#else
    (void)argc;
    (void)argv;
    throw config_error("runtime", "expected \"sim\" or \"threads\": this heterograd-run was built without MPI");
#endif
  }
  mpi_session(const mpi_session&) = delete;
  mpi_session& operator=(const mpi_session&) = delete;
  ~mpi_session() {
#ifdef HG_HAS_MPI
    if (active_) MPI_Finalize();
#endif
  }
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Ends every rank (a failure on one rank would leave the others waiting).
  void abort(int code) {
#ifdef HG_HAS_MPI
    if (active_) MPI_Abort(MPI_COMM_WORLD, code);
#endif
    (void)code;
  }

 private:
  bool active_ = false;
  int rank_ = 0, size_ = 1;
};

// Before MPI is initialised, the launcher's environment says which rank this is (errors are
// printed by rank 0 only).
int launcher_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
    if (const char* r = std::getenv(v)) return std::atoi(r);
  return 0;
}

struct unit {
  std::size_t method;
  std::uint64_t seed;
  std::filesystem::path dir;
};

// Some run of a stage failed (each failure was reported as it happened).
struct run_failed {};

// A child of --jobs N dies with its parent: a parent killed with SIGKILL cannot stop its
// children, so the kernel does (the parent-death signal). The signal is armed here, after exec,
// so a parent that died before this line is seen by its pid no longer being our parent.
bool follow_parent(long parent) {
  if (parent <= 0) return true;  // started by hand
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return false;
  return ::getppid() == static_cast<pid_t>(parent);
}

int child_main(const std::string& config_path, std::size_t method, std::uint64_t seed, const std::string& dir,
               bool resume, std::uint64_t halt_after) {
#ifdef _OPENMP
  // Parallelism comes from processes here: OpenMP teams in every process would fight over the
  // cores (their spinning threads slow everyone down).
  omp_set_num_threads(1);
#endif
  std::ifstream in(config_path);
  const json cfg = json::parse(in);
  run_request req{cfg, method, seed, dir, resume, halt_after, {}};
  auto last = clock_type::now() - std::chrono::seconds(1);
  req.progress = [&](const progress_info& p) {
    const auto now = clock_type::now();
    if (p.done || now - last > std::chrono::milliseconds(400)) {
      last = now;
      write_progress(dir, p);
    }
  };
  try {
    run_method(req);
  } catch (const halted&) {
    return 3;
  }
  return 0;
}

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

// clock "real": the simulator's prediction of each real run, and the comparison. The same
// configuration on the simulated cluster (runtime sim, clock virtual) predicts the wall time
// to the target: its virtual time x real_scale. Without real_scale (the workers' speeds are
// whatever the cores give, e.g. with workers.placement), the prediction's worker-time model is
// the real run's trace of measured jobs (real_jobs.csv), or, when it lacks a worker, fixed at
// each worker's measured seconds per gradient. The predictions go to <method>/predicted/;
// sim_vs_real.md has one row per run.
void write_sim_vs_real(const json& resolved, const std::vector<unit>& units, const std::filesystem::path& root) {
  const double scale = resolved.value("real_scale", 0.0);
  const double unit_s = scale > 0 ? scale : 1.0;
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
  struct row {
    std::string label;
    std::uint64_t seed;
    json predicted, measured;
    std::string rest, cells;
  };
  std::vector<row> rows;
  for (const auto& u : units) {
    const json real = json::parse(read_file(u.dir / "summary.json"));
    json sim = resolved;
    sim["runtime"] = "sim";
    sim["clock"] = "virtual";
    sim.erase("real_scale");
    sim["workers"]["placement"] = json::array();
    if (scale <= 0) {
      // A worker that finished no gradient has no measured speed (0 here): a fixed model
      // with a zero job time would make the prediction an endless run of instant jobs.
      const auto spg = real["extra"]["real"]["seconds_per_gradient"].get<std::vector<double>>();
      const auto slow = std::find_if(spg.begin(), spg.end(), [](double x) { return !(x > 0); });
      if (slow != spg.end()) {
        md << "| " << real["label"].get<std::string>() << " | " << u.seed << " | no prediction: worker "
           << (slow - spg.begin()) << " finished no gradient, so its speed was not measured |||||||||||\n";
        continue;
      }
      json& t = sim["workers"]["time"];
      // The run's own trace when it measured every worker's jobs (real_jobs.csv; under MPI
      // rank 0 measured only its own rounds): each simulated job takes the duration of its
      // worker's last measured job that started before it; else each worker's mean.
      json trace = json::array();
      std::vector<char> seen(spg.size(), 0);
      try {
        std::ifstream in(u.dir / "real_jobs.csv");
        for (const auto& r : heterograd::sim::trace_replay::parse_csv(in)) {
          trace.push_back({{"worker", r.worker}, {"start", r.start}, {"duration", std::max(r.duration, 1e-9)}});
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
    run_request req{sim, u.method, u.seed, u.dir / "predicted", false, 0, {}, true};
    const json pred = run_method(req);
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
    rows.push_back({real["label"].get<std::string>(), u.seed, p_t, m_t, rest.str(),
                    seconds_text(p_t) + " | " + seconds_text(m_t) + " | " + ratio});
  }
  // Speed-ups against the baseline method of the same seed (time to target of the baseline /
  // the method's), measured and predicted.
  auto speedup = [](const json& base, const json& t) -> std::string {
    if (!base.is_number() || !t.is_number() || t.get<double>() <= 0) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2fx", base.get<double>() / t.get<double>());
    return buf;
  };
  for (const auto& r : rows) {
    const row* b = nullptr;
    for (const auto& x : rows)
      if (x.seed == r.seed && x.label == resolved["baseline"].get<std::string>()) b = &x;
    md << "| " << r.label << " | " << r.seed << " | " << r.cells << " | "
       << (b ? speedup(b->predicted, r.predicted) : "-") << " | " << (b ? speedup(b->measured, r.measured) : "-")
       << " | " << r.rest << "\n";
  }
  md << "\nCommunication: a worker's mean wall seconds receiving jobs and sending results (servers) or in "
        "the rounds' collectives, barrier waits included (round methods). Model violations: jobs whose compute "
        "alone took longer than the model's time (and by how much in all).\n";
  write_file(root / "sim_vs_real.md", md.str());
  std::printf("%s\n", md.str().c_str());
}

// Units of work of one configuration: (method, seed), each in its own folder below `root`
// (root/<method> with one seed, root/seed-N/<method> with several).
std::vector<unit> make_units(const json& cfg, const std::vector<std::uint64_t>& seeds, const std::filesystem::path& root) {
  std::vector<unit> units;
  for (auto s : seeds)
    for (std::size_t m = 0; m < cfg["methods"].size(); ++m) {
      const auto base = seeds.size() == 1 ? root : root / ("seed-" + std::to_string(s));
      units.push_back({m, s, base / slug(cfg["methods"][m]["label"])});
    }
  return units;
}

// What every stage of a run shares.
struct run_options {
  unsigned jobs = 1;
  bool resume = false, quiet = false, writer = true;
  std::uint64_t halt_after = 0;
  std::string metric;
};

// A stage of a run: the tuning runs of a sweep, or the runs the table reports. `resolved` is
// what its runs read (its config.json); `failed[i]` says why unit i failed ("" when it did not).
struct stage {
  std::string name;
  json resolved;
  std::filesystem::path root;
  std::vector<std::uint64_t> seeds;
  std::vector<unit> units;
  std::vector<std::string> failed;
  int halts = 0;
};

// Every folder of a stage is checked before any is touched: a user's folder among them stops
// the run with nothing deleted.
void check_stage_folders(const stage& st) {
  check_folder(st.root);
  for (const auto& u : st.units) {
    check_folder(u.dir.parent_path());
    check_folder(u.dir);
  }
}

// A fresh run empties what an earlier run left in its folder: heterograd-run's own subfolders
// (they carry the marker), the files it writes there and the charts that its charts.json lists
// (listed_charts: plain files with the plotting program's names). Anything else stays: the
// user's own .png, .pdf and .svg files, and every link (only the name of a plain file or of a
// folder of heterograd-run's is removed, never what a link points to).
void clear_earlier_outputs(const std::filesystem::path& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!is_our_folder(root)) return;
  static const std::set<std::string> ours{"config.json", "table.md",     "summary.json", "runs.json",
                                          "charts.json", "charts.log",   "sim_vs_real.md"};
  std::vector<fs::path> gone = listed_charts(root);
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const auto type = e.symlink_status(ec).type();
    const bool folder = type == fs::file_type::directory && is_our_folder(e.path());
    if (folder || (type == fs::file_type::regular && ours.count(e.path().filename().string())))
      gone.push_back(e.path());
  }
  if (ec) throw output_error(root, "cannot list the previous run's outputs: " + ec.message());
  for (const auto& p : gone) {
    fs::remove_all(p, ec);
    if (ec) throw output_error(p, "cannot remove the previous run's output: " + ec.message());
  }
}

// Starts a unit of a stage as a child process of --jobs N: `args` without a shell, its
// standard error to <unit>/log.txt, a new file (an earlier one, or a link planted in its
// place, is replaced, never written through or truncated).
pid_t start_child(std::vector<std::string>& args, const std::filesystem::path& dir) {
  std::vector<char*> av;
  for (auto& a : args) av.push_back(a.data());
  av.push_back(nullptr);
  const int log = create_fresh(dir / "log.txt");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, log, 2);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, av[0], &fa, nullptr, av.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(log);
  if (rc != 0) throw std::runtime_error("cannot start " + args[0] + ": " + std::strerror(rc));
  return pid;
}

// --resume continues the run recorded in config.json, never another one: the results already
// there would be reported as this configuration's.
void check_resumed_config(const stage& st) {
  const auto cfg_path = st.root / "config.json";
  if (!std::filesystem::exists(cfg_path)) return;
  const json saved = json::parse(read_file(cfg_path), nullptr, false);
  if (saved.is_discarded() || !saved.is_object())
    throw std::runtime_error("cannot resume: " + cfg_path.string() +
                             " is not a JSON object (damaged); run without --resume to start again");
  const json before = result_inputs(saved), now = result_inputs(st.resolved);
  if (before != now)
    throw config_error("--resume", "the configuration differs from the one in " + cfg_path.string() + " (" +
                                       differences_text(before, now) +
                                       "); resume with the same configuration, or run without --resume "
                                       "(another --out keeps these results)");
}

// The units of a stage left to run, each in its folder (claimed; emptied on a fresh run):
// --resume skips those whose summary.json is there (checked: it is what the table reports).
std::vector<std::size_t> units_to_run(const stage& st, const run_options& o, display& disp) {
  std::vector<std::size_t> todo;
  for (std::size_t i = 0; i < st.units.size(); ++i) {
    // A fresh run deletes a method folder only when it carries heterograd-run's marker.
    if (o.writer) o.resume ? claim_folder(st.units[i].dir) : reset_folder(st.units[i].dir);
    const auto sp = st.units[i].dir / "summary.json";
    if (o.resume && std::filesystem::exists(sp)) {
      const json s = json::parse(read_file(sp), nullptr, false);
      if (s.is_discarded() || !s.is_object() || !s.contains("trace_hash") || !s.contains("final"))
        throw std::runtime_error("cannot resume: " + sp.string() +
                                 " from the earlier run is damaged (truncated or not a summary); delete it "
                                 "to run that method again");
      disp.skipped(i);
      continue;
    }
    todo.push_back(i);
  }
  return todo;
}

// Unit i of a tolerant stage failed: why, in st.failed and its failed.txt.
void record_failure(stage& st, const run_options& o, std::size_t i, const std::string& why) {
  st.failed[i] = why.empty() ? std::string("failed") : why;
  if (o.writer) write_file(st.units[i].dir / "failed.txt", st.failed[i] + "\n");
}

// Runs the units `todo` in this process, one after the other.
void run_in_process(stage& st, const run_options& o, bool tolerate, const std::vector<std::size_t>& todo,
                    display& disp) {
  for (auto i : todo) {
    // `resolved`, as the children of --jobs N read it from config.json: a checkpoint's
    // digest (the code revision included) is the same either way.
    run_request req{st.resolved, st.units[i].method, st.units[i].seed, st.units[i].dir, o.resume, o.halt_after,
                    [&disp, i](const progress_info& p) { disp.update(i, p); }, o.writer};
    try {
      run_method(req);
    } catch (const halted&) {
      ++st.halts;
    } catch (const config_error&) {
      throw;
    } catch (const std::exception& e) {
      if (!tolerate) throw;
      record_failure(st, o, i, e.what());
    }
  }
}

// Unit i's child process ended with `rc`: a halt is counted, a failure recorded (tolerated)
// or reported with its log.txt. Returns 1 for a failure that fails the run, else 0.
int child_ended(stage& st, const run_options& o, bool tolerate, std::size_t i, int rc) {
  if (rc == 3) ++st.halts;
  if (rc == 0 || rc == 3) return 0;
  std::string why;
  try {
    why = read_file(st.units[i].dir / "log.txt");
  } catch (const std::exception& e) {
    why = e.what();
  }
  while (!why.empty() && why.back() == '\n') why.pop_back();
  // A configuration error is the user's, whatever the stage (exit status 2).
  if (tolerate && rc != 2) {
    record_failure(st, o, i, why);
    return 0;
  }
  std::fprintf(stderr, "heterograd-run: %s (seed %llu) failed:\n%s\n",
               st.resolved["methods"][st.units[i].method]["label"].get<std::string>().c_str(),
               static_cast<unsigned long long>(st.units[i].seed), why.c_str());
  return 1;
}

// Runs the units `todo` in child processes, --jobs at a time; each reports through its
// progress.json. Returns how many failed the run.
int run_in_processes(stage& st, const run_options& o, bool tolerate, const std::vector<std::size_t>& todo,
                     display& disp) {
  const auto exe = std::filesystem::read_symlink("/proc/self/exe");
  std::map<pid_t, std::size_t> running;
  std::size_t next = 0;
  int failures = 0;
  while (next < todo.size() || !running.empty()) {
    while (next < todo.size() && running.size() < o.jobs) {
      const unit& u = st.units[todo[next]];
      std::vector<std::string> args{exe.string(), (st.root / "config.json").string(), "--child", "--method-index",
                                    std::to_string(u.method), "--seed", std::to_string(u.seed), "--dir",
                                    u.dir.string(), "--parent-pid", std::to_string(::getpid())};
      if (o.resume) args.push_back("--resume");
      if (o.halt_after) {
        args.push_back("--halt-after");
        args.push_back(std::to_string(o.halt_after));
      }
      running[start_child(args, u.dir)] = todo[next++];
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    for (auto it = running.begin(); it != running.end();) {
      const std::size_t i = it->second;
      if (auto p = read_progress(st.units[i].dir)) disp.update(i, *p);
      int status = 0;
      if (waitpid(it->first, &status, WNOHANG) != it->first) {
        ++it;
        continue;
      }
      if (auto p = read_progress(st.units[i].dir)) disp.update(i, *p);
      failures += child_ended(st, o, tolerate, i, WIFEXITED(status) ? WEXITSTATUS(status) : 128);
      it = running.erase(it);
    }
  }
  return failures;
}

// Runs a stage's units (in parallel processes with --jobs), skipping those --resume finds done.
// `tolerate`: a unit that fails is recorded in st.failed (a sweep's diverging setting is a
// result) instead of failing the run.
void run_stage(stage& st, const run_options& o, bool tolerate) {
  if (o.writer) {
    claim_folder(st.root);
    check_stage_folders(st);
  }
  if (o.resume && o.writer) check_resumed_config(st);
  if (o.writer && st.seeds.size() > 1)
    for (auto s : st.seeds) claim_folder(st.root / ("seed-" + std::to_string(s)));
  const json& cfg = st.resolved;
  std::vector<std::string> keys;  // the progress rows: a method's label, and its seed when several
  for (const auto& u : st.units)
    keys.push_back(cfg["methods"][u.method]["label"].get<std::string>() +
                   (st.seeds.size() > 1 ? " seed " + std::to_string(u.seed) : ""));
  display disp(o.quiet, o.metric, keys, o.jobs);
  if (!o.quiet)
    std::fprintf(stderr, "heterograd-run: %s%s (%zu method(s) x %zu seed(s), %u job(s)) -> %s\n",
                 cfg["name"].get<std::string>().c_str(), st.name.empty() ? "" : (", " + st.name).c_str(),
                 cfg["methods"].size(), st.seeds.size(), o.jobs, st.root.c_str());
  st.failed.assign(st.units.size(), "");
  const std::vector<std::size_t> todo = units_to_run(st, o, disp);
  if (o.writer) write_file(st.root / "config.json", st.resolved.dump(2) + "\n");
  int failures = 0;
  if (o.jobs == 1) run_in_process(st, o, tolerate, todo, disp);
  else failures = run_in_processes(st, o, tolerate, todo, disp);
  disp.finish();
  if (failures) throw run_failed{};
}

// The summaries of a stage's runs, grouped per method (in the configuration's order) with
// their seeds; a failed unit has none.
std::vector<std::vector<method_result>> stage_results(const stage& st) {
  std::vector<std::vector<method_result>> by(st.resolved["methods"].size());
  for (std::size_t i = 0; i < st.units.size(); ++i) {
    const auto& u = st.units[i];
    if (!st.failed[i].empty()) continue;
    by[u.method].push_back({json::parse(read_file(u.dir / "summary.json")), u.dir, u.seed});
  }
  return by;
}

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

}  // namespace

int main(int argc, char** argv) {
  // A file size limit then fails the write (EFBIG, an output_error naming the file) instead of
  // killing the process before it can say which file.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"heterograd-run: heterogeneous-training experiments on a simulated cluster"};
  std::string experiment, out, methods, seeds_text;
  std::vector<std::string> sets, sweeps;
  std::uint64_t seed = 0, halt_after = 0, checkpoint_every = 0;
  unsigned jobs = 1;
  std::string schema;  // "markdown" or "json": --schema, --schema=json
  bool list = false, tiny = false, resume = false, check = false, no_plots = false, quiet = false;
  bool child = false;
  std::size_t child_method = 0;
  std::string child_dir;
  long parent_pid = 0;
  app.add_option("experiment", experiment, "named experiment (examples/experiments/<name>.json) or a JSON file");
  app.add_flag("--list", list, "list the named experiments");
  app.add_flag("--schema{markdown}", schema,
               "print every configuration key: Markdown, or --schema=json a JSON Schema (draft 2020-12)");
  app.add_option("--set", sets, "override a key: --set workers.count=32 --set methods[1].threshold=8")->allow_extra_args(false);
  app.add_option("--seed", seed, "seed (overrides the config's)");
  app.add_option("--sweep", sweeps,
                 "tune a method key over values for every method: --sweep optimizer.lr=0.1,0.03,0.01 (as the "
                 "config's \"sweep\"; repeatable)")
      ->allow_extra_args(false);
  app.add_option("--seeds", seeds_text, "several seeds, comma-separated: one run each, in parallel with --jobs");
  app.add_option("--out", out, "output directory (overrides the config's)");
  app.add_option("--methods", methods, "run only these methods (comma-separated labels)");
  app.add_option("--jobs,-j", jobs, "methods/seeds run in parallel processes")->check(CLI::Range(1u, 256u));
  app.add_flag("--tiny", tiny, "apply the experiment's 'tiny' overrides (test size)");
  app.add_flag("--resume", resume, "continue from the checkpoints in the output directory; skip finished runs");
  app.add_option("--checkpoint-every", checkpoint_every, "evaluations between checkpoints (same as --set checkpoint_every=N)");
  app.add_flag("--check", check, "check the configuration, print it resolved, run nothing");
  app.add_flag("--no-plots", no_plots, "skip the charts (runs.json is written; tools/plot/heterograd_plot.py draws them later)");
  app.add_flag("--quiet,-q", quiet, "no progress output");
  app.add_flag("--child", child, "(internal) run one method")->group("");
  app.add_option("--method-index", child_method, "(internal)")->group("");
  app.add_option("--dir", child_dir, "(internal)")->group("");
  app.add_option("--parent-pid", parent_pid, "(internal) the parent's pid: the child ends when it does")->group("");
  app.add_option("--halt-after", halt_after, "stop as if killed after N evaluations (tests)")->group("");
  CLI11_PARSE(app, argc, argv);

  std::optional<mpi_session> mpi;
  int rank = launcher_rank();
  json seen;  // the resolved configuration, for errors the library raises while it runs
  try {
    if (child && !follow_parent(parent_pid)) return 1;  // the parent is gone already
    if (child) return child_main(experiment, child_method, seed, child_dir, resume, halt_after);
    if (list) {
      for (const auto& n : list_experiments()) {
        const json j = load_experiment(n);
        std::printf("%-22s %s\n", n.c_str(), j.value("title", "").c_str());
      }
      return 0;
    }
    if (!schema.empty()) {
      if (schema == "json") {
        std::printf("%s\n", schema_json().dump(2).c_str());
      } else if (schema == "markdown") {
        std::printf("%s", schema_markdown().c_str());
      } else {
        std::fprintf(stderr, "heterograd-run: --schema takes markdown or json, got '%s'\n", schema.c_str());
        return 2;
      }
      return 0;
    }
    if (experiment.empty()) {
      std::fprintf(stderr, "heterograd-run: name an experiment or a JSON file (--list shows the named ones)\n");
      return 2;
    }
    json raw = load_experiment(experiment);
    if (!raw.is_object()) throw config_error("", "expected a JSON object (an experiment), got " + std::string(raw.type_name()));
    if (tiny) {
      if (!raw.is_object() || !raw.contains("tiny") || !raw["tiny"].is_object())
        throw config_error("tiny", "--tiny needs a \"tiny\" object of overrides in " + experiment +
                                       ", which has none");
      raw.merge_patch(json(raw["tiny"]));
    }
    for (const auto& s : sets) apply_override(raw, s);
    for (const auto& s : sweeps) {
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
    if (checkpoint_every) raw["checkpoint_every"] = checkpoint_every;
    if (seed) raw["seed"] = seed;
    if (!out.empty()) raw["output"] = out;
    // --methods selects before the checks, so that the methods left out do not have to pass
    // the checks that depend on the others (e.g. runtime "threads" for a sim-only method).
    if (!methods.empty()) select_methods(raw, methods);
    json cfg = resolve(raw);
    seen = cfg;
    const hgrun::experiment settings = experiment_of(cfg);
    // A sweep: each method's grid. With more than one setting somewhere, tuning runs first.
    const std::vector<sweep_grid> grids = sweep_grids(raw);
    const bool sweeping = std::any_of(grids.begin(), grids.end(), [](const sweep_grid& g) { return g.size() > 1; });
    // Evaluation seeds: --seeds, else the configuration's seeds, else its seed; tuning seeds.
    const run_seeds all_seeds =
        seeds_of(cfg, grids, seeds_text.empty() ? std::vector<std::uint64_t>{} : parse_seeds(seeds_text));
    const std::vector<std::uint64_t>& seeds = all_seeds.evaluation;
    json tuning_cfg;
    std::vector<expanded_method> expanded;
    const std::vector<std::uint64_t>& tuning_seeds = all_seeds.tuning;
    if (sweeping) {
      if (settings.runtime == "mpi")
        throw config_error("sweep", "not available with runtime \"mpi\" (every rank would have to agree on the "
                                    "chosen settings); tune on runtime \"sim\" or \"threads\" and set the chosen "
                                    "values");
      for (std::size_t m = 0; m < cfg["methods"].size(); ++m)
        if (slug(cfg["methods"][m]["label"]) == "tuning")
          throw config_error("methods[" + std::to_string(m) + "].label",
                             "expected a label whose folder name is not \"tuning\" (a sweep's tuning runs are in "
                             "the tuning folder beside the methods' folders)");
      tuning_cfg = resolve_expanded(expand_methods(raw, grids, expanded), raw, grids, expanded);
      preflight(tuning_cfg);
    } else if (std::any_of(grids.begin(), grids.end(), [](const sweep_grid& g) { return !g.keys.empty(); })) {
      // One value per key: a plain setting.
      cfg = resolve(apply_settings(raw, grids, std::vector<std::size_t>(grids.size(), 0)));
      seen = cfg;
    }
    preflight(cfg);
    if (check) {
      std::printf("%s\n", cfg.dump(2).c_str());
      if (sweeping)
        std::printf("(a sweep of %zu runs first: %zu settings x %zu tuning seed(s))\n",
                    tuning_cfg["methods"].size() * tuning_seeds.size(), tuning_cfg["methods"].size(),
                    tuning_seeds.size());
      return 0;
    }
    const std::string& runtime = settings.runtime;
    if (runtime == "mpi") {
      if (jobs > 1) throw config_error("--jobs", "expected 1 with runtime \"mpi\" (mpirun starts the processes)");
      if (resume && cfg["clock"] != "real")
        throw config_error("--resume", "not available with runtime \"mpi\" and clock \"virtual\" (no checkpoints; "
                                       "clock \"real\" has them)");
      const int need = mpi_ranks_needed(cfg);
      mpi.emplace(argc, argv);
      rank = mpi->rank();
      if (mpi->size() != need) throw mpi_ranks_mismatch(cfg, mpi->size());
      quiet = quiet || rank != 0;
    }
    if (runtime == "threads" && jobs > 1) {
      const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
      const std::size_t threads = jobs * settings.workers.count;
      if (threads > cores && !quiet)
        std::fprintf(stderr,
                     "heterograd-run: note: --jobs %u with runtime \"threads\" runs up to %zu worker threads "
                     "on %u cores (each job runs workers.count of them); --jobs 1 avoids the oversubscription\n",
                     jobs, threads, cores);
    }
    const bool writer = rank == 0;
    const run_options opts{jobs, resume, quiet, writer, halt_after, settings.target.metric};
    const std::string command = [&] {
      std::string c;
      for (int i = 0; i < argc; ++i) c += (i ? " " : "") + std::string(argv[i]);
      return c;
    }();
    const std::string revision = writer ? git_revision() : "";

    const std::filesystem::path root = cfg["output"].get<std::string>();
    // heterograd-run writes only into folders it made or found empty (folders.hpp): a user's
    // folder is refused before anything in it is touched.
    stage eval{"", cfg, root, seeds, make_units(cfg, seeds, root), {}, 0};
    stage tune{"tuning", tuning_cfg, root / "tuning", tuning_seeds, {}, {}, 0};
    if (sweeping) tune.units = make_units(tuning_cfg, tuning_seeds, tune.root);
    if (writer) {
      check_stage_folders(eval);
      if (sweeping) check_stage_folders(tune);
      claim_folder(root);
      if (!resume) clear_earlier_outputs(root);
    }
    const auto halted_exit = [&] {
      std::fprintf(stderr, "heterograd-run: halted after %llu evaluations (resume with --resume)\n",
                   static_cast<unsigned long long>(halt_after));
      return 3;
    };
    // Tuning: every setting on the tuning seeds; each method keeps its best.
    json tuning = nullptr;
    std::vector<json> chosen_json(cfg["methods"].size());
    std::vector<std::string> chosen_text;
    if (sweeping) {
      tune.resolved["resolved"] = {{"seeds", tuning_seeds}, {"git_revision", revision}, {"command", command}};
      run_stage(tune, opts, true);
      if (!writer) return 0;
      if (tune.halts) return halted_exit();
      const std::string criterion = cfg["tuning"]["criterion"];
      const bool below = settings.target.below;
      std::vector<std::size_t> chosen(grids.size(), 0);
      tuning = {{"criterion", criterion}, {"seeds", tuning_seeds}, {"keys", json::array()}, {"methods", json::array()}};
      std::set<std::string> all_keys;
      for (std::size_t m = 0; m < grids.size(); ++m) {
        std::vector<candidate_score> scores;
        json cands = json::array();
        for (std::size_t s = 0; s < grids[m].size(); ++s) {
          std::size_t k = 0;
          while (k < expanded.size() && !(expanded[k].method == m && expanded[k].setting == s)) ++k;
          std::vector<json> sums;
          json failures = json::array();
          for (std::size_t i = 0; i < tune.units.size(); ++i) {
            if (tune.units[i].method != k) continue;
            if (!tune.failed[i].empty()) {
              sums.push_back(nullptr);
              failures.push_back({{"seed", tune.units[i].seed}, {"why", tune.failed[i].substr(0, 300)}});
            } else {
              sums.push_back(json::parse(read_file(tune.units[i].dir / "summary.json")));
            }
          }
          scores.push_back(score_of(sums, settings.target.metric));
          const auto& c = scores.back();
          cands.push_back({{"setting", setting_json(grids[m], s)},
                           {"label", tuning_cfg["methods"][k]["label"]},
                           {"score", score_json(c, criterion)},
                           {"reached", c.reached},
                           {"seeds", c.seeds},
                           {"failed", c.failed},
                           {"time_to_target", c.time.to_json()},
                           {"crossed", c.crossed},
                           {"first_crossing", c.first.to_json()},
                           {"final", c.final_.to_json()},
                           {"failures", failures}});
        }
        chosen[m] = best_candidate(scores, criterion, below);
        for (const auto& k : grids[m].keys) all_keys.insert(k);
        chosen_json[m] = grids[m].keys.empty() ? json(nullptr) : setting_json(grids[m], chosen[m]);
        chosen_text.push_back(grids[m].keys.empty() ? "—" : setting_text(grids[m], chosen[m]));
        tuning["methods"].push_back({{"label", cfg["methods"][m]["label"]},
                                     {"keys", grids[m].keys},
                                     {"chosen", chosen_json[m]},
                                     {"chosen_index", chosen[m]},
                                     {"candidates", cands}});
      }
      tuning["keys"] = std::vector<std::string>(all_keys.begin(), all_keys.end());
      write_file(tune.root / "summary.json", tuning.dump(2) + "\n");
      write_file(tune.root / "table.md", tuning_table(cfg, tuning));
      cfg = resolve(apply_settings(raw, grids, chosen));
      seen = cfg;
      if (!methods.empty()) {  // (as above: the base's baseline choice)
        if (!std::any_of(cfg["methods"].begin(), cfg["methods"].end(),
                         [&](const json& m) { return m["label"] == cfg["baseline"]; }))
          cfg["baseline"] = cfg["methods"][0]["label"];
      }
      eval.resolved = cfg;
    }
    eval.resolved["resolved"] = {{"seeds", seeds}, {"git_revision", revision}, {"command", command}};
    if (sweeping) eval.resolved["resolved"]["tuning"] = tuning;
    run_stage(eval, opts, false);
    if (!writer) return 0;  // MPI ranks other than 0: rank 0 writes the table and charts
    if (eval.halts) return halted_exit();
    const json& resolved = eval.resolved;
    const auto& units = eval.units;

    if (resolved["clock"] == "real") write_sim_vs_real(resolved, units, root);

    // The table: one seed's, or the seeds' summary and then each seed's; summary.json, runs.json, the charts.
    const auto runs = stage_results(eval);
    std::string tables, head = "## " + cfg["name"].get<std::string>() +
                               (cfg["title"].get<std::string>().empty() ? "" : ": " + cfg["title"].get<std::string>());
    std::string paper = cfg["paper"].get<std::string>().empty() ? "" : "Paper: " + cfg["paper"].get<std::string>() + "\n\n";
    if (seeds.size() > 1) {
      std::string seeds_list;
      for (auto s : seeds) seeds_list += (seeds_list.empty() ? "" : ", ") + std::to_string(s);
      tables += head + " (" + std::to_string(seeds.size()) + " seeds: " + seeds_list + ")\n\n" + paper +
                seeds_table(cfg, runs, chosen_text) + "\n";
    }
    for (auto s : seeds) {
      std::vector<method_result> one;
      for (const auto& rs : runs)
        for (const auto& r : rs)
          if (r.seed == s) one.push_back(r);
      tables += (seeds.size() > 1 ? "### seed " + std::to_string(s) + "\n\n"
                                  : head + " (seed " + std::to_string(s) + ")\n\n" + paper) +
                markdown_table(cfg, one, chosen_text) + "\n";
    }
    if (sweeping) tables += tuning_table(cfg, tuning);
    write_file(root / "table.md", tables);
    write_file(root / "summary.json", seeds_summary(cfg, runs, chosen_json).dump(2) + "\n");
    write_file(root / "runs.json", plot_manifest(cfg, runs, root, tuning).dump(2) + "\n");
    std::printf("%s", tables.c_str());
    if (!no_plots) {
      std::string why;
      const auto charts = make_plots(root, why);
      if (!why.empty()) std::printf("(%s)\n", why.c_str());
      for (const auto& p : charts) std::printf("chart: %s\n", p.c_str());
    }
    // The folder that holds config.json and table.md (with several seeds, each seed's runs are
    // in its seed-N folder below it; a sweep's tuning runs in tuning/).
    std::printf("results: %s (config.json, table.md, summary.json, %s%s)\n\n", root.c_str(),
                seeds.size() > 1 ? "seed-*/" : "*/evaluations.csv, */summary.json",
                sweeping ? ", tuning/" : "");
    if (std::fflush(stdout) != 0 || std::ferror(stdout))
      throw std::runtime_error(std::string("cannot write the standard output: ") + std::strerror(errno));
    return 0;
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
