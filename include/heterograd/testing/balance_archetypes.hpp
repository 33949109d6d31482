#pragma once
// Minimal archetypes for the balance concept: copy the positive one to start a custom
// load-balancing policy.

#include <cstddef>

#include "heterograd/balance/concepts.hpp"
#include "heterograd/balance/measurement.hpp"

namespace heterograd::testing {

/// The least a balance policy must provide: one worker that always gets 32 samples.
struct balance_policy_archetype {
  std::size_t workers() const { return 1; }
  void observe(std::size_t, const balance::worker_measurement&) {}
  bool rebalance() { return false; }
  std::size_t assignment(std::size_t) const { return 32; }
  double weight(std::size_t) const { return 1.0; }
};

/// Not a policy: it cannot be told what happened (no observe).
struct balance_policy_without_observe {
  std::size_t workers() const { return 1; }
  bool rebalance() { return false; }
  std::size_t assignment(std::size_t) const { return 32; }
  double weight(std::size_t) const { return 1.0; }
};

/// Not a policy: rebalance() does not say whether the assignment changed.
struct balance_policy_with_void_rebalance {
  std::size_t workers() const { return 1; }
  void observe(std::size_t, const balance::worker_measurement&) {}
  void rebalance() {}
  std::size_t assignment(std::size_t) const { return 32; }
  double weight(std::size_t) const { return 1.0; }
};

/// Not a policy: no aggregation weight.
struct balance_policy_without_weight {
  std::size_t workers() const { return 1; }
  void observe(std::size_t, const balance::worker_measurement&) {}
  bool rebalance() { return false; }
  std::size_t assignment(std::size_t) const { return 32; }
};

/// Not a policy: not copyable (policies are values that runtimes snapshot and restore).
struct balance_policy_not_copyable : balance_policy_archetype {
  balance_policy_not_copyable() = default;
  balance_policy_not_copyable(const balance_policy_not_copyable&) = delete;
  balance_policy_not_copyable& operator=(const balance_policy_not_copyable&) = delete;
};

static_assert(balance::balance_policy<balance_policy_archetype>);
static_assert(!balance::balance_policy<balance_policy_without_observe>);
static_assert(!balance::balance_policy<balance_policy_with_void_rebalance>);
static_assert(!balance::balance_policy<balance_policy_without_weight>);
static_assert(!balance::balance_policy<balance_policy_not_copyable>);

}  // namespace heterograd::testing
