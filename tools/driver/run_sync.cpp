// Synchronous, semi-synchronous and local methods (algorithms/sync, issue 7) and OmniLearn's
// dynamic batching (balance/ over sync's BSP): one adapter each, on drive_rounds or, for
// eager-SGD's partial rounds, drive_async.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <set>

#include "described.hpp"
#include "drive.hpp"
#include "runners.hpp"
#include "runtimes.hpp"

#include "heterograd/algorithms/sync.hpp"
#include "heterograd/balance/omnilearn.hpp"

namespace hgrun {

namespace {

namespace hg = heterograd;
namespace hs = heterograd::algorithms::sync;
namespace sim = heterograd::sim;
namespace hr = heterograd::runtime;

// A checkpoint's part of a round method held by an adapter (OmniLearn's controller, biased
// local SGD's data plan): the adapter's whole state.
template <class Adapter>
std::function<void(hg::archive_writer&)> saved(Adapter& p) {
  return [&p](hg::archive_writer& w) { detail::save_policy(w, p); };
}
template <class Adapter>
std::function<void(hg::archive_reader&)> loaded(Adapter& p) {
  return [&p](hg::archive_reader& r) { detail::load_policy(r, p); };
}

// SelSync's delta~ against its threshold (issue 50): the quantiles of every worker's value at
// every step that had one (linear interpolation between order statistics), and how many.
json smoothed_delta_quantiles(std::vector<double> v) {
  std::erase_if(v, [](double x) { return std::isnan(x); });
  json q = {{"count", v.size()}};
  if (v.empty()) return q;
  std::sort(v.begin(), v.end());
  for (const double p : {0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0}) {
    const double at = p * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(at));
    const std::size_t hi = std::min(lo + 1, v.size() - 1);
    char key[32];  // "p0" .. "p100"
    std::snprintf(key, sizeof key, "p%g", 100 * p);
    q[key] = v[lo] + (at - static_cast<double>(lo)) * (v[hi] - v[lo]);
  }
  return q;
}

// OmniLearn (#7): BSP whose per-worker batches a proportional controller re-balances from the
// measured per-iteration compute times (engine busy time per round), once every `every` rounds.
template <class Bsp>
class omnilearn_policy {
 public:
  omnilearn_policy(Bsp& b, hg::balance::omnilearn_bsp ctl, std::size_t every)
      : bsp_(b), ctl_(std::move(ctl)), every_(every) {}
  void attach(const sim::engine& e) {
    eng_ = &e;
    busy0_.assign(e.workers(), 0.0);
  }
  /// A real-clock run: the controller reads each worker's measured busy time (compute and
  /// paced sleep, model units) instead of an engine's.
  void measure(std::function<double(std::size_t)> busy) {
    busy_of_ = std::move(busy);
    busy0_.assign(ctl_.batch_sizes().size(), 0.0);
  }
  std::size_t batch(std::size_t w) const { return bsp_.batch(w); }
  double communication_time(std::uint64_t r) const { return bsp_.communication_time(r); }
  std::size_t steps_in_round(std::size_t w, std::uint64_t r) const { return bsp_.steps_in_round(w, r); }
  void compute(std::size_t w, std::uint64_t r, std::uint64_t k, hs::round_stats& out) { bsp_.compute(w, r, k, out); }
  template <class Ctl>
  void on_round(Ctl& c, std::uint64_t r, std::vector<hs::round_stats>& res) {
    bsp_.on_round(c, r, res);
    control(r);
  }
  /// The controller's part of round r's end: every `every` rounds it observes the engine's
  /// busy time per worker since the last observation and may change the batches of the
  /// rounds after r (the threads and MPI runtimes call it between real rounds: with clock
  /// "virtual" on the shadow engine, whose busy times are the simulator's; with clock "real"
  /// on the measured times, measure()).
  void control(std::uint64_t r) {
    if ((r + 1) % every_ != 0) return;
    const auto iters = static_cast<std::size_t>(r + 1 - round0_);
    for (std::size_t w = 0; w < busy0_.size(); ++w) {
      const double busy = busy_of_ ? busy_of_(w) : eng_->stats(static_cast<sim::worker_id>(w)).busy;
      ctl_.observe(w, {.samples = bsp_.batch(w) * iters, .iterations = iters,
                       .compute_time = hg::seconds{busy - busy0_[w]}});
      busy0_[w] = busy;
    }
    round0_ = r + 1;
    if (ctl_.rebalance()) {
      bsp_.set_batches_from(ctl_);
      ++changes_;
    }
  }
  const hg::balance::omnilearn_bsp& controller() const { return ctl_; }
  std::size_t changes() const { return changes_; }
  /// Checkpoints: the BSP replicas, the controller (batches, open window) and the adapter's
  /// own counters (busy time at the window's start, its first round, rebalances so far). The
  /// engine pointer is re-attached by drive_rounds before a load.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(bsp_, ctl_, busy0_, round0_, changes_);
  }

