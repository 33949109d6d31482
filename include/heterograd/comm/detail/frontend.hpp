#pragma once
// The front-end every transport shares (inproc, mpi, nccl): what a call checks before anything
// is posted, so that a bad argument is the same std::invalid_argument, naming the same field,
// on every backend; the collectives as ranks compare them; the options and tags of a
// schedule-based allreduce; and the agreement check of a partial allreduce's construction.
// The checks take the handle (valid(), rank(), size()) and run in one order: the options'
// timeout, the handle, then the call's sizes, roots, ranks and tags.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "heterograd/comm/executor.hpp"
#include "heterograd/comm/partial.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::comm::detail {

/// The collectives, as ranks compare them: inproc's call descriptors, and mpi's shape check,
/// which sends the value across ranks (and names it in its mismatch message), so the order is
/// part of the wire format.
enum class collective : std::uint8_t {
  barrier,
  allreduce,
  reduce_scatter,
  allgather,
  broadcast,
  gather,
  split
};

constexpr const char* collective_name(collective k) {
  switch (k) {
    case collective::barrier: return "barrier";
    case collective::allreduce: return "allreduce";
    case collective::reduce_scatter: return "reduce_scatter";
    case collective::allgather: return "allgather";
    case collective::broadcast: return "broadcast";
    case collective::gather: return "gather";
    case collective::split: return "split";
  }
  return "collective";
}

// --- argument checks ------------------------------------------------------------------------

inline void require_valid(bool valid) {
  require(valid, "communicator", "empty", "must be a valid communicator");
}

/// Largest user tag when a transport has no bound of its own (inproc): any tag >= 0.
inline constexpr int unbounded_tag = std::numeric_limits<int>::max();

/// A tag in [0, max_tag] (or any_tag where `any_allowed`). The rule's text is built only on
/// failure: a send or receive must not allocate to be checked.
inline void require_tag(std::string_view field, int tag, int max_tag, bool any_allowed) {
  if ((tag >= 0 && tag <= max_tag) || (any_allowed && tag == any_tag)) return;
  std::string rule = max_tag == unbounded_tag ? std::string("must be >= 0")
                                              : "must be in [0, " + std::to_string(max_tag) + "]";
  if (any_allowed) rule += " or any_tag";
  require(false, field, tag, rule);
}

template <class T, class Comm>
void check_allreduce(const Comm& c, const allreduce_options& o) {
  validate(o);
  require(!o.weight || std::is_floating_point_v<T>, "allreduce_options.weight", o.weight.value_or(0.0),
          "weights need a floating-point element type");
  require_valid(c.valid());
}

/// in.size() = size() * out.size().
template <class Comm>
void check_reduce_scatter(const Comm& c, std::size_t in, std::size_t out, const reduce_scatter_options& o) {
  validate_timeout("reduce_scatter_options.timeout", o.timeout);
  require_valid(c.valid());
  require_same_size("reduce_scatter.in", in, "size() * out.size()", out * static_cast<std::size_t>(c.size()));
}

/// out.size() = size() * in.size().
template <class Comm>
void check_allgather(const Comm& c, std::size_t in, std::size_t out, const allgather_options& o) {
  validate_timeout("allgather_options.timeout", o.timeout);
  require_valid(c.valid());
  require_same_size("allgather.out", out, "size() * in.size()", in * static_cast<std::size_t>(c.size()));
}

template <class Comm>
void check_broadcast(const Comm& c, int root, const broadcast_options& o) {
  validate_timeout("broadcast_options.timeout", o.timeout);
  require_valid(c.valid());
  require_in_range_co("broadcast.root", root, 0, c.size());
}

/// out.size() = size() * in.size() on the root (ignored elsewhere).
template <class Comm>
void check_gather(const Comm& c, std::size_t in, std::size_t out, int root, const gather_options& o) {
  validate_timeout("gather_options.timeout", o.timeout);
  require_valid(c.valid());
  require_in_range_co("gather.root", root, 0, c.size());
  if (c.rank() == root)
    require_same_size("gather.out", out, "size() * in.size()", in * static_cast<std::size_t>(c.size()));
}

template <class Comm>
void check_barrier(const Comm& c, const barrier_options& o) {
  validate_timeout("barrier_options.timeout", o.timeout);
  require_valid(c.valid());
}

