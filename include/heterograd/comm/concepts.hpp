#pragma once
// The transport concept (stdexec style: a cheap copyable handle customised by members, no
// base class). Positive and negative archetypes live in heterograd/testing/comm_archetypes.hpp.
//
//   request_like<R>          test() -> bool, wait(timeout); errors rethrown by wait
//   collective_transport<T>  rank(), size(), allreduce, reduce_scatter, allgather, broadcast,
//                            barrier over span<float, Space> (nccl: Space = device_space)
//   transport<T>             a host collective_transport plus gather, tagged send/recv with
//                            any-source receive reporting the sender, and split(color, key)

#include <concepts>

#include "heterograd/comm/types.hpp"
#include "heterograd/core/clock.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::comm {

/// The future of a posted operation.
template <class R>
concept request_like = std::copyable<R> && requires(R& r, seconds timeout) {
  { r.test() } -> std::same_as<bool>;
  r.wait(timeout);
};

/// A request that also reports who sent a received message.
template <class R>
concept receive_request_like = request_like<R> && requires(const R& r) {
  { r.status() } -> std::convertible_to<status>;
};

/// Collectives over buffers in memory space `Space`.
template <class T, class Space = host_space>
concept collective_transport =
    std::copyable<T> &&
    requires(const T& t, span<float, Space> buf, span<const float, Space> in, int root) {
      { t.rank() } -> std::convertible_to<int>;
      { t.size() } -> std::convertible_to<int>;
      { t.allreduce(buf, allreduce_options{}) } -> request_like;
      { t.reduce_scatter(in, buf, reduce_scatter_options{}) } -> request_like;
      { t.allgather(in, buf, allgather_options{}) } -> request_like;
      { t.broadcast(buf, root, broadcast_options{}) } -> request_like;
      { t.barrier(barrier_options{}) } -> request_like;
    };

/// The full host transport: what the algorithms of the upper layers are written against.
template <class T>
concept transport =
    collective_transport<T, host_space> &&
    requires(const T& t, span<float> buf, span<const float> in, int peer, int tag, int color) {
      { t.gather(in, buf, peer, gather_options{}) } -> request_like;
      { t.send(in, peer, tag, send_options{}) } -> request_like;
      { t.recv(buf, peer, tag, recv_options{}) } -> receive_request_like;
      { t.split(color, peer, split_options{}) } -> std::same_as<T>;
    };

}  // namespace heterograd::comm
