#pragma once
// clock "real": the threads and MPI runtimes on the wall clock (runtimes.hpp replays the
// simulator's order instead). Nothing is replayed: a server takes results as they arrive
// (runtime::arrival_order::real_time) and round methods run their rounds back to back, so
// Ringmaster's stops, Rennala's batches and SSP's waits act on what really happens.
// Servers, round methods and eager-SGD run through runtime::run (runtime/run.hpp).
//
// Time. A model time unit lasts real_scale wall seconds (1 when real_scale is absent). With
// real_scale, every job is paced to its worker-time model's duration (runtime/pacing.hpp: the
// worker sleeps for what its compute left), so the simulator's prediction in model units
// times real_scale is the wall time to expect; a compute longer than the model's time is
// counted per worker (a violation of the model), never hidden. Horizons, eval_interval and
// the evaluations' `time` column are in model units; `wall_seconds` is the wall clock.
//
// Evaluations do not stall training: the method runs on its own threads, and the evaluation
// loop (this thread) sleeps until each evaluation's wall time, copies the model under a lock
// (a server's model as of that instant; a round method's as of its last round that ended),
// and evaluates the copy while the workers go on.
//
// Telemetry is measured: each worker's compute, paced sleep and communication seconds, the
// server's hold times, the update records (applied, buffered, discarded, interrupted, with
// staleness from the real versions), the model violations (real_workers.csv, workers.csv in
// model units, the summary's "real" entry).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "drive.hpp"
#include "elastic_real.hpp"
#include "files.hpp"
#include "heterograd/algorithms/sync/exchange.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/runtime/live.hpp"
#include "heterograd/runtime/measure.hpp"
#include "heterograd/runtime/pacing.hpp"
#include "heterograd/runtime/placement.hpp"
#include "heterograd/runtime/run.hpp"
#include "heterograd/runtime/server.hpp"
#include "heterograd/sim/recorder.hpp"
#include "mpi_world.hpp"