 private:
  Bsp& bsp_;
  hg::balance::omnilearn_bsp ctl_;
  std::size_t every_;
  const sim::engine* eng_ = nullptr;
  std::function<double(std::size_t)> busy_of_;
  std::vector<double> busy0_;
  std::uint64_t round0_ = 0;
  std::size_t changes_ = 0;
};

// Biased local SGD's data (#1): worker w's k-th step since the last redraw takes the plan's
// samples; per-sample losses go back into the plan; a new period redraws (worker 0 computes
// first in every round, after every worker's last step of the previous one).
struct biased_data {
  hs::biased_data_plan plan;
  problem* prob;
  std::vector<std::size_t> steps;  // H_i
  std::size_t rounds_per_redraw;
  std::uint64_t period = 0;
  std::vector<std::vector<float>> losses;  // per worker (threads runtime: concurrent workers)
  json* extra = nullptr;                   // the run's summary numbers (note_redraw)
};

// How biased the slow workers' samples are, after each redraw: the mean merged score (last
// loss seen) of their assigned samples over the mean over every seen sample, and the share of
// their samples never seen (+inf). Averaged over the redraws into extra.slow_samples (unbiased
// runs too: their ratio is the control's).
void note_redraw(biased_data& d) {
  const auto [ratio, unseen] = d.plan.slow_score_ratio();
  if (d.extra == nullptr || ratio == 0.0) return;
  json& n = (*d.extra)["slow_samples"];
  if (!n.is_object()) n = json::object();
  const double k = n.value("redraws", 0.0);
  n["mean_score_ratio"] = (n.value("mean_score_ratio", 0.0) * k + ratio) / (k + 1);
  n["unseen_fraction"] = (n.value("unseen_fraction", 0.0) * k + unseen) / (k + 1);
  n["redraws"] = k + 1;
}
struct biased_oracle {
  biased_data* d;
  double operator()(std::size_t w, std::uint64_t s, std::size_t b, hg::span<const float> x, hg::span<float> g) const {
    const std::uint64_t round = s / d->steps[w];
    const std::uint64_t p = round / d->rounds_per_redraw;
    if (p > d->period) {
      d->plan.redraw(p);
      d->period = p;
      note_redraw(*d);
    }
    const std::uint64_t k = s - p * d->rounds_per_redraw * d->steps[w];
    single_threaded_here();  // worker threads of the threads runtime
    const auto idx = d->plan.batch(w, static_cast<std::size_t>(k));
    auto& losses = d->losses.at(w);
    losses.resize(b);
    const double l = d->prob->gradient_on(w, std::span<const std::size_t>(idx.data(), idx.size()),
                                          std::span<const float>(x.data(), x.size()),
                                          std::span<float>(g.data(), g.size()), losses);
    d->plan.record(w, idx, hg::span<const float>(losses));  // worker w's own table
    std::atomic_ref<std::uint64_t>(d->prob->samples).fetch_add(b, std::memory_order_relaxed);
    return l;
  }
};

