#pragma once
// Communication cost model: the alpha-beta (Hockney) model. Sending m bytes over a link costs
// alpha + m / beta (latency alpha seconds, bandwidth beta bytes/s). Collectives are counted
// as synchronous steps; each step costs the latency of the slowest link it uses plus its
// bytes over that link's bandwidth. Formulas (n ranks, m bytes per rank's buffer):
//
//   point to point                 alpha + m/beta                                     1 step
//   ring allreduce                 2(n-1) alpha + 2(n-1)/n * m/beta             2(n-1) steps
//     (reduce-scatter then allgather; Patarasuk & Yuan, JPDC 2009)
//   tree allreduce                 2 ceil(log2 n) (alpha + m/beta)       2 ceil(log2 n) steps
//     (binomial-tree reduce to a root, then binomial-tree broadcast)
//   recursive-doubling allreduce   ceil(log2 n) (alpha + m/beta)           ceil(log2 n) steps
//   broadcast (binomial tree)      ceil(log2 n) (alpha + m/beta)           ceil(log2 n) steps
//   hierarchical allreduce         g ranks per node, N = n/g nodes:
//                                  intra reduce-scatter (g-1) a_i + (g-1)/g m/b_i
//                                  inter ring allreduce of m/g: 2(N-1) a_e + 2(N-1)/N (m/g)/b_e
//                                  intra allgather      (g-1) a_i + (g-1)/g m/b_i
//   2D-torus allreduce (X x Y)     horizontal reduce-scatter a_h + (X-1)/X m/b_h
//     (Mikami et al.,              vertical allreduce of m/X 2(Y-1) a_v + 2(Y-1)/Y (m/X)/b_v
//      arXiv 1811.05233)           horizontal allgather      a_h + (X-1)/X m/b_h
//                                  2(X-1) + 2(Y-1) steps instead of the flat ring's 2(XY-1)
//   parameter server push / pull   alpha + c m / (S beta): c workers at once through S server
//                                  shards, whose links they share
//
// `bytes_per_rank` is the most any one rank sends (the volume the bandwidth term charges).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "heterograd/core/error.hpp"

namespace heterograd::sim {

/// One link class: latency alpha (s), bandwidth beta (bytes/s).
struct link {
  double latency = 0.0;
  double bandwidth = std::numeric_limits<double>::infinity();

  void validate(const char* name = "link") const {
    std::string n = name;
    require(std::isfinite(latency) && latency >= 0, n + ".latency", latency,
            "must be finite and >= 0 (a negative time)");
    require(bandwidth > 0, n + ".bandwidth", bandwidth, "must be > 0 bytes/s");
  }
  /// alpha + m / beta.
  double time(double bytes) const { return latency + bytes / bandwidth; }
};

/// The cost of one communication: virtual seconds, synchronous steps, and the largest volume
/// one rank sends.
struct comm_cost {
  double seconds = 0;
  std::size_t steps = 0;
  double bytes_per_rank = 0;

  comm_cost& operator+=(const comm_cost& o) {
    seconds += o.seconds;
    steps += o.steps;
    bytes_per_rank += o.bytes_per_rank;
    return *this;
  }
  friend comm_cost operator+(comm_cost a, const comm_cost& b) { return a += b; }
};

namespace detail {
inline void require_ranks(const char* name, std::size_t n) {
  require(n > 0, name, n, "must be > 0 (an empty group)");
}
inline void require_bytes(double bytes) {
  require(std::isfinite(bytes) && bytes >= 0, "bytes", bytes, "must be finite and >= 0");
}
/// ceil(log2 n) for n >= 1.
inline std::size_t ceil_log2(std::size_t n) {
  std::size_t k = 0;
  while ((std::size_t{1} << k) < n) ++k;
  return k;
}
}  // namespace detail

inline comm_cost point_to_point(const link& l, double bytes) {
  l.validate();
  detail::require_bytes(bytes);
  return {l.time(bytes), 1, bytes};
}

/// Reduce-scatter over a ring: (n-1) alpha + (n-1)/n m/beta.
inline comm_cost ring_reduce_scatter(const link& l, std::size_t n, double bytes) {
  l.validate();
  detail::require_ranks("ranks", n);
  detail::require_bytes(bytes);
  const double k = static_cast<double>(n - 1);
  const double v = k / static_cast<double>(n) * bytes;
  return {k * l.latency + v / l.bandwidth, n - 1, v};
}
/// Allgather over a ring: same cost as the reduce-scatter.
inline comm_cost ring_allgather(const link& l, std::size_t n, double bytes) {
  return ring_reduce_scatter(l, n, bytes);
}
/// 2(n-1) alpha + 2(n-1)/n m/beta.
inline comm_cost ring_allreduce(const link& l, std::size_t n, double bytes) {
  return ring_reduce_scatter(l, n, bytes) + ring_allgather(l, n, bytes);
}
/// Binomial-tree broadcast: ceil(log2 n) (alpha + m/beta).
inline comm_cost tree_broadcast(const link& l, std::size_t n, double bytes) {
  l.validate();
  detail::require_ranks("ranks", n);
  detail::require_bytes(bytes);
  const std::size_t s = detail::ceil_log2(n);
  return {static_cast<double>(s) * l.time(bytes), s, static_cast<double>(s) * bytes};
}
/// Binomial-tree reduce + broadcast: 2 ceil(log2 n) (alpha + m/beta).
inline comm_cost tree_allreduce(const link& l, std::size_t n, double bytes) {
  return tree_broadcast(l, n, bytes) + tree_broadcast(l, n, bytes);
}
/// Recursive doubling: ceil(log2 n) (alpha + m/beta) (exact for powers of two).
inline comm_cost recursive_doubling_allreduce(const link& l, std::size_t n, double bytes) {
  return tree_broadcast(l, n, bytes);
}

/// 2D-torus allreduce on an X x Y grid (Mikami et al.): reduce-scatter along X, allreduce of
/// the 1/X shard along Y, allgather along X.
inline comm_cost torus2d_allreduce(const link& horizontal, const link& vertical, std::size_t x,
                                   std::size_t y, double bytes) {
  horizontal.validate("horizontal");
  vertical.validate("vertical");
  detail::require_ranks("x", x);
  detail::require_ranks("y", y);
  detail::require_bytes(bytes);
  comm_cost c = ring_reduce_scatter(horizontal, x, bytes);
  c += ring_allreduce(vertical, y, bytes / static_cast<double>(x));
  c += ring_allgather(horizontal, x, bytes);
  return c;
}

/// Parameter-server push of m bytes by `concurrent` workers at once, into `servers` shards:
/// alpha + concurrent m / (servers beta). One worker alone: alpha + m/beta.
inline comm_cost ps_push(const link& l, double bytes, std::size_t concurrent = 1,
                         std::size_t servers = 1) {
  l.validate();
  detail::require_bytes(bytes);
  detail::require_ranks("concurrent", concurrent);
  detail::require_ranks("servers", servers);
  const double load = static_cast<double>(concurrent) / static_cast<double>(servers);
  return {l.latency + load * bytes / l.bandwidth, 1, bytes};
}
/// Pull of the model: symmetric to the push.
inline comm_cost ps_pull(const link& l, double bytes, std::size_t concurrent = 1,
                         std::size_t servers = 1) {
  return ps_push(l, bytes, concurrent, servers);
}
/// A worker's push of its gradient followed by its pull of the model.
inline comm_cost ps_push_pull(const link& l, double bytes, std::size_t concurrent = 1,
                              std::size_t servers = 1) {
  return ps_push(l, bytes, concurrent, servers) + ps_pull(l, bytes, concurrent, servers);
}

/// A cluster's network: `ranks_per_node` ranks share a node and talk over `intra`; nodes talk
/// over `inter`. Rank r lives on node r / ranks_per_node.
struct network {
  link intra{};
  link inter{};
  std::size_t ranks_per_node = 1;

