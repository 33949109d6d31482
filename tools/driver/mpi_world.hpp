#pragma once
// heterograd-run's one door to MPI: the only driver file that asks whether MPI is built in
// (HG_HAS_MPI; cmake/check_sizes.py holds it so). MPI is started by `mpi_session` (main.cpp's
// runtime "mpi") and MPI_COMM_WORLD is reached through `with_world`, whose callable takes the
// communicator as `const auto&`: it is compiled only where MPI is, so its callers need no
// #ifdef. Built without MPI, each refuses runtime "mpi" by name.

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "config.hpp"

#ifdef HG_HAS_MPI
#include <mpi.h>

#include "heterograd/comm/mpi.hpp"
#include "heterograd/comm/mpi_partial.hpp"
#include "heterograd/runtime/round_mpi.hpp"
#endif

namespace hgrun {

/// Refuses runtime "mpi" in a build without MPI.
[[noreturn]] inline void no_mpi() {
  throw config_error("runtime", "expected \"sim\" or \"threads\": this heterograd-run was built without MPI");
}

/// A communicator over MPI_COMM_WORLD (a comm::mpi::communicator), made by every rank at the
/// same point: its construction is a collective.
using world_handle = std::shared_ptr<const void>;

#ifdef HG_HAS_MPI
inline world_handle make_world() {
  return std::make_shared<const heterograd::comm::mpi::communicator>(MPI_COMM_WORLD);
}
/// f(the communicator of `w`).
template <class R, class F>
R with_world(const world_handle& w, F&& f) {
  return std::forward<F>(f)(*static_cast<const heterograd::comm::mpi::communicator*>(w.get()));
}
#else
[[noreturn]] inline world_handle make_world() { no_mpi(); }
template <class R, class F>
[[noreturn]] R with_world(const world_handle&, F&&) {
  no_mpi();
}
#endif

/// runtime::run_mpi of `rounds` rounds of a round policy on rank c.rank() (round_mpi.hpp,
/// which only an MPI build has: declared here so that callers name it without an #ifdef).
template <class Policy, class Comm, class Options>
void run_rounds_mpi(Policy& p, const Comm& c, std::uint64_t rounds, const Options& o);
#ifdef HG_HAS_MPI
template <class Policy, class Comm, class Options>
void run_rounds_mpi(Policy& p, const Comm& c, std::uint64_t rounds, const Options& o) {
  heterograd::runtime::run_mpi(p, c, rounds, o);
}
#endif

/// f(a new communicator over MPI_COMM_WORLD): collective, every rank at the same point.
template <class R, class F>
R with_world(F&& f) {
  return with_world<R>(make_world(), std::forward<F>(f));
}

// runtime "mpi": MPI is initialised here only (sim and threads never touch it). Thread
// support: the asynchronous server runs on a thread beside rank 0's evaluation loop, so MPI
// calls come from a thread other than main (one at a time, at least).
class mpi_session {
 public:
  mpi_session(int& argc, char**& argv) {
#ifdef HG_HAS_MPI
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    active_ = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (provided < MPI_THREAD_SERIALIZED)
      throw std::runtime_error("runtime \"mpi\" needs MPI_THREAD_SERIALIZED or better; this MPI provides level " +
                               std::to_string(provided));
#else
    (void)argc;
    (void)argv;
    no_mpi();
#endif
  }
  mpi_session(const mpi_session&) = delete;
  mpi_session& operator=(const mpi_session&) = delete;
  ~mpi_session() {
#ifdef HG_HAS_MPI
    if (active_) MPI_Finalize();
#endif
  }
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Ends every rank (a failure on one rank would leave the others waiting).
  void abort(int code) {
#ifdef HG_HAS_MPI
    if (active_) MPI_Abort(MPI_COMM_WORLD, code);
#endif
    (void)code;
  }

 private:
  bool active_ = false;
  int rank_ = 0, size_ = 1;
};

}  // namespace hgrun
