#pragma once
// Vocabulary shared by the synchronous family: what a synchronisation aggregates, what happens
// to optimizer states when models are averaged, the parameter transforms around averaging
// (#16), the "no outer optimizer" default, and the gradient-oracle shape the simulated
// clusters call.
//
// Gradient oracle. A simulated cluster asks the user for worker w's mini-batch gradient:
//     double grad(std::size_t worker, std::uint64_t step, std::size_t batch,
//                 span<const T> params, span<T> grads);      // returns the batch's mean loss
// `step` counts worker w's gradient computations (0, 1, ...), so a sampler keyed on
// (worker, step) is deterministic whatever the runtime. `batch` is the worker's b_i.
//
// Optimizer. Any object with the optim layer's shape: init(exec_policy, params) -> state and
// update(exec_policy, grads, state&, params) (heterograd/optim: sgd, momentum, adam, ...). A
// state with `slots` and `children` (optim::state) can be averaged; others only reset or kept.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include "heterograd/algorithms/nonfinite.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::algorithms::sync {

/// What a round does with a worker's non-finite gradient (nonfinite.hpp; every config's
/// `nonfinite` field, fail by default).
using algorithms::nonfinite_gradient_error;
using algorithms::nonfinite_policy;
using algorithms::nonfinite_policy_name;

/// What a synchronising step combines.
enum class aggregation {
  gradients,  ///< allreduce the (weighted) gradients, then every worker takes the same step
  parameters  ///< every worker steps on its own gradient, then the models are averaged
};

/// The names configurations give the aggregations (core/describe.hpp).
inline constexpr choice<aggregation> aggregations[] = {{"gradients", aggregation::gradients},
                                                       {"parameters", aggregation::parameters}};

/// What happens to the optimizer states (momentum, Adam moments) when models are averaged.
enum class state_policy {
  keep_local,  ///< each worker keeps its own state (the usual local SGD / FedAvg choice)
  average,     ///< states are averaged with the same weights as the models
  reset        ///< states restart from init (no momentum carried across a synchronisation)
};

/// The names configurations give the state policies (core/describe.hpp).
inline constexpr choice<state_policy> state_policies[] = {{"keep_local", state_policy::keep_local},
                                                          {"average", state_policy::average},
                                                          {"reset", state_policy::reset}};

/// What a simulated worker reports for one round (the Result of runtime::round_runtime).
struct round_stats {
  std::size_t steps = 0;  ///< gradient computations this round
  double loss = 0;        ///< mean loss of those computations (0 when none)
};

/// Pre- and post-aggregation parameter transforms (#16, Karilanova et al. 2026): map worker w's
/// parameters to a common parameterisation before they are averaged, and the average back to
/// worker w's own afterwards. The identity is the default.
struct identity_transform {
  template <class T, class S>
  void to_common(std::size_t, span<T, S>) const {}
  template <class T, class S>
  void from_common(std::size_t, span<T, S>) const {}
  static constexpr bool is_identity = true;
};

/// No outer optimizer: the averaged model becomes the new model (FedAvg / plain local SGD).
/// An outer optimizer (optim::diloco_nesterov, fedavgm, fedadam, outer_sgd) instead treats
/// anchor - average as a gradient and updates the anchor.
struct no_outer {
  struct state {
    friend bool operator==(const state&, const state&) = default;
  };
  template <class Policy, class P>
  state init(const Policy&, P&&) const {
    return {};
  }
  static constexpr bool is_none = true;
};

namespace detail {

template <class X>
concept has_identity_flag = requires { X::is_identity; };
template <class Tr>
inline constexpr bool is_identity_transform_v = [] {
  if constexpr (has_identity_flag<Tr>) return Tr::is_identity;
  else return false;
}();

template <class O>
concept has_none_flag = requires { O::is_none; };
template <class O>
inline constexpr bool is_no_outer_v = [] {
  if constexpr (has_none_flag<O>) return O::is_none;
  else return false;
}();

/// The state an optimizer keeps for host parameters of type T (sequential policy).
template <class Optimizer, class T>
using optimizer_state_t = decltype(std::declval<const Optimizer&>().init(
    thrust::cpp::par, std::declval<span<T>>()));

}  // namespace detail

/// The gradient oracle a simulated cluster calls.
template <class G, class T>
concept gradient_oracle = requires(G& g, std::size_t w, std::uint64_t step, std::size_t b,
                                   span<const T> x, span<T> out) {
  { g(w, step, b, x, out) } -> std::convertible_to<double>;
};

}  // namespace heterograd::algorithms::sync
