#pragma once
// Two baselines of Ringmaster ASGD (Maranjyan, Tyurin, Richtarik, ICML 2025):
//
// Rennala SGD (Tyurin & Richtarik, NeurIPS 2023; Alg. 2 of the Ringmaster paper): an
// asynchronous mini-batch. The server collects B gradients that were all computed at the
// current x (a gradient from an older version is discarded), then
//     x <- x - gamma * (1/B) sum_{j<B} g_j ,  k <- k + 1.
// Workers restart at the current x after every arrival. At an update every computation
// still running at the old x is stopped and restarted at the new one (stop_stale, what the
// authors' simulator does by resetting all workers each step); without it those workers
// finish, are discarded, and only then restart. Authors' tuned MLP run: B = 6.
//
// Naive Optimal ASGD (Alg. 3): vanilla ASGD run on the m* fastest workers only, where
//     m* = argmin_m  (m + sigma^2/eps) / sum_{i<=m} 1/tau_(i)
// is the minimiser of the optimal time complexity
//     T(m) = ((1/m) sum_{i<=m} 1/tau_(i))^{-1} (L Delta/eps + sigma^2 L Delta/(m eps^2))
// over the workers sorted by compute time tau_(1) <= ... <= tau_(n). Needs the taus.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/algorithms/async/server.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::algorithms::async {

struct rennala_config {
  std::size_t batch = 6;  ///< B: fresh gradients per update (authors' tuned value)
  bool stop_stale = true;  ///< stop computations at the old x at each update

  static constexpr auto description() {
    return describe("rennala_config",
                    describe_field("batch", &rennala_config::batch,
                                   "B: fresh gradients per update", at_least(1)),
                    describe_field("stop_stale", &rennala_config::stop_stale,
                                   "stop computations at the old x at each update"));
  }
  void validate() const { validate_fields(*this); }
};

template <class T = double, class Optimizer = default_optimizer, class Memory = host_memory>
class rennala_sgd : public detail::policy_base<T, Optimizer, Memory> {
  using base = detail::policy_base<T, Optimizer, Memory>;

 public:
  rennala_sgd(std::size_t workers, model_server<T, Optimizer, Memory> server, rennala_config config = {})
      : base(workers, std::move(server)), config_((config.validate(), config)),
        sum_(this->server_.make(this->dim())) {}

  const rennala_config& config() const { return config_; }
  /// Fresh gradients collected towards the next update.
  std::size_t collected() const { return count_; }
  // Membership: policy_base's hooks. Nothing accepted is dropped when its worker leaves (the
  // gradients in the sum were computed at the current x, so they stay valid); the batch of B
  // is filled by the members' arrivals (a leaver's late result is dropped by admit).

  template <class Ctl, class Arrival, class G>
  void on_arrival(Ctl& ctl, const Arrival& a, const G& g) {
    const auto in = this->admit(ctl, a, g, "rennala_sgd");
    if (!in) return;
    const std::uint64_t delay = in->delay;
    if (delay > 0) {
      ctl.discarded(a.worker, delay);
      return;
    }
    const auto s = this->server_.view(sum_);
    detail::ops::axpy(this->server_.memory(), T(1), in->gradient, s);
    if (++count_ < config_.batch) {
      ctl.buffered(a.worker, 0);
      return;
    }
    this->server_.apply(this->server_.view(std::as_const(sum_)), 1.0 / static_cast<double>(config_.batch));
    detail::ops::zero(this->server_.memory(), s);
    count_ = 0;
    ctl.applied(a.worker, 0);
    if (config_.stop_stale) detail::stop_all_busy(ctl, this->workers_);
  }

  friend bool operator==(const rennala_sgd& a, const rennala_sgd& b) {
    return a.server_ == b.server_ && a.same_membership(b) && a.count_ == b.count_ &&
           kernels::same_bits(a.server_.memory(), a.sum_, b.sum_);
  }

  /// Checkpointing (core/archive.hpp): the mutable state; the configuration is rebuilt.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(this->server_);
    this->serialize_membership(ar);
    kernels::archive_buffer(ar, this->server_.memory(), sum_, "rennala.sum", this->dim());
    ar(count_);
  }

 private:
  rennala_config config_;
  typename base::server_type::vector_type sum_;
  std::size_t count_ = 0;
};
template <class T, class O, class M>
rennala_sgd(std::size_t, model_server<T, O, M>) -> rennala_sgd<T, O, M>;
template <class T, class O, class M>
rennala_sgd(std::size_t, model_server<T, O, M>, rennala_config) -> rennala_sgd<T, O, M>;

