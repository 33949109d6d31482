#pragma once
// What the per-rank steps of the synchronous family share: one rank's storage by reference
// (`replica`: the simulated policy's cluster entry or a helper's own state) and the pieces
// of a synchronisation written once against an exchange (heterograd/algorithms/sync/
// exchange.hpp): the synchronising step of BSP and SelSync, and the optimizer-state policy
// after a model average.

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "heterograd/algorithms/sync/common.hpp"
#include "heterograd/algorithms/sync/exchange.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/optim/state.hpp"

namespace heterograd::algorithms::sync::detail {

/// The sequential host backend (the simulated replicas; the helpers' default: several worker
/// threads share the cores, so each updates on one core).
using host_exec = std::remove_cvref_t<decltype(thrust::cpp::par)>;

/// Whether a state type can be averaged: optim's state (slots and children).
template <class State>
inline constexpr bool is_optim_state_v = false;
template <class T, class S>
inline constexpr bool is_optim_state_v<optim::state<T, S>> = true;

/// One rank's optimizer, state, transform and backend, by reference: a per-rank step works
/// on storage its owner keeps (and serializes).
template <class Optimizer, class State, class Transform, class Exec>
struct replica {
  const Optimizer& opt;
  State& state;
  const Transform& tr;
  Exec exec;
  std::size_t rank;  ///< world rank: the transforms' index

  template <class T>
  void update(span<const T> g, span<T> p) const {
    opt.update(exec, g, state, p);
  }
};

/// Every slot of an optim::state (at every depth), in a fixed order.
template <class T, class State>
void slots_of(State& st, std::vector<span<T>>& out) {
  if constexpr (is_optim_state_v<State>) {
    for (auto& slot : st.slots) out.emplace_back(slot.data(), slot.size());
    for (auto& c : st.children) slots_of<T>(c, out);
  }
}

/// The optimizer-state policy after a model average of weight w (`member`: this rank's
/// model was in it; a non-member's state contributes 0 * 0, never 0 * inf).
template <class T, class Ex, class Rep>
step_task<bool> apply_state_policy(Ex& ex, Rep rep, state_policy sp, double w, bool member,
                                   span<T> params) {
  switch (sp) {
    case state_policy::keep_local: break;
    case state_policy::average: {
      std::vector<span<T>> slots;
      slots_of<T>(rep.state, slots);
      for (auto s : slots) {
        if (!member) std::fill(s.begin(), s.end(), T(0));
        co_await ex.allreduce(span<const T>(s), s, member ? w : 0.0);
      }
      break;
    }
    case state_policy::reset: rep.state = rep.opt.init(rep.exec, params); break;
  }
  co_return true;
}

/// One synchronising step of a rank with weight w (BSP's, and SelSync's when it
/// synchronises). Gradients mode: agg <- the weighted allreduce of grads (agg may be grads,
/// as in the helpers, or a buffer of the policy's), then the optimizer step with agg.
/// Parameters mode: the step on the own gradient, the weighted average of the models in the
/// common form (recorded into `model` when it is not empty), back to the own form, then the
/// optimizer-state policy.
template <class T, class Ex, class Rep>
step_task<bool> synchronous_step(Ex& ex, Rep rep, aggregation mode, state_policy sp, double w,
                                 span<T> params, span<const T> grads, span<T> agg, span<T> model) {
  if (mode == aggregation::gradients) {
    co_await ex.allreduce(grads, agg, w);
    rep.update(span<const T>(agg), params);
  } else {
    rep.update(grads, params);
    rep.tr.to_common(rep.rank, params);
    co_await ex.allreduce(span<const T>(params), params, w);
    if (!model.empty()) std::copy(params.begin(), params.end(), model.begin());
    rep.tr.from_common(rep.rank, params);
    co_await apply_state_policy<T>(ex, rep, sp, w, true, params);
  }
  co_return true;
}

}  // namespace heterograd::algorithms::sync::detail
