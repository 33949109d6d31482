#pragma once
// Collective algorithms as schedules, separate from any transport (the fflib / eager-SGD
// idea: a collective is a list of steps of point-to-point transfers). A schedule is pure data
// computed from (rank, size, count): tests inspect it (step counts, bytes) without running
// it, and heterograd/comm/executor.hpp runs it over any transport's send/recv.
//
// Within a step every transfer is posted at once; received data is combined into the buffer
// after the step's sends completed, in the listed order (fixed order: deterministic results).
//
// Algorithms (n ranks, S elements):
//   ring                        reduce-scatter then allgather around a ring: 2(n-1) steps,
//                               each rank sends 2(n-1)/n * S (bandwidth-optimal).
//   recursive_halving_doubling  Rabenseifner: reduce-scatter by recursive halving, allgather by
//                               recursive doubling: 2 log2 p steps (+2 when n is not a power of
//                               two), same volume as ring, fewer steps.
//   tree                        binomial reduce to rank 0 then binomial broadcast:
//                               2 ceil(log2 n) rounds of whole-buffer messages (small buffers).
//   hierarchical                two levels: binomial reduce inside groups of g consecutive ranks
//                               to the group leader, ring allreduce among leaders, binomial
//                               broadcast inside groups.
//   torus_2d                    Mikami et al. (#2, "ImageNet/ResNet-50 training in 224 seconds"):
//                               ranks on an X x Y grid (rank = y*X + x): reduce-scatter along X,
//                               allreduce along Y on each 1/X shard, allgather along X:
//                               2(X-1) + 2(Y-1) steps against 2(XY-1) for the flat ring.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "heterograd/comm/types.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::comm {

/// One point-to-point transfer of a step, over elements [offset, offset + count).
struct transfer {
  enum class kind : std::uint8_t { send, recv_reduce, recv_copy };
  kind what = kind::send;
  int peer = 0;
  std::size_t offset = 0;
  std::size_t count = 0;
  friend bool operator==(const transfer&, const transfer&) = default;
};

struct schedule_step {
  std::vector<transfer> transfers;
};

/// The steps one rank runs for one collective.
struct schedule {
  algorithm algo = algorithm::ring;
  int rank = 0;
  int size = 1;
  std::size_t count = 0;
  std::vector<schedule_step> steps;

  /// Elements this rank sends in total.
  std::size_t elements_sent() const {
    std::size_t s = 0;
    for (const auto& st : steps)
      for (const auto& t : st.transfers)
        if (t.what == transfer::kind::send) s += t.count;
    return s;
  }
  /// The most elements received in one step (the scratch the executor needs).
  std::size_t max_step_receive() const {
    std::size_t m = 0;
    for (const auto& st : steps) {
      std::size_t s = 0;
      for (const auto& t : st.transfers)
        if (t.what == transfer::kind::recv_reduce) s += t.count;
      m = std::max(m, s);
    }
    return m;
  }
};

