#pragma once
// gloo: the transport over Gloo (Debian: libgloo-dev) with its TCP device, for groups whose
// members change between epochs and for runs across machines without an MPI launcher. Needs
// the gloo component (heterograd::gloo, HG_HAS_GLOO). docs/transports.md compares it with mpi.
//
// - A group is one membership epoch: gloo::connect(store, prefix, rank, size) makes every rank
//   publish its address under `prefix` in a store (a directory on a shared filesystem, or a
//   Redis server) and connect to every other (a full TCP mesh). A new member set connects
//   under a new prefix; nothing of an old epoch is reused.
// - Collectives (allreduce, reduce_scatter, allgather, broadcast, gather, barrier) are Gloo's
//   and block in the call: the request comes back finished. Point-to-point messages are
//   asynchronous: each waits on a thread of its own, so test() polls, and a receive posted
//   before a send completes while its rank waits on the send. Receives name a source or
//   any_source (Gloo's receive from a set of ranks) and one tag (no any_tag).
// - Every message is a 32-byte header (magic, version, element type, tag, sequence, size)
//   then its payload; a receive checks the header before it reads the payload: a malformed
//   header, or a size over connect_options::max_message_bytes, is refused naming the sender.
//   A message of another size or element type is read into scratch and refused (size_error,
//   mismatch_error): nothing is written.
// - Failures end the epoch: a Gloo error or timeout, an abort(), a wait(timeout) that passes,
//   fail the group on every rank. The failing rank sends each peer an abort notice (its rank
//   and reason), then closes its connections; peers' pending and later operations end with
//   aborted_error naming the rank that started it (or, if the notice could not be sent, with
//   Gloo's error, which names the closed connection). Reconnect under a new prefix.
// - The first call of each collective shape is compared across ranks (mismatch_error on every
//   rank, the group stays usable), as on mpi.
// - Not yet: partial collectives, any_tag, the elastic runtime and the launcher.

#include "heterograd/comm/gloo/communicator.hpp"
#include "heterograd/comm/gloo/point_to_point.hpp"
