#pragma once
// runtime::run's round methods on the real clock (runtime/run.hpp): rounds back to back on
// real workers (threads: one inproc thread per worker each round; a process group: rank w is
// worker w, rank 0's rounds on a thread beside the evaluation loop), paced and measured by
// round_clock.hpp, watched by the evaluation loop of real_loop.hpp.
//
// Before every round the ranks agree (one allreduce of n + 3 doubles) on whether to go on,
// rank 0 deciding by its wall clock (`over`: the round that just ended is past the horizon,
// which the simulated run would not have), on whether a checkpoint waits for a cut, and on
// each worker's measured busy time (between_rounds reads it). After each round the method's
// model is published under the model's lock: evaluations see the last round that ended.
// Checkpoints cut at a round boundary. Under a process group every rank's part of the state
// (its replica, its worker's timing, the client's per-rank part: save_rank) is gathered on
// rank 0 at the agreed round (parts.hpp) and handed back at a resume, where every rank checks
// that all go on from the same round.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/algorithms/sync/exchange.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/core/archive.hpp"
#include "heterograd/runtime/detail/real_loop.hpp"
#include "heterograd/runtime/detail/round_clock.hpp"
#include "heterograd/runtime/live.hpp"
#include "heterograd/runtime/options.hpp"
#include "heterograd/runtime/parts.hpp"
#include "heterograd/runtime/placement.hpp"
#include "heterograd/runtime/report.hpp"
#include "heterograd/runtime/rounds.hpp"
#include "heterograd/sim/recorder.hpp"

namespace heterograd::runtime {

/// A round method (runtime::per_rank_round_policy: bsp, selsync, local_sgd) as runtime::run
/// runs it on the real clock. `params()`: the model evaluated and published after each round
/// (worker 0's replica, local SGD's anchor). Optional: `between_rounds(r, m)` runs at every
/// round boundary on every rank after round r (OmniLearn's controller on the measured busy
/// times, biased local SGD's redraws); `save`/`load`, what a checkpoint holds of the method
/// (an adapter holding it with its own state; default: method.serialize).
template <class Method, class Params>
struct rounds_of {
  Method& method;
  Params params;
  std::function<void(std::uint64_t round, const round_measurements&)> between_rounds{};
  std::function<void(archive_writer&)> save{};
  std::function<void(archive_reader&)> load{};
};
template <class Method, class Params, class... Rest>
rounds_of(Method&, Params, Rest&&...) -> rounds_of<Method, Params>;

}  // namespace heterograd::runtime

namespace heterograd::runtime::detail {

/// The threads runner's stand-in for a process group.
struct no_group {};

template <class Method, class Params, class Model>
class real_rounds {
 public:
  real_rounds(const rounds_of<Method, Params>& m, const run_options& o, const Model& model,
              placement_config placement, std::string placement_key)
      : m_(m), p_(m.method), o_(o), placement_(std::move(placement)), key_(std::move(placement_key)),
        n_(m.method.workers()),
        rc_(n_, o.real_scale, model, [this](std::size_t k) { return p_.batch(k); }, s_.origin,
            [this](std::size_t w) { pin(w); }),
        updates_(n_), steps_(n_, 0) {
    o.rule().validate();
    placement_.validate(n_, key_);
    placement_.refuse_server(key_, "must be empty for a round method: it has no server thread");
    if constexpr (std::same_as<Model, no_time_model>)
      require(o.real_scale == 0, "run_options.real_scale", o.real_scale,
              "must be 0 without a worker-time model (runtime::run's model argument paces the rounds)");
    require(!o.membership.elastic, "run_options.membership.elastic", "true",
            "applies to a server policy (runtime::run(served, ...)); round methods on runtime::run keep a fixed "
            "membership (docs/elastic.md)");
    if (!serializable())
      require(o.checkpoint.every == 0 && !o.checkpoint.resume, "run_options.checkpoint", "set",
              "needs a method with serialize(archive) or rounds_of::save and load");
    algorithms::sync::worker_options base;
    base.timeout = o.timeout;
    wo_ = rc_.options(base);
    const auto x = m_.params();
    published_.assign(x.begin(), x.end());
  }

  run_report run_threads() {
    loop_.run(method_hooks([this] { body(static_cast<const no_group*>(nullptr)); }, false));
    return report(rc_.reports());
  }

