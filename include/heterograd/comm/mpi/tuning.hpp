#pragma once
// The size thresholds of the mpi transport's automatic allreduce.

#include <cstddef>

namespace heterograd::comm::mpi {

/// Size thresholds of the mpi transport's automatic allreduce (measured on OpenMPI 4.1 over
/// shared memory; see docs/performance.md, "Transports").
struct mpi_allreduce_tuning {
  /// Up to this many bytes per rank: MPI_Iallreduce; above: heterograd's schedules over
  /// point-to-point messages (OpenMPI's non-blocking allreduce, libnbc, is 2-5x slower than
  /// its blocking one here). 0: never MPI_Iallreduce unless asked (algorithm::native).
  std::size_t native_max_bytes = 0;
  /// Up to this many bytes per rank on a power-of-two group: recursive doubling (whole-buffer
  /// exchanges, log2 n steps). Just under OpenMPI's shared-memory eager limit
  /// (btl_vader_eager_limit, 4 KiB with headers): past it every whole-buffer message pays a
  /// rendezvous and halving (messages of S/2, S/4, ...) is faster. Measured on 2 ranks:
  /// doubling 0.31 / 0.73 us at 256 / 4000 bytes against 0.54 / 1.11 us for halving, and
  /// 2.8 us against 1.1 us at 4096 bytes.
  std::size_t doubling_max_bytes = 4000;
  /// Up to this many bytes per rank: recursive halving/doubling (Rabenseifner, 2 log2 p
  /// steps); above: ring (2(n-1) steps, the same volume, each step a neighbour exchange).
  /// Two ranks always use halving (the two coincide).
  std::size_t rhd_max_bytes = std::size_t{1} << 20;
  /// Pipelining segment of the schedules over MPI.
  std::size_t segment_bytes = 1 << 20;
  /// When a node's ranks outnumber its cores, every step costs context switches, so fewer
  /// steps beat smaller messages: on powers of two recursive doubling up to
  /// oversubscribed_doubling_max_bytes, MPI_Iallreduce up to oversubscribed_native_max_bytes,
  /// the binomial tree (each rank takes part in few rounds) up to
  /// oversubscribed_tree_max_bytes, then halving/doubling up to rhd_max_bytes and ring above,
  /// as without oversubscription. Measured at 4 ranks on 2 cores, each against MPI_Allreduce
  /// in the same process (docs/performance.md): doubling 1.03-1.05x up to 1 KiB where the
  /// tree is 1.2-1.5x and MPI_Iallreduce 1.0-1.5x; the tree 1.0x at 4 KiB, 0.57-0.82x at
  /// 16-32 KiB and 0.87-1.07x at 128 KiB; halving/doubling 1.00-1.06x at 256 KiB to 1 MiB,
  /// where the tree is 0.97-1.39x; ring 0.90-0.96x at 4 MiB.
  std::size_t oversubscribed_doubling_max_bytes = 2048;
  std::size_t oversubscribed_native_max_bytes = 0;
  std::size_t oversubscribed_tree_max_bytes = std::size_t{128} << 10;
};

}  // namespace heterograd::comm::mpi
