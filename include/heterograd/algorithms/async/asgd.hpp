#pragma once
// Asynchronous SGD with a per-arrival step rule. On arrival of g from worker i computed at
// version v, with delay delta = k - v:
//     x <- x - gamma * w(delta) * g ,  k <- k + 1 ,  worker i restarts at x.
//
//   asgd                    w = 1                       vanilla ASGD (Hogwild-style parameter
//                                                       server; Recht et al. 2011, Agarwal &
//                                                       Duchi 2011)
//   delay_adaptive_asgd     w = n / max(n, delta)       the baseline of Ringmaster ASGD
//                                                       (Maranjyan, Tyurin, Richtarik, ICML'25),
//                                                       exactly as in the authors' simulator
//   staleness_scaled_asgd   w = 1 / max(1, delta)       staleness-aware ASGD (Zhang, Gupta,
//                                                       Lian, Liu, IJCAI'16): gamma / delta
//                           w = 1 / (1 + delta)^a       polynomial staleness weights (FedAsync,
//                                                       Xie, Koyejo, Gupta 2019; a = 0.5)
//
// Guarantee worth knowing (Mahran, Maranjyan, Richtarik, arXiv 2605.13434): with heterogeneous
// data, vanilla ASGD converges to a stationary point of the frequency-weighted objective
// sum_i f_i / tau_i / sum_i 1 / tau_i, not of f (tests/async reproduce the fixed point).
// gamma is the server optimizer's learning rate; w multiplies it (model_server::apply).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>
#include <utility>

#include "heterograd/algorithms/async/server.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::algorithms::async {

namespace detail {

/// ASGD whose step weight is Rule{}(delta); every arrival is applied.
template <class T, class Optimizer, class Rule, class Memory = host_memory>
class weighted_asgd : public policy_base<T, Optimizer, Memory> {
  using base = policy_base<T, Optimizer, Memory>;

 public:
  weighted_asgd(std::size_t workers, typename base::server_type server, Rule rule)
      : base(workers, std::move(server)), rule_(rule) {}

  const Rule& rule() const { return rule_; }

  template <class Ctl, class Arrival, class G>
  void on_arrival(Ctl& ctl, const Arrival& a, const G& g) {
    const auto in = this->admit(ctl, a, g, Rule::name);
    if (!in) return;
    const std::uint64_t delay = in->delay;
    const double w = rule_(delay, this->live_);  // n: the members now (docs/elastic.md)
    this->server_.apply(in->gradient, w);
    ctl.applied(a.worker, delay);
  }

  friend bool operator==(const weighted_asgd& a, const weighted_asgd& b) {
    return a.server_ == b.server_ && a.same_membership(b);
  }

  /// Checkpointing (core/archive.hpp): the mutable state; the configuration is rebuilt.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(this->server_);
    this->serialize_membership(ar);
  }

 private:
  Rule rule_;
};

struct unit_weight {
  static constexpr std::string_view name = "asgd";
  double operator()(std::uint64_t, std::size_t) const { return 1.0; }
};

}  // namespace detail

/// Vanilla asynchronous SGD: every gradient applied with the same step.
template <class T = double, class Optimizer = default_optimizer, class Memory = host_memory>
class asgd : public detail::weighted_asgd<T, Optimizer, detail::unit_weight, Memory> {
 public:
  asgd(std::size_t workers, model_server<T, Optimizer, Memory> server)
      : detail::weighted_asgd<T, Optimizer, detail::unit_weight, Memory>(workers, std::move(server), {}) {}
};
template <class T, class O, class M>
asgd(std::size_t, model_server<T, O, M>) -> asgd<T, O, M>;

/// Delay-adaptive ASGD: gamma_k = gamma * n / max(n, delta_k).
struct delay_adaptive_config {
  /// n of the rule; 0 = the number of workers (the authors' choice).
  std::size_t reference = 0;

