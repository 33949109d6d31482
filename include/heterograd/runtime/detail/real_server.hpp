#pragma once
// runtime::run's server on the real clock (runtime/run.hpp): the policy behind the model's
// lock, the method on a thread of its own and the evaluation grid on the calling thread
// (real_loop.hpp, shared with the round methods' real_rounds.hpp), and checkpoints at a cut
// between two arrivals.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/comm/inproc.hpp"
#include "heterograd/core/archive.hpp"
#include "heterograd/runtime/evaluation.hpp"
#include "heterograd/runtime/live.hpp"
#include "heterograd/runtime/options.hpp"
#include "heterograd/runtime/detail/real_loop.hpp"
#include "heterograd/runtime/detail/thread_crew.hpp"
#include "heterograd/runtime/placement.hpp"
#include "heterograd/runtime/report.hpp"
#include "heterograd/runtime/server.hpp"
#include "heterograd/sim/recorder.hpp"

namespace heterograd::runtime::detail {

/// A server policy as the real server runs it: each arrival changes the model under the live
/// run's lock and moves the counters the evaluation loop reads; between two arrivals the
/// server passes a cut (live_run::cut), where a checkpoint records the update log and every
/// worker's stream position.
template <class Policy>
struct counted_policy {
  Policy& p;
  live_run& s;
  const run_options& o;
  std::uint64_t arrivals = 0, samples = 0;
  std::vector<double> staleness_sum = std::vector<double>(p.workers(), 0.0);
  std::vector<std::uint64_t> arrived = std::vector<std::uint64_t>(p.workers(), 0);
  std::vector<sim::trace_row> jobs;
  sim::recorder log_at_cut = sim::recorder(p.workers());
  /// Per worker: jobs sent and the sum of their batches before this run's server (a resumed
  /// run's, from its checkpoint) and at the last cut.
  std::vector<std::uint64_t> jobs_before = std::vector<std::uint64_t>(p.workers(), 0);
  std::vector<std::uint64_t> drawn_before = jobs_before, jobs_at_cut = jobs_before, drawn_at_cut = jobs_before;

