// The evaluation loop, checkpoints and summaries a run shares, and the checks before a run
// (ranks, threads, the work and memory it asks for).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "files.hpp"
#include "heterograd/data/idx.hpp"
#include "heterograd/runtime/report.hpp"
#include "heterograd/sim/network.hpp"
#include "problems.hpp"
#include "resume.hpp"
#include "registry.hpp"
#include "run.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace hgrun {

namespace hg = heterograd;
namespace sim = heterograd::sim;

namespace {

// The run's times to its target (runtime::target_times, which the checkpoint carries), fed the
// problem's metric column at every evaluation.
struct target_tracker {
  std::optional<heterograd::runtime::target_rule> rule;  // none: the problem has no such metric
  heterograd::runtime::target_times times;
  void observe(double t, const std::vector<double>& v) {
    if (rule) times.observe(*rule, t, v[rule->metric]);
  }
  template <class Archive>
  void serialize(Archive& ar) {
    times.serialize(ar);
  }
};

}  // namespace

std::optional<heterograd::runtime::target_rule> target_rule_of(const context& ctx) {
  const auto names = ctx.prob.metrics();
  const target_settings& t = ctx.exp.target;
  const auto it = std::find(names.begin(), names.end(), t.metric);
  if (it == names.end()) return std::nullopt;
  return heterograd::runtime::target_rule{static_cast<std::size_t>(it - names.begin()), t.value, t.below, t.window};
}

void record_target(context& ctx, const heterograd::runtime::target_times& t) {
  auto or_null = [](const std::optional<double>& x) { return x ? json(*x) : json(nullptr); };
  ctx.extra["time_to_target"] = or_null(t.sustained);
  ctx.extra["first_crossing"] = or_null(t.first);
  ctx.extra["best"] = or_null(t.best);
}

namespace {

// A checkpoint records what determines its run's results (resume.hpp's unit_inputs): the same
// whether the run was started with --jobs 1 (the configuration main resolved) or in a child of
// --jobs N (the same configuration read back from config.json), and whatever the command line.
std::string checkpoint_digest(const context& ctx) { return unit_inputs(ctx.config, ctx.method, ctx.seed).dump(); }

}  // namespace

stop_rule stop_rule_of(const context& ctx) {
  const horizon_settings& hz = ctx.exp.horizon;
  stop_rule r;
  if (hz.updates) r.updates = *hz.updates;
  if (hz.epochs) r.epochs = *hz.epochs;
  return r;
}

std::vector<std::string> evaluation_columns(const context& ctx) {
  auto columns = ctx.prob.metrics();
  for (const char* c : {"epochs", "samples", "updates"}) columns.emplace_back(c);
  return columns;
}

std::vector<double> evaluation_row(context& ctx, const model_vector& x, double passes, std::uint64_t updates) {
  auto v = ctx.root ? ctx.prob.evaluate(x) : std::vector<double>(ctx.prob.metrics().size(), 0.0);
  v.push_back(passes);
  v.push_back(std::round(passes * static_cast<double>(ctx.prob.train_size())));
  v.push_back(static_cast<double>(updates));
  return v;
}

double wall_so_far(const context& ctx) {
  return ctx.wall_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - ctx.wall_start).count();
}

void save_client(context& ctx, heterograd::archive_writer& w) {
  w(checkpoint_digest(ctx));
  w(wall_so_far(ctx), ctx.extra.dump());
  ctx.prob.serialize(w);
}

void load_client(context& ctx, heterograd::archive_reader& r) {
  const auto ckpt = ctx.dir / "checkpoint.bin";
  std::string digest, extra;
  r(digest);
  if (digest != checkpoint_digest(ctx)) {
    const json saved = json::parse(digest, nullptr, false);
    throw heterograd::checkpoint_error(ckpt, "written by a run with other inputs (" +
                                                 (saved.is_discarded() ? std::string("unreadable record")
                                                                       : differences_text(saved, json::parse(checkpoint_digest(ctx)))) +
                                                 ")");
  }
  r(ctx.wall_before, extra);
  ctx.extra = json::parse(extra);
  ctx.prob.serialize(r);
}

