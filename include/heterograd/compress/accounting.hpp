#pragma once
// What compression costs on the simulated network and how it is reported:
//   network_cost(net, n, plan)   each phase of a codec's wire plan charged by sim::network's
//                                alpha-beta model: an allgather of m-byte messages as a ring
//                                allgather of the n m-byte result, (n-1) alpha + (n-1) m / beta;
//                                an allreduce of m bytes as a ring allreduce,
//                                2(n-1) alpha + 2(n-1)/n m / beta;
//   dense_network_cost(net, n, elements)   the uncompressed float allreduce it replaces;
//   record(recorder, stats)      bytes on the wire into a recorder's configuration (written in
//                                every CSV header and in the JSON document).

#include <cstddef>
#include <string>

#include "heterograd/compress/codec.hpp"
#include "heterograd/compress/error_feedback.hpp"
#include "heterograd/sim/network.hpp"
#include "heterograd/sim/recorder.hpp"

namespace heterograd::compress {

/// The simulated time of one compressed exchange among the first `ranks` ranks of `net`.
inline sim::comm_cost network_cost(const sim::network& net, std::size_t ranks, const wire_plan& plan) {
  require_positive("network_cost.ranks", ranks);
  sim::comm_cost c{};
  for (const auto& p : plan.phases) {
    if (p.kind == collective::allgather)
      c += sim::ring_allgather(net.flat_link(ranks), ranks, static_cast<double>(ranks) * p.bytes);
    else
      c += net.ring_allreduce(ranks, p.bytes);
  }
  return c;
}

/// The simulated time of the dense float allreduce of `elements` that compression replaces.
inline sim::comm_cost dense_network_cost(const sim::network& net, std::size_t ranks, std::size_t elements) {
  return net.ring_allreduce(ranks, 4.0 * static_cast<double>(elements));
}

/// The codec's exchange of a buffer of `elements` floats.
template <codec C>
sim::comm_cost network_cost(const sim::network& net, std::size_t ranks, const C& c, std::size_t elements) {
  return network_cost(net, ranks, c.plan(elements));
}

/// Writes wire bytes, dense-equivalent bytes, their ratio and the number of compressed rounds
/// into the recorder's configuration as <prefix>.wire_bytes, .dense_bytes, .ratio, .rounds.
inline void record(sim::recorder& rec, const wire_stats& s, const std::string& prefix = "comm") {
  rec.set(prefix + ".wire_bytes", s.wire_bytes);
  rec.set(prefix + ".dense_bytes", s.dense_bytes);
  rec.set(prefix + ".ratio", s.ratio());
  rec.set(prefix + ".rounds", static_cast<std::uint64_t>(s.rounds));
}

}  // namespace heterograd::compress
