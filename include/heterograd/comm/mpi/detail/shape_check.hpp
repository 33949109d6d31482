#pragma once
// The cross-rank shape check of the mpi transport's collectives: what ranks must agree on in
// one call, encoded for one MPI_MAX allreduce, and the last shape of each collective a handle
// ran (only a new shape is checked, except in debug builds).

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "heterograd/comm/detail/frontend.hpp"
#include "heterograd/comm/types.hpp"

namespace heterograd::comm::mpi {

namespace detail {

using comm::detail::collective;

/// What ranks must agree on in one collective call: the collective, the element count and
/// type, and `extra`: the operator of an allreduce (allreduce_extra) or reduce_scatter, the
/// root of a broadcast or gather.
struct call_shape {
  collective kind = collective::barrier;
  std::size_t count = 0;
  dtype dt = dtype::u8;
  int extra = 0;
  friend bool operator==(const call_shape&, const call_shape&) = default;

  /// The shape as (x, -x) pairs for an MPI_MAX allreduce: max(-x) = -min(x), so the ranks
  /// agree iff every pair still cancels afterwards (shape_mismatch).
  void pairs(std::int64_t* b) const {
    const std::int64_t v[4] = {static_cast<std::int64_t>(kind), static_cast<std::int64_t>(count),
                               static_cast<std::int64_t>(dt), extra};
    for (int i = 0; i < 4; ++i) {
      b[2 * i] = v[i];
      b[2 * i + 1] = -v[i];
    }
  }
};

/// An allreduce's `extra`: its operator, and whether it is weighted.
inline int allreduce_extra(reduce_op op, bool weighted) { return static_cast<int>(op) * 2 + (weighted ? 1 : 0); }

/// The mismatch message of a shape check (pairs (x, -x) reduced with MPI_MAX: equal on every
/// rank iff max(x) == min(x)), or an empty string when the ranks agree.
inline std::string shape_mismatch(const std::int64_t* b, int rank) {
  static const char* field[] = {"collective", "element count", "element type", "operator or root"};
  for (int i = 0; i < 8; i += 2) {
    if (b[i] != -b[i + 1])
      return "heterograd: comm: mismatched collective on rank " + std::to_string(rank) +
             ": ranks passed different " + field[i / 2] + " (from " + std::to_string(-b[i + 1]) +
             " to " + std::to_string(b[i]) + ")";
  }
  return {};
}

/// The last shape of each collective a handle ran.
class shape_table {
 public:
  /// Records `s` as the last shape of its collective; true when the call must check it across
  /// ranks: a new shape, or every call in debug builds (NDEBUG unset).
  bool note(const call_shape& s) {
#if defined(NDEBUG)
    auto it = last_.find(s.kind);
    if (it != last_.end() && it->second == s) return false;
#endif
    last_[s.kind] = s;
    return true;
  }
  /// After a mismatch: the next call of `k` checks again.
  void forget(collective k) { last_.erase(k); }

 private:
  std::map<collective, call_shape> last_;
};

}  // namespace detail

}  // namespace heterograd::comm::mpi