namespace hgrun {

/// Deadline of every receive of the real runtimes (a failing run ends instead of hanging).
inline constexpr double runtime_timeout_s = heterograd::runtime::real_clock_timeout_s;

namespace wall {

namespace hg = heterograd;
namespace sim = heterograd::sim;
namespace hr = heterograd::runtime;
namespace hs = heterograd::algorithms::sync;
using clock = std::chrono::steady_clock;

/// Wall seconds of one model time unit.
inline double unit_of(const context& ctx) { return ctx.exp.real_scale > 0 ? ctx.exp.real_scale : 1.0; }

inline double seconds_since(clock::time_point t) {
  return std::chrono::duration<double>(clock::now() - t).count();
}

/// What the method's threads share with the evaluation loop (runtime/live.hpp).
using shared_run = hr::live_run;

/// The evaluation loop's hooks for a run on the wall clock: advance(t) sleeps until model
/// time t (or the run's end), params() copies the model under the lock.
/// `reached()`: the run's updates or epochs rule holds (it ended there).
inline loop_hooks hooks(const context& ctx, shared_run& s, std::function<std::vector<float>()> copy,
                        std::function<bool()> reached) {
  const double unit = unit_of(ctx);
  const double t_end = ctx.exp.horizon.time.value_or(std::numeric_limits<double>::infinity());
  loop_hooks h;
  h.advance = [&s, unit, t_end, reached](double t) {
    if (!s.started) s.start();
    std::unique_lock l(s.m);
    // The horizon's evaluation is the final model's: wait there for the run to end. Bounded
    // without a deadline of its own, which could not tell a stall from a long end (a server's
    // shutdown waits up to remote_options::shutdown_grace for a worker's last computation):
    // the method ends by its own rule at its horizon (a server at the first arrival past it,
    // a round method at the agreement after the round that passed it, eager-SGD at the flush
    // round after its vote), and every wait inside it has a deadline (runtime_timeout_s for a
    // message, shutdown_grace for the goodbyes), past which it fails, which ends it too.
    if (t >= t_end) {
      s.cv.wait(l, [&] { return s.finished; });
    } else {
      const auto until = s.origin + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(t * unit));
      s.cv.wait_until(l, until, [&] { return s.finished; });
    }
    if (s.error) std::rethrow_exception(s.error);
    // A run that ended before t by no rule (every worker held) has nothing left to evaluate.
    // One that ended at its horizon while this loop lagged behind (each evaluation waiting for
    // a cut, a round, to write its checkpoint) has: its final model, at the grid's times left.
    const bool at_horizon = s.finished && std::chrono::duration<double>(s.ended - s.origin).count() >= t_end * unit;
    return !(s.finished && t < t_end && !reached() && !at_horizon);
  };
  h.params = [&s, copy] {
    std::lock_guard l(s.model);
    return copy();
  };
  h.updates = [&s] { return s.updates.load(); };
  h.events = [&s] { return s.events.load(); };
  h.epochs_done = [&s] { return s.epochs.load(); };
  h.now = [&s, unit] { return s.finished ? s.last.load() : s.model_now(unit); };
  h.wall = [&s] { return s.started ? std::max(0.0, seconds_since(s.origin)) : 0.0; };  // 0 before the start
  return h;
}

/// Runs `body` on a thread of its own; its end (or error) wakes the evaluation loop.
using runner = hr::method_thread;

/// The model version and parameters' hash at a checkpoint's cut, and at a resume (the
/// summary's extra.cuts and extra.resumed): a resumed run shows it went on from the saved model.
inline json cut_record(std::uint64_t version, std::span<const float> x, double time) {
  return {{"version", version}, {"params_hash", params_hash(x)}, {"time", time}};
}
inline json cut_record(const hr::cut_record& c) {
  return {{"version", c.version}, {"params_hash", hex_of(c.params_hash)}, {"time", c.time}};
}

/// Per-worker accounting of a real run, in wall seconds (worker_report's fields: for round
/// methods pull = 0 and push = the round's collectives, barrier wait included), and each job
/// measured (`jobs`: a server's from the job's start to its result's arrival, as the server
/// saw them; a round's per gradient: round_clock::jobs), written as real_jobs.csv.
/// Where a server's thread ran (workers.server_placement), and which workers' cores it shared.
inline std::string server_cores_note(const workers_settings& w) {
  if (w.server_placement.empty()) return "; server thread not pinned";
  auto p = hr::placement_config::parse(w.placement, "workers.placement");
  p.server = hr::parse_core_set(w.server_placement, "workers.server_placement");
  std::string shared;
  for (const std::size_t k : p.sharing_server()) shared += (shared.empty() ? "" : " ") + std::to_string(k);
  return "; server thread on cores " + p.server.str() +
         (shared.empty() ? " (shared with no worker)" : " (shared with workers " + shared + ")");
}

/// `gradients[w]`: worker w's gradients computed (a round of local steps has several).
/// `server`: a server's workers, whose iteration includes receiving the job and sending the
/// result (the server's own work is on that path); a round's collectives are not (the
/// simulated round runtime adds the barrier itself).
inline void write_real_tables(const context& ctx, const std::vector<hr::worker_report>& r,
                              const std::vector<double>& held, const std::vector<std::uint64_t>& gradients,
                              bool server, const std::vector<sim::trace_row>& jobs, json& extra) {
  if (!ctx.root) return;
  // Every measured job in model units, as a trace (sim::trace_replay::parse_csv reads it,
  // its header the first line; the placement runs' predictions replay it: sim_vs_real.md).
  std::ostringstream tr;
  tr.precision(17);
  tr << "worker,start,duration\n";
  for (const auto& j : jobs) tr << j.worker << ',' << j.start << ',' << j.duration << '\n';
  std::filesystem::create_directories(ctx.dir);
  write_file(ctx.dir / "real_jobs.csv", tr.str());
  const double unit = unit_of(ctx);
  std::ostringstream o;
  o << "# clock real, real_scale " << ctx.exp.real_scale << " (0: not paced), seconds are wall seconds"
    << (server && ctx.runtime() == "threads" ? server_cores_note(ctx.exp.workers) : "") << '\n'
    << "worker,cores,jobs,gradients,compute_seconds,paced_seconds,pull_seconds,push_seconds,held_seconds,"
       "violations,overrun_seconds\n";
  std::uint64_t violations = 0;
  double overrun = 0, compute = 0, paced = 0, comm = 0;
  std::vector<double> per_gradient;
  for (std::size_t w = 0; w < r.size(); ++w) {
    const auto& x = r[w];
    const std::string cores = ctx.exp.workers.placement.empty() ? "" : ctx.exp.workers.placement[w];
    o << w << ",\"" << cores << "\"," << x.jobs << ',' << gradients.at(w) << ',' << x.compute_seconds << ',' << x.paced_seconds << ','
      << x.pull_seconds << ',' << x.push_seconds << ',' << (w < held.size() ? held[w] * unit : 0.0) << ','
      << x.violations << ',' << x.overrun_seconds << '\n';
    violations += x.violations;
    overrun += x.overrun_seconds;
    compute += x.compute_seconds;
    paced += x.paced_seconds;
    comm += x.pull_seconds + x.push_seconds;
    // A worker's measured speed: wall seconds per gradient of its iteration (what a fixed
    // worker-time model fed the real run's speeds uses: sim_vs_real.md). A held worker's wait
    // is not its work.
    const double iteration = x.compute_seconds + x.paced_seconds +
                             (server ? x.pull_seconds + x.push_seconds - (w < held.size() ? held[w] * unit : 0.0) : 0.0);
    per_gradient.push_back(gradients[w] > 0 ? std::max(0.0, iteration) / static_cast<double>(gradients[w]) : 0.0);
  }
  std::filesystem::create_directories(ctx.dir);
  write_file(ctx.dir / "real_workers.csv", o.str());
  const double n = static_cast<double>(std::max<std::size_t>(1, r.size()));
  extra["real"] = {{"clock", "real"},
                   {"real_scale", ctx.exp.real_scale},
                   {"violations", violations},
                   {"overrun_seconds", overrun},
                   {"mean_compute_seconds", compute / n},
                   {"mean_paced_seconds", paced / n},
                   {"mean_communication_seconds", comm / n},
                   {"seconds_per_gradient", per_gradient}};
}

/// The recorder of a real run: the update records (`updates`), the evaluations of `evals`,
/// the measured per-worker accounting in model units.
inline sim::recorder measured_recorder(context& ctx, const sim::recorder& updates, const sim::recorder& evals,
                                       const std::vector<hr::worker_report>& r, const std::vector<std::uint64_t>& sent,
                                       const std::vector<std::uint64_t>& finished, const std::vector<double>& held,
                                       double end_time, std::uint64_t events) {
  sim::recorder out = updates;
  detail::describe(ctx, out);
  out.set("clock", "real");
  out.set("real_scale", ctx.exp.real_scale);
  out.set_metrics(evals.metric_names());
  for (const auto& e : evals.evaluations()) out.record_evaluation(e.time, e.values, e.wall);
  const double unit = unit_of(ctx);
  std::vector<sim::worker_stats> st(r.size());
  for (std::size_t w = 0; w < r.size(); ++w) {
    auto& x = st[w];
    x.jobs_started = w < sent.size() ? sent[w] : r[w].jobs;
    x.jobs_finished = w < finished.size() ? finished[w] : r[w].jobs;
    x.jobs_cancelled = updates.count(static_cast<sim::worker_id>(w), sim::update_outcome::interrupted);
    x.busy = (r[w].compute_seconds + r[w].paced_seconds) / unit;
    x.waiting = w < held.size() ? held[w] : 0.0;
    x.idle = std::max(0.0, (r[w].pull_seconds + r[w].push_seconds) / unit - x.waiting);
    x.throughput = end_time > 0 ? static_cast<double>(x.jobs_finished) / end_time : 0.0;
  }
  out.set_measured(std::move(st), end_time, events);
  return out;
}

/// Each worker's wall seconds per gradient where it will run, measured before a real run
/// without injected time (its H_i then follow what the cores give, not the worker-time
/// model): runtime::measure_seconds_per_gradient (runtime/measure.hpp) on the workers' threads
/// or ranks, gradients of the method's batch at the initial model for `window` seconds. The
/// gradients are not applied; each draws from its worker's sample stream, so the run's data
/// order starts later.
inline std::vector<double> measure_gradient_seconds(context& ctx, double window = 0.25) {
  const std::size_t n = ctx.workers(), b = ctx.batch(), d = ctx.prob.dim();
  const std::vector<float> x0 = ctx.prob.initial();
  std::vector<std::vector<float>> g(n, std::vector<float>(d));
  auto gradient = [&](std::size_t w) {
    ctx.prob.gradient(w, b, std::span<const float>(x0.data(), x0.size()), std::span<float>(g[w].data(), d));
  };
  const auto placement = hr::placement_config::parse(ctx.exp.workers.placement, "workers.placement");
  if (ctx.runtime() == "mpi")
    return with_world<std::vector<double>>([&](const auto& c) {
      single_threaded_here();
      return hr::measure_seconds_per_gradient(hr::where::mpi{c, placement, "workers.placement"}, n, gradient, window,
                                              hg::seconds{runtime_timeout_s});
    });
  return hr::measure_seconds_per_gradient(hr::where::threads{placement, "workers.placement"}, n, gradient, window,
                                          [] { single_threaded_here(); });
}

}  // namespace wall

