// heterograd-run's stages (stages.hpp): units, child processes and their progress files, the
// progress display, and the folders of a stage.
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

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include "files.hpp"
#include "folders.hpp"
#include "resume.hpp"
#include "run.hpp"
#include "stages.hpp"

extern char** environ;

namespace hgrun {

namespace {

using clock_type = std::chrono::steady_clock;

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

}  // namespace

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

// Before MPI is initialised, the launcher's environment says which rank this is (errors are
// printed by rank 0 only).
int launcher_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
    if (const char* r = std::getenv(v)) return std::atoi(r);
  return 0;
}

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

std::vector<unit> make_units(const json& cfg, const std::vector<std::uint64_t>& seeds, const std::filesystem::path& root) {
  std::vector<unit> units;
  for (auto s : seeds)
    for (std::size_t m = 0; m < cfg["methods"].size(); ++m) {
      const auto base = seeds.size() == 1 ? root : root / ("seed-" + std::to_string(s));
      units.push_back({m, s, base / slug(cfg["methods"][m]["label"])});
    }
  return units;
}

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

namespace {

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
std::vector<std::size_t> units_to_run(const stage& st, const stage_options& o, display& disp) {
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
void record_failure(stage& st, const stage_options& o, std::size_t i, const std::string& why) {
  st.failed[i] = why.empty() ? std::string("failed") : why;
  if (o.writer) write_file(st.units[i].dir / "failed.txt", st.failed[i] + "\n");
}

// Runs the units `todo` in this process, one after the other.
void run_in_process(stage& st, const stage_options& o, bool tolerate, const std::vector<std::size_t>& todo,
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
int child_ended(stage& st, const stage_options& o, bool tolerate, std::size_t i, int rc) {
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
int run_in_processes(stage& st, const stage_options& o, bool tolerate, const std::vector<std::size_t>& todo,
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

}  // namespace

// Runs a stage's units (in parallel processes with --jobs), skipping those --resume finds done.
// `tolerate`: a unit that fails is recorded in st.failed (a sweep's diverging setting is a
// result) instead of failing the run.
void run_stage(stage& st, const stage_options& o, bool tolerate) {
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

}  // namespace hgrun
