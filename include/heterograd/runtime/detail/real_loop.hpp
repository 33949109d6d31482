#pragma once
// The evaluating side of every real-clock run of runtime::run (runtime/run.hpp): the method on
// a thread of its own (live.hpp's method_thread), the evaluation grid on the calling thread
// (evaluation.hpp), each evaluation on a copy of the model taken under the model's lock (the
// workers go on while the hook runs), and the checkpoints the grid asks for. What differs
// between a server and a round method (the body, the model's copy, what a checkpoint holds) is
// the caller's: real_server.hpp, real_rounds.hpp.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "heterograd/comm/types.hpp"
#include "heterograd/core/archive.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/runtime/evaluation.hpp"
#include "heterograd/runtime/live.hpp"
#include "heterograd/runtime/options.hpp"
#include "heterograd/runtime/report.hpp"
#include "heterograd/runtime/server_types.hpp"

namespace heterograd::runtime::detail {

/// What the loop asks of the method it watches.
struct loop_method {
  std::function<void()> body;                      ///< the method (on its own thread)
  std::function<void(std::vector<float>&)> copy;   ///< the model evaluations see (under the model's lock)
  std::function<void(std::uint64_t)> save;         ///< a checkpoint after evaluation `index`
  std::function<void(const std::vector<std::byte>&)> load;  ///< a resumed run's payload
  /// Under a process group the other ranks' first collectives wait for this one's: a loop that
  /// ends before its first advance (halted, failed) still starts the method, stopped at once.
  bool group = false;
};

class real_loop {
 public:
  real_loop(live_run& s, const run_options& o) : s_(s), o_(o) { s_.limit_s = o.timeout.count(); }

  std::vector<evaluation_record> evals;
  std::vector<cut_record> cuts;
  std::optional<cut_record> resumed_from;
  target_times target;
  double evaluation_seconds = 0;

  /// The evaluation grid on this thread while the method runs on its own (started at the first
  /// advance, after a checkpoint is loaded). Rethrows the method's error.
  void run(const loop_method& m) {
    std::uint64_t first = 0;
    if (o_.checkpoint.resume) {
      m.load(*o_.checkpoint.resume);
      first = evals.empty() ? 0 : evals.back().index + 1;
    }
    std::optional<method_thread> method;
    s_.start = [&] {
      s_.start_clock();
      method.emplace(s_, m.body);
      s_.started = true;
    };
    auto start_stopped = [&] {
      if (s_.started || !m.group) return;
      s_.stop = true;
      s_.start();
    };
    std::vector<float> x;
    try {
      const grid_hooks h{[this](double t) { return advance(t); }, [this] { return s_.updates.load(); },
                         [this] { return s_.epochs.load(); },
                         [this] { return s_.finished ? s_.last.load() : s_.model_now(o_.unit()); }};
      evaluation_grid(o_.rule(), o_.eval_interval, first, h, [&](const grid_point& g) {
        evaluate(g, x, m.copy);
        if (o_.checkpoint.every && (g.index + 1) % o_.checkpoint.every == 0 && !g.last) m.save(g.index);
        if (o_.halt_after && g.index + 1 == o_.halt_after && !g.last) throw halted{};
        return true;
      });
    } catch (...) {
      start_stopped();
      throw;
    }
    start_stopped();
    if (method) method->join();
    if (s_.error) std::rethrow_exception(s_.error);
  }

  /// The evaluations and cuts so far, the target and the evaluations' seconds (a checkpoint's).
  void save_history(archive_writer& w) {
    w(evaluation_seconds, target);
    w(static_cast<std::uint64_t>(evals.size()));
    for (auto& e : evals) w(e.index, e.time, e.wall_seconds, e.updates, e.epochs, e.values);
    w(static_cast<std::uint64_t>(cuts.size()));
    for (auto& c : cuts) w(c.version, c.params_hash, c.time);
  }
  /// Reads save_history's; `bound`: the payload's size (a count is never trusted beyond it).
  void load_history(archive_reader& r, std::size_t bound) {
    r(evaluation_seconds, target);
    std::uint64_t k = 0;
    r(k);
    evals.resize(static_cast<std::size_t>(std::min<std::uint64_t>(k, bound)));
    for (auto& e : evals) r(e.index, e.time, e.wall_seconds, e.updates, e.epochs, e.values);
    r(k);
    cuts.resize(static_cast<std::size_t>(std::min<std::uint64_t>(k, bound)));
    for (auto& c : cuts) r(c.version, c.params_hash, c.time);
  }
  /// The report's part the loop knows.
  void fill(run_report& out) {
    out.wall_seconds = s_.seconds_since_origin();
    out.evaluations = std::move(evals);
    out.epochs = s_.epochs.load();
    out.evaluation_seconds = evaluation_seconds;
    out.cuts = std::move(cuts);
    out.resumed_from = resumed_from;
    out.target = target;
  }

