#pragma once
// Partial allreduce over the inproc transport (semantics: heterograd/comm/partial.hpp).
//
// Shared memory makes it direct: a round's state lives in one object under a mutex. The rank
// that sees the round's policy satisfied fires it: it sums the fresh buffers of the ranks
// that arrived and every pending (late) contribution, in rank order, into the round's result
// slot, and copies the result into each fresh rank's buffer: (fresh + stale) * S read,
// (fresh + 1) * S written. A rank arriving after its round fired adds its buffer to its
// pending contribution (S read, S written) and takes the stored result (S). Nobody waits for
// a late rank, and results stay available for B rounds (the staleness bound).

#include "heterograd/comm/inproc.hpp"
#include "heterograd/comm/inproc/partial.hpp"