namespace wall {

/// The options of a real run (clock "real") from the experiment: the horizon's rules, the
/// pacing, the evaluation grid, the batch and the samples a gradient draws, the timeout, and
/// the driver's part of checkpoints (its identity, wall seconds, summary numbers, sample
/// streams; checkpoint.bin sealed and written whole).
inline hr::run_options real_run_options(context& ctx) {
  const horizon_settings& hz = ctx.exp.horizon;
  hr::run_options o;
  if (hz.time) o.horizon = *hz.time;
  if (hz.updates) o.max_updates = *hz.updates;
  if (hz.epochs) o.max_epochs = *hz.epochs;
  o.eval_interval = ctx.exp.run.eval_interval;
  o.real_scale = ctx.exp.real_scale;
  o.batch = ctx.batch();
  o.train_samples = ctx.prob.train_size();
  o.samples_per_gradient = [&ctx](std::size_t b) { return ctx.prob.samples_per_gradient(b); };
  o.timeout = hg::seconds{runtime_timeout_s};
  o.halt_after = ctx.halt_after;
  o.thread_init = [] { single_threaded_here(); };
  o.checkpoint.every = ctx.exp.run.checkpoint_every;
  o.checkpoint.write = [&ctx](const std::vector<std::byte>& payload, const hr::cut_record&) { write_checkpoint(ctx, payload); };
  o.checkpoint.save = [&ctx](hg::archive_writer& w) { save_client(ctx, w); };
  o.checkpoint.load = [&ctx](hg::archive_reader& r) { load_client(ctx, r); };
  o.checkpoint.seek = [&ctx](std::size_t w, std::uint64_t jobs, std::uint64_t drawn) { ctx.prob.seek(w, jobs, drawn); };
  o.checkpoint.resume = checkpoint_to_resume(ctx);
  o.target = target_rule_of(ctx);
  return o;
}

/// The evaluation hook of a real run: the problem's metrics on the snapshot, then epochs,
/// samples and updates (evaluations.csv's columns), and a progress report.
inline std::function<std::vector<double>(const hr::snapshot&)> real_evaluation(context& ctx) {
  auto best = std::make_shared<hr::target_times>();
  return [&ctx, best, rule = target_rule_of(ctx)](const hr::snapshot& s) {
    auto v = evaluation_row(ctx, std::vector<float>(s.params.begin(), s.params.end()), s.epochs, s.updates);
    if (rule) best->observe(*rule, s.time, v[rule->metric]);
    report_progress(ctx, {s.time, s.epochs, s.updates, s.events, best->best, false});
    return v;
  };
}

/// What a real run's summary records alike for servers and rounds (cuts, resumed cut,
/// evaluation seconds, epochs, target), and its evaluations as a recorder.
inline sim::recorder record_run(context& ctx, const hr::run_report& r) {
  for (const auto& c : r.cuts) ctx.extra["cuts"].push_back(cut_record(c));
  if (r.resumed_from) ctx.extra["resumed"] = cut_record(*r.resumed_from);
  ctx.extra["evaluation_seconds"] = r.evaluation_seconds;
  ctx.extra["epochs"] = r.epochs;
  record_target(ctx, r.target);
  sim::recorder evals(ctx.workers());
  evals.set_metrics(evaluation_columns(ctx));
  for (const auto& e : r.evaluations) evals.record_evaluation(e.time, e.values, e.wall_seconds);
  return evals;
}

/// The summary's numbers of a real server run (extra.real, cuts, resumed, the target), its
/// tables (real_jobs.csv, real_workers.csv) and its recorder: the server's update records, the
/// evaluations, each worker's measured seconds in model units.
inline json finish_real_server(context& ctx, const hr::run_report& r) {
  std::vector<std::uint64_t> gradients(ctx.workers());
  for (std::size_t k = 0; k < gradients.size(); ++k) gradients[k] = r.workers[k].jobs;
  write_real_tables(ctx, r.workers, r.held, gradients, true, r.jobs, ctx.extra);
  ctx.extra["real"].update({{"wall_seconds", r.wall_seconds}, {"dropped", r.dropped}, {"abandoned", r.abandoned}});
  ctx.extra["real"]["mean_staleness"] = r.mean_staleness;  // per worker, of every result handed over
  if (ctx.exp.membership.options.elastic) ctx.extra["membership"] = real_membership_record(r);
  const auto evals = record_run(ctx, r);
  const auto rec = measured_recorder(ctx, r.updates, evals, r.workers, r.jobs_sent, r.results, r.held, r.end_time,
                                     r.arrivals);
  report_progress(ctx, {r.evaluations.empty() ? 0.0 : r.evaluations.back().time, r.epochs, r.updates_done, r.arrivals,
                        r.target.best, true});
  return finish(ctx, rec, r.params);
}

/// The summary's numbers of a real round run (extra.real, rounds, cuts, resumed, the target;
/// `partial`: eager-SGD's audit and late contributions), its tables and its recorder: a record
/// per worker's round (eager: per contribution), the evaluations, each worker's measured
/// seconds in model units.
inline json finish_real_rounds(context& ctx, const hr::run_report& r, bool partial) {
  if (r.resumed_from && !r.resumed_rounds_per_rank.empty()) ctx.extra["resumed_rounds_per_rank"] = r.resumed_rounds_per_rank;
  write_real_tables(ctx, r.workers, {}, r.gradients, false, r.jobs, ctx.extra);
  json& real = ctx.extra["real"];
  real["wall_seconds"] = r.wall_seconds;
  if (partial) {  // eager-SGD: its audit; not extra.rounds (sim_vs_real compares contributions applied)
    real["replicas_agree"] = r.partial.replicas_agree;
    real["conservation_error"] = r.partial.conservation_error;
    real["late_per_worker"] = r.partial.late_per_worker;
    real["rounds"] = r.rounds;
  } else {
    ctx.extra["rounds"] = r.rounds;
  }
  const auto evals = record_run(ctx, r);
  const auto rec = measured_recorder(ctx, r.updates, evals, r.workers, r.results, r.results, {}, r.end_time,
                                     partial ? r.arrivals : r.rounds);
  report_progress(ctx, {r.evaluations.empty() ? 0.0 : r.evaluations.back().time, r.epochs, r.rounds, 0, r.target.best,
                        true});
  return finish(ctx, rec, r.params);
}

/// runtime::run of a served policy, a round method (rounds_of) or eager-SGD on the experiment's
/// runtime: threads, or the ranks of MPI_COMM_WORLD (a server's rank 0 serves; a round
/// method's rank w is worker w); a halted run is the driver's `halted`.
/// A server method (runtime::served): the one kind with a server thread to pin.
template <class T>
inline constexpr bool is_served = false;
template <class P, class C>
inline constexpr bool is_served<hr::served<P, C>> = true;

template <class Method>
hr::run_report run_real(context& ctx, Method& m, hr::run_options o, const sim::any_time_model& model) {
  auto placement = hr::placement_config::parse(ctx.exp.workers.placement, "workers.placement");
  try {
    if (ctx.runtime() == "threads") {
      if constexpr (is_served<std::remove_cv_t<Method>>) {  // round methods have no server thread
        placement.server_key = "workers.server_placement";
        if (!ctx.exp.workers.server_placement.empty())
          placement.server = hr::parse_core_set(ctx.exp.workers.server_placement, placement.server_key);
      }
      const auto where = elastic_threads(ctx.exp.membership, o, placement);  // membership: elastic.hpp
      return hr::run(m, where, o, model);
    }
    return with_world<hr::run_report>([&](const auto& world) {  // collective: every rank once
      return hr::run(m, hr::where::mpi{world, placement, "workers.placement"}, o, model);
    });
  } catch (const hr::halted&) {
    throw halted{};
  }
}

}  // namespace wall

