#pragma once
// Delay-compensated ASGD (DC-ASGD; Zheng, Meng, Wang, Chen, Yu, Ma, Liu, "Asynchronous
// Stochastic Gradient Descent with Delay Compensation", ICML 2017). A stale gradient
// g = grad f(x_bak) is corrected towards grad f(x) by a first-order Taylor term whose Hessian
// is approximated by the (diagonal of the) outer product of the gradient:
//     g~ = g + lambda (.) g (.) g (.) (x - x_bak(i)) ,   x <- x - gamma g~ ,
// where x_bak(i) is the model worker i pulled (kept per worker: n x d memory).
//   DC-ASGD-c: constant lambda (paper: lambda_0 = 0.04).
//   DC-ASGD-a: lambda_j = lambda_0 / sqrt(MeanSquare_j + eps), MeanSquare <- m MeanSquare +
//              (1 - m) g^2 (paper: lambda_0 = 2, m = 0.95, eps = 1e-7).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

#include "heterograd/algorithms/async/server.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::algorithms::async {

struct dc_asgd_config {
  double lambda = 0.04;           ///< lambda_0 of DC-ASGD-c
  bool adaptive = false;          ///< DC-ASGD-a (then lambda_0 = adaptive_lambda)
  double adaptive_lambda = 2.0;   ///< lambda_0 of DC-ASGD-a
  double mean_square_decay = 0.95;  ///< m
  double eps = 1e-7;

  static constexpr auto description() {
    return describe(
        "dc_asgd_config",
        describe_field("lambda", &dc_asgd_config::lambda, "lambda_0 of DC-ASGD-c",
                       finite_at_least(0)),
        describe_field("adaptive", &dc_asgd_config::adaptive,
                       "DC-ASGD-a (then lambda_0 = adaptive_lambda)"),
        describe_field("adaptive_lambda", &dc_asgd_config::adaptive_lambda,
                       "lambda_0 of DC-ASGD-a", finite_at_least(0)),
        describe_field("mean_square_decay", &dc_asgd_config::mean_square_decay,
                       "m: decay of the mean square of the gradients", closed_open(0, 1)),
        describe_field("eps", &dc_asgd_config::eps, "added to the denominator", finite_above(0)));
  }
  void validate() const { validate_fields(*this); }
};

template <class T = double, class Optimizer = default_optimizer>
class dc_asgd : public detail::policy_base<T, Optimizer> {
  using base = detail::policy_base<T, Optimizer>;

 public:
  dc_asgd(std::size_t workers, model_server<T, Optimizer> server, dc_asgd_config config = {})
      : base(workers, std::move(server)), config_((config.validate(), config)),
        backup_(workers * this->dim()), compensated_(this->dim()),
        mean_square_(config_.adaptive ? this->dim() : 0, T(0)) {
    // Every worker starts from the initial model.
    const auto x = this->params();
    for (std::size_t w = 0; w < workers; ++w)
      std::copy(x.begin(), x.end(), backup_.begin() + static_cast<std::ptrdiff_t>(w * this->dim()));
  }

  const dc_asgd_config& config() const { return config_; }
  /// The model worker w pulled (x_bak(w)).
  span<const T> backup(worker_id w) const {
    require(static_cast<std::size_t>(w) < this->workers_, "worker", w, "must be < workers");
    return span<const T>(backup_.data() + w * this->dim(), this->dim());
  }

  template <class Ctl, class Arrival, class G>
  void on_arrival(Ctl& ctl, const Arrival& a, const G& g) {
    const auto in = this->admit(ctl, a, g, "dc_asgd");
    const std::size_t d = this->dim();
    if (!in) {  // skipped: the worker restarts from the current model, its new backup
      const auto y = this->params();
      std::copy(y.begin(), y.end(), backup_.data() + a.worker * d);
      return;
    }
    const std::uint64_t delay = in->delay;
    const auto gv = in->gradient;
    T* bak = backup_.data() + a.worker * d;
    const auto x = this->params();
    // g~ = g + lambda g^2 (x - x_bak): reads g, x, x_bak, writes g~ (4 sizeof(T) per
    // element; adaptive: + read/write MeanSquare, 6).
    if (config_.adaptive) {
      const T m = static_cast<T>(config_.mean_square_decay);
      const T l0 = static_cast<T>(config_.adaptive_lambda);
      const T eps = static_cast<T>(config_.eps);
      for (std::size_t j = 0; j < d; ++j) {
        const T gj = gv[j];
        mean_square_[j] = m * mean_square_[j] + (T(1) - m) * gj * gj;
        compensated_[j] = gj + l0 / std::sqrt(mean_square_[j] + eps) * gj * gj * (x[j] - bak[j]);
      }
    } else {
      const T l = static_cast<T>(config_.lambda);
      for (std::size_t j = 0; j < d; ++j)
        compensated_[j] = gv[j] + l * gv[j] * gv[j] * (x[j] - bak[j]);
    }
    this->server_.apply(span<const T>(compensated_.data(), d));
    ctl.applied(a.worker, delay);
    // Worker a.worker restarts from the new model: it becomes its backup (2 sizeof(T)).
    const auto y = this->params();
    std::copy(y.begin(), y.end(), bak);
  }

  friend bool operator==(const dc_asgd& a, const dc_asgd& b) {
    return a.server_ == b.server_ && a.backup_ == b.backup_ && a.mean_square_ == b.mean_square_;
  }

  /// Checkpointing (core/archive.hpp): the mutable state; the configuration is rebuilt.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(this->server_, backup_, mean_square_);
  }

 private:
  dc_asgd_config config_;
  std::vector<T> backup_;       // n x d: x_bak per worker
  std::vector<T> compensated_;  // g~ (scratch)
  std::vector<T> mean_square_;  // DC-ASGD-a
};
template <class T, class O>
dc_asgd(std::size_t, model_server<T, O>) -> dc_asgd<T, O>;
template <class T, class O>
dc_asgd(std::size_t, model_server<T, O>, dc_asgd_config) -> dc_asgd<T, O>;

}  // namespace heterograd::algorithms::async
