#pragma once
// The optimizer concept: `init(policy, params) -> state` and
// `update(policy, grads, state, params)`, with the state a plain value.

#include <concepts>
#include <vector>

#include <thrust/system/cpp/execution_policy.h>

#include "heterograd/core/span.hpp"
#include "heterograd/optim/state.hpp"

namespace heterograd::optim {

/// An optimizer over host float buffers with the sequential policy (the shape every
/// heterograd optimizer has for every policy, element type and memory space).
template <class O>
concept optimizer = std::copy_constructible<O> &&
    requires(const O& o, state<float>& st, span<const float> g, span<float> p) {
  { o.init(thrust::cpp::par, p) } -> std::same_as<state<float>>;
  o.update(thrust::cpp::par, g, st, p);
  { O::name() } -> std::convertible_to<std::string_view>;
};

}  // namespace heterograd::optim
