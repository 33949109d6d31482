#pragma once
// OmniLearn's ASP form as a server policy (Tyagi, Sharma, IEEE TPDS 2025, #7 of
// docs/references.md): vanilla asynchronous SGD whose workers' batch sizes the controller
// balance::omnilearn_asp equalises. Each arrival is one measurement of its worker (the job's
// batch and its compute time, arrival.time - arrival.start: virtual seconds in the simulator,
// wall seconds where a runtime measures them), and is applied at once with the weight
// b_i / b_i(0) when the learning rate follows the batch (linear scaling; the weight multiplies
// the server optimizer's learning rate, model_server::apply). Once every worker has reported
// since the last run and `rebalance_every` arrivals have passed, the controller runs:
// b_i' = b_i + k_p (X_i t̄ - b_i) with X_i the measured throughput, clamped to
// [min_batch, max_batch] and rounded, unless the largest change is inside the dead-band. The
// new batches reach the runtime (control handle set_batch, when it has one) and apply to each
// worker's next job; a job already running keeps the batch it started with, and is measured
// with it. Where the job time is proportional to the batch over a worker's speed, one run
// (k_p = 1) brings every worker to the same iteration time, with b_i proportional to its speed
// (tests/async).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/algorithms/async/server.hpp"
#include "heterograd/balance/measurement.hpp"
#include "heterograd/balance/omnilearn.hpp"
#include "heterograd/core/clock.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::algorithms::async {

struct omnilearn_asgd_config {
  balance::omnilearn_config controller{};
  /// Arrivals between controller runs, counted once every worker has reported since the
  /// last (0: the number of workers).
  std::size_t rebalance_every = 0;
  /// Weight each push by b_i / b_i(0) (the learning rate follows the batch).
  bool scale_learning_rate = true;

  static constexpr auto description() {
    return describe(
        "omnilearn_asgd",
        describe_field("controller", &omnilearn_asgd_config::controller, "OmniLearn's controller"),
        describe_field("rebalance_every", &omnilearn_asgd_config::rebalance_every,
                       "arrivals between controller runs, counted once every worker has reported "
                       "since the last (0: the number of workers)"),
        describe_field("scale_learning_rate", &omnilearn_asgd_config::scale_learning_rate,
                       "weight each push by b_i / b_i(0) (the learning rate follows the batch)"));
  }
};

template <class T = double, class Optimizer = default_optimizer, class Memory = host_memory>
class omnilearn_asgd : public detail::policy_base<T, Optimizer, Memory> {
  using base = detail::policy_base<T, Optimizer, Memory>;

 public:
  /// `initial_batches`: b_i(0) of each worker (one per worker, in the controller's bounds).
  omnilearn_asgd(std::size_t workers, model_server<T, Optimizer, Memory> server,
                 std::vector<std::size_t> initial_batches, omnilearn_asgd_config config = {})
      : base(workers, std::move(server)),
        ctrl_((require_same_size("omnilearn_asgd.initial_batches", initial_batches.size(),
                                 "workers", workers),
               std::span<const std::size_t>(initial_batches)),
              config.controller),
        cfg_(config), job_batch_(std::move(initial_batches)), reported_(workers, 0) {}

  /// The batch of worker w's next job (the gradient oracle's, and the runtime's).
  std::size_t batch(worker_id w) const {
    require(w < this->workers_, "worker", w, "must be < the number of workers");
    return ctrl_.batch_size(w);
  }
  /// The batch worker w's running job started with (until its result has been handed over:
  /// what a driver counts that result's samples by).
  std::size_t job_batch(worker_id w) const {
    require(w < this->workers_, "worker", w, "must be < the number of workers");
    return job_batch_[w];
  }
  const balance::omnilearn_asp& controller() const { return ctrl_; }
  const omnilearn_asgd_config& config() const { return cfg_; }
  /// Controller runs so far, and those that changed a batch.
  std::uint64_t rebalances() const { return runs_; }
  std::uint64_t changes() const { return changes_; }

  template <class Ctl, class Arrival, class G>
  void on_arrival(Ctl& ctl, const Arrival& a, const G& g) {
    const auto in = this->admit(ctl, a, g, "omnilearn_asgd");
    const auto w = static_cast<std::size_t>(a.worker);
    if (in) {
      const double t = static_cast<double>(a.time) - static_cast<double>(a.start);
      if (t > 0) {
        ctrl_.observe(w, balance::worker_measurement{job_batch_[w], 1, seconds{t}});
        reported_[w] = 1;
      }
      const double weight = cfg_.scale_learning_rate ? ctrl_.learning_rate_scale(w) : 1.0;
      this->server_.apply(in->gradient, weight);
      ctl.applied(a.worker, in->delay);
      ++since_;
      maybe_rebalance(ctl);
    }
    job_batch_[w] = ctrl_.batch_size(w);  // worker w restarts now, with its current batch
  }

  /// Membership (docs/elastic.md): the controller runs over the members (t̄ is their mean;
  /// "every worker has reported" means every member); an absent worker keeps its batch. A
  /// joiner, fresh or returning, starts with the batch the controller holds for it and is
  /// measured from its first job, so the next run rebalances it with the others.
  template <class Ctl>
  void on_leave(Ctl& ctl, worker_id w) {
    this->mark_leave(w);
    reported_[w] = 0;
    maybe_rebalance(ctl);
  }
  template <class Ctl>
  void on_join(Ctl&, worker_id w) {
    this->mark_join(w);
    reported_[w] = 0;
    job_batch_[w] = ctrl_.batch_size(w);
  }
  friend bool operator==(const omnilearn_asgd& a, const omnilearn_asgd& b) {
    return a.server_ == b.server_ && a.same_membership(b) && a.ctrl_ == b.ctrl_ && a.job_batch_ == b.job_batch_ &&
           a.reported_ == b.reported_ && a.since_ == b.since_ && a.runs_ == b.runs_ &&
           a.changes_ == b.changes_;
  }

  /// Checkpointing (core/archive.hpp): the server, the controller's batches and window, the
  /// batch of each running job and the counters; the configuration is rebuilt by the caller.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(this->server_, ctrl_, job_batch_, reported_, since_, runs_, changes_);
    this->serialize_membership(ar);
  }

 private:
  template <class Ctl>
  void maybe_rebalance(Ctl& ctl) {
    const std::size_t every = cfg_.rebalance_every == 0 ? this->live_ : cfg_.rebalance_every;
    if (since_ < every) return;
    for (std::size_t j = 0; j < this->workers_; ++j)
      if (!reported_[j] && this->live(static_cast<worker_id>(j))) return;
    since_ = 0;
    std::fill(reported_.begin(), reported_.end(), 0);
    ++runs_;
    if (!ctrl_.rebalance(this->absent_)) return;
    ++changes_;
    if constexpr (requires { ctl.set_batch(worker_id{0}, std::size_t{1}); })
      for (std::size_t j = 0; j < this->workers_; ++j)
        ctl.set_batch(static_cast<worker_id>(j), ctrl_.batch_size(j));
  }

  balance::omnilearn_asp ctrl_;
  omnilearn_asgd_config cfg_;
  std::vector<std::size_t> job_batch_;  // the batch each worker's running job started with
  std::vector<char> reported_;          // measured since the last controller run
  std::size_t since_ = 0;               // arrivals since then
  std::uint64_t runs_ = 0, changes_ = 0;
};

}  // namespace heterograd::algorithms::async
