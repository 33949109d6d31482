#pragma once
// The parameter server every asynchronous policy owns: the model (flat parameters and its
// version k = number of updates applied), the server-side optimizer and its state, and the
// checks every arriving gradient goes through.
//
// Every arriving gradient goes through policy_base::admit before a policy uses it: the arrival
// checks, then the server's non-finite policy (heterograd/algorithms/nonfinite.hpp: fail by
// default, skip or zero; model_server's third argument). A skipped gradient is reported to
// the runtime as discarded (the worker restarts at the current model) and counted in
// model_server::nonfinite_skipped(); no policy counts it as applied, buffered or collected.
//
// The update step lives in ONE place, model_server::apply: every policy, whatever its rule
// (delay-adaptive step, gradient table mean, buffered average), ends in
//     params <- optimizer.update(weight * direction),   k <- k + 1.
// The optimizer is any heterograd/optim optimizer (or anything with its concept's shape): a
// copyable value with `init(policy, params) -> state` and `update(policy, grads, state,
// params)`, its state a plain value (optim::state: copyable, comparable, serialisable). For
// plain SGD the weight is exactly a per-update step-size multiplier (gamma_k = gamma *
// weight); for adaptive optimizers it weights the gradient they see. The default is
// optim::sgd; plain_sgd(lr) builds it.
//
// The server's parameters live on the host; updates run with the build's host execution
// policy (OpenMP when compiled with it): element-wise, so bitwise the same for any number
// of threads.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <thrust/system/cpp/execution_policy.h>

#include "heterograd/algorithms/async/detail/ops.hpp"
#include "heterograd/algorithms/nonfinite.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/sim/engine.hpp"

namespace heterograd::algorithms::async {

/// Worker index, as the runtimes number workers.
using sim::worker_id;

/// "Never" for thresholds: a Ringmaster threshold R = infinite_delay accepts every delay.
inline constexpr std::uint64_t infinite_delay = ~std::uint64_t{0};

template <class O, class T>
using optimizer_state_t =
    decltype(std::declval<const O&>().init(thrust::cpp::par, std::declval<span<T>>()));

/// An optimizer the server can apply its updates through (optim/'s concept, for element T):
/// init(policy, params) gives its state, update(policy, grads, state, params) steps.
template <class O, class T>
concept server_optimizer =
    std::copy_constructible<O> &&
    requires(const O& o, span<T> p, span<const T> g, optimizer_state_t<O, T>& st) {
      o.update(thrust::cpp::par, g, st, p);
    };

using algorithms::nonfinite_gradient_error;
using algorithms::nonfinite_policy;
using algorithms::nonfinite_policy_name;

/// The server-side optimizer used when none is given.
using default_optimizer = optim::sgd;

/// Plain SGD with learning rate `lr` (the step size gamma of the papers).
inline optim::sgd plain_sgd(double lr) {
  return optim::sgd(optim::sgd_config{.lr = lr});
}

/// Parameters, version and server-side optimizer of an asynchronous server.
template <class T = double, class Optimizer = default_optimizer>
  requires server_optimizer<Optimizer, T>
class model_server {
 public:
  using value_type = T;
  using optimizer_type = Optimizer;
  using state_type = optimizer_state_t<Optimizer, T>;

  /// `nonfinite`: what an arriving gradient with an infinity or a NaN gets (fail by default).
  model_server(std::vector<T> initial_params, Optimizer opt = Optimizer(),
               nonfinite_policy nonfinite = nonfinite_policy::fail)
      : params_(std::move(initial_params)), scratch_(params_.size()), opt_(std::move(opt)),
        state_(opt_.init(thrust::cpp::par, span<T>(params_))), nonfinite_(nonfinite) {
    require(!params_.empty(), "params.size", params_.size(), "must be > 0");
    algorithms::validate_nonfinite_policy("model_server.nonfinite", nonfinite_);
  }

  std::size_t dim() const { return params_.size(); }
  /// k: updates applied so far.
  std::uint64_t version() const { return version_; }
  span<const T> params() const { return span<const T>(params_.data(), params_.size()); }
  const Optimizer& optimizer() const { return opt_; }
  const state_type& optimizer_state() const { return state_; }
  nonfinite_policy nonfinite() const { return nonfinite_; }
  /// Gradients dropped by the skip policy so far.
  std::uint64_t nonfinite_skipped() const { return skipped_; }

  /// The non-finite policy on gradient g from `worker` (arriving at this version): g itself
  /// when it is finite; under zero, a copy with its non-finite entries set to 0 (valid until
  /// the next call); under skip, nothing (counted); under fail, nonfinite_gradient_error.
  /// Reads g once (sizeof(T) per element); zero writes the copy (+2 sizeof(T)).
  std::optional<span<const T>> screen(span<const T> g, worker_id worker, std::string_view method) {
    const std::size_t bad = algorithms::first_nonfinite(g);
    if (bad == g.size()) return g;
    switch (nonfinite_) {
      case nonfinite_policy::skip:
        ++skipped_;
        return std::nullopt;
      case nonfinite_policy::zero: {
        zeroed_.resize(g.size());
        for (std::size_t j = 0; j < g.size(); ++j) zeroed_[j] = std::isfinite(g[j]) ? g[j] : T(0);
        return span<const T>(zeroed_.data(), zeroed_.size());
      }
      case nonfinite_policy::fail: break;
    }
    throw nonfinite_gradient_error(method, worker, version_, "the server's version when it arrived",
                                   bad, static_cast<double>(g[bad]));
  }