  std::size_t workers() const { return p.workers(); }
  std::size_t dim() const { return p.dim(); }
  std::uint64_t version() const { return static_cast<std::uint64_t>(p.version()); }
  auto params() const { return p.params(); }  // the server's own thread: no lock needed
  template <class Ctl>
  void on_start(Ctl& c) {
    std::lock_guard l(s.model);
    if constexpr (requires { p.on_start(c); }) p.on_start(c);
    else
      for (std::size_t w = 0; w < c.workers(); ++w)
        if (std::find(o.membership.absent.begin(), o.membership.absent.end(), w) == o.membership.absent.end())
          c.restart(static_cast<worker_id>(w));  // a spare takes part by its join
  }
  // Membership (run_options::membership): the policy's hooks, under the model's lock.
  template <class Ctl>
    requires has_on_leave<Policy, Ctl>
  void on_leave(Ctl& c, worker_id w) {
    std::lock_guard l(s.model);
    p.on_leave(c, w);
  }
  template <class Ctl>
    requires has_on_join<Policy, Ctl>
  void on_join(Ctl& c, worker_id w) {
    std::lock_guard l(s.model);
    p.on_join(c, w);
  }
  template <class Ctl, class A, class G>
  void on_arrival(Ctl& c, const A& a, const G& g) {
    staleness_sum.at(a.worker) += static_cast<double>(version() - a.version);
    ++arrived[a.worker];
    jobs.push_back({a.worker, a.start, std::max(0.0, a.time - a.start)});
    std::size_t batch = o.batch;
    if constexpr (requires { p.job_batch(a.worker); }) batch = p.job_batch(a.worker);  // before on_arrival starts the next
    {
      std::lock_guard l(s.model);
      p.on_arrival(c, a, g);
    }
    ++arrivals;
    samples += o.samples_of(batch);
    s.updates = version();
    s.events = arrivals;
    s.epochs = o.train_samples ? static_cast<double>(samples) / static_cast<double>(o.train_samples) : 0.0;
    s.last = a.time;
    s.cut([&] {  // between two arrivals, with this one's update recorded
      log_at_cut = c.outcome_log();
      for (std::size_t w = 0; w < c.workers(); ++w) {
        jobs_at_cut[w] = jobs_before[w] + c.jobs_sent(static_cast<worker_id>(w));
        drawn_at_cut[w] = drawn_before[w] + c.batches_sent(static_cast<worker_id>(w));
      }
    });
  }
  template <class Archive>
  void serialize(Archive& ar) {
    ar(arrivals, staleness_sum, arrived, samples, jobs_at_cut, drawn_at_cut);
    if constexpr (std::is_same_v<Archive, archive_reader>) {
      if (jobs_at_cut.size() != p.workers() || drawn_at_cut.size() != p.workers() || arrived.size() != p.workers() ||
          staleness_sum.size() != p.workers())
        throw archive_error(0, "heterograd: runtime: the checkpoint's per-worker counts are not one per worker (" +
                            std::to_string(p.workers()) + ")");
      jobs_before = jobs_at_cut;
      drawn_before = drawn_at_cut;
    }
  }
};

template <class Policy, class Compute, class Model>
class real_server {
 public:
  real_server(Policy& p, Compute& compute, const run_options& o, const Model& model, placement_config placement,
              std::string placement_key)
      : p_(p), compute_(compute), o_(o), model_(model), placement_(std::move(placement)),
        placement_key_(std::move(placement_key)), n_(p.workers()), counted_{p, s_, o_}, before_(p.workers()) {
    s_.limit_s = o.timeout.count();
    o.rule().validate();
    placement_.validate(n_, placement_key_);
    placement_.validate_server(placement_key_);
    o.membership.validate(n_);
    remote().validate();  // the server's rules on what runtime::run gives it (the order of an elastic run)
    require(!o.membership.elastic || (o.checkpoint.every == 0 && !o.checkpoint.resume), "run_options.checkpoint",
            "set", "is not built for run_options.membership.elastic (a cut does not record the membership)");
  }

  /// On threads: rank 0 serves, rank w + 1 runs worker w (not the slots absent at the start),
  /// `joins` (where::threads::joins: .worker, .after_updates, .at_time) restart slots on new
  /// threads, and `leaves` (where::threads::leaves) make workers leave.
  template <class Joins, class Leaves>
  run_report run_threads(const Joins& joins, const Leaves& leaves) {
    for (const auto& l : leaves) leaves_.push_back({l.worker, l.after_jobs, l.at_time, false});
    std::vector<worker_report> reports(n_), joiners;
    remote_summary summary;
    auto body = [&] {
      const auto ro = remote();
      thread_crew crew(static_cast<int>(n_) + 1);
      std::atomic<bool> served{false};
      crew.start(0, false, [&](comm::inproc::communicator c) {
        struct at_end {
          std::atomic<bool>& f;
          ~at_end() { f = true; }
        } done{served};
        if (o_.thread_init) o_.thread_init();
        placement_.pin_server(placement_key_);
        summary = serve<float>(counted_, c, ro, model_);
      });
      const auto& absent = o_.membership.absent;
      for (std::size_t w = 0; w < n_; ++w)
        if (std::find(absent.begin(), absent.end(), w) == absent.end())
          crew.start(static_cast<int>(w) + 1, false, [&, w](comm::inproc::communicator c) {
            if (o_.thread_init) o_.thread_init();
            reports[w] = work<float>(c, p_.dim(), gradient(), ro, model_);
          });
      supervise(crew, joins, ro, served, joiners);
      crew.finish();
    };
    const bool mpi = false;
    loop(body, mpi);
    run_report out = report(summary, std::move(reports));
    out.joiners = std::move(joiners);
    return out;
  }

