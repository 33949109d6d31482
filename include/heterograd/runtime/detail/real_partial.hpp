#pragma once
// runtime::run's partial round methods (eager-SGD: runtime::partial_round_method) on the real
// clock (runtime/run.hpp): every worker runs its rounds over the transport's real partial
// allreduce (threads: inproc's, one thread per worker; a process group: the communicator's,
// rank w worker w, rank 0's rounds on a thread beside the evaluation loop), so real arrival
// decides who is fresh and who is late. Paced and measured by round_clock.hpp, watched by the
// evaluation loop of real_loop.hpp.
//
// The run ends by vote (worker_options::stop): rank 0 votes once its wall clock passes the
// horizon, the rounds reach max_updates or the samples max_epochs, or the evaluation loop is
// done; the round after the first fired round whose result holds the vote is a flush and the
// last on every rank (eager_sgd::run_round). So every computed gradient is applied and the
// replicas agree: both are checked after the run (the audit, across the ranks under a process
// group) and reported. After each round rank 0 publishes its replica under the model's lock
// and books the round's report (the same on every rank): each fresh contribution applied
// (delay 0), each late one buffered with the lag at which a later round folded it in.
//
// No checkpoints yet: a consistent cut needs the ranks to agree on a flush round mid-run (a
// second vote; docs/runtime.md), so run_options::checkpoint is refused by name.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/algorithms/sync/exchange.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/comm/inproc_partial.hpp"
#include "heterograd/comm/partial.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/hash.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/runtime/detail/real_loop.hpp"
#include "heterograd/runtime/detail/round_clock.hpp"
#include "heterograd/runtime/live.hpp"
#include "heterograd/runtime/options.hpp"
#include "heterograd/runtime/placement.hpp"
#include "heterograd/runtime/report.hpp"
#include "heterograd/runtime/rounds.hpp"
#include "heterograd/sim/recorder.hpp"

namespace heterograd::runtime::detail {

template <class Method, class Model>
class real_partial {
 public:
  real_partial(Method& p, const run_options& o, const Model& model, placement_config placement,
               std::string placement_key)
      : p_(p), o_(o), placement_(std::move(placement)), key_(std::move(placement_key)), n_(p.workers()),
        rc_(n_, o.real_scale, model, [this](std::size_t k) { return p_.batch(k); }, s_.origin,
            [this](std::size_t w) { pin(w); }),
        updates_(n_), fresh_(n_, 0), late_(n_, 0), pending_(n_) {
    o.rule().validate();
    placement_.validate(n_, key_);
    placement_.refuse_server(key_, "must be empty for a round method: it has no server thread");
    if constexpr (std::same_as<Model, no_time_model>)
      require(o.real_scale == 0, "run_options.real_scale", o.real_scale,
              "must be 0 without a worker-time model (runtime::run's model argument paces the rounds)");
    require(!o.membership.elastic, "run_options.membership.elastic", "true",
            "applies to a server policy (runtime::run(served, ...)); eager-SGD on runtime::run keeps a fixed "
            "membership (docs/elastic.md)");
    require(o.checkpoint.every == 0 && !o.checkpoint.resume, "run_options.checkpoint", "set",
            "must be unset for eager-SGD on the real clock: its ranks' rounds are not checkpointed there yet "
            "(a cut needs a flush round the ranks agree on mid-run; docs/runtime.md)");
    (void)p_.partial_setup(true);  // the method's own refusals, before anything runs
    for (std::size_t k = 0; k < n_; ++k) round_samples_ += static_cast<std::uint64_t>(o.samples_of(p_.batch(k)));
    algorithms::sync::worker_options base;
    base.timeout = o.timeout;
    wo_ = rc_.options(base);
    wo_.stop = [this](std::size_t w) { return w == 0 && vote(); };
    wo_.round_end = [this](std::size_t w, const comm::round_report& rep) {
      if (w == 0) round_end(rep);
    };
    const auto x = p_.params(0);
    published_.assign(x.begin(), x.end());
  }

  run_report run_threads() {
    loop_.run(loop_hooks([this] {
      comm::inproc::spawn(static_cast<int>(n_), [this](comm::inproc::communicator c) {
        if (o_.thread_init) o_.thread_init();
        run_worker(p_, c, wo_, c.rank() == 0);
      });
    }, false));
    const auto a = audit(static_cast<const no_partial_group*>(nullptr));
    return report(rc_.reports(), a);
  }

  template <class Transport>
  run_report run_ranks(const Transport& t) {
    const auto me = static_cast<std::size_t>(t.rank());
    auto body = [&] {
      if (o_.thread_init) o_.thread_init();
      run_worker(p_, t, wo_, true);
    };
    if (me != 0) {  // a worker rank: its rounds, no evaluation
      s_.start_clock();
      body();
      (void)audit(&t);
      run_report out;
      out.evaluating = false;
      out.workers = gather_reports(t, n_, me, rc_.reports()[me], o_.timeout);
      return out;
    }
    try {
      loop_.run(loop_hooks(body, true));
    } catch (const halted&) {
      (void)audit(&t);  // the other ranks' last collectives
      (void)gather_reports(t, n_, 0, rc_.reports()[0], o_.timeout);
      throw;
    }
    const auto a = audit(&t);
    return report(gather_reports(t, n_, 0, rc_.reports()[0], o_.timeout), a);
  }

 private:
  struct no_partial_group {};
  struct audited {
    bool agree = true;
    double error = 0;
  };