  /// THE update of every policy: params <- optimizer step on (weight * direction); k <- k + 1.
  /// Checks first: nothing changes when it throws. Bytes: weight == 1 hands `direction` to
  /// the optimizer as is (SGD: 3 sizeof(T) per element); otherwise one more pass scales it
  /// into scratch (+2 sizeof(T)).
  void apply(span<const T> direction, double weight = 1.0) {
    require_same_size("direction", direction.size(), "params", params_.size());
    require(std::isfinite(weight), "weight", weight, "must be finite");
    span<T> p(params_.data(), params_.size());
    detail::ops::with_host_policy(p.size(), [&](const auto& policy) {
      if (weight == 1.0) {
        opt_.update(policy, direction, state_, p);
      } else {
        span<T> s(scratch_.data(), scratch_.size());
        detail::ops::scale_into(static_cast<T>(weight), direction, s);
        opt_.update(policy, span<const T>(s), state_, p);
      }
    });
    ++version_;
  }

  /// Bitwise equality of parameters, version and optimizer state (not the scratch buffers,
  /// the non-finite policy or its skip count).
  friend bool operator==(const model_server& a, const model_server& b) {
    return a.version_ == b.version_ && a.params_.size() == b.params_.size() &&
           std::memcmp(a.params_.data(), b.params_.data(), a.params_.size() * sizeof(T)) == 0 &&
           a.state_ == b.state_;
  }

  /// Checkpointing (core/archive.hpp): the mutable state; the configuration is rebuilt.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(params_, state_, version_, skipped_);
  }

 private:
  std::vector<T> params_;
  std::vector<T> scratch_;
  Optimizer opt_;
  state_type state_;
  std::uint64_t version_ = 0;
  nonfinite_policy nonfinite_ = nonfinite_policy::fail;
  std::uint64_t skipped_ = 0;
  std::vector<T> zeroed_;  // zero policy: the screened copy of the last bad gradient
};

template <class T, class O>
model_server(std::vector<T>, O) -> model_server<T, O>;
template <class T, class O>
model_server(std::vector<T>, O, nonfinite_policy) -> model_server<T, O>;

namespace detail {

/// A contiguous gradient buffer (std::vector, span, std::array) as a span.
template <class T, class G>
span<const T> gradient_view(const G& g) {
  return span<const T>(std::data(g), std::size(g));
}

/// Stops every busy worker (each restarts at the current model): the end of a round of
/// Rennala / Malenia, whose running computations are at a point no longer used.
template <class Ctl>
void stop_all_busy(Ctl& ctl, std::size_t workers) {
  for (std::size_t w = 0; w < workers; ++w) {
    const auto id = static_cast<worker_id>(w);
    if (ctl.busy(id)) ctl.interrupt(id);
  }
}

/// What every policy shares: n workers, the model server, and the arrival checks.
template <class T, class Optimizer>
class policy_base {
 public:
  using value_type = T;
  using server_type = model_server<T, Optimizer>;

  std::uint64_t version() const { return server_.version(); }
  std::size_t workers() const { return workers_; }
  std::size_t dim() const { return server_.dim(); }
  span<const T> params() const { return server_.params(); }
  const server_type& server() const { return server_; }

 protected:
  policy_base(std::size_t workers, server_type server)
      : server_(std::move(server)), workers_(workers) {
    require(workers > 0, "workers", workers, "must be > 0");
  }

  /// Checks an arrival before anything changes: a known worker, a gradient of the model's
  /// size, a version the server has reached. Returns its staleness (delay) k - v.
  template <class Arrival>
  std::uint64_t check(const Arrival& a, std::size_t gradient_size) const {
    require(static_cast<std::size_t>(a.worker) < workers_, "arrival.worker", a.worker,
            "must be < the number of workers (" + std::to_string(workers_) + ")");
    require_same_size("gradient", gradient_size, "params", server_.dim());
    require(a.version <= server_.version(), "arrival.version", a.version,
            "must be <= the server's version (" + std::to_string(server_.version()) + ")");
    return server_.version() - a.version;
  }

  /// What a policy's on_arrival starts with: check(), then the server's non-finite policy.
  /// Returns the delay and the gradient to use, or nothing when the gradient is skipped
  /// (then it is already reported as discarded: the runtime restarts the worker at the
  /// current model). Throws before anything changes (fail, bad arrivals).
  struct admitted {
    std::uint64_t delay;
    span<const T> gradient;
  };
  template <class Ctl, class Arrival, class G>
  std::optional<admitted> admit(Ctl& ctl, const Arrival& a, const G& g, std::string_view method) {
    const std::uint64_t delay = check(a, std::size(g));
    const auto use = server_.screen(gradient_view<T>(g), a.worker, method);
    if (!use) {
      ctl.discarded(a.worker, delay);
      return std::nullopt;
    }
    return admitted{delay, *use};
  }

  server_type server_;
  std::size_t workers_;
};

}  // namespace detail

}  // namespace heterograd::algorithms::async