  template <class Transport>
  run_report run_ranks(const Transport& t) {
    // Rank 0's process is the server's: a launcher's binding places it (pinning its thread
    // alone left MPI's own threads elsewhere and stalled the exchanges: docs/experiments.md).
    placement_.refuse_server(placement_key_,
                             "must be empty under MPI: rank 0's process is the server's, bind it with the launcher");
    if (t.rank() != 0) return worker_rank(t);
    remote_summary summary;
    auto body = [&] {
      if (o_.thread_init) o_.thread_init();
      (void)streams(t);
      summary = serve<float>(counted_, t, remote(), model_);
    };
    try {
      loop(body, true);
    } catch (const halted&) {
      (void)gather_reports(t, n_, n_, {}, o_.timeout);  // the workers' last collective
      throw;
    }
    return report(summary, gather_reports(t, n_, n_, {}, o_.timeout));
  }

 private:
  remote_options remote() const {
    remote_options ro;
    ro.order = arrival_order::real_time;
    ro.timeout = o_.timeout;
    ro.time_scale = o_.real_scale;
    ro.batch = o_.batch;
    ro.max_updates = o_.max_updates;
    ro.stop = &s_.stop;
    ro.membership = o_.membership;
    ro.copy_jobs = !placement_.workers.empty() || !placement_.server.empty();  // server_types.hpp
    ro.start_time = resumed_at_;
    if (std::isfinite(o_.horizon)) ro.horizon = o_.horizon;
    if (std::isfinite(o_.max_epochs) && !requires { p_.job_batch(worker_id{}); }) {  // else the epochs rule alone
      const auto all = static_cast<std::uint64_t>(std::ceil(o_.max_epochs * static_cast<double>(o_.train_samples) /
                                                            static_cast<double>(o_.samples_of(o_.batch))));
      ro.max_arrivals = all - std::min(all, counted_.arrivals);  // a resumed run: those after its cut
    }
    return ro;
  }