namespace detail {

/// Block partition of [0, count) into `parts` near-equal chunks; chunk k is [lo, hi).
inline std::size_t chunk_lo(std::size_t count, int parts, int k) {
  const std::size_t q = count / static_cast<std::size_t>(parts);
  const std::size_t r = count % static_cast<std::size_t>(parts);
  const auto kk = static_cast<std::size_t>(k);
  return kk * q + std::min(kk, r);
}
inline std::size_t chunk_len(std::size_t count, int parts, int k) {
  return chunk_lo(count, parts, k + 1) - chunk_lo(count, parts, k);
}

inline int mod(int a, int n) { return ((a % n) + n) % n; }

inline void add(schedule_step& st, transfer::kind k, int peer, std::size_t off, std::size_t n) {
  if (n > 0) st.transfers.push_back({k, peer, off, n});
}

/// Ring reduce-scatter over `members` (global ranks in ring order) on [base, base+count):
/// after k-1 steps, member j holds the reduced chunk (j+1) mod k. Returns that chunk index.
inline int append_ring_reduce_scatter(std::vector<schedule_step>& steps,
                                      const std::vector<int>& members, int me,
                                      std::size_t base, std::size_t count) {
  const int k = static_cast<int>(members.size());
  const int right = members[static_cast<std::size_t>(mod(me + 1, k))];
  const int left = members[static_cast<std::size_t>(mod(me - 1, k))];
  for (int s = 0; s < k - 1; ++s) {
    schedule_step st;
    const int cs = mod(me - s, k), cr = mod(me - s - 1, k);
    add(st, transfer::kind::send, right, base + chunk_lo(count, k, cs), chunk_len(count, k, cs));
    add(st, transfer::kind::recv_reduce, left, base + chunk_lo(count, k, cr),
        chunk_len(count, k, cr));
    steps.push_back(std::move(st));
  }
  return mod(me + 1, k);
}

/// Ring allgather matching append_ring_reduce_scatter (member j starts with chunk (j+1) mod k).
inline void append_ring_allgather(std::vector<schedule_step>& steps,
                                  const std::vector<int>& members, int me, std::size_t base,
                                  std::size_t count) {
  const int k = static_cast<int>(members.size());
  const int right = members[static_cast<std::size_t>(mod(me + 1, k))];
  const int left = members[static_cast<std::size_t>(mod(me - 1, k))];
  for (int s = 0; s < k - 1; ++s) {
    schedule_step st;
    const int cs = mod(me + 1 - s, k), cr = mod(me - s, k);
    add(st, transfer::kind::send, right, base + chunk_lo(count, k, cs), chunk_len(count, k, cs));
    add(st, transfer::kind::recv_copy, left, base + chunk_lo(count, k, cr),
        chunk_len(count, k, cr));
    steps.push_back(std::move(st));
  }
}

inline void append_ring_allreduce(std::vector<schedule_step>& steps,
                                  const std::vector<int>& members, int me, std::size_t base,
                                  std::size_t count) {
  if (members.size() < 2) return;
  append_ring_reduce_scatter(steps, members, me, base, count);
  append_ring_allgather(steps, members, me, base, count);
}

/// Binomial reduce of [base, base+count) to members[0], then binomial broadcast from it.
inline void append_tree_reduce(std::vector<schedule_step>& steps, const std::vector<int>& members,
                               int me, std::size_t base, std::size_t count) {
  const int k = static_cast<int>(members.size());
  for (int d = 1; d < k; d *= 2) {
    schedule_step st;
    if (me % (2 * d) == d) {
      add(st, transfer::kind::send, members[static_cast<std::size_t>(me - d)], base, count);
    } else if (me % (2 * d) == 0 && me + d < k) {
      add(st, transfer::kind::recv_reduce, members[static_cast<std::size_t>(me + d)], base, count);
    }
    if (!st.transfers.empty()) steps.push_back(std::move(st));
  }
}
inline void append_tree_broadcast(std::vector<schedule_step>& steps,
                                  const std::vector<int>& members, int me, std::size_t base,
                                  std::size_t count) {
  const int k = static_cast<int>(members.size());
  int top = 1;
  while (top < k) top *= 2;
  for (int d = top / 2; d >= 1; d /= 2) {
    schedule_step st;
    if (me % (2 * d) == 0 && me + d < k) {
      add(st, transfer::kind::send, members[static_cast<std::size_t>(me + d)], base, count);
    } else if (me % (2 * d) == d) {
      add(st, transfer::kind::recv_copy, members[static_cast<std::size_t>(me - d)], base, count);
    }
    if (!st.transfers.empty()) steps.push_back(std::move(st));
  }
}

/// A grid side or group size must tile the ranks.
inline void require_divides(std::string_view parameter, int divisor, int size) {
  require(divisor >= 1 && size % divisor == 0, parameter, divisor,
          "must be >= 1 and divide the number of ranks");
}

inline std::vector<int> iota_members(int first, int count, int stride = 1) {
  std::vector<int> m(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) m[static_cast<std::size_t>(i)] = first + i * stride;
  return m;
}

}  // namespace detail