  static constexpr auto description() {
    return describe("delay_adaptive_config",
                    describe_field("reference", &delay_adaptive_config::reference,
                                   "n of gamma n / max(n, delay) (0: the number of workers)",
                                   at_least(0)));
  }
  void validate() const { validate_fields(*this); }
};

namespace detail {
struct delay_adaptive_weight {
  static constexpr std::string_view name = "delay_adaptive_asgd";
  std::size_t reference = 0;
  double operator()(std::uint64_t delay, std::size_t workers) const {
    const double n = static_cast<double>(reference == 0 ? workers : reference);
    const double d = static_cast<double>(delay);
    return n / (d > n ? d : n);
  }
};
}  // namespace detail

template <class T = double, class Optimizer = default_optimizer, class Memory = host_memory>
class delay_adaptive_asgd
    : public detail::weighted_asgd<T, Optimizer, detail::delay_adaptive_weight, Memory> {
 public:
  delay_adaptive_asgd(std::size_t workers, model_server<T, Optimizer, Memory> server,
                      delay_adaptive_config config = {})
      : detail::weighted_asgd<T, Optimizer, detail::delay_adaptive_weight, Memory>(
            workers, std::move(server), detail::delay_adaptive_weight{config.reference}) {}
};
template <class T, class O, class M>
delay_adaptive_asgd(std::size_t, model_server<T, O, M>) -> delay_adaptive_asgd<T, O, M>;
template <class T, class O, class M>
delay_adaptive_asgd(std::size_t, model_server<T, O, M>, delay_adaptive_config)
    -> delay_adaptive_asgd<T, O, M>;

/// How a staleness-scaled step shrinks with the delay.
enum class staleness_rule : std::uint8_t {
  inverse,     ///< w = 1 / max(1, delta)      (gamma / delta, Zhang et al. IJCAI'16)
  polynomial,  ///< w = (1 + delta)^(-a)        (FedAsync's polynomial weights)
};

inline constexpr choice<staleness_rule> staleness_rules[] = {
    {"inverse", staleness_rule::inverse}, {"polynomial", staleness_rule::polynomial}};

struct staleness_scaled_config {
  staleness_rule rule = staleness_rule::polynomial;
  double exponent = 0.5;  ///< a of the polynomial rule (FedAsync's default)

  static constexpr auto description() {
    return describe(
        "staleness_scaled_config",
        describe_field("rule", &staleness_scaled_config::rule,
                       "inverse: 1 / max(1, delay); polynomial: (1 + delay)^(-exponent)",
                       staleness_rules),
        describe_field("exponent", &staleness_scaled_config::exponent,
                       "a of the polynomial rule", finite_at_least(0)));
  }
  void validate() const { validate_fields(*this); }
};

namespace detail {
struct staleness_weight {
  static constexpr std::string_view name = "staleness_scaled_asgd";
  staleness_scaled_config config;
  double operator()(std::uint64_t delay, std::size_t) const {
    const double d = static_cast<double>(delay);
    if (config.rule == staleness_rule::inverse) return 1.0 / (d > 1.0 ? d : 1.0);
    return std::pow(1.0 + d, -config.exponent);
  }
};
}  // namespace detail

template <class T = double, class Optimizer = default_optimizer, class Memory = host_memory>
class staleness_scaled_asgd
    : public detail::weighted_asgd<T, Optimizer, detail::staleness_weight, Memory> {
 public:
  staleness_scaled_asgd(std::size_t workers, model_server<T, Optimizer, Memory> server,
                        staleness_scaled_config config = {})
      : detail::weighted_asgd<T, Optimizer, detail::staleness_weight, Memory>(
            workers, std::move(server), (config.validate(), detail::staleness_weight{config})) {}
};
template <class T, class O, class M>
staleness_scaled_asgd(std::size_t, model_server<T, O, M>) -> staleness_scaled_asgd<T, O, M>;
template <class T, class O, class M>
staleness_scaled_asgd(std::size_t, model_server<T, O, M>, staleness_scaled_config)
    -> staleness_scaled_asgd<T, O, M>;

}  // namespace heterograd::algorithms::async