  loop_method loop_hooks(std::function<void()> body, bool group) {
    return {std::move(body), [this](std::vector<float>& x) { x.assign(published_.begin(), published_.end()); },
            [](std::uint64_t) {}, [](const std::vector<std::byte>&) {}, group};
  }
  void pin(std::size_t w) { placement_.pin_once(this, w, key_); }
  double epochs() const {
    return o_.train_samples ? static_cast<double>(rounds_ * round_samples_) / static_cast<double>(o_.train_samples)
                            : 0.0;
  }
  // Rank 0's vote before each of its rounds (read on its worker's thread, which alone moves
  // the counters): the loop is done (live_run::stop), or a horizon is reached.
  bool vote() const {
    return s_.stop || s_.model_now(o_.unit()) >= o_.horizon || rounds_ >= o_.max_updates ||
           static_cast<double>(rounds_ * round_samples_) >= o_.max_epochs * static_cast<double>(o_.train_samples);
  }
  void round_end(const comm::round_report& rep);
  template <class Group>
  audited audit(const Group* t);
  run_report report(std::vector<worker_report> reports, const audited& a);

  Method& p_;
  const run_options& o_;
  placement_config placement_;
  std::string key_;
  std::size_t n_;
  live_run s_;
  round_clock<Model> rc_;
  real_loop loop_{s_, o_};
  algorithms::sync::worker_options wo_;
  sim::recorder updates_;
  std::uint64_t rounds_ = 0, round_samples_ = 0;  // rank 0's rounds applied; one gradient of every worker
  std::vector<std::uint64_t> fresh_, late_;
  std::vector<std::vector<std::uint64_t>> pending_;  // each rank's late rounds not yet folded in
  std::vector<comm::round_report> reports_;
  std::vector<typename Method::value_type> published_;
};

// Round rep.round on rank 0: its fresh contributions are applied; a late part folded in now
// was buffered since its round (its lag: this round - that round; a rank more than a round
// behind may have parts of two late rounds folded in at once, each counted with its own lag).
// A rank's late rounds are known from the reports before (it was not fresh there).
template <class Method, class Model>
void real_partial<Method, Model>::round_end(const comm::round_report& rep) {
  std::vector<char> in(n_, 0);
  for (int r : rep.fresh) in[static_cast<std::size_t>(r)] = 1;
  for (int r : rep.stale) {
    auto& q = pending_[static_cast<std::size_t>(r)];
    for (std::uint64_t t : q)
      updates_.record_update(static_cast<sim::worker_id>(r), rep.round - t, sim::update_outcome::buffered);
    q.clear();
  }
  for (std::size_t r = 0; r < n_; ++r) {
    if (in[r]) {
      ++fresh_[r];
      updates_.record_update(static_cast<sim::worker_id>(r), 0, sim::update_outcome::applied);
    } else {
      ++late_[r];
      pending_[r].push_back(rep.round);
    }
  }
  reports_.push_back(rep);
  ++rounds_;
  {
    std::lock_guard l(s_.model);
    const auto x = p_.params(0);
    published_.assign(x.begin(), x.end());
  }
  s_.updates = rounds_;
  s_.events = rounds_ * n_;  // contributions, as the simulated run counts its events
  s_.epochs = epochs();
  s_.last = s_.model_now(o_.unit());
}

// The replicas agree bitwise and every computed gradient was applied: the largest difference
// between the sum of the rounds' results (times n when averaging) and the sum of the computed
// gradients, relative to the largest of the latter. Under a process group each rank holds its
// own replica and its own worker's computed sum: one allreduce of the sums, one of the hashes.
template <class Method, class Model>
template <class Group>
auto real_partial<Method, Model>::audit(const Group* t) -> audited {
  std::vector<double> v = p_.computed_sum();
  audited a;
  if constexpr (std::same_as<Group, no_partial_group>) {
    const auto x0 = p_.params(0);
    for (std::size_t k = 1; k < n_ && a.agree; ++k) {
      const auto x = p_.params(k);
      a.agree = std::equal(x0.begin(), x0.end(), x.begin(), x.end());
    }
  } else {
    const auto x = p_.params(static_cast<std::size_t>(t->rank()));
    const double h = static_cast<double>(fnv1a(x.data(), x.size() * sizeof(x[0])) >> 11);  // exact in a double
    std::vector<double> hashes{h, -h};
    t->allreduce(span<double>(v.data(), v.size()),
                 comm::allreduce_options{.op = comm::reduce_op::sum, .timeout = o_.timeout})
        .wait();
    t->allreduce(span<double>(hashes.data(), hashes.size()),
                 comm::allreduce_options{.op = comm::reduce_op::max, .timeout = o_.timeout})
        .wait();
    a.agree = hashes[0] == -hashes[1];
  }
  const auto& applied = p_.applied_sum();
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < v.size() && i < applied.size(); ++i) {
    err = std::max(err, std::abs(applied[i] - v[i]));
    scale = std::max(scale, std::abs(v[i]));
  }
  a.error = scale > 0 ? err / scale : err;
  return a;
}

template <class Method, class Model>
run_report real_partial<Method, Model>::report(std::vector<worker_report> reports, const audited& a) {
  run_report out;
  loop_.fill(out);
  out.updates = updates_;
  out.jobs = rc_.jobs([](std::size_t, std::uint64_t) { return 1; }, false);
  out.gradients.resize(n_);
  for (std::size_t k = 0; k < n_ && k < reports.size(); ++k) out.gradients[k] = reports[k].jobs;
  out.results = out.gradients;
  out.jobs_sent = out.gradients;
  out.workers = std::move(reports);
  out.rounds = rounds_;
  out.updates_done = rounds_;
  out.arrivals = rounds_ * n_;
  out.end_time = s_.last.load();
  out.params.assign(published_.begin(), published_.end());
  out.partial.rounds = std::move(reports_);
  out.partial.late_per_worker = late_;
  out.partial.replicas_agree = a.agree;
  out.partial.conservation_error = a.error;
  return out;
}

}  // namespace heterograd::runtime::detail