/// m* = argmin_m (m + noise_ratio) / sum_{i<=m} 1/tau_(i) (ties: the smaller m), with
/// noise_ratio = sigma^2 / eps. With noise_ratio = 0 the fastest worker alone is optimal.
inline std::size_t optimal_worker_count(const std::vector<double>& tau, double noise_ratio) {
  require(!tau.empty(), "tau.size", tau.size(), "must be > 0");
  require(std::isfinite(noise_ratio) && noise_ratio >= 0, "noise_ratio", noise_ratio,
          "must be finite and >= 0");
  for (std::size_t i = 0; i < tau.size(); ++i)
    require(std::isfinite(tau[i]) && tau[i] > 0, "tau[" + std::to_string(i) + "]", tau[i],
            "must be finite and > 0");
  std::vector<double> sorted(tau);
  std::sort(sorted.begin(), sorted.end());
  double rate = 0, best = 0;
  std::size_t best_m = 1;
  for (std::size_t m = 1; m <= sorted.size(); ++m) {
    rate += 1.0 / sorted[m - 1];
    const double t = (static_cast<double>(m) + noise_ratio) / rate;
    if (m == 1 || t < best) {
      best = t;
      best_m = m;
    }
  }
  return best_m;
}

struct naive_optimal_config {
  std::vector<double> tau;    ///< per-worker compute times (required)
  double noise_ratio = 0.0;   ///< sigma^2 / eps of the time complexity
  std::size_t active = 0;     ///< m; 0 = m* from tau and noise_ratio

  void validate() const {
    (void)optimal_worker_count(tau, noise_ratio);  // checks tau and noise_ratio
    require(active <= tau.size(), "naive_optimal_config.active", active,
            "must be <= the number of workers");
  }
};

template <class T = double, class Optimizer = default_optimizer, class Memory = host_memory>
class naive_optimal_asgd : public detail::policy_base<T, Optimizer, Memory> {
  using base = detail::policy_base<T, Optimizer, Memory>;

 public:
  naive_optimal_asgd(std::size_t workers, model_server<T, Optimizer, Memory> server,
                     naive_optimal_config config)
      : base(workers, std::move(server)), config_((config.validate(), std::move(config))),
        active_(workers, false) {
    require_same_size("naive_optimal_config.tau", config_.tau.size(), "workers", workers);
    const std::size_t m =
        config_.active ? config_.active : optimal_worker_count(config_.tau, config_.noise_ratio);
    std::vector<std::size_t> order(workers);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return config_.tau[a] < config_.tau[b]; });
    for (std::size_t i = 0; i < m; ++i) active_[order[i]] = true;
    m_ = m;
  }

  const naive_optimal_config& config() const { return config_; }
  std::size_t active_workers() const { return m_; }
  bool active(worker_id w) const { return active_.at(w); }

  /// Only the m fastest start; the others are held for the whole run.
  template <class Ctl>
  void on_start(Ctl& ctl) {
    for (std::size_t w = 0; w < this->workers_; ++w) {
      if (!this->live(static_cast<worker_id>(w))) continue;  // absent from the start
      if (active_[w]) ctl.restart(static_cast<worker_id>(w));
      else ctl.hold(static_cast<worker_id>(w));
    }
  }

  template <class Ctl, class Arrival, class G>
  void on_arrival(Ctl& ctl, const Arrival& a, const G& g) {
    const auto in = this->admit(ctl, a, g, "naive_optimal_asgd");
    if (!in) {  // skipped (non-finite): an inactive worker stays held
      if (!active_[a.worker]) ctl.hold(a.worker);
      return;
    }
    const std::uint64_t delay = in->delay;
    if (!active_[a.worker]) {  // only reachable if a runtime started an inactive worker
      ctl.discarded(a.worker, delay);
      ctl.hold(a.worker);
      return;
    }
    this->server_.apply(in->gradient);
    ctl.applied(a.worker, delay);
  }

  /// Membership: the active set is fixed by tau (the m* fastest): a joiner outside it is
  /// held, as at the start; an active leaver is not replaced (docs/elastic.md).
  template <class Ctl>
  void on_join(Ctl& ctl, worker_id w) {
    this->mark_join(w);
    if (!active_[w]) ctl.hold(w);
  }
  friend bool operator==(const naive_optimal_asgd& a, const naive_optimal_asgd& b) {
    return a.server_ == b.server_ && a.same_membership(b);
  }

  /// Checkpointing (core/archive.hpp): the mutable state; the configuration is rebuilt.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(this->server_);
    this->serialize_membership(ar);
  }

 private:
  naive_optimal_config config_;
  std::vector<bool> active_;
  std::size_t m_ = 0;
};
template <class T, class O, class M>
naive_optimal_asgd(std::size_t, model_server<T, O, M>, naive_optimal_config)
    -> naive_optimal_asgd<T, O, M>;

}  // namespace heterograd::algorithms::async