// The per-worker score tables of a biased_data_plan, in the order its serialize() visits them
// (every worker's table, then the merged table and the assignment, which are skipped here).
struct score_table_refs {
  std::size_t workers;
  std::vector<std::vector<float>*> tables;
  void operator()(std::vector<float>& t) {
    if (tables.size() < workers) tables.push_back(&t);
  }
  template <class... A>
  void operator()(A&...) {}
};

// Every rank's own score table (worker rank's, the only one its worker records into) to every
// rank of `c`: 4 B per training sample per worker, once per redraw.
template <class Comm>
void allgather_score_tables(const Comm& c, hs::biased_data_plan& plan) {
  score_table_refs refs{plan.workers(), {}};
  plan.serialize(refs);
  const auto n = refs.tables.size();
  const auto w = static_cast<std::size_t>(c.rank());
  if (n != static_cast<std::size_t>(c.size()) || w >= n)
    throw std::logic_error("biased local SGD under MPI: one rank per worker expected");
  const std::size_t S = refs.tables[w]->size();
  std::vector<float> all(n * S);
  c.allgather(hg::span<const float>(refs.tables[w]->data(), S), hg::span<float>(all.data(), all.size()))
      .wait(hg::seconds{runtime_timeout_s});
  for (std::size_t j = 0; j < n; ++j)
    std::copy(all.begin() + static_cast<std::ptrdiff_t>(j * S), all.begin() + static_cast<std::ptrdiff_t>((j + 1) * S),
              refs.tables[j]->begin());
}

// Biased local SGD's policy with its data plan, so that a checkpoint holds both: the plan's
// score tables and assignment and the current redraw period are the method's sampler state.
template <class Local>
class biased_policy {
 public:
  biased_policy(Local& p, biased_data& d) : p_(p), d_(d) {}
  std::size_t batch(std::size_t w) const { return p_.batch(w); }
  double communication_time(std::uint64_t r) { return p_.communication_time(r); }
  std::size_t steps_in_round(std::size_t w, std::uint64_t r) const { return p_.steps_in_round(w, r); }
  void compute(std::size_t w, std::uint64_t r, std::uint64_t k, hs::round_stats& out) { p_.compute(w, r, k, out); }
  template <class Ctl>
  void on_round(Ctl& c, std::uint64_t r, std::vector<hs::round_stats>& res) {
    p_.on_round(c, r, res);
  }
  template <class Archive>
  void serialize(Archive& ar) {
    ar(p_, d_.plan, d_.period);
  }

 private:
  Local& p_;
  biased_data& d_;
};

// eager-SGD served to real workers (runtime threads, mpi): the policy as
// runtime/server.hpp's server sees it. A job carries its worker's own replica
// (params_for); the evaluations see replica 0, as under sim.
template <class Eager>
struct eager_remote {
  Eager& p;
  std::vector<float> buf;  // the arrived gradient (eager_sgd::on_arrival takes it mutable)
  std::size_t workers() const { return p.workers(); }
  std::size_t dim() const { return p.params(0).size(); }
  std::uint64_t version() const { return p.version(); }
  hg::span<const float> params() const { return p.params(0); }
  hg::span<const float> params_for(std::uint32_t w) const { return p.params(w); }
  template <class Ctl, class A, class G>
  void on_arrival(Ctl& c, const A& a, const G& g) {
    buf.assign(g.begin(), g.end());
    p.on_arrival(c, a, buf);
  }
};

