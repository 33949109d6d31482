#pragma once
// The inproc transport's size limits: collectives in flight, staging and eager sizes.

#include <cstddef>

namespace heterograd::comm::inproc {

/// Collectives in flight per rank.
inline constexpr int window = 4;
/// Largest allreduce (bytes per rank) that goes through the staging copy (the size of a
/// staging slot).
inline constexpr std::size_t stage_bytes = 16 * 1024;
/// The same limit for two ranks. Above it, owner-computes is faster for two ranks even for
/// small buffers: each rank moves half of the peer's data instead of all of it and copies
/// nothing, at the price of a second synchronisation (the departure wait). On the 2-core
/// development VM (median per call) staging takes 0.37-0.40 us at 2 KiB against 0.39-0.41 us,
/// 0.59-0.60 us at 3 KiB against 0.39-0.41 us, and 0.71-0.73 us at 4 KiB against 0.46-0.51 us;
/// on a 16-vCPU Intel VM the two are equal at 4 KiB (2.4-3.0 us). With 4 ranks on that VM
/// the second synchronisation cost 19 us at 4 KiB against 5 us staged (a late rank's blocking
/// wake-up is a VM exit there), so more ranks keep the full staging limit.
inline constexpr std::size_t stage_bytes_two_ranks = 2 * 1024;
/// True when an allreduce of `bytes` per rank over `ranks` ranks is staged.
constexpr bool staged_allreduce(std::size_t bytes, int ranks) {
  return bytes <= (ranks == 2 ? stage_bytes_two_ranks : stage_bytes);
}
/// Largest message a send copies at post (larger ones are rendezvous).
inline constexpr std::size_t eager_bytes = 64 * 1024;

}  // namespace heterograd::comm::inproc
