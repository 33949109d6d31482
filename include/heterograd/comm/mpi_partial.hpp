#pragma once
// Partial allreduce over MPI (semantics: heterograd/comm/partial.hpp). Needs
// MPI_THREAD_MULTIPLE: like eager-SGD's fflib, each rank runs a progress thread, so a rank
// that is busy computing still takes part in rounds fired without it (it contributes what it
// has pending), and on-time ranks never wait for it.
//
// Protocol, per round t, on a private duplicate of the communicator:
//   1. a rank's user arrives -> its progress thread sends ARRIVE(t) to rank 0 (the
//      coordinator; rank 0's own arrival is local);
//   2. the coordinator fires t when the policy says so (first arrival, the seeded initiator,
//      the k-th arrival, or its clock passing first arrival + d) and sends FIRE(t) to all;
//   3. on FIRE(t) every progress thread snapshots its contribution: the user's buffer if the
//      user already arrived (fresh), plus everything pending (stale); a user arriving later
//      adds its buffer to pending and takes the stored result of t;
//   4. MPI_Iallreduce of the contributions (sum) and of the per-rank report (max), so every
//      rank gets the same result and the same report.
// A progress thread starts round t only after its user took the result of round t - B, which
// bounds staleness by B and keeps B result slots.

#include "heterograd/comm/mpi.hpp"
#include "heterograd/comm/mpi/partial.hpp"