std::optional<std::vector<std::byte>> checkpoint_to_resume(const context& ctx) {
  const auto ckpt = ctx.dir / "checkpoint.bin";
  // Every checksum is checked before a byte is used (a flipped byte in the parameters would
  // otherwise resume to a different run without a word).
  if (!ctx.resume || !std::filesystem::exists(ckpt)) return std::nullopt;
  return heterograd::open_checkpoint(ckpt, read_file(ckpt));
}

void write_checkpoint(const context& ctx, const std::vector<std::byte>& payload) {
  // Temporary file, fsync, rename (files.hpp): a kill leaves the previous checkpoint or this one.
  hgrun::write_file(ctx.dir / "checkpoint.bin", heterograd::seal_checkpoint(payload));
}

void report_progress(context& ctx, const progress_point& at) {
  if (!ctx.progress) return;
  const horizon_settings& hz = ctx.exp.horizon;
  progress_info p;
  p.label = ctx.method["label"];
  p.virtual_time = at.time;
  double f = 0;
  if (hz.time) f = at.time / *hz.time;
  else if (hz.epochs) f = at.epochs / *hz.epochs;
  else if (hz.updates) f = static_cast<double>(at.updates) / static_cast<double>(*hz.updates);
  p.fraction = std::clamp(f, 0.0, 1.0);
  p.has_best = at.best.has_value();
  p.best = at.best.value_or(0);
  p.events = at.events;
  p.wall_seconds = wall_so_far(ctx);
  p.done = at.done;
  ctx.progress(p);
}

namespace {

// Resumes the loop's state (evaluations done, target, recorder, the method's) from the run's
// checkpoint when there is one to resume.
void resume_loop(context& ctx, std::uint64_t& e, target_tracker& target, sim::recorder& rec, const loop_hooks& h) {
  const auto bytes = checkpoint_to_resume(ctx);
  if (!bytes) return;
  heterograd::archive_reader r(*bytes);
  load_client(ctx, r);
  r(e, target, rec);
  h.load(r);
  if (!r.done())
    throw heterograd::checkpoint_error(ctx.dir / "checkpoint.bin", "the payload has trailing bytes (another build's layout)");
}

}  // namespace

model_vector evaluation_loop(context& ctx, sim::recorder& rec, const loop_hooks& h,
                                   bool time_is_epochs) {
  const horizon_settings& hz = ctx.exp.horizon;
  const double dt = ctx.exp.run.eval_interval;
  const double t_end = hz.time.value_or(std::numeric_limits<double>::infinity());
  const double epochs = hz.epochs.value_or(std::numeric_limits<double>::infinity());
  const std::uint64_t updates = hz.updates.value_or(~std::uint64_t{0});
  const std::uint64_t every = ctx.exp.run.checkpoint_every;
  target_tracker target{target_rule_of(ctx), {}};
  // evaluations.csv: the problem's metrics, then where the run was at each evaluation: passes
  // over the training set, samples whose gradients were computed, and the model's updates
  // (server steps; rounds for the round methods), beside time (and wall_seconds on the real clock).
  rec.set_metrics(evaluation_columns(ctx));

  std::uint64_t e = 0;  // evaluations done
  auto save = [&] {
    heterograd::archive_writer w;
    {
      // A real-clock run is held at a consistent cut while its state is copied into `w` (not
      // while the file is written: the wall clock runs on while it is held).
      struct release {
        std::function<void()> f;
        ~release() {
          if (f) f();
        }
      } held{h.hold ? h.hold() : nullptr};
      save_client(ctx, w);
      w(e, target, rec);
      h.save(w);
    }
    write_checkpoint(ctx, w.bytes());
  };
  resume_loop(ctx, e, target, rec, h);
  auto epochs_done = [&] {
    return h.epochs_done ? h.epochs_done()
                         : static_cast<double>(ctx.prob.samples) / static_cast<double>(ctx.prob.train_size());
  };
  auto report = [&](double t, bool done) {
    report_progress(ctx, {t, epochs_done(), h.updates(), h.events(), target.times.best, done});
  };
  // Evaluation e happens at virtual time min(e * dt, horizon); the method runs up to it first.
  // An evaluation at t sees every event at or before t and none after (sim::run's rule).
  for (;;) {
    const double t = std::min(static_cast<double>(e) * dt, t_end);
    double te = t;  // the evaluation's time
    if (e > 0) {
      const double prev = std::min(static_cast<double>(e - 1) * dt, t_end);
      if (t <= prev) break;  // the horizon was evaluated already
      if (!h.advance(t)) break;
      // An updates/epochs horizon reached inside advance(): evaluate where it was reached.
      if (h.now && (h.updates() >= updates || epochs_done() >= epochs)) te = std::min(t, h.now());
    }
    const double wall = h.wall ? h.wall() : std::numeric_limits<double>::quiet_NaN();
    const auto eval_start = std::chrono::steady_clock::now();
    auto v = evaluation_row(ctx, h.params(), epochs_done(), h.updates());
    if (h.wall)  // a real-clock run: the evaluations' own wall time (the workers go on meanwhile)
      ctx.extra["evaluation_seconds"] =
          ctx.extra.value("evaluation_seconds", 0.0) +
          std::chrono::duration<double>(std::chrono::steady_clock::now() - eval_start).count();
    target.observe(te, v);
    rec.record_evaluation(te, std::move(v), wall);
    ++e;
    report(te, false);
    const bool stop = t >= t_end || epochs_done() >= epochs || h.updates() >= updates;
    if (every && e % every == 0 && !stop) save();
    if (ctx.halt_after && e == ctx.halt_after && !stop) throw halted{};
    if (stop) break;
  }
  (void)time_is_epochs;
  ctx.extra["epochs"] = epochs_done();  // passes over the training set (stop_rule's count)
  record_target(ctx, target.times);
  report(rec.evaluations().empty() ? 0.0 : rec.evaluations().back().time, true);
  return h.params();
}