/// Flat ring allreduce.
inline schedule ring_allreduce(int rank, int size, std::size_t count) {
  schedule s{algorithm::ring, rank, size, count, {}};
  detail::append_ring_allreduce(s.steps, detail::iota_members(0, size), rank, 0, count);
  return s;
}

/// Rabenseifner's reduce-scatter (recursive halving) + allgather (recursive doubling). With
/// n = p + r (p the largest power of two <= n), ranks 2i and 2i+1 for i < r first fold into
/// 2i+1, which stands for both, and get the result back at the end.
inline schedule recursive_halving_doubling_allreduce(int rank, int size, std::size_t count) {
  schedule s{algorithm::recursive_halving_doubling, rank, size, count, {}};
  if (size < 2) return s;
  int p = 1;
  while (p * 2 <= size) p *= 2;
  const int r = size - p;
  auto real_of = [r](int v) { return v < r ? 2 * v + 1 : v + r; };
  int v = -1;  // virtual rank among the p participants
  if (rank < 2 * r) {
    schedule_step st;
    if (rank % 2 == 0) {
      detail::add(st, transfer::kind::send, rank + 1, 0, count);
    } else {
      detail::add(st, transfer::kind::recv_reduce, rank - 1, 0, count);
      v = rank / 2;
    }
    s.steps.push_back(std::move(st));
  } else {
    v = rank - r;
  }
  if (v >= 0) {
    // Recursive halving: keep the half on this rank's side of each bit, from the top bit.
    std::size_t lo = 0, hi = count;
    std::vector<std::pair<std::size_t, std::size_t>> kept;
    for (int d = p / 2; d >= 1; d /= 2) {
      const int partner = real_of(v ^ d);
      const std::size_t mid = lo + (hi - lo) / 2;
      schedule_step st;
      if ((v & d) == 0) {
        detail::add(st, transfer::kind::send, partner, mid, hi - mid);
        detail::add(st, transfer::kind::recv_reduce, partner, lo, mid - lo);
        hi = mid;
      } else {
        detail::add(st, transfer::kind::send, partner, lo, mid - lo);
        detail::add(st, transfer::kind::recv_reduce, partner, mid, hi - mid);
        lo = mid;
      }
      kept.emplace_back(lo, hi);
      s.steps.push_back(std::move(st));
    }
    // Recursive doubling: exchange owned ranges in the reverse order.
    for (int i = static_cast<int>(kept.size()) - 1, d = 1; i >= 0; --i, d *= 2) {
      const int partner = real_of(v ^ d);
      const auto [klo, khi] = kept[static_cast<std::size_t>(i)];
      // The range before halving step i was the union of the kept half and its sibling.
      const std::size_t plo = i == 0 ? 0 : kept[static_cast<std::size_t>(i - 1)].first;
      const std::size_t phi = i == 0 ? count : kept[static_cast<std::size_t>(i - 1)].second;
      schedule_step st;
      detail::add(st, transfer::kind::send, partner, klo, khi - klo);
      if (klo == plo) {
        detail::add(st, transfer::kind::recv_copy, partner, khi, phi - khi);
      } else {
        detail::add(st, transfer::kind::recv_copy, partner, plo, klo - plo);
      }
      s.steps.push_back(std::move(st));
    }
  }
  if (rank < 2 * r) {
    schedule_step st;
    if (rank % 2 == 0) {
      detail::add(st, transfer::kind::recv_copy, rank + 1, 0, count);
    } else {
      detail::add(st, transfer::kind::send, rank - 1, 0, count);
    }
    s.steps.push_back(std::move(st));
  }
  return s;
}

/// Binomial-tree reduce to rank 0 then broadcast: latency-bound small buffers.
inline schedule tree_allreduce(int rank, int size, std::size_t count) {
  schedule s{algorithm::tree, rank, size, count, {}};
  const auto all = detail::iota_members(0, size);
  detail::append_tree_reduce(s.steps, all, rank, 0, count);
  detail::append_tree_broadcast(s.steps, all, rank, 0, count);
  return s;
}