  network() = default;
  network(link intra_node, link inter_node, std::size_t per_node)
      : intra(intra_node), inter(inter_node), ranks_per_node(per_node) {
    validate();
  }
  void validate() const {
    intra.validate("network.intra");
    inter.validate("network.inter");
    require(ranks_per_node > 0, "network.ranks_per_node", ranks_per_node, "must be > 0");
  }

  /// The link between two ranks.
  const link& between(std::size_t a, std::size_t b) const {
    return a / ranks_per_node == b / ranks_per_node ? intra : inter;
  }
  /// The slowest link a flat collective over ranks 0..n-1 uses: every step of a ring waits
  /// for its slowest hop, so a group spanning nodes runs at the inter-node link.
  const link& flat_link(std::size_t n) const { return n <= ranks_per_node ? intra : inter; }

  comm_cost send(std::size_t from, std::size_t to, double bytes) const {
    return point_to_point(between(from, to), bytes);
  }
  comm_cost ring_allreduce(std::size_t n, double bytes) const {
    return sim::ring_allreduce(flat_link(n), n, bytes);
  }
  comm_cost tree_allreduce(std::size_t n, double bytes) const {
    return sim::tree_allreduce(flat_link(n), n, bytes);
  }
  comm_cost broadcast(std::size_t n, double bytes) const {
    return sim::tree_broadcast(flat_link(n), n, bytes);
  }
  /// Intra-node reduce-scatter, inter-node ring allreduce of the 1/g shard, intra-node
  /// allgather; n must be a multiple of ranks_per_node (or at most one node).
  comm_cost hierarchical_allreduce(std::size_t n, double bytes) const {
    detail::require_ranks("ranks", n);
    if (n <= ranks_per_node) return sim::ring_allreduce(intra, n, bytes);
    require(n % ranks_per_node == 0, "ranks", n,
            "must be a multiple of network.ranks_per_node for a hierarchical allreduce");
    const std::size_t g = ranks_per_node, nodes = n / g;
    comm_cost c = ring_reduce_scatter(intra, g, bytes);
    c += sim::ring_allreduce(inter, nodes, bytes / static_cast<double>(g));
    c += ring_allgather(intra, g, bytes);
    return c;
  }
  /// 2D torus with X = ranks_per_node (horizontal = intra-node) and Y = nodes.
  comm_cost torus2d_allreduce(std::size_t n, double bytes) const {
    detail::require_ranks("ranks", n);
    require(n % ranks_per_node == 0, "ranks", n,
            "must be a multiple of network.ranks_per_node for a 2D-torus allreduce");
    return sim::torus2d_allreduce(intra, inter, ranks_per_node, n / ranks_per_node, bytes);
  }
  /// Parameter server on its own node: every push crosses the inter-node link.
  comm_cost ps_push(double bytes, std::size_t concurrent = 1, std::size_t servers = 1) const {
    return sim::ps_push(inter, bytes, concurrent, servers);
  }
  comm_cost ps_pull(double bytes, std::size_t concurrent = 1, std::size_t servers = 1) const {
    return sim::ps_pull(inter, bytes, concurrent, servers);
  }
};

}  // namespace heterograd::sim
