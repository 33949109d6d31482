#pragma once
// inproc: N ranks as threads of one process, over shared memory. The embedded default and the
// reference every other transport is tested against.
//
// Collectives. Each rank publishes a small descriptor of its call (kind, element type, count,
// operator, buffer pointers) in a slot of its own, beside the slot's publication word in one
// cache line (a peer that sees the word has the descriptor). Once every rank arrived, each
// rank checks that all descriptors agree (a mismatch throws on every rank) and does its share
// of the work directly on the other ranks' buffers:
//   allreduce, small (staged_allreduce: <= 16 KiB per rank, 2 KiB for two ranks): every rank
//     copies its input into a staging slot when it posts, then reduces all slots into its own
//     buffer. One synchronisation, no departure wait.
//   allreduce, larger: single-pass owner-computes. Rank r reduces chunk r of all N buffers and
//     writes the result into chunk r of all N buffers: N*S/N reads + N*S/N writes per rank,
//     2*N*S bytes in total, against (3N-1)*S for a reduce-scatter + allgather through copies.
//   reduce_scatter, allgather, broadcast, gather: each rank reads what it needs from the
//     others' buffers; everyone waits until all ranks finished (buffers are lent until then).
// Up to `window` collectives may be in flight per rank; they complete in posting order.
//
// Point to point: a mailbox per rank, matched in FIFO order on (source or any, tag or any).
// Messages up to eager_bytes are copied at post (the send completes at once); larger ones are
// copied straight from the sender's buffer into the receiver's when matched (rendezvous), and
// the send completes then.
//
// Failures. Any rank can abort the world (spawn does it when fn throws); every pending and
// future operation of every rank then fails with "aborted by rank r". A collective that times
// out aborts the world (its peers would otherwise wait on a rank that gave up); a receive or a
// rendezvous send that times out is withdrawn from its mailbox and fails alone. The same rule
// holds when the last request of a pending operation goes (the rank unwinds from an
// exception, or dropped the request): a receive or send is withdrawn; a collective aborts the
// world and waits until no peer works on it (peers read and write this rank's buffers), so the
// buffer may be freed once the request's destructor returned.
//
// Threading: a communicator handle's rank must be driven by one thread at a time (like

#include "heterograd/comm/inproc/communicator.hpp"
#include "heterograd/comm/inproc/limits.hpp"
#include "heterograd/comm/inproc/world.hpp"