json finish(context& ctx, const sim::recorder& run_rec, const model_vector& params) {
  if (!ctx.root) return json();
  std::filesystem::create_directories(ctx.dir);
  // workers.csv and run.json relate each worker to its speed: the worker-time model's mean
  // time per job (tau_i at the method's batch) and the rank it gives (local learning's
  // workers are its modules: no worker-time model of theirs).
  // On the real clock without real_scale the workers follow no worker-time model: their
  // time per job is the measured one (busy seconds per finished job; 0 for a worker that
  // finished none).
  sim::recorder rec = run_rec;
  if (ctx.exp.workers.count == rec.workers()) {
    if (ctx.exp.real_clock && !(ctx.exp.real_scale > 0)) {
      std::vector<double> measured(rec.workers(), 0.0);
      for (std::size_t w = 0; w < measured.size(); ++w) {
        const auto& st = rec.worker(static_cast<sim::worker_id>(w));
        if (st.jobs_finished > 0) measured[w] = st.busy / static_cast<double>(st.jobs_finished);
      }
      rec.set_model_times(std::move(measured));
    } else {
      rec.set_model_times(mean_job_times(ctx.exp, ctx.seed, ctx.batch()));
    }
  }
  // Each table is formatted in memory and written whole (hgrun::write_file): a full disk or a
  // size limit is an output_error naming the file, never a short file under its name.
  auto table = [&](const char* name, sim::recorder::table t) {
    std::ostringstream o;
    rec.write_csv(o, t);
    hgrun::write_file(ctx.dir / name, o.str());
  };
  table("evaluations.csv", sim::recorder::table::evaluations);
  table("workers.csv", sim::recorder::table::workers);
  table("staleness.csv", sim::recorder::table::staleness);
  {
    std::ostringstream o;
    rec.write_json(o);
    hgrun::write_file(ctx.dir / "run.json", o.str());
  }
  json s = json::object();
  s["label"] = ctx.method["label"];
  s["algorithm"] = ctx.method["algorithm"];
  s["seed"] = ctx.seed;
  s["metrics"] = ctx.prob.metrics();  // (evaluations.csv's epochs, samples and updates follow them)
  json fin = json::object();
  if (!rec.evaluations().empty()) {
    const auto& last = rec.evaluations().back();
    for (std::size_t i = 0; i < rec.metric_names().size(); ++i) fin[rec.metric_names()[i]] = last.values[i];
    s["end_time"] = last.time;
  }
  s["final"] = fin;
  s["time_to_target"] = ctx.extra["time_to_target"];
  s["first_crossing"] = ctx.extra["first_crossing"];
  s["best"] = ctx.extra["best"];
  s["events"] = rec.events();
  s["trace_hash"] = hex_of(rec.trace_hash());
  s["params_hash"] = params_hash(params);
  s["wall_seconds"] = ctx.wall_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - ctx.wall_start).count();
  json counts = json::object();
  for (auto o : {sim::update_outcome::applied, sim::update_outcome::buffered, sim::update_outcome::discarded,
                 sim::update_outcome::interrupted})
    counts[sim::to_string(o)] = rec.count(o);
  s["updates"] = counts;
  s["max_staleness"] = rec.max_staleness();
  if (json facts = ctx.prob.facts(); !facts.empty()) s["data"] = std::move(facts);
  json ex = ctx.extra;
  for (const char* k : {"time_to_target", "first_crossing", "best"}) ex.erase(k);
  s["extra"] = ex;
  return s;
}

