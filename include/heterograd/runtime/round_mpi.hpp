#pragma once
// The MPI runtime of the round methods: one process per worker over comm::mpi, each running
// the per-worker helper of algorithms/sync/workers.hpp on its own replica of the same policy
// object the simulator drives (rounds.hpp). Needs <mpi.h> and the mpi component (HG_HAS_MPI).
//
//     MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...);   // eager-SGD's progress thread needs it
//     comm::mpi::communicator c(MPI_COMM_WORLD);
//     sync::bsp<float, optim::sgd, Grad> p(c.size(), x0, optim::sgd({.lr = 0.1}), grad, b);
//     runtime::run_mpi(p, c, 100);                     // replica c.rank() moves
//     p.params(c.rank());
//
// Every rank builds the policy with the same arguments (it holds all replicas, but only its
// own moves: keep MPI problems small or build a per-worker helper directly). Results match
// the threads runtime up to the MPI allreduce's summation order (its schedules add in another
// order than rank order): within 1e-6 on the tests' problems.

#include <cstdint>

#include "heterograd/algorithms/sync/workers.hpp"
#include "heterograd/comm/mpi.hpp"
#include "heterograd/comm/mpi_partial.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/runtime/rounds.hpp"

namespace heterograd::runtime {

/// Runs `rounds` more rounds (SelSync: steps) of worker c.rank() of `p` (collective over c).
template <per_rank_round_policy Policy>
void run_mpi(Policy& p, const comm::mpi::communicator& c, std::uint64_t rounds,
             algorithms::sync::worker_options o = {}) {
  o.validate();
  run_worker(p, c, rounds, o, true);
}

/// A method that ends itself (eager-SGD): worker c.rank() over the MPI partial allreduce
/// until its configured rounds (eager.rounds) are over or the ranks vote to stop (o.stop).
/// Needs MPI_THREAD_MULTIPLE (the partial allreduce's progress thread).
template <partial_round_method Policy>
void run_mpi(Policy& p, const comm::mpi::communicator& c, algorithms::sync::worker_options o = {}) {
  run_worker(p, c, o, true);
}

}  // namespace heterograd::runtime