// Each worker's time per gradient for H_i proportional to speed: the worker-time model's mean
// job times, or, on the real clock without injected time (real_scale absent: the speeds are
// whatever the cores give), measured where the workers run (realtime.hpp).
std::vector<double> speeds_for_steps(context& ctx) {
  if (ctx.exp.real_clock && ctx.exp.real_scale <= 0) {
    auto tau = wall::measure_gradient_seconds(ctx);
    ctx.extra["measured_seconds_per_gradient"] = tau;  // the run's own, at its end: extra.real
    for (auto& t : tau) t = std::max(t, 1e-9);
    return tau;
  }
  return mean_job_times(ctx.exp, ctx.seed, ctx.batch());
}

// H_i proportional to speed: every worker spends about the fastest one's H steps of time.
std::vector<std::size_t> proportional_steps(const std::vector<double>& tau, std::size_t H) {
  const double fastest = *std::min_element(tau.begin(), tau.end());
  std::vector<std::size_t> h(tau.size());
  for (std::size_t w = 0; w < tau.size(); ++w)
    h[w] = std::max<std::size_t>(
        1, static_cast<std::size_t>(std::llround(static_cast<double>(H) * fastest / tau[w])));
  return h;
}

// The per-worker H_i: the configured ones, else H for every worker, or H_i proportional to speed.
std::vector<std::size_t> local_steps_of(context& ctx, const hs::local_sgd_config& cfg) {
  const std::size_t n = ctx.workers();
  if (!cfg.local_steps.empty()) return cfg.local_steps;
  const std::size_t H = cfg.period;
  if (!ctx.method.at("speed_proportional").get<bool>()) return std::vector<std::size_t>(n, H);
  return proportional_steps(speeds_for_steps(ctx), H);
}

// What every round method of a run starts from: the workers, the batch, the initial model,
// the batches, a synchronisation's time, the problem's gradient, the worker-time model and the
// method's optimizer.
struct round_setup {
  std::size_t n, b;
  std::vector<float> init;
  std::vector<std::size_t> batches;
  double sync;
  oracle g;
  sim::any_time_model model;
  any_optimizer opt;

  explicit round_setup(context& ctx)
      : n(ctx.workers()), b(ctx.batch()), init(ctx.prob.initial()), batches(n, b),
        sync(sync_time(ctx.exp, ctx.prob.dim())), g{&ctx.prob}, model(make_time_model(ctx.exp, ctx.seed, b)),
        opt(make_optimizer(ctx.method["optimizer"])) {}
  hg::span<const float> x0() const { return hg::span<const float>(init); }
};

// The driver's methods run over any_optimizer and the problem's oracle.
using bsp_method = hs::bsp<float, any_optimizer, oracle>;
using local_sgd_method = hs::local_sgd<float, any_optimizer, oracle>;
using selsync_method = hs::selsync<float, any_optimizer, oracle>;
using eager_method = hs::eager_sgd<float, any_optimizer, oracle>;
using omnilearn_method = omnilearn_policy<bsp_method>;
using biased_method = biased_policy<hs::local_sgd<float, any_optimizer, biased_oracle>>;

// A synchronising method's config from the method's keys (its `nonfinite` key among them) and
// its synchronisation's time from the network.
template <class Config>
Config synced_config(const context& ctx, const round_setup& r) {
  auto cfg = from_json(ctx.method, Config{});
  cfg.sync_time = r.sync;
  return cfg;
}

}  // namespace

json bsp_runner::run(context& ctx) {
  round_setup r(ctx);
  const auto cfg = synced_config<hs::bsp_config>(ctx, r);
  bsp_method p(r.n, r.x0(), r.opt, r.g, r.batches, cfg);
  auto params = [&p] { return p.params(0); };
  if (ctx.runtime() != "sim") return drive_rounds_real(ctx, p, params, r.model);
  return drive_rounds<hs::round_stats>(ctx, p, params, r.model);
}

