#pragma once
// The bytes a rank of a sharded run holds, and the refusal of a layout over a rank's budget.
//
// Per rank r (E bytes per element, k optimizer slots per element, n ranks):
//   parameters        shard_size(r) · E           its shard of the parameters
//   gradients         shard_size(r) · E           its reduced gradient shard, until apply
//   optimizer state   shard_size(r) · k · E       momentum, moments, accumulators
//   gathered          largest bucket · E          the gathered parameters of one bucket
//   gradient bucket   largest bucket · E          one bucket's full local gradient
//   scratch           (n-1) · largest piece(r) · E  reduce_scatter_v's receive buffers
// The two bucket buffers are the FSDP peak: one layer's parameters gathered while its full
// gradient exists (backward), both freed (reused) before the next layer. Activations and the
// model's own workspace are the caller's (Cephalo's reserved and per-sample bytes).

#include <algorithm>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>

#include "heterograd/algorithms/sharded/layout.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::algorithms::sharded {

/// The bytes rank r holds (see the header).
struct rank_memory {
  std::size_t parameters = 0, gradients = 0, optimizer_state = 0, gathered = 0,
              gradient_bucket = 0, scratch = 0;
  std::size_t total() const {
    return parameters + gradients + optimizer_state + gathered + gradient_bucket + scratch;
  }
  friend bool operator==(const rank_memory&, const rank_memory&) = default;
};

/// The bytes rank r of `l` holds with `state_slots` optimizer slots per element (the
/// optimizer's `state_slots`: sgd 0, momentum 1, adam 2, lamb 2) of `element_bytes` each.
inline rank_memory memory_of(const layout& l, int r, std::size_t state_slots,
                             std::size_t element_bytes = sizeof(float)) {
  std::size_t largest_piece = 0;
  for (std::size_t b = 0; b < l.buckets(); ++b) largest_piece = std::max(largest_piece, l.piece_count(b, r));
  rank_memory m;
  m.parameters = m.gradients = l.shard_size(r) * element_bytes;
  m.optimizer_state = l.shard_size(r) * state_slots * element_bytes;
  m.gathered = m.gradient_bucket = l.largest_bucket() * element_bytes;
  m.scratch = static_cast<std::size_t>(l.ranks() - 1) * largest_piece * element_bytes;
  return m;
}

/// What a rank may hold: its worker's name (for the error) and its bytes.
struct memory_budget {
  std::string worker;
  std::size_t bytes = 0;
};

/// Refuses `l` when a rank needs more than its budget: std::invalid_argument naming the
/// budget's index and worker, its bytes, and the bytes the rank needs, item by item.
inline void require_within_budget(const layout& l, std::size_t state_slots,
                                  std::span<const memory_budget> budgets,
                                  std::size_t element_bytes = sizeof(float)) {
  require(budgets.size() == static_cast<std::size_t>(l.ranks()), "memory_budgets (size)",
          budgets.size(), "must be one per rank (" + std::to_string(l.ranks()) + ")");
  for (int r = 0; r < l.ranks(); ++r) {
    const auto& b = budgets[static_cast<std::size_t>(r)];
    const rank_memory m = memory_of(l, r, state_slots, element_bytes);
    if (m.total() <= b.bytes) continue;
    throw std::invalid_argument(invalid_argument_message(
        "memory_budgets[" + std::to_string(r) + "] (worker '" + b.worker + "', bytes)", b.bytes,
        "rank " + std::to_string(r) + " (worker '" + b.worker + "') needs " +
            std::to_string(m.total()) + " bytes: parameters " + std::to_string(m.parameters) +
            " + gradients " + std::to_string(m.gradients) + " + optimizer state " +
            std::to_string(m.optimizer_state) + " + gathered bucket " + std::to_string(m.gathered) +
            " + gradient bucket " + std::to_string(m.gradient_bucket) + " + reduce-scatter scratch " +
            std::to_string(m.scratch) + "; the layout does not fit its budget by " +
            std::to_string(m.total() - b.bytes) + " bytes"));
  }
}

}  // namespace heterograd::algorithms::sharded
