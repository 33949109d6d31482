#pragma once
// Rescaled ASGD (Mahran, Maranjyan, Richtarik, "Rescaled Asynchronous SGD: Optimal
// Distributed Optimization under Data and System Heterogeneity", arXiv 2605.13434, 2026).
//
// Vanilla ASGD with heterogeneous data converges to a stationary point of the
// frequency-weighted objective sum_i f_i / tau_i / sum_i 1/tau_i: fast workers arrive more
// often. Rescaled ASGD keeps the ASGD template (no table, no buffer, no waiting) and gives
// each worker a step proportional to its compute time,
//     x <- x - gamma_i g_i ,   gamma_i = gamma * tau_i / tau_ref ,
// so every worker gets the same aggregate rate per unit time (gamma_i / tau_i = gamma /
// tau_ref) and the fixed point is that of f = (1/n) sum_i f_i.
//
// tau_i is estimated online by an exponential moving average of the worker's observed job
// times (arrival time - start time), tau_i <- tau_i + alpha (t - tau_i); the first
// observation initialises it (or config.initial_tau when the times are known).
// tau_ref is config.reference when > 0, else the largest current estimate (so the slowest
// worker steps with gamma and every other with less) [the normaliser is
// ours, inferred: docs/references.md].

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/algorithms/async/server.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::algorithms::async {

struct rescaled_config {
  double ema = 0.2;                 ///< alpha: weight of the newest job time in tau_i's EMA
  double reference = 0.0;           ///< tau_ref; 0 = the largest current estimate
  std::vector<double> initial_tau;  ///< known tau_i (empty: learnt from the first job)

  static constexpr auto description() {
    return describe(
        "rescaled_config",
        describe_field("ema", &rescaled_config::ema,
                       "alpha: weight of the newest job time in tau_i's moving average",
                       open_closed(0, 1)),
        describe_field("reference", &rescaled_config::reference,
                       "tau_ref (0: the largest current estimate)", finite_at_least(0)),
        describe_field("initial_tau", &rescaled_config::initial_tau,
                       "known tau_i, each finite and > 0 (empty: learnt from the first job)"));
  }
  void validate() const {
    validate_fields(*this);
    // Element rules: a description holds one rule per field.
    for (std::size_t i = 0; i < initial_tau.size(); ++i)
      require(std::isfinite(initial_tau[i]) && initial_tau[i] > 0,
              "rescaled_config.initial_tau[" + std::to_string(i) + "]", initial_tau[i],
              "must be finite and > 0");
  }
};

template <class T = double, class Optimizer = default_optimizer, class Memory = host_memory>
class rescaled_asgd : public detail::policy_base<T, Optimizer, Memory> {
  using base = detail::policy_base<T, Optimizer, Memory>;

 public:
  rescaled_asgd(std::size_t workers, model_server<T, Optimizer, Memory> server,
                rescaled_config config = {})
      : base(workers, std::move(server)), config_((config.validate(), std::move(config))),
        tau_(workers, 0.0) {
    if (!config_.initial_tau.empty()) {
      require_same_size("rescaled_config.initial_tau", config_.initial_tau.size(), "workers",
                        workers);
      tau_ = config_.initial_tau;
      max_ = *std::max_element(tau_.begin(), tau_.end());
    }
  }

  const rescaled_config& config() const { return config_; }
  /// Current estimate of tau_w (0 until observed or given).
  double tau(worker_id w) const { return tau_.at(w); }
  /// gamma_w / gamma = tau_w / tau_ref with the current estimates (1 when unknown).
  double step_scale(worker_id w) const {
    const double ref = config_.reference > 0 ? config_.reference : max_;
    return ref > 0 && tau_.at(w) > 0 ? tau_[w] / ref : 1.0;
  }

  template <class Ctl, class Arrival, class G>
  void on_arrival(Ctl& ctl, const Arrival& a, const G& g) {
    // The job time is checked before the gradient is admitted: a skipped gradient is only
    // counted once nothing else can throw.
    const double t = a.time - a.start;
    require(std::isfinite(t) && t >= 0, "arrival.time - arrival.start", t,
            "must be finite and >= 0 (a job time)");
    const auto in = this->admit(ctl, a, g, "rescaled_asgd");
    if (!in) return;
    const std::uint64_t delay = in->delay;
    const double old = tau_[a.worker];
    // old + alpha (t - old): a worker whose job time never changes keeps it exactly.
    const double fresh = old > 0 ? old + config_.ema * (t - old) : t;
    const double before_max = max_;
    tau_[a.worker] = fresh;
    update_max(old, fresh);
    try {
      this->server_.apply(in->gradient, step_scale(a.worker));
    } catch (...) {  // keep the estimates as they were (nothing is lost)
      tau_[a.worker] = old;
      max_ = before_max;
      throw;
    }
    ctl.applied(a.worker, delay);
  }

  /// Membership: tau_ref (when learnt: the largest estimate) is taken over the members, so a
  /// slow leaver no longer shrinks everyone's step; a joiner, fresh or returning, starts from
  /// its configured tau (initial_tau) or learns it from its first job (an old estimate of a
  /// returning id may describe another machine).
  template <class Ctl>
  void on_leave(Ctl&, worker_id w) {
    this->mark_leave(w);
    tau_[w] = 0.0;
    max_ = *std::max_element(tau_.begin(), tau_.end());
  }
  template <class Ctl>
  void on_join(Ctl&, worker_id w) {
    this->mark_join(w);
    tau_[w] = config_.initial_tau.empty() ? 0.0 : config_.initial_tau[w];
    max_ = *std::max_element(tau_.begin(), tau_.end());
  }
  friend bool operator==(const rescaled_asgd& a, const rescaled_asgd& b) {
    return a.server_ == b.server_ && a.same_membership(b) && a.tau_ == b.tau_;
  }

  /// Checkpointing (core/archive.hpp): the mutable state; the configuration is rebuilt.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(this->server_, tau_, max_);
    this->serialize_membership(ar);
  }

 private:
  void update_max(double old, double fresh) {
    if (fresh >= max_) {
      max_ = fresh;
    } else if (old == max_) {  // the maximum may have shrunk: rescan (rare)
      max_ = *std::max_element(tau_.begin(), tau_.end());
    }
  }

  rescaled_config config_;
  std::vector<double> tau_;
  double max_ = 0.0;
};
template <class T, class O, class M>
rescaled_asgd(std::size_t, model_server<T, O, M>) -> rescaled_asgd<T, O, M>;
template <class T, class O, class M>
rescaled_asgd(std::size_t, model_server<T, O, M>, rescaled_config) -> rescaled_asgd<T, O, M>;

}  // namespace heterograd::algorithms::async
