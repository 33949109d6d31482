#pragma once
// mpi: the transport over an MPI library (OpenMPI here; any MPI-3 library). Needs <mpi.h> and
// the mpi component (heterograd::mpi, HG_HAS_MPI).
//
// - A communicator handle is made from an existing MPI communicator. It duplicates it twice
//   (user traffic, and internal traffic: schedules and shape checks), sets MPI_ERRORS_RETURN
//   on the duplicates, and frees them when the last copy of the handle goes (unless MPI was
//   finalized first). The user's communicator is never modified.
// - Every operation is non-blocking (MPI_I*); waits poll MPI_Test against a deadline, so a
//   peer that never arrives gives a timeout_error, never a hang. MPI error codes become
//   comm_error exceptions (MPI_ERR_TRUNCATE: truncation_error) stored in the request.
// - A collective cannot be cancelled in MPI: after one times out, the handle is marked failed
//   and every later operation on it fails ("use after abort"). A receive that times out is
//   cancelled and fails alone.
// - Shapes: the first call of a new shape (count, element type, operator) of each collective,
//   and every call in debug builds (NDEBUG unset), first compares the shape across ranks with a
//   tiny allreduce on the internal communicator; a mismatch throws mismatch_error on every rank.
//   If only some ranks see a new shape, the others' operation and these ranks' check wait on
//   different communicators and both time out.
// - allreduce picks per size between MPI_Iallreduce (native) and heterograd's schedules over
//   MPI_Isend/MPI_Irecv (ring, recursive halving/doubling, tree, ...); see choose().

#include "heterograd/comm/mpi/communicator.hpp"
#include "heterograd/comm/mpi/thread_level.hpp"
#include "heterograd/comm/mpi/tuning.hpp"
