#pragma once
// Minimal archetypes for the transport concepts: copy transport_archetype to start a custom
// transport. The negative ones each miss one requirement, and the concept must reject them.

#include "heterograd/comm/concepts.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::testing {

/// The least a request must provide.
struct request_archetype {
  bool test() { return true; }
  void wait(seconds) {}
  comm::status status() const { return {}; }
};

/// Not a request: wait() takes no timeout (every wait must be bounded).
struct not_a_request_unbounded_wait {
  bool test() { return true; }
  void wait() {}
};

/// The least a transport must provide (every operation completes at once).
struct transport_archetype {
  int rank() const { return 0; }
  int size() const { return 1; }
  template <class T>
  request_archetype allreduce(span<T>, const comm::allreduce_options&) const { return {}; }
  template <class U, class T>
  request_archetype reduce_scatter(span<U>, span<T>, const comm::reduce_scatter_options&) const {
    return {};
  }
  template <class U, class T>
  request_archetype allgather(span<U>, span<T>, const comm::allgather_options&) const { return {}; }
  template <class T>
  request_archetype broadcast(span<T>, int, const comm::broadcast_options&) const { return {}; }
  template <class U, class T>
  request_archetype gather(span<U>, span<T>, int, const comm::gather_options&) const { return {}; }
  template <class U>
  request_archetype send(span<U>, int, int, const comm::send_options&) const { return {}; }
  template <class T>
  request_archetype recv(span<T>, int, int, const comm::recv_options&) const { return {}; }
  request_archetype barrier(const comm::barrier_options&) const { return {}; }
  transport_archetype split(int, int, const comm::split_options&) const { return *this; }
};

/// Not a transport: no receive (a parameter server could not be written against it). The
/// archetype with its recv deleted, so that only the receive is missing; split still gives
/// its own type.
struct not_a_transport_no_recv : transport_archetype {
  template <class T>
  request_archetype recv(span<T>, int, int, const comm::recv_options&) const = delete;
  not_a_transport_no_recv split(int, int, const comm::split_options&) const { return *this; }
};

/// Not a transport: allreduce blocks and returns nothing (no request to wait with a timeout).
struct not_a_transport_blocking_allreduce : transport_archetype {
  template <class T>
  void allreduce(span<T>, const comm::allreduce_options&) const {}
};

/// Not a transport: not copyable (a transport is a cheap handle).
struct not_a_transport_move_only : transport_archetype {
  not_a_transport_move_only() = default;
  not_a_transport_move_only(const not_a_transport_move_only&) = delete;
  not_a_transport_move_only(not_a_transport_move_only&&) = default;
  not_a_transport_move_only& operator=(not_a_transport_move_only&&) = default;
};

/// A device-memory collective transport (what nccl provides): collectives only.
struct device_collective_archetype {
  int rank() const { return 0; }
  int size() const { return 1; }
  template <class T>
  request_archetype allreduce(span<T, device_space>, const comm::allreduce_options&) const {
    return {};
  }
  template <class U, class T>
  request_archetype reduce_scatter(span<U, device_space>, span<T, device_space>,
                                   const comm::reduce_scatter_options&) const {
    return {};
  }
  template <class U, class T>
  request_archetype allgather(span<U, device_space>, span<T, device_space>,
                              const comm::allgather_options&) const {
    return {};
  }
  template <class T>
  request_archetype broadcast(span<T, device_space>, int, const comm::broadcast_options&) const {
    return {};
  }
  request_archetype barrier(const comm::barrier_options&) const { return {}; }
};

static_assert(comm::request_like<request_archetype>);
static_assert(comm::receive_request_like<request_archetype>);
static_assert(!comm::request_like<not_a_request_unbounded_wait>);
static_assert(comm::request_like<comm::request>);
static_assert(comm::transport<transport_archetype>);
static_assert(!comm::transport<not_a_transport_no_recv>);
static_assert(comm::collective_transport<not_a_transport_no_recv>);
static_assert(!comm::transport<not_a_transport_blocking_allreduce>);
static_assert(!comm::transport<not_a_transport_move_only>);
static_assert(comm::collective_transport<device_collective_archetype, device_space>);
static_assert(!comm::collective_transport<device_collective_archetype, host_space>);

}  // namespace heterograd::testing