template <class Comm>
void check_split(const Comm& c, const split_options& o) {
  validate_timeout("split_options.timeout", o.timeout);
  require_valid(c.valid());
}

/// A tagged send to `dest` with a tag in [0, max_tag].
template <class Comm>
void check_send(const Comm& c, int dest, int tag, int max_tag, const send_options& o) {
  validate_timeout("send_options.timeout", o.timeout);
  require_valid(c.valid());
  require_in_range_co("send.dest", dest, 0, c.size());
  require_tag("send.tag", tag, max_tag, false);
}

/// A tagged receive from `source` (or any_source) with a tag in [0, max_tag] (or any_tag).
template <class Comm>
void check_recv(const Comm& c, int source, int tag, int max_tag, const recv_options& o) {
  validate_timeout("recv_options.timeout", o.timeout);
  require_valid(c.valid());
  require(source == any_source || (source >= 0 && source < c.size()), "recv.source", source,
          "must be a rank of the communicator or any_source");
  require_tag("recv.tag", tag, max_tag, true);
}

/// An untagged send or receive with `peer` (nccl): `what` is "send" or "recv".
template <class Comm>
void check_peer(const Comm& c, std::string_view what, int peer, seconds timeout) {
  validate_timeout(what == "send" ? "send_options.timeout" : "recv_options.timeout", timeout);
  require_valid(c.valid());
  require_in_range_co(what == "send" ? "send.peer" : "recv.peer", peer, 0, c.size());
}

// --- schedules ------------------------------------------------------------------------------

/// The tags of the schedules a handle runs on its internal message space. Each call takes two
/// (the data's, and the next one for a weighted average's weight sum: schedule_options::tag),
/// cycling through [0, schedule_tag_end): under 32767, the least MPI_TAG_UB an MPI library
/// may have, and under mpi's abort notices (tag 32767 on the same communicator). A tag comes
/// back after 15000 calls, far more than can be in flight.
inline constexpr int schedule_tag_end = 30000;

class schedule_tags {
 public:
  int take() {
    const int t = next_;
    next_ = (next_ + 2) % schedule_tag_end;
    return t;
  }

 private:
  int next_ = 0;
};

/// How a schedule runs the allreduce `o` asks for: its operator, weight and deadline, its
/// segment (or the backend's default), on the call's tag.
inline schedule_options schedule_options_for(const allreduce_options& o, std::size_t default_segment_bytes,
                                             int tag) {
  schedule_options so;
  so.op = o.op;
  so.weight = o.weight;
  so.timeout = o.timeout;
  so.segment_bytes = o.segment_bytes ? o.segment_bytes : default_segment_bytes;
  so.tag = tag;
  return so;
}

// --- partial collectives --------------------------------------------------------------------

/// What a partial allreduce's construction checks on its rank alone.
template <class Comm>
void check_partial(const Comm& c, const partial_policy& policy, const partial_options& opt) {
  require(c.valid(), "partial_allreduce.communicator", "empty", "must be a valid communicator");
  validate(opt, c.size(), policy);
}

/// Collective: throws mismatch_error on every rank unless all ranks built their partial
/// allreduce with the same count, policy and options (a min and a max allreduce of them, on
/// the transport's algorithm `algo`).
template <class Comm>
void check_partial_agreement(const Comm& c, std::size_t count, const partial_policy& policy,
                             const partial_options& opt, algorithm algo) {
  const std::int64_t mine[5] = {static_cast<std::int64_t>(count), static_cast<std::int64_t>(policy.what),
                                policy.k, static_cast<std::int64_t>(policy.seed), opt.staleness_bound};
  std::int64_t lo[5], hi[5];
  for (int i = 0; i < 5; ++i) lo[i] = hi[i] = mine[i];
  allreduce_options mn, mx;
  mn.op = reduce_op::min;
  mx.op = reduce_op::max;
  mn.algo = mx.algo = algo;
  mn.timeout = mx.timeout = opt.timeout;
  c.allreduce(span<std::int64_t>(lo, 5), mn).wait();
  c.allreduce(span<std::int64_t>(hi, 5), mx).wait();
  for (int i = 0; i < 5; ++i)
    if (lo[i] != hi[i])
      throw mismatch_error("heterograd: comm: partial_allreduce built with different sizes, "
                           "policies or options on different ranks");
}

}  // namespace heterograd::comm::detail
