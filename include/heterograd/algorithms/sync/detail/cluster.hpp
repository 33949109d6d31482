#pragma once
// The replicas of a simulated synchronous cluster: n copies of the parameters, optimizer
// states and gradient buffers (the per-rank storage the policies serialize), the local
// operations (a gradient, a local step), and each worker's replica handle for the per-rank
// steps (detail/rank.hpp), which do every synchronisation, over a sequential exchange in the
// simulator (replicated::run_ranks) and over a real transport on threads and MPI. One
// thread, no I/O.
//
// Every gradient of the family enters through compute_gradient (the sim runtimes, and the
// threads / MPI runtimes through heterograd/runtime/rounds.hpp), which applies the method's non-finite policy
// (heterograd/algorithms/nonfinite.hpp) to the worker's buffer before anything uses it:
// fail throws before the worker's step counter moves and before any parameter or optimizer
// state does; zero sets the non-finite entries to 0 in place; skip drops the whole gradient
// by setting the buffer to 0 (a synchronous step has fixed members and weights, so a
// dropped gradient adds nothing to the aggregate and a local step sees no gradient;
// counted per worker). A buffer-level rule, so every runtime gives the same bits.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "heterograd/algorithms/sync/common.hpp"
#include "heterograd/algorithms/nonfinite.hpp"
#include "heterograd/algorithms/sync/detail/rank.hpp"
#include "heterograd/algorithms/sync/exchange.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/memory.hpp"
#include "heterograd/optim/state.hpp"

namespace heterograd::algorithms::sync::detail {

using algorithms::first_nonfinite;
using algorithms::nonfinite_gradient_error;
using algorithms::nonfinite_policy;
using algorithms::validate_nonfinite_policy;

/// Throws unless `p` can be applied to states of type State (average needs optim's state,
/// whose slots can be averaged).
template <class State>
void require_state_policy(state_policy p, const std::string& field) {
  require(p != state_policy::average || is_optim_state_v<State>, field, "average",
          "needs an optimizer whose state is an optim::state (slots to average)");
}

template <class T, class Optimizer, class Grad, class Transform = identity_transform>
class cluster {
 public:
  using value_type = T;
  using state_type = optimizer_state_t<Optimizer, T>;

  cluster(std::size_t workers, span<const T> init, Optimizer opt, Grad grad,
          std::vector<std::size_t> batches, Transform transform)
      : opt_(std::move(opt)), grad_(std::move(grad)), tr_(std::move(transform)),
        batches_(std::move(batches)) {
    require_positive("workers", workers);
    require_positive("params.size", init.size());
    require_same_size("batches", batches_.size(), "workers", workers);
    std::size_t total = 0;
    for (std::size_t i = 0; i < workers; ++i) {
      require(batches_[i] >= 1, "batches[" + std::to_string(i) + "]", batches_[i], "must be >= 1");
      total += batches_[i];
    }
    require(total > 0, "batches (sum)", total, "must be > 0");
    params_.assign(workers, std::vector<T>(init.begin(), init.end()));
    grads_.assign(workers, std::vector<T>(init.size(), T(0)));
    states_.reserve(workers);
    for (std::size_t i = 0; i < workers; ++i)
      states_.push_back(opt_.init(thrust::cpp::par, span<T>(params_[i])));
    steps_.assign(workers, 0);
    skipped_.assign(workers, 0);
  }

  /// The non-finite policy of `method` (its config's nonfinite field, validated there).
  void set_nonfinite(nonfinite_policy p, std::string_view method) {
    validate_nonfinite_policy(std::string(method) + ".nonfinite", p);
    nonfinite_ = p;
    method_ = method;
  }
  nonfinite_policy nonfinite() const { return nonfinite_; }
  /// Worker w's gradients dropped by the skip policy.
  std::uint64_t nonfinite_skipped(std::size_t w) const { return skipped_.at(w); }

  std::size_t workers() const { return params_.size(); }
  std::size_t dim() const { return params_[0].size(); }
  span<const T> params(std::size_t w) const { return span<const T>(params_.at(w)); }
  span<T> mutable_params(std::size_t w) { return span<T>(params_.at(w)); }
  span<const T> gradient(std::size_t w) const { return span<const T>(grads_.at(w)); }
  const state_type& optimizer_state(std::size_t w) const { return states_.at(w); }
  /// Gradient computations worker w has made.
  std::uint64_t steps(std::size_t w) const { return steps_.at(w); }
  const std::vector<std::size_t>& batches() const { return batches_; }
  std::size_t batch(std::size_t w) const { return batches_.at(w); }
  void set_batches(std::vector<std::size_t> b) {
    require_same_size("batches", b.size(), "workers", workers());
    std::size_t total = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
      require(b[i] >= 1, "batches[" + std::to_string(i) + "]", b[i], "must be >= 1");
      total += b[i];
    }
    require(total > 0, "batches (sum)", total, "must be > 0");
    batches_ = std::move(b);
  }
  const Optimizer& optimizer() const { return opt_; }
  const Transform& transform() const { return tr_; }
  Grad& oracle() { return grad_; }

  span<T> mutable_gradient(std::size_t w) { return span<T>(grads_.at(w)); }
  /// Worker w's optimizer, state and transform, for its per-rank step (detail/rank.hpp).
  replica<Optimizer, state_type, Transform, kernels::serial_host_memory> replica_of(std::size_t w) {
    return {opt_, states_.at(w), tr_, memory_, w};
  }

  static void require_state_policy(state_policy p, const std::string& field) {
    detail::require_state_policy<state_type>(p, field);
  }

