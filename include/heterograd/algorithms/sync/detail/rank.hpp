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
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/blend.hpp"
#include "heterograd/kernels/memory.hpp"
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

/// One rank's optimizer, state, transform and memory (kernels/memory.hpp: the memory of
/// the rank's parameters, which runs every kernel of the step), by reference: a per-rank
/// step works on storage its owner keeps (and serializes). The simulated replicas' memory
/// is kernels::serial_host_memory.
template <class Optimizer, class State, class Transform, class Memory>
struct replica {
  const Optimizer& opt;
  State& state;
  const Transform& tr;
  const Memory& memory;
  std::size_t rank;  ///< world rank: the transforms' index

  template <class T, class S>
  void update(span<const T, S> g, span<T, S> p) const {
    memory.run(p.size(), [&](const auto& policy) { opt.update(policy, g, state, p); });
  }
  /// The optimizer state from init (state policy reset).
  template <class T, class S>
  void reset(span<T, S> p) const {
    memory.run(p.size(), [&](const auto& policy) { state = opt.init(policy, p); });
  }
  template <class T, class S>
  void copy(span<const T, S> from, span<T, S> to) const {
    require_same_size("copy.from", from.size(), "copy.to", to.size());
    memory.run(to.size(), [&](const auto& policy) { kernels::copy(policy, from, to); });
  }
  template <class T, class S>
  void fill(span<T, S> x, T value) const {
    memory.run(x.size(), [&](const auto& policy) { kernels::fill(policy, x, value); });
  }
};

/// Every slot of an optim::state (at every depth), in a fixed order.
template <class T, class S, class State>
void slots_of(State& st, std::vector<span<T, S>>& out) {
  if constexpr (is_optim_state_v<State>) {
    for (auto& slot : st.slots) out.emplace_back(thrust::raw_pointer_cast(slot.data()), slot.size());
    for (auto& c : st.children) slots_of<T, S>(c, out);
  }
}

/// The optimizer-state policy after a model average of weight w (`member`: this rank's
/// model was in it; a non-member's state contributes 0 * 0, never 0 * inf).
template <class T, class S, class Ex, class Rep>
step_task<bool> apply_state_policy(Ex& ex, Rep rep, state_policy sp, double w, bool member,
                                   span<T, S> params) {
  switch (sp) {
    case state_policy::keep_local: break;
    case state_policy::average: {
      std::vector<span<T, S>> slots;
      slots_of<T, S>(rep.state, slots);
      for (auto s : slots) {
        if (!member) rep.fill(s, T(0));
        co_await ex.allreduce(span<const T, S>(s), s, member ? w : 0.0);
      }
      break;
    }
    case state_policy::reset: rep.reset(params); break;
  }
  co_return true;
}

/// One synchronising step of a rank with weight w (BSP's, and SelSync's when it
/// synchronises). Gradients mode: agg <- the weighted allreduce of grads (agg may be grads,
/// as in the helpers, or a buffer of the policy's), then the optimizer step with agg.
/// Parameters mode: the step on the own gradient, the weighted average of the models in the
/// common form (recorded into `model` when it is not empty), back to the own form, then the
/// optimizer-state policy.
template <class T, class S, class Ex, class Rep>
step_task<bool> synchronous_step(Ex& ex, Rep rep, aggregation mode, state_policy sp, double w,
                                 span<T, S> params, span<const T, S> grads, span<T, S> agg,
                                 span<T, S> model) {
  if (mode == aggregation::gradients) {
    co_await ex.allreduce(grads, agg, w);
    rep.update(span<const T, S>(agg), params);
  } else {
    rep.update(grads, params);
    rep.tr.to_common(rep.rank, params);
    co_await ex.allreduce(span<const T, S>(params), params, w);
    if (!model.empty()) rep.copy(span<const T, S>(params), model);
    rep.tr.from_common(rep.rank, params);
    co_await apply_state_policy<T>(ex, rep, sp, w, true, params);
  }
  co_return true;
}

}  // namespace heterograd::algorithms::sync::detail
