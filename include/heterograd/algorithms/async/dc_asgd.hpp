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
#include "heterograd/kernels/launch.hpp"

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

namespace detail {
// g~ = g + lambda g^2 (x - x_bak): reads g, x, x_bak, writes g~ (4 sizeof(T) per element).
template <class T>
struct dc_compensate_body {
  const T* g;
  const T* x;
  const T* bak;
  T* out;
  T lambda;
  HG_HOST_DEVICE void operator()(std::size_t j) const {
    out[j] = g[j] + lambda * g[j] * g[j] * (x[j] - bak[j]);
  }
};
// DC-ASGD-a: MeanSquare <- m MeanSquare + (1 - m) g^2;
// g~ = g + lambda_0 / sqrt(MeanSquare + eps) g^2 (x - x_bak) (6 sizeof(T) per element).
template <class T>
struct dc_adaptive_body {
  const T* g;
  const T* x;
  const T* bak;
  T* out;
  T* mean_square;
  T m, lambda0, eps;
  HG_HOST_DEVICE void operator()(std::size_t j) const {
    const T gj = g[j];
    mean_square[j] = m * mean_square[j] + (T(1) - m) * gj * gj;
    out[j] = gj + lambda0 / std::sqrt(mean_square[j] + eps) * gj * gj * (x[j] - bak[j]);
  }
};
}  // namespace detail

template <class T = double, class Optimizer = default_optimizer, class Memory = host_memory>
class dc_asgd : public detail::policy_base<T, Optimizer, Memory> {
  using base = detail::policy_base<T, Optimizer, Memory>;
  using vector_type = typename base::server_type::vector_type;

 public:
  dc_asgd(std::size_t workers, model_server<T, Optimizer, Memory> server, dc_asgd_config config = {})
      : base(workers, std::move(server)), config_((config.validate(), config)),
        backup_(this->server_.make(workers * this->dim())), compensated_(this->server_.make(this->dim())),
        mean_square_(this->server_.make(config_.adaptive ? this->dim() : 0)) {
    // Every worker starts from the initial model.
    for (std::size_t w = 0; w < workers; ++w) save_backup(static_cast<worker_id>(w));
  }

  const dc_asgd_config& config() const { return config_; }
  /// The model worker w pulled (x_bak(w)).
  auto backup(worker_id w) const {
    require(static_cast<std::size_t>(w) < this->workers_, "worker", w, "must be < workers");
    return this->server_.view(backup_).subspan(w * this->dim(), this->dim());
  }

  template <class Ctl, class Arrival, class G>
  void on_arrival(Ctl& ctl, const Arrival& a, const G& g) {
    const auto in = this->admit(ctl, a, g, "dc_asgd");
    if (!in) {  // skipped: the worker restarts from the current model, its new backup
      save_backup(a.worker);
      return;
    }
    const std::uint64_t delay = in->delay;
    const std::size_t d = this->dim();
    const auto gv = in->gradient;
    const auto bak = backup(a.worker);
    const auto x = this->params();
    const auto out = this->server_.view(compensated_);
    this->server_.memory().run(d, [&](const auto& p) {
      if (config_.adaptive) {
        kernels::launch(p, d,
                        detail::dc_adaptive_body<T>{gv.data(), x.data(), bak.data(), out.data(),
                                                    this->server_.view(mean_square_).data(),
                                                    static_cast<T>(config_.mean_square_decay),
                                                    static_cast<T>(config_.adaptive_lambda),
                                                    static_cast<T>(config_.eps)},
                        out.data());
      } else {
        kernels::launch(p, d,
                        detail::dc_compensate_body<T>{gv.data(), x.data(), bak.data(), out.data(),
                                                      static_cast<T>(config_.lambda)},
                        out.data());
      }
    });
    this->server_.apply(this->server_.view(std::as_const(compensated_)));
    ctl.applied(a.worker, delay);
    // Worker a.worker restarts from the new model: it becomes its backup (2 sizeof(T)).
    save_backup(a.worker);
  }

  /// Membership: a joiner pulls the current model, which becomes its backup x_bak (the
  /// compensation needs the model its gradient is computed at); a leaver's backup is unused
  /// until it returns, and then overwritten.
  template <class Ctl>
  void on_join(Ctl&, worker_id w) {
    this->mark_join(w);
    save_backup(w);
  }
  friend bool operator==(const dc_asgd& a, const dc_asgd& b) {
    const auto& m = a.server_.memory();
    return a.server_ == b.server_ && a.same_membership(b) && kernels::same_bits(m, a.backup_, b.backup_) &&
           kernels::same_bits(m, a.mean_square_, b.mean_square_);
  }

  /// Checkpointing (core/archive.hpp): the mutable state; the configuration is rebuilt.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(this->server_);
    this->serialize_membership(ar);
    const auto& m = this->server_.memory();
    kernels::archive_buffer(ar, m, backup_, "dc_asgd.backup", backup_.size());
    kernels::archive_buffer(ar, m, mean_square_, "dc_asgd.mean_square", mean_square_.size());
  }

 private:
  void save_backup(worker_id w) {
    const std::size_t d = this->dim();
    detail::ops::copy(this->server_.memory(), this->params(),
                      this->server_.view(backup_).subspan(w * d, d));
  }

  dc_asgd_config config_;
  vector_type backup_;       // n x d: x_bak per worker
  vector_type compensated_;  // g~ (scratch)
  vector_type mean_square_;  // DC-ASGD-a
};
template <class T, class O, class M>
dc_asgd(std::size_t, model_server<T, O, M>) -> dc_asgd<T, O, M>;
template <class T, class O, class M>
dc_asgd(std::size_t, model_server<T, O, M>, dc_asgd_config) -> dc_asgd<T, O, M>;

}  // namespace heterograd::algorithms::async