json omnilearn_runner::run(context& ctx) {
  round_setup r(ctx);
  const json& m = ctx.method;
  bsp_method inner(r.n, r.x0(), r.opt, r.g, r.batches,
                   {.mode = hs::aggregation::gradients, .weighting = hs::averaging::sample_weighted,
                    .sync_time = r.sync, .nonfinite = nonfinite_of(m)});
  const auto oc = from_json(m, hg::balance::omnilearn_config{});
  std::size_t every = m["rebalance_every"].get<std::size_t>();
  if (every == 0) every = std::max<std::size_t>(1, ctx.prob.train_size() / (r.n * r.b));  // one epoch
  omnilearn_method p(inner, hg::balance::omnilearn_bsp(r.batches, oc), every);
  auto params = [&inner] { return inner.params(0); };
  json s;
  if (ctx.exp.real_clock) {
    // Real BSP rounds through runtime::run; the controller acts between them on the measured
    // busy times (compute and paced sleep), every rank's shared by the rounds' agreement.
    const hr::round_measurements* seen = nullptr;
    p.measure([&seen](std::size_t k) { return seen->busy.at(k); });
    auto between = [&p, &seen](std::uint64_t round, const hr::round_measurements& m) {
      seen = &m;
      p.control(round);
    };
    s = drive_rounds_wall(ctx, hr::rounds_of{inner, params, between, saved(p), loaded(p)}, r.model);
    if (s.is_null()) return s;  // an MPI rank other than 0
  } else if (ctx.runtime() != "sim") {
    // Real BSP rounds between the controller's rebalances; the controller reads the shadow
    // engine's busy times (the simulator's), so the batches, hence the run, are sim's.
    rt_detail::round_wiring wiring;
    wiring.run = real_rounds(ctx, inner);
    wiring.after_round = [&p](std::uint64_t round) { p.control(round); };
    s = drive_rounds_real(ctx, p, params, r.model, wiring);
    if (s.is_null()) return s;  // an MPI rank other than 0
  } else {
    s = drive_rounds<hs::round_stats>(ctx, p, params, r.model);
  }
  const auto final_b = p.controller().batch_sizes();
  s["extra"]["final_batches"] = std::vector<std::size_t>(final_b.begin(), final_b.end());
  s["extra"]["rebalances"] = p.changes();
  s["extra"]["rebalance_every_rounds"] = every;
  return s;
}

json local_sgd_runner::run(context& ctx) {
  round_setup r(ctx);
  const json& m = ctx.method;
  auto cfg = synced_config<hs::local_sgd_config>(ctx, r);
  cfg.local_steps = local_steps_of(ctx, cfg);
  cfg.sampled = m["sampled"].get<std::size_t>();
  cfg.seed = ctx.seed;
  if (m["gossip"] == "ring") cfg.gossip = hs::mixing_matrix::ring(r.n);
  local_sgd_method p(r.n, r.x0(), r.opt, r.g, r.batches, cfg);
  auto anchor = [&p] { return hg::span<const float>(p.anchor()); };
  const sim::any_time_model timed = hs::steps_time<sim::any_time_model>(r.model, p.schedule());
  json s = ctx.runtime() != "sim" ? drive_rounds_real(ctx, p, anchor, timed)
                                  : drive_rounds<hs::round_stats>(ctx, p, anchor, timed);
  if (s.is_null()) return s;  // an MPI rank other than 0
  s["extra"]["local_steps"] = cfg.local_steps;
  return s;
}

