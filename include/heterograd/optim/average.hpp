#pragma once
// Averaging optimizer states: local SGD and DiLoCo variants average (or keep, or reset) the
// workers' optimizer states at a synchronisation; this computes the weighted average of the
// slots of states that share one structure. Bytes per element: (K + 1) sizeof(T) per slot
// (kernels::weighted_sum).

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/blend.hpp"
#include "heterograd/optim/state.hpp"

namespace heterograd::optim {

namespace detail {
template <class T, class S>
void require_same_shape(const state<T, S>& a, const state<T, S>& b, const std::string& where) {
  require(a.kind == b.kind, where + ".kind", b.kind,
          "must equal the first state's '" + a.kind + "'");
  require(a.slots.size() == b.slots.size(), where + ".slots (count)", b.slots.size(),
          "must equal the first state's slot count");
  for (std::size_t i = 0; i < a.slots.size(); ++i)
    require_same_size(where + ".slots[" + std::to_string(i) + "] (size)", b.slots[i].size(),
                      "the first state's slot", a.slots[i].size());
  require(a.children.size() == b.children.size(), where + ".children (count)", b.children.size(),
          "must equal the first state's child count");
  for (std::size_t i = 0; i < a.children.size(); ++i)
    require_same_shape(a.children[i], b.children[i],
                       where + ".children[" + std::to_string(i) + "]");
}

template <class Policy, class T, class S>
void average_into(const Policy& policy, state<T, S>& out, std::span<const state<T, S>* const> in,
                  std::span<const T> w) {
  for (std::size_t i = 0; i < out.slots.size(); ++i) {
    std::vector<span<const T, S>> xs;
    for (const auto* s : in) xs.push_back(slot_span<T, S>(const_cast<buffer<T, S>&>(s->slots[i])));
    kernels::weighted_sum(policy, slot_span<T, S>(out.slots[i]), xs, w);
  }
  for (std::size_t c = 0; c < out.children.size(); ++c) {
    std::vector<const state<T, S>*> kids;
    for (const auto* s : in) kids.push_back(&s->children[c]);
    average_into(policy, out.children[c], std::span<const state<T, S>* const>(kids), w);
  }
}
}  // namespace detail

/// The weighted average of states of one structure (same kind, slots and children at every
/// depth): every slot is sum_k weights[k] slot_k, in list order; count and counters are the
/// first state's. `weights` empty: equal weights 1/K. Throws before writing anything when the
/// structures differ or the weights are not one per state.
template <class Policy, class T, class S>
state<T, S> average_states(const Policy& policy, std::span<const state<T, S>> states,
                           std::span<const double> weights = {}) {
  static_assert(exec::accessible_v<Policy, S>, "policy cannot access the states' memory");
  require(!states.empty(), "average_states.states (count)", states.size(), "must be >= 1");
  if (!weights.empty())
    require_same_size("average_states.weights", weights.size(), "average_states.states",
                      states.size());
  for (std::size_t k = 1; k < states.size(); ++k)
    detail::require_same_shape(states[0], states[k],
                               "average_states.states[" + std::to_string(k) + "]");
  std::vector<T> w(states.size());
  for (std::size_t k = 0; k < w.size(); ++k)
    w[k] = static_cast<T>(weights.empty() ? 1.0 / static_cast<double>(states.size()) : weights[k]);
  state<T, S> out = states[0];
  std::vector<const state<T, S>*> ptrs;
  for (const auto& s : states) ptrs.push_back(&s);
  detail::average_into(policy, out, std::span<const state<T, S>* const>(ptrs),
                       std::span<const T>(w));
  return out;
}

}  // namespace heterograd::optim