/// An asynchronous server policy on real workers in real arrival order (clock "real"): a
/// client of runtime::run (runtime/run.hpp), which runs the server and its workers (threads, or
/// the ranks of MPI_COMM_WORLD), the evaluation grid and the checkpoints at cuts between two
/// arrivals; this adds the problem (gradients, metrics, sample streams) and the files.
template <class Policy>
json drive_server_wall(context& ctx, Policy& p, const heterograd::sim::any_time_model& model) {
  namespace hr = heterograd::runtime;
  namespace sim = heterograd::sim;
  static_assert(!requires { p.params_for(sim::worker_id{}); },
                "a policy with per-worker replicas runs over the partial allreduce, not the server");
  ctx.extra["runtime"] = ctx.runtime();
  ctx.extra["clock"] = "real";
  problem* prob = &ctx.prob;
  const std::size_t d = ctx.prob.dim();
  auto compute = [prob, d](sim::worker_id wk, std::uint64_t, std::uint64_t, std::size_t b,
                           heterograd::span<const float> x, std::vector<float>& g) {
    g.resize(d);
    prob->gradient(wk, b, std::span<const float>(x.data(), x.size()), std::span<float>(g.data(), g.size()));
  };
  hr::run_options o = wall::real_run_options(ctx);
  o.evaluate = wall::real_evaluation(ctx);
  hr::served m{p, compute};
  const hr::run_report r = wall::run_real(ctx, m, o, model);
  if (!r.evaluating) return json();
  return wall::finish_real_server(ctx, r);
}