/// Two-level: groups of `group` consecutive ranks (size % group == 0).
inline schedule hierarchical_allreduce(int rank, int size, std::size_t count, int group) {
  detail::require_divides("hierarchical.group_size", group, size);
  schedule s{algorithm::hierarchical, rank, size, count, {}};
  const int g = rank / group, l = rank % group, groups = size / group;
  const auto local = detail::iota_members(g * group, group);
  detail::append_tree_reduce(s.steps, local, l, 0, count);
  if (l == 0) {
    detail::append_ring_allreduce(s.steps, detail::iota_members(0, groups, group), g, 0, count);
  }
  detail::append_tree_broadcast(s.steps, local, l, 0, count);
  return s;
}

/// 2D torus on an X x Y grid (size == X * Y, rank = y*X + x).
inline schedule torus_2d_allreduce(int rank, int size, std::size_t count, int x_dim) {
  detail::require_divides("torus_2d.x", x_dim, size);
  schedule s{algorithm::torus_2d, rank, size, count, {}};
  const int X = x_dim, Y = size / x_dim, x = rank % X, y = rank / X;
  const auto row = detail::iota_members(y * X, X);
  const auto col = detail::iota_members(x, Y, X);
  int owned = 0;
  if (X > 1) owned = detail::append_ring_reduce_scatter(s.steps, row, x, 0, count);
  const std::size_t lo = X > 1 ? detail::chunk_lo(count, X, owned) : 0;
  const std::size_t len = X > 1 ? detail::chunk_len(count, X, owned) : count;
  // Every rank of a column owns the same chunk index (owned depends on x only).
  detail::append_ring_allreduce(s.steps, col, y, lo, len);
  if (X > 1) detail::append_ring_allgather(s.steps, row, x, 0, count);
  return s;
}

/// The most square X for torus_2d: the smallest divisor of n that is >= sqrt(n).
inline int default_torus_x(int n) {
  for (int x = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n)))); x <= n; ++x)
    if (n % x == 0) return x;
  return n;
}

/// Size thresholds of the automatic choice among schedule-based algorithms.
struct algorithm_thresholds {
  std::size_t tree_max_bytes = 4096;   ///< at or below: tree (fewest messages)
  std::size_t rhd_max_bytes = 1 << 20;  ///< at or below: recursive halving/doubling
};

/// The schedule-based algorithm for `bytes` on `size` ranks.
inline algorithm choose_schedule_algorithm(int size, std::size_t bytes,
                                           const algorithm_thresholds& t = {}) {
  // Two ranks: one exchange (recursive doubling) beats a reduce to one rank and back.
  if (size <= 2) return algorithm::recursive_halving_doubling;
  if (bytes <= t.tree_max_bytes) return algorithm::tree;
  if (bytes <= t.rhd_max_bytes) return algorithm::recursive_halving_doubling;
  return algorithm::ring;
}

/// The schedule of `algo` (a schedule-based algorithm; automatic picks by size).
inline schedule make_allreduce_schedule(algorithm algo, int rank, int size, std::size_t count,
                                        std::size_t elem_bytes, int group_size = 0) {
  require(size >= 1, "schedule.size", size, "must be >= 1");
  require(rank >= 0 && rank < size, "schedule.rank", rank, "must be in [0, size)");
  if (algo == algorithm::automatic || algo == algorithm::native)
    algo = choose_schedule_algorithm(size, count * elem_bytes);
  switch (algo) {
    case algorithm::ring: return ring_allreduce(rank, size, count);
    case algorithm::recursive_halving_doubling:
      return recursive_halving_doubling_allreduce(rank, size, count);
    case algorithm::tree: return tree_allreduce(rank, size, count);
    case algorithm::hierarchical: {
      int g = group_size;
      if (g == 0) g = default_torus_x(size);
      return hierarchical_allreduce(rank, size, count, g);
    }
    case algorithm::torus_2d:
      return torus_2d_allreduce(rank, size, count, group_size ? group_size : default_torus_x(size));
    default: break;
  }
  return ring_allreduce(rank, size, count);
}

}  // namespace heterograd::comm