  // Until the server ends: each join, once due and its slot free, on a new thread (a join the
  // server ended before answering is interrupted after: the run's results stand). Each
  // joiner's report goes into `joiners`, in the order they end.
  template <class Joins>
  void supervise(thread_crew& crew, const Joins& joins, const remote_options& ro, const std::atomic<bool>& served,
                 std::vector<worker_report>& joiners) {
    std::vector<char> made(joins.size(), 0);
    std::vector<int> started;
    std::mutex m;
    while (!served) {
      for (std::size_t i = 0; i < joins.size(); ++i) {
        const int r = static_cast<int>(joins[i].worker) + 1;
        if (made[i] || s_.updates < joins[i].after_updates || crew.running(r) ||
            (joins[i].at_time > 0 && s_.model_now(o_.unit()) < joins[i].at_time))
          continue;
        made[i] = 1;
        started.push_back(r);
        crew.start(r, true, [&](comm::inproc::communicator c) {
          if (o_.thread_init) o_.thread_init();
          worker_report got;
          try {
            got = work<float>(c, p_.dim(), gradient(), ro, model_, joining);
          } catch (const comm::comm_error&) {
            if (!served) throw;  // else: the run ended before its join was answered
          }
          std::lock_guard l(m);
          joiners.push_back(got);
        });
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    for (const int r : started)
      while (crew.running(r)) {
        crew.interrupt(r);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
  }

  // The workers' gradient: pinned to their cores, counted while it runs (a checkpoint's cut
  // waits for no gradient in flight).
  auto gradient() {
    return [this](worker_id w, std::uint64_t v, std::uint64_t k, std::size_t b, span<const float> x,
                  std::vector<float>& g) {
      pin(w);
      leave_if_due(w, k);
      ++computing_;
      struct leave {
        std::atomic<int>& c;
        ~leave() { --c; }
      } l{computing_};
      if constexpr (requires { compute_(w, v, k, b, x, g); }) compute_(w, v, k, b, x, g);
      else compute_(w, v, k, x, g);
    };
  }
  // where::threads::leaves: worker w's first leave not yet made, if due for its job k, throws
  // leave_run in place of the compute. Only w's thread reads or marks w's leaves, and a slot
  // has one thread at a time (a join waits for the earlier one to end).
  void leave_if_due(worker_id w, std::uint64_t k) {
    for (auto& l : leaves_) {
      if (l.worker != w || l.made) continue;
      if (k < l.after_jobs && s_.model_now(o_.unit()) < l.at_time) return;
      l.made = true;
      throw leave_run();
    }
  }
  void pin(std::size_t w) { placement_.pin_once(this, w, placement_key_); }

  // Each worker's stream where the server's checkpoint says (fresh: at the start): rank 0 sends
  // every worker's jobs and draws (one broadcast of 2n u64) once it has loaded.
  template <class Transport>
  std::vector<std::uint64_t> streams(const Transport& t) {
    std::vector<std::uint64_t> v(2 * n_);
    std::copy(counted_.jobs_before.begin(), counted_.jobs_before.end(), v.begin());
    std::copy(counted_.drawn_before.begin(), counted_.drawn_before.end(), v.begin() + static_cast<std::ptrdiff_t>(n_));
    t.broadcast(span<std::uint64_t>(v.data(), v.size()), 0, comm::broadcast_options{.timeout = o_.timeout}).wait();
    return v;
  }

  template <class Transport>
  run_report worker_rank(const Transport& t) {
    const auto me = static_cast<std::size_t>(t.rank() - 1);
    if (o_.thread_init) o_.thread_init();
    pin(me);
    const auto v = streams(t);
    if (o_.checkpoint.seek) o_.checkpoint.seek(me, v[me], v[n_ + me]);
    const auto r = work<float>(t, p_.dim(), gradient(), remote(), model_);
    run_report out;
    out.evaluating = false;
    out.workers = gather_reports(t, n_, me, r, o_.timeout);
    return out;
  }

  void save_policy(archive_writer& w) {
    if constexpr (requires { p_.serialize(w); }) p_.serialize(w);
    else throw std::invalid_argument("heterograd: runtime: run_options.checkpoint.every is set, but this policy has no serialize(archive): it cannot be checkpointed");
  }
  void load_policy(archive_reader& r) {
    if constexpr (requires { p_.serialize(r); }) p_.serialize(r);
    else throw std::invalid_argument("heterograd: runtime: run_options.checkpoint.resume is set, but this policy has no serialize(archive): it cannot be resumed");
  }
  void loop(const std::function<void()>& body, bool mpi) {
    loop_.run({body, [this](std::vector<float>& x) {
                 const auto v = p_.params();
                 x.assign(v.begin(), v.end());
               },
               [this](std::uint64_t e) { save_checkpoint(e); },
               [this](const std::vector<std::byte>& b) { load_checkpoint(b); }, mpi});
  }
  void save_checkpoint(std::uint64_t e);
  void load_checkpoint(const std::vector<std::byte>& payload);
  run_report report(const remote_summary& summary, std::vector<worker_report> reports);

  Policy& p_;
  Compute& compute_;
  const run_options& o_;
  const Model& model_;
  placement_config placement_;
  std::string placement_key_;
  std::size_t n_;
  live_run s_;
  counted_policy<Policy> counted_;
  std::atomic<int> computing_{0};
  struct leave_due {
    std::size_t worker;
    std::uint64_t after_jobs;
    double at_time;
    bool made;
  };
  std::vector<leave_due> leaves_;  // run_threads' leaves
  sim::recorder before_;  // a resumed run: the update records up to its cut
  double resumed_at_ = 0, cut_time_ = 0;
  real_loop loop_{s_, o_};
};

template <class Policy>
cut_record cut_of(const Policy& p, double time) {
  const auto x = p.params();
  return {static_cast<std::uint64_t>(p.version()), fnv1a(x.data(), x.size() * sizeof(float)), time};
}

// A checkpoint: the server held between two arrivals with no gradient in flight while the
// state is copied into the archive (not while the client stores it).
template <class Policy, class Compute, class Model>
void real_server<Policy, Compute, Model>::save_checkpoint(std::uint64_t) {
  archive_writer w;
  {
    release_at_exit held{s_.hold([this] { return computing_ == 0; })};
    cut_time_ = s_.last.load();
    loop_.cuts.push_back(cut_of(p_, cut_time_));
    if (o_.checkpoint.save) o_.checkpoint.save(w);  // first: a resume checks the client's identity first
    save_policy(w);
    counted_.serialize(w);
    sim::recorder all = before_;
    all.merge_updates(counted_.log_at_cut);
    w(cut_time_, all);
    loop_.save_history(w);
  }
  if (o_.checkpoint.write) o_.checkpoint.write(w.bytes(), loop_.cuts.back());
}

template <class Policy, class Compute, class Model>
void real_server<Policy, Compute, Model>::load_checkpoint(const std::vector<std::byte>& payload) {
  archive_reader r(payload);
  if (o_.checkpoint.load) o_.checkpoint.load(r);
  load_policy(r);
  counted_.serialize(r);
  r(resumed_at_, before_);
  loop_.load_history(r, payload.size());
  if (!r.done()) throw archive_error(payload.size(), "heterograd: runtime: the checkpoint has trailing bytes (another build's layout)");
  // The workers' streams as after every job sent before the cut (the jobs in flight there were
  // computed and dropped): on threads here, under MPI on each worker's rank (run_ranks).
  if (o_.checkpoint.seek)
    for (std::size_t w = 0; w < n_; ++w) o_.checkpoint.seek(w, counted_.jobs_before[w], counted_.drawn_before[w]);
  s_.resume_at(resumed_at_, o_.unit());
  s_.updates = counted_.version();
  s_.events = counted_.arrivals;
  s_.epochs = o_.train_samples ? static_cast<double>(counted_.samples) / static_cast<double>(o_.train_samples) : 0.0;
  loop_.resumed_from = cut_of(p_, resumed_at_);
}

template <class Policy, class Compute, class Model>
run_report real_server<Policy, Compute, Model>::report(const remote_summary& summary,
                                                       std::vector<worker_report> reports) {
  run_report out;
  loop_.fill(out);
  out.updates = before_;
  out.updates.merge_updates(summary.log);
  out.workers = std::move(reports);
  out.held = summary.held;
  out.results = counted_.arrived;
  out.jobs_sent.resize(n_);
  out.mean_staleness.assign(n_, 0.0);
  for (std::size_t w = 0; w < n_; ++w) {
    // jobs started: those handed over before the cut (whose jobs in flight were dropped), and
    // every job sent after it
    const std::uint64_t after = w < summary.jobs_finished.size() ? summary.jobs_finished[w] : 0;
    out.jobs_sent[w] = counted_.arrived[w] - std::min(counted_.arrived[w], after) +
                       (w < summary.jobs_sent.size() ? summary.jobs_sent[w] : 0);
    if (counted_.arrived[w] > 0) out.mean_staleness[w] = counted_.staleness_sum[w] / static_cast<double>(counted_.arrived[w]);
  }
  out.jobs = std::move(counted_.jobs);
  out.arrivals = counted_.arrivals;
  out.updates_done = counted_.version();
  out.end_time = summary.end_time;
  out.dropped = summary.dropped;
  out.abandoned = summary.abandoned;
  out.refused = summary.refused;
  out.evicted = summary.evicted;
  out.refused_late = summary.refused_late;
  out.lost = summary.lost;
  out.membership = summary.membership;
  out.membership_refusals = summary.membership_refusals;
  const auto x = p_.params();
  out.params.assign(x.begin(), x.end());
  return out;
}

}  // namespace heterograd::runtime::detail