namespace {

// Biased local SGD's library config from the method: its slow workers, its H_i (from speed
// when asked: the largest configured H for the fastest worker, proportionally fewer steps for
// slower ones, measured on the real clock without injected time), the batch and the seed.
hs::biased_config biased_config_of(context& ctx) {
  const json& m = ctx.method;
  auto bc = from_json(m, hs::biased_config{});
  bc.slow.assign(ctx.workers(), 0);
  for (const auto& w : m["slow_workers"]) bc.slow[w.get<std::size_t>()] = 1;
  if (m.at("speed_proportional").get<bool>()) {
    const std::size_t H = *std::max_element(bc.local_steps.begin(), bc.local_steps.end());
    bc.local_steps = proportional_steps(speeds_for_steps(ctx), H);
    ctx.extra["local_steps"] = bc.local_steps;
  }
  bc.batch = ctx.batch();
  bc.seed = ctx.seed;
  return bc;
}

// Threads and MPI: the redraw that the simulated run makes at the first step of round
// k * shuffle_rounds (after every worker's last step of the round before) is made here,
// between real rounds, so the workers only read the plan and record into their own tables.
// Under MPI worker w's table is filled on rank w only: every rank's own table is first
// allgathered into every rank's plan, so all ranks merge the same tables and draw the same
// plan (the simulator's).
std::function<void()> score_tables_gatherer(context& ctx, biased_data& data) {
  if (ctx.runtime() == "mpi")
    return [&data] { with_world<void>([&](const auto& c) { allgather_score_tables(c, data.plan); }); };
  return [] {};
}

// Round `round` is about to run: a new period redraws the plan first.
void next_period(biased_data& data, std::uint64_t round, const std::function<void()>& gather_tables) {
  const std::uint64_t period = round / data.rounds_per_redraw;
  if (period <= data.period) return;
  gather_tables();
  data.plan.redraw(period);
  data.period = period;
  note_redraw(data);
}

template <class Inner>
std::function<void(std::uint64_t, std::uint64_t)> biased_real_rounds(context& ctx, Inner& inner, biased_data& data) {
  return [&data, gather_tables = score_tables_gatherer(ctx, data), rounds = real_rounds(ctx, inner)](std::uint64_t from,
                                                                                                 std::uint64_t to) {
    const std::uint64_t R = data.rounds_per_redraw;
    while (from < to) {
      next_period(data, from, gather_tables);
      const std::uint64_t period = from / R;
      const std::uint64_t end = std::min(to, (period + 1) * R);
      rounds(from, end);
      from = end;
    }
  };
}

}  // namespace

json biased_local_sgd_runner::run(context& ctx) {
  round_setup r(ctx);
  const auto bc = biased_config_of(ctx);
  hs::biased_data_plan plan(ctx.prob.train_size(), bc);
  const std::size_t redraw_rounds = plan.config().shuffle_rounds;  // resolved: 0 is one pass
  biased_data data{std::move(plan), &ctx.prob, bc.local_steps, redraw_rounds, 0,
                   std::vector<std::vector<float>>(r.n), &ctx.extra};
  hs::local_sgd_config cfg;
  cfg.local_steps = bc.local_steps;
  cfg.weighting = hs::averaging::uniform;  // bias #2: slow workers weigh as much as fast ones
  cfg.sync_time = r.sync;
  cfg.nonfinite = nonfinite_of(ctx.method);
  hs::local_sgd<float, any_optimizer, biased_oracle> inner(r.n, r.x0(), r.opt, biased_oracle{&data}, r.batches, cfg);
  biased_method p(inner, data);
  auto anchor = [&inner] { return hg::span<const float>(inner.anchor()); };
  const sim::any_time_model timed = hs::steps_time<sim::any_time_model>(r.model, inner.schedule());
  if (ctx.runtime() == "sim") return drive_rounds<hs::round_stats>(ctx, p, anchor, timed);
  if (ctx.exp.real_clock) {
    // Real rounds through runtime::run; the redraw before the first round of a period is made
    // between rounds, on every rank (under MPI after the score tables' allgather).
    auto between = [&data, gather = score_tables_gatherer(ctx, data)](std::uint64_t round, const hr::round_measurements&) {
      next_period(data, round + 1, gather);
    };
    return drive_rounds_wall(ctx, hr::rounds_of{inner, anchor, between, saved(p), loaded(p)}, timed);
  }
  rt_detail::round_wiring wiring;
  wiring.run = biased_real_rounds(ctx, inner, data);
  return drive_rounds_real(ctx, p, anchor, timed, wiring);
}