  /// Worker w's gradient at its own parameters into its gradient buffer, through the
  /// non-finite policy; returns the loss. Worker w's state only (threads call it per worker).
  double compute_gradient(std::size_t w) {
    const double loss = static_cast<double>(
        grad_(w, steps_[w], batches_[w], span<const T>(params_[w]), span<T>(grads_[w])));
    screen(w);
    ++steps_[w];
    return loss;
  }
  /// Worker w's optimizer step with gradient g.
  void apply(std::size_t w, span<const T> g) {
    opt_.update(thrust::cpp::par, g, states_[w], span<T>(params_[w]));
  }
  /// One local SGD step of worker w on its own gradient; returns the loss.
  double local_step(std::size_t w) {
    const double loss = compute_gradient(w);
    apply(w, span<const T>(grads_[w]));
    return loss;
  }

  /// Checkpointing (core/archive.hpp): visits the mutable state in a fixed order; `ar(...)`
  /// writes or reads it. Configuration (optimizer, hyper-parameters) is rebuilt by the caller.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(batches_, params_, grads_, states_, steps_, skipped_);
  }

 private:
  Optimizer opt_;
  Grad grad_;
  Transform tr_;
  kernels::serial_host_memory memory_;  // the replicas' (replica_of)
  std::vector<std::size_t> batches_;
  std::vector<std::vector<T>> params_;
  std::vector<std::vector<T>> grads_;
  std::vector<state_type> states_;
  std::vector<std::uint64_t> steps_;
  std::vector<std::uint64_t> skipped_;
  nonfinite_policy nonfinite_ = nonfinite_policy::fail;
  std::string_view method_ = "sync";

  void screen(std::size_t w) { screen(w, span<T>(grads_[w]), steps_[w]); }

 public:
  /// The non-finite policy on a gradient of worker w computed elsewhere (eager-SGD's real
  /// workers), `step` naming it in an error. Reads g once (sizeof(T) per element); zero and
  /// skip write it (+sizeof(T)).
  void screen(std::size_t w, span<T> g, std::uint64_t step) {
    if (algorithms::apply_nonfinite_policy(nonfinite_, g, method_, w, step,
                                           "the worker's gradient count") ==
        algorithms::nonfinite_outcome::skipped)
      ++skipped_[w];
  }
};

/// The replicas of a simulated policy (bsp, local_sgd, selsync, eager_sgd derive from it),
/// with what every runtime reads of them (the observers) and the simulator's way of running
/// the per-rank steps (run_ranks). Under threads and MPI, worker w's thread (or rank) runs
/// the policy's per-rank step on replica w only. The derived policy reaches the cluster as c_.
template <class T, class Optimizer, class Grad, class Transform = identity_transform>
class replicated {
 public:
  using value_type = T;

  replicated(std::size_t workers, span<const T> init, Optimizer opt, Grad grad,
             std::vector<std::size_t> batches, Transform tr)
      : c_(workers, init, std::move(opt), std::move(grad), std::move(batches), std::move(tr)) {}

  // --- observers --------------------------------------------------------------------------------
  std::size_t workers() const { return c_.workers(); }
  span<const T> params(std::size_t w = 0) const { return c_.params(w); }
  const auto& optimizer_state(std::size_t w) const { return c_.optimizer_state(w); }
  /// Worker w's gradients dropped by the skip policy.
  std::uint64_t nonfinite_skipped(std::size_t w) const { return c_.nonfinite_skipped(w); }
  /// Worker w's b_i (runtime::round_runtime scales the worker-time models with it).
  std::size_t batch(std::size_t w) const { return c_.batch(w); }
  const std::vector<std::size_t>& batches() const { return c_.batches(); }
  const Optimizer& optimizer() const { return c_.optimizer(); }
  const Transform& transform() const { return c_.transform(); }

 protected:
  /// Runs every worker's per-rank step, make(exchange view, w) -> step_task, over one
  /// sequential exchange of the workers (exchange.hpp), resumed in rank order.
  template <class Make>
  void run_ranks(Make make) {
    const std::size_t n = c_.workers();
    sequential_exchange<T> ex(n);
    std::vector<typename sequential_exchange<T>::view> views;
    views.reserve(n);
    for (std::size_t w = 0; w < n; ++w) views.push_back(ex.rank(w));
    using task = decltype(make(views[0], std::size_t{0}));
    std::vector<task> steps;
    steps.reserve(n);
    for (std::size_t w = 0; w < n; ++w) steps.push_back(make(views[w], w));
    ex.run_in_rank_order(steps);
  }

  cluster<T, Optimizer, Grad, Transform> c_;
};

/// Stops a round_runtime-driven policy after a number of rounds without losing the work the
/// runtime starts for the next round: work of a round at or past the limit is deferred to
/// that round's end (where, replicas being private within a round, it gives the same bits).
class round_limit {
 public:
  explicit round_limit(std::size_t workers = 0) : deferred_(workers, 0) {}
  void set(std::uint64_t limit) { limit_ = limit; }
  std::uint64_t limit() const { return limit_; }
  /// True if worker w's work of `round` must run now (else it is deferred).
  bool run_now(std::size_t w, std::uint64_t round) {
    if (round < limit_) return true;
    deferred_[w] = 1;
    return false;
  }
  /// True (and clears it) if worker w's work was deferred.
  bool take_deferred(std::size_t w) {
    const bool d = deferred_[w] != 0;
    deferred_[w] = 0;
    return d;
  }

  template <class Archive>
  void serialize(Archive& ar) {
    ar(limit_, deferred_);
  }

 private:
  std::uint64_t limit_ = ~std::uint64_t{0};
  std::vector<char> deferred_;
};

}  // namespace heterograd::algorithms::sync::detail