  template <class Transport>
  run_report run_ranks(const Transport& t) {
    group_ = true;
    const auto me = static_cast<std::size_t>(t.rank());
    auto body_of = [&] {
      if (o_.thread_init) o_.thread_init();
      body(&t);
    };
    if (me != 0) {  // a worker rank: its rounds, no evaluation
      s_.start_clock();
      body_of();
      run_report out;
      out.evaluating = false;
      out.workers = gather_reports(t, n_, me, rc_.reports()[me], o_.timeout);
      return out;
    }
    try {
      loop_.run(method_hooks(body_of, true));
    } catch (const halted&) {
      (void)gather_reports(t, n_, 0, rc_.reports()[0], o_.timeout);  // the other ranks' last collective
      throw;
    }
    return report(gather_reports(t, n_, 0, rc_.reports()[0], o_.timeout));
  }

 private:
  struct agreed {
    bool more, over, checkpoint;
  };

  loop_method method_hooks(std::function<void()> body, bool group) {
    return {std::move(body), [this](std::vector<float>& x) { x = published_; },
            [this](std::uint64_t) { save_checkpoint(); },
            [this](const std::vector<std::byte>& b) { load_checkpoint(b); }, group};
  }
  void pin(std::size_t w) { placement_.pin_once(this, w, key_); }
  bool reached() const {
    return rounds_ >= o_.max_updates ||
           static_cast<double>(samples_) >= o_.max_epochs * static_cast<double>(o_.train_samples);
  }
  double epochs() const {
    return o_.train_samples ? static_cast<double>(samples_) / static_cast<double>(o_.train_samples) : 0.0;
  }
  parts_options parts_for(std::size_t own_bytes) const {
    // a part's announced size is checked before anything is sized by it: every rank saves the
    // same structure, so at most twice this rank's own and 1 MiB
    return {.limit = 2 * own_bytes + (std::size_t{1} << 20), .timeout = o_.timeout, .tag = 29000};
  }

  // Whether to go on with another round, the same answer on every rank.
  template <class Group>
  agreed agree(const Group* t, bool over) {
    bool stop = over || s_.stop || reached() || s_.model_now(o_.unit()) >= o_.horizon;
    bool checkpoint = false;
    if constexpr (!std::same_as<Group, no_group>) {
      std::vector<double> v(n_ + 3, 0.0);
      const auto me = static_cast<std::size_t>(t->rank());
      if (me == 0) {
        v[0] = stop ? 1.0 : 0.0;
        v[1] = over ? 1.0 : 0.0;
        v[2] = s_.pause_requested.load(std::memory_order_acquire) ? 1.0 : 0.0;
      }
      v[3 + me] = rc_.busy(me);
      t->allreduce(span<double>(v.data(), v.size()),
                   comm::allreduce_options{.op = comm::reduce_op::sum, .timeout = o_.timeout})
          .wait();
      for (std::size_t k = 0; k < n_; ++k) rc_.set_busy(k, v[3 + k]);
      stop = v[0] > 0 || reached();
      over = v[1] > 0;
      checkpoint = v[2] > 0;
    }
    return agreed{!stop, over, checkpoint};
  }

  template <class Group>
  void one_round(const Group* t) {
    if constexpr (std::same_as<Group, no_group>) {
      const auto start = p_.shared_state();  // read before any worker moves
      comm::inproc::spawn(static_cast<int>(n_), [&](comm::inproc::communicator c) {
        if (o_.thread_init) o_.thread_init();
        run_worker(p_, c, 1, start, wo_, c.rank() == 0);
      });
    } else {
      run_worker(p_, *t, 1, wo_, true);
    }
  }

  template <class Group>
  void body(const Group* t);
  template <class Group>
  void resume_ranks(const Group& t);
  void publish(double end);
  bool serializable() const {
    return static_cast<bool>(m_.save) || requires(archive_writer& w) { p_.serialize(w); };
  }
  void save_state(archive_writer& w);
  void load_state(archive_reader& r);
  std::string own_part();
  cut_record cut_now() const {
    const auto x = m_.params();
    return {published_rounds_, fnv1a(x.data(), x.size() * sizeof(x[0])), cut_time_};
  }
  void save_checkpoint();
  void load_checkpoint(const std::vector<std::byte>& payload);
  run_report report(std::vector<worker_report> reports);