 private:
  // Sleeps until model time t (or the run's end). The horizon's evaluation is the final
  // model's: it waits there for the method to end by its own rule (every wait inside the
  // method has a deadline, past which it fails, which ends it too).
  bool advance(double t) {
    if (!s_.started) s_.start();
    std::unique_lock l(s_.m);
    if (t >= o_.horizon) {
      s_.cv.wait(l, [&] { return s_.finished; });
    } else {
      const auto until = s_.origin + std::chrono::duration_cast<live_run::clock::duration>(
                                         std::chrono::duration<double>(t * o_.unit()));
      s_.cv.wait_until(l, until, [&] { return s_.finished; });
    }
    if (s_.error) std::rethrow_exception(s_.error);
    // A run that ended before t by no rule (every worker held) has nothing left to evaluate;
    // one that ended at its horizon while the loop lagged (each evaluation waiting for a cut)
    // has: its final model, at the grid's times left.
    const bool reached = s_.updates >= o_.max_updates || s_.epochs >= o_.max_epochs;
    const bool at_horizon =
        s_.finished && std::chrono::duration<double>(s_.ended - s_.origin).count() >= o_.horizon * o_.unit();
    return !(s_.finished && t < o_.horizon && !reached && !at_horizon);
  }

  void evaluate(const grid_point& g, std::vector<float>& x, const std::function<void(std::vector<float>&)>& copy) {
    {
      std::lock_guard l(s_.model);
      copy(x);
    }
    snapshot at{g.index, g.time, s_.started ? std::max(0.0, s_.seconds_since_origin()) : 0.0, s_.updates.load(),
                s_.events.load(), s_.epochs.load(), span<const float>(x.data(), x.size())};
    const auto begin = live_run::clock::now();
    evaluation_record r{g.index, g.time, at.wall_seconds, at.updates, at.epochs, {}};
    if (o_.evaluate) r.values = o_.evaluate(at);
    evaluation_seconds += std::chrono::duration<double>(live_run::clock::now() - begin).count();
    if (o_.target && o_.target->metric < r.values.size()) target.observe(*o_.target, g.time, r.values[o_.target->metric]);
    evals.push_back(std::move(r));
  }

  live_run& s_;
  const run_options& o_;
};

/// Every worker's report to every rank (one allreduce of n x 7 doubles; each rank fills its
/// own row: `mine` = n on the server rank, which has none).
template <class Transport>
std::vector<worker_report> gather_reports(const Transport& t, std::size_t n, std::size_t mine, const worker_report& r,
                                          seconds timeout) {
  std::vector<double> v(n * 7, 0.0);
  if (mine < n) {
    double* row = v.data() + mine * 7;
    row[0] = static_cast<double>(r.jobs);
    row[1] = r.pull_seconds;
    row[2] = r.compute_seconds;
    row[3] = r.paced_seconds;
    row[4] = r.push_seconds;
    row[5] = static_cast<double>(r.violations);
    row[6] = r.overrun_seconds;
  }
  t.allreduce(span<double>(v.data(), v.size()), comm::allreduce_options{.op = comm::reduce_op::sum, .timeout = timeout})
      .wait();
  std::vector<worker_report> out(n);
  for (std::size_t w = 0; w < n; ++w) {
    const double* row = v.data() + w * 7;
    out[w] = {static_cast<std::uint64_t>(row[0]), row[1], row[2], row[3], row[4], static_cast<std::uint64_t>(row[5]),
              row[6]};
  }
  return out;
}

/// Lets a held method go on when the scope ends (a checkpoint's copy done, or failed).
struct release_at_exit {
  std::function<void()> f;
  ~release_at_exit() {
    if (f) f();
  }
};

}  // namespace heterograd::runtime::detail