void single_threaded_here() {
#ifdef _OPENMP
  thread_local bool done = false;
  if (!done) {
    omp_set_num_threads(1);
    done = true;
  }
#endif
}

int mpi_ranks_needed(const json& c) {
  const int n = static_cast<int>(experiment_of(c).workers.count);
  int need = 0;
  std::string first;
  for (std::size_t i = 0; i < c["methods"].size(); ++i) {
    const std::string a = c["methods"][i]["algorithm"];
    // eager-SGD on the virtual clock is served like the asynchronous methods (its rounds fire
    // in the worker-time model's arrival order on rank 0; runtimes.hpp); on the real clock
    // rank w is worker w over the MPI partial allreduce (realtime.hpp).
    // local learning: one rank per module (decoupled/transport_pipeline.hpp).
    const family f = runnable_algorithm(a).kind;
    const bool served = f == family::server || (a == "eager" && c["clock"] != "real");
    const int k = f == family::local ? c["methods"][i]["modules"].get<int>() : served ? n + 1 : n;
    const std::string here = "methods[" + std::to_string(i) + "] (" + a + ")";
    if (need && k != need)
      throw config_error("runtime", "expected methods that need one MPI rank count: " + first + " needs -np " +
                                        std::to_string(need) + ", " + here + " needs -np " + std::to_string(k) +
                                        " (asynchronous methods and eager on the virtual clock: workers.count + 1, "
                                        "rank 0 serves; round methods and eager on the real clock: workers.count; local_learning: methods[i].modules, one "
                                        "rank per module); run them apart with --methods");
    if (!need) {
      need = k;
      first = here;
    }
  }
  return need;
}

config_error mpi_ranks_mismatch(const json& c, int got) {
  const int need = mpi_ranks_needed(c);
  const std::string np = std::to_string(need), g = std::to_string(got);
  for (std::size_t i = 0; i < c["methods"].size(); ++i)
    if (c["methods"][i]["algorithm"] == "local_learning") {
      const std::string key = "methods[" + std::to_string(i) + "].modules";
      return config_error(key, "runtime \"mpi\": " + key + " = " + np +
                                   " (local_learning: one rank per module, rank 0 evaluates) needs mpirun -np " + np +
                                   ", got -np " + g + "; run with -np " + np + " or set " + key + " = " + g);
    }
  const int n = static_cast<int>(experiment_of(c).workers.count);
  const bool async = need == n + 1;
  return config_error("runtime", "mpi: workers.count = " + std::to_string(n) + " needs mpirun -np " + np +
                                      (async ? " (rank 0 serves, ranks 1.." + std::to_string(n) + " are the workers)"
                                             : " (one rank per worker)") +
                                      ", got -np " + g + "; run with -np " + np +
                                      " or set workers.count = " + std::to_string(async ? got - 1 : got));
}

bool algorithm_checkpointable(const std::string& a) { return runnable_algorithm(a).checkpointable; }