  rounds_of<Method, Params> m_;
  Method& p_;
  const run_options& o_;
  placement_config placement_;
  std::string key_;
  std::size_t n_;
  live_run s_;
  round_clock<Model> rc_;
  real_loop loop_{s_, o_};
  algorithms::sync::worker_options wo_;
  bool group_ = false;
  sim::recorder updates_;
  std::uint64_t samples_ = 0, rounds_ = 0, published_rounds_ = 0;
  std::vector<std::uint64_t> steps_;  // gradients per worker
  double cut_time_ = 0;
  std::vector<float> published_;
  std::vector<std::string> parts_;              // rank 0: ranks 1 .. n - 1's parts of the checkpoint
  std::vector<std::uint64_t> resumed_rounds_;  // a process group: the round each rank went on from
};

template <class Method, class Params, class Model>
template <class Group>
void real_rounds<Method, Params, Model>::body(const Group* t) {
  if constexpr (!std::same_as<Group, no_group>) resume_ranks(*t);
  agreed a = agree(t, false);
  while (a.more) {
    const std::uint64_t r = rounds_;
    std::uint64_t round_samples = 0;
    for (std::size_t k = 0; k < n_; ++k)
      round_samples += static_cast<std::uint64_t>(o_.samples_of(p_.batch(k))) * p_.steps_in_round(k, r);
    one_round(t);
    for (std::size_t k = 0; k < n_; ++k) {
      const auto h = static_cast<std::uint64_t>(p_.steps_in_round(k, r));
      steps_[k] += h;
      if (h > 0) updates_.record_update(static_cast<sim::worker_id>(k), 0, sim::update_outcome::applied);
    }
    rounds_ = r + 1;
    samples_ += round_samples;
    const double end = s_.model_now(o_.unit());
    a = agree(t, end > o_.horizon);
    if (m_.between_rounds) m_.between_rounds(r, round_measurements{r, rc_.busy()});
    if (a.over) break;
    publish(end);
    if constexpr (!std::same_as<Group, no_group>) {
      // Rank 0 stops at this cut only when every rank's part of this round was gathered (a
      // request that came after the agreement waits for the next round's).
      if (!a.checkpoint) continue;
      cut_time_ = end;
      const std::string own = own_part();  // rank 0's goes into the checkpoint whole; its size bounds the others'
      parts_ = gather_parts(*t, t->rank() != 0 ? own : std::string(), parts_for(own.size()));
    }
    s_.cut();  // a round boundary: a checkpoint may be written here
  }
}

// A resumed run under a process group: rank 0 hands every rank its part (empty: a fresh run),
// and every rank checks that all go on from the same round.
template <class Method, class Params, class Model>
template <class Group>
void real_rounds<Method, Params, Model>::resume_ranks(const Group& t) {
  const std::string mine = scatter_parts(t, parts_, parts_for(own_part().size()));
  if (!mine.empty()) {
    archive_reader ar(std::span<const std::byte>(reinterpret_cast<const std::byte*>(mine.data()), mine.size()));
    load_state(ar);
    if (o_.checkpoint.load_rank) o_.checkpoint.load_rank(ar);
    if (!ar.done())
      throw std::runtime_error("heterograd: runtime: rank " + std::to_string(t.rank()) +
                               "'s part of the checkpoint has trailing bytes");
  }
  std::vector<std::uint64_t> at(n_, 0);
  at[static_cast<std::size_t>(t.rank())] = published_rounds_;
  t.allreduce(span<std::uint64_t>(at.data(), at.size()),
              comm::allreduce_options{.op = comm::reduce_op::sum, .timeout = o_.timeout})
      .wait();
  for (std::size_t k = 0; k < n_; ++k)
    if (at[k] != at[0])
      throw std::runtime_error("heterograd: runtime: rank " + std::to_string(k) + " resumed at round " +
                               std::to_string(at[k]) + ", rank 0 at round " + std::to_string(at[0]));
  resumed_rounds_ = at;
}

template <class Method, class Params, class Model>
void real_rounds<Method, Params, Model>::publish(double end) {
  {
    std::lock_guard l(s_.model);
    const auto x = m_.params();
    published_.assign(x.begin(), x.end());
  }
  published_rounds_ = rounds_;
  s_.updates = rounds_;
  s_.epochs = epochs();
  s_.last = end;
}

// The state of a cut, as the simulated run saves it: the method, the loop's counters, the
// workers' timing.
template <class Method, class Params, class Model>
void real_rounds<Method, Params, Model>::save_state(archive_writer& w) {
  if (m_.save) m_.save(w);
  else if constexpr (requires { p_.serialize(w); }) p_.serialize(w);
  w(rounds_, samples_, published_rounds_, steps_, cut_time_, updates_);
  rc_.serialize(w);
}

template <class Method, class Params, class Model>
void real_rounds<Method, Params, Model>::load_state(archive_reader& r) {
  if (m_.load) m_.load(r);
  else if constexpr (requires { p_.serialize(r); }) p_.serialize(r);
  r(rounds_, samples_, published_rounds_, steps_, cut_time_, updates_);
  if (steps_.size() != n_)
    throw archive_error(0, "heterograd: runtime: the checkpoint's per-worker counts are not one per worker (" +
                               std::to_string(n_) + ")");
  rc_.serialize(r);
  s_.resume_at(cut_time_, o_.unit());
  const auto x = m_.params();
  published_.assign(x.begin(), x.end());
  s_.updates = published_rounds_;
  s_.epochs = epochs();
}

// This rank's part of a checkpoint under a process group: its state and the client's part.
template <class Method, class Params, class Model>
std::string real_rounds<Method, Params, Model>::own_part() {
  archive_writer w;
  save_state(w);
  if (o_.checkpoint.save_rank) o_.checkpoint.save_rank(w);
  const auto& b = w.bytes();
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// A checkpoint: the method held at a round boundary while the state is copied (before the
// method's threads start, the state as it is; a process group's ranks then wait for their
// parts, a fresh run's empty ones).
template <class Method, class Params, class Model>
void real_rounds<Method, Params, Model>::save_checkpoint() {
  archive_writer w;
  {
    if (!s_.started && group_ && parts_.empty()) parts_.assign(n_ - 1, std::string());
    release_at_exit held{s_.hold()};
    cut_time_ = s_.last.load();
    loop_.cuts.push_back(cut_now());
    if (o_.checkpoint.save) o_.checkpoint.save(w);  // first: a resume checks the client's identity first
    save_state(w);
    w(parts_);
    loop_.save_history(w);
  }
  if (o_.checkpoint.write) o_.checkpoint.write(w.bytes(), loop_.cuts.back());
}

template <class Method, class Params, class Model>
void real_rounds<Method, Params, Model>::load_checkpoint(const std::vector<std::byte>& payload) {
  archive_reader r(payload);
  if (o_.checkpoint.load) o_.checkpoint.load(r);
  load_state(r);
  r(parts_);
  const std::size_t others = group_ ? n_ - 1 : 0;
  if (parts_.size() != others)
    throw archive_error(payload.size(), "heterograd: runtime: the checkpoint holds the parts of " +
                                            std::to_string(parts_.size()) + " other ranks; this run has " +
                                            std::to_string(others));
  loop_.load_history(r, payload.size());
  if (!r.done()) throw archive_error(payload.size(), "heterograd: runtime: the checkpoint has trailing bytes (another build's layout)");
  loop_.resumed_from = cut_now();
}

template <class Method, class Params, class Model>
run_report real_rounds<Method, Params, Model>::report(std::vector<worker_report> reports) {
  run_report out;
  loop_.fill(out);
  out.updates = updates_;
  out.jobs = rc_.jobs([this](std::size_t k, std::uint64_t r) { return p_.steps_in_round(k, r); }, true);
  out.results.resize(n_);
  for (std::size_t k = 0; k < n_ && k < reports.size(); ++k) out.results[k] = reports[k].jobs;
  out.jobs_sent = out.results;
  out.workers = std::move(reports);
  out.gradients = steps_;
  out.rounds = published_rounds_;
  out.updates_done = published_rounds_;
  out.end_time = s_.last.load();
  out.resumed_rounds_per_rank = resumed_rounds_;
  out.params = published_;
  return out;
}

}  // namespace heterograd::runtime::detail
