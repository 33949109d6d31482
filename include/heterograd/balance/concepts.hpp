#pragma once
// The concept of the balance layer. It has positive and negative archetypes in
// heterograd/testing/balance_archetypes.hpp.

#include <concepts>
#include <cstddef>

#include "heterograd/balance/measurement.hpp"

namespace heterograd::balance {

/// A load-balancing policy: a copyable value with no threads and no I/O. A runtime reports
/// each worker's measurements with observe(w, m), asks for a decision with rebalance() (once
/// per epoch or round; true when the assignment changed) and reads, per worker, its
/// assignment (samples per step for batch-size policies, local steps per round for
/// local-step policies) and the weight its contribution gets in the aggregation.
template <class P>
concept balance_policy = std::copyable<P> &&
    requires(P& p, const P& cp, std::size_t w, const worker_measurement& m) {
      { cp.workers() } -> std::convertible_to<std::size_t>;
      p.observe(w, m);
      { p.rebalance() } -> std::same_as<bool>;
      { cp.assignment(w) } -> std::convertible_to<std::size_t>;
      { cp.weight(w) } -> std::convertible_to<double>;
    };

}  // namespace heterograd::balance