/// A round method on real workers, rounds back to back on the wall clock (clock "real"): a
/// client of runtime::run (runtime/run.hpp), which runs the rounds (threads, or the ranks of
/// MPI_COMM_WORLD, rank w worker w), the agreement before each round, the evaluation grid, the
/// checkpoints at round boundaries with every rank's part; `m` carries the method, its
/// evaluated model and what acts between rounds (OmniLearn's controller, biased local SGD's
/// redraws). This adds the problem (metrics, sample streams) and the files.
template <class Method, class Params>
json drive_rounds_wall(context& ctx, const heterograd::runtime::rounds_of<Method, Params>& m,
                       const heterograd::sim::any_time_model& model) {
  namespace hr = heterograd::runtime;
  ctx.extra["runtime"] = ctx.runtime();
  ctx.extra["clock"] = "real";
  hr::run_options o = wall::real_run_options(ctx);
  o.evaluate = wall::real_evaluation(ctx);
  o.checkpoint.seek = {};
  o.checkpoint.save_rank = [&ctx](heterograd::archive_writer& w) { ctx.prob.serialize(w); };
  o.checkpoint.load_rank = [&ctx](heterograd::archive_reader& r) { ctx.prob.serialize(r); };
  const hr::run_report r = wall::run_real(ctx, m, o, model);
  if (!r.evaluating) return json();
  return wall::finish_real_rounds(ctx, r, false);
}

/// eager-SGD on the wall clock (clock "real"): a client of runtime::run (runtime/run.hpp,
/// runtime/detail/real_partial.hpp), which runs every worker's rounds over the real partial
/// allreduce (threads, or the ranks of MPI_COMM_WORLD, rank w worker w), ends them by rank 0's
/// vote with a flush round, evaluates rank 0's published replica and audits the run (replicas
/// agree, every computed gradient applied). This adds the problem and the files: extra.real's
/// replicas_agree, conservation_error, late_per_worker and rounds, the update records (each
/// fresh contribution applied, each late one buffered with the lag at which it was folded in).
template <class Eager>
json drive_eager_wall(context& ctx, Eager& p, const heterograd::sim::any_time_model& model) {
  namespace hr = heterograd::runtime;
  ctx.extra["runtime"] = ctx.runtime();
  ctx.extra["clock"] = "real";
  hr::run_options o = wall::real_run_options(ctx);
  o.evaluate = wall::real_evaluation(ctx);
  const hr::run_report r = wall::run_real(ctx, p, o, model);
  if (!r.evaluating) return json();
  return wall::finish_real_rounds(ctx, r, true);
}

}  // namespace hgrun