namespace {

std::string num(double x) {
  std::ostringstream os;
  os.precision(6);
  os << x;
  return os.str();
}

// The keys that set the workers' job times.
std::string job_time_keys(const worker_time_settings& t) {
  const std::string& b = t.base;
  std::string k = b == "fixed" ? "workers.time.tau, " : b == "speed_classes" ? "workers.time.classes, " : "";
  k += "workers.time.scale";
  if (t.batch_scaling || b == "omnilearn") k += ", workers.time.reference_batch";
  return k;
}

// Work a method's run asks for, from the worker-time model: gradient computations and the
// virtual time the horizon takes (so the evaluations); refused beyond the limits.
void check_work(const json& c, const experiment& e, std::size_t i, problem& prob) {
  const json& m = c["methods"][i];
  const std::string a = m["algorithm"], p = "methods[" + std::to_string(i) + "]";
  const std::size_t batch = m["batch"].get<std::size_t>();
  const horizon_settings& hz = e.horizon;
  const double dt = e.run.eval_interval;
  const double n = static_cast<double>(e.workers.count);
  const double train = static_cast<double>(prob.train_size());
  if (c["data"]["dataset"] == "fashion_mnist" || c["data"]["dataset"] == "text") {
    double b = static_cast<double>(batch);
    std::string key = m["batch"] == c["data"]["batch"] ? "data.batch" : p + ".batch";
    if (a == "omnilearn" || a == "omnilearn_asgd") {
      b = m["max_batch"].get<double>();
      key = p + ".max_batch";
    }
    if (!(b <= train))
      throw config_error(key, "expected a mini-batch of at most the training set's " + num(train) + " samples, got " +
                                  num(b));
  }
  if (a == "local_learning") {
    // Virtual time is epochs: iterations = horizon x (training set / batch).
    const double h = hz.epochs ? *hz.epochs : hz.time.value_or(0.0);
    const double its = h * std::max(1.0, train / static_cast<double>(batch));
    if (!(its <= max_gradients))
      throw config_error(hz.epochs ? "horizon.epochs" : "horizon.time",
                         "expected at most " + num(max_gradients) + " iterations per run, got " + num(its));
    return;
  }
  const std::vector<double> tau = mean_job_times(e, e.run.seed, batch);
  double rate = 0, fastest = std::numeric_limits<double>::infinity(), slowest = 0;
  for (double t : tau) {
    rate += 1.0 / t;  // jobs per unit of virtual time, every worker busy
    fastest = std::min(fastest, t);
    slowest = std::max(slowest, t);
  }
  const double per_gradient = static_cast<double>(prob.samples_per_gradient(batch));
  double gradients = 0, end_time = 0;
  std::string key;
  if (hz.time) {
    end_time = *hz.time;
    gradients = end_time * rate;
    key = "horizon.time";
  } else if (hz.epochs) {
    gradients = *hz.epochs * train / per_gradient;
    key = "horizon.epochs";
  } else {
    gradients = static_cast<double>(*hz.updates);  // at least one gradient an update (resolve() bounds the rest)
    key = "horizon.updates";
  }
  if (!(gradients <= max_gradients))
    throw config_error(key, "expected at most " + num(max_gradients) + " gradient computations per run, got about " +
                                num(gradients) + " (" + std::to_string(tau.size()) + " workers, the fastest " +
                                num(fastest) + " virtual time a job: " + job_time_keys(e.workers.time) + ")");
  if (!hz.time) {
    // The horizon's virtual time: all workers busy, or the slowest one for the round methods,
    // and no earlier than the end of every outage and slow-down window.
    end_time = gradients / rate;
    if (runnable_algorithm(a).kind == family::round) end_time = std::max(end_time, gradients / n * slowest);
    for (const auto* windows : {&e.workers.time.outages, &e.workers.time.slowdowns})
      for (const auto& win : *windows) end_time = std::max(end_time, win.end);
    const double evals = end_time / dt;
    if (!(evals <= max_evaluations))
      throw config_error("eval_interval", "expected at most " + num(max_evaluations) +
                                              " evaluations per run, got about " + num(evals) + " (" + key +
                                              " takes about " + num(end_time) + " virtual time, eval_interval = " +
                                              num(dt) + ")");
  }
}

}  // namespace