json selsync_runner::run(context& ctx) {
  round_setup r(ctx);
  const auto cfg = synced_config<hs::selsync_config>(ctx, r);
  selsync_method p(r.n, r.x0(), r.opt, r.g, r.batches, cfg);
  auto params = [&p] { return p.params(0); };
  json s;
  if (ctx.runtime() != "sim") {
    // A step's time depends on its vote: the shadow's step r, when its last worker finishes,
    // runs the real step r and reads its decision (vote, then synchronisation or not).
    rt_detail::round_wiring wiring;
    wiring.run = real_rounds(ctx, p);
    wiring.communication = [&p](std::uint64_t) { return p.step_communication_time(p.decisions().back()); };
    s = drive_rounds_real(ctx, p, params, r.model, wiring);
    if (s.is_null()) return s;  // an MPI rank other than 0
  } else {
    s = drive_rounds<hs::round_stats>(ctx, p, params, r.model);
  }
  const double steps = static_cast<double>(p.decisions().size());
  s["extra"]["local_fraction"] = steps > 0 ? static_cast<double>(p.local_steps()) / steps : 0.0;
  s["extra"]["smoothed_delta"] = smoothed_delta_quantiles(p.smoothed_history());
  return s;
}

// eager: each step's partial allreduce costs what a round's allreduce does, paid by every
// job (a process's gradient and its share of the collective); on the real clock without
// real_scale the collective's own time is real.
json eager_runner::run(context& ctx) {
  round_setup r(ctx);
  if (!(ctx.exp.real_clock && !(ctx.exp.real_scale > 0))) r.model = with_exchange(std::move(r.model), r.sync);
  auto cfg = from_json(ctx.method, hs::eager_config{});
  cfg.seed = ctx.seed;
  eager_method p(r.n, r.x0(), r.opt, r.g, r.batches, cfg);
  json s;
  if (ctx.exp.real_clock) {
    // Clock real: the ranks' rounds over the real partial allreduce (realtime.hpp).
    s = drive_eager_wall(ctx, p, r.model);
  } else if (ctx.runtime() != "sim") {
    // Real workers compute the gradients (at their own replica, which the job carries); which
    // contributions are fresh or late in each round is decided by the worker-time model: the
    // policy is served in the simulator's arrival order (runtimes.hpp's drive_remote), so the
    // rounds fire exactly as in the simulated run and the replicas are sim's bit for bit.
    eager_remote<decltype(p)> remote{p, {}};
    s = drive_server_real(ctx, remote, r.model);
  } else {
    auto compute = [&p](sim::worker_id w, std::uint64_t v, std::uint64_t k, std::vector<float>& out) {
      p.compute(w, v, k, out);
    };
    s = drive_async(ctx, p, compute, [&p] { return p.params(0); }, r.model);
  }
  if (s.is_null()) return s;  // an MPI rank other than 0
  const auto& fresh = p.fresh_counts();
  double mean_fresh = 0;
  for (auto f : fresh) mean_fresh += static_cast<double>(f);
  s["extra"]["mean_fresh_per_round"] = fresh.empty() ? 0.0 : mean_fresh / static_cast<double>(fresh.size());
  s["extra"]["late_contributions"] = p.late_contributions();
  return s;
}

// OmniLearn and biased local SGD: their driver adapters hold the controller / data plan too.
bool bsp_runner::checkpointable() { return hgrun::checkpointable<bsp_method>; }
bool omnilearn_runner::checkpointable() { return hgrun::checkpointable<omnilearn_method>; }
bool local_sgd_runner::checkpointable() { return hgrun::checkpointable<local_sgd_method>; }
bool selsync_runner::checkpointable() { return hgrun::checkpointable<selsync_method>; }
bool eager_runner::checkpointable() { return hgrun::checkpointable<eager_method>; }
bool biased_local_sgd_runner::checkpointable() { return hgrun::checkpointable<biased_method>; }

}  // namespace hgrun