void preflight(const json& c) {
  const experiment e = experiment_of(c);
  if (c["data"]["dataset"] == "fashion_mnist") {
    const auto dir = hg::data::fashion_mnist_dir(c["data"]["path"].get<std::string>());
    for (const char* f : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                          "t10k-labels-idx1-ubyte"}) {
      const bool ok = std::filesystem::exists(dir / f) || std::filesystem::exists(dir / (std::string(f) + ".gz"));
      if (!ok)
        throw config_error("data.path", "expected a directory with the Fashion-MNIST IDX files (Debian "
                                        "package dataset-fashion-mnist: ./hg deps); " +
                                            (dir / f).string() + "[.gz] is missing");
    }
  }
  if (e.run.checkpoint_every > 0)
    for (std::size_t i = 0; i < c["methods"].size(); ++i) {
      const std::string a = c["methods"][i]["algorithm"];
      if (!algorithm_checkpointable(a))
        throw config_error("checkpoint_every", "expected 0: methods[" + std::to_string(i) + "] (" + a +
                                                   ") cannot be checkpointed in this build (its policy has "
                                                   "no serialize(Archive&))");
    }
  // The problem and the worker-time models are built once here, so that what the library
  // refuses (a partition with fewer samples than workers, ...) is a config error naming the
  // key before anything runs, not an error from the middle of a run. resolve() bounded their
  // sizes already.
  std::unique_ptr<problem> prob;
  try {
    prob = make_problem(e, c, e.run.seed);
  } catch (const config_error&) {
    throw;
  } catch (const std::invalid_argument& x) {
    throw from_library_error(x, c, -1, "data");
  }
  const auto metrics = prob->metrics();
  if (std::find(metrics.begin(), metrics.end(), e.target.metric) == metrics.end()) {
    std::string names;
    for (const auto& x : metrics) names += (names.empty() ? "\"" : ", \"") + x + "\"";
    throw config_error("target.metric", "expected a metric the methods report with data.dataset " +
                                            c["data"]["dataset"].dump() + ": one of " + names + "; got " +
                                            json(e.target.metric).dump());
  }
  for (std::size_t i = 0; i < c["methods"].size(); ++i) {
    try {
      (void)make_time_model(e, e.run.seed, c["methods"][i]["batch"].get<std::size_t>());
    } catch (const config_error&) {
      throw;
    } catch (const std::invalid_argument& x) {
      throw from_library_error(x, c, static_cast<long>(i), "workers.time");
    }
    check_work(c, e, i, *prob);
    if (c["methods"][i]["algorithm"] == "local_learning") {  // a split the model lacks, before anything runs
      try {
        (void)prob->module_chain(chain_request_of(c, c["methods"][i]));
      } catch (const config_error&) {
        throw;
      } catch (const std::invalid_argument& x) {
        throw from_library_error(x, c, static_cast<long>(i), "methods[" + std::to_string(i) + "]");
      }
    }
  }
}

json run_method(const run_request& req) {
  // One thread per run: parallelism comes from processes (--jobs). OpenMP teams and BLAS
  // threads on the small per-event vectors of a simulation cost more than they give.
  hg::kernels::set_blas_threads(1);
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
  const json& m = req.config["methods"][req.method];
  experiment e = experiment_of(req.config);
  auto prob = make_problem(e, req.config, req.seed);
  if (req.root) std::filesystem::create_directories(req.dir);
  context ctx{.config = req.config, .method = m, .seed = req.seed, .dir = req.dir, .prob = *prob,
              .resume = req.resume, .halt_after = req.halt_after, .progress = req.progress, .root = req.root,
              .exp = std::move(e)};
  const std::string a = m["algorithm"];
  json s = runnable_algorithm(a).run(ctx);
  // summary.json marks the run finished (--resume skips it), so it is written once, whole,
  // with the runner's own numbers, and only then is the checkpoint dropped: a kill at any
  // point leaves a checkpoint to resume from or the complete summary.
  if (ctx.root && !s.is_null()) {
    hgrun::write_file(ctx.dir / "summary.json", s.dump(2) + "\n");
    std::filesystem::remove(ctx.dir / "checkpoint.bin");
  }
  return s;
}

}  // namespace hgrun
