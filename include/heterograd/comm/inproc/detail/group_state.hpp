#pragma once
// One inproc group's shared memory: the collectives' descriptor slots, counters and
// staging copies, the mailboxes of point-to-point messages, and each rank's own bookkeeping.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "heterograd/comm/detail/frontend.hpp"
#include "heterograd/comm/inproc/detail/world_state.hpp"
#include "heterograd/comm/inproc/limits.hpp"
#include "heterograd/comm/reduce.hpp"
#include "heterograd/comm/schedule.hpp"
#include "heterograd/comm/types.hpp"

namespace heterograd::comm::inproc {

namespace detail {

using comm::detail::collective;

/// A rank's description of one collective call.
struct coll_meta {
  collective kind = collective::barrier;
  dtype dt = dtype::u8;
  reduce_op op = reduce_op::sum;
  bool weighted = false;
  int root = 0;
  int color = 0;
  int key = 0;
  std::size_t count = 0;
  double weight = 1.0;
  const void* in = nullptr;
  void* out = nullptr;
};

/// A collective's shared chunk counters (owner-computes allreduce): `next` hands out chunks,
/// `done` counts finished ones. Each word is tagged with the collective's sequence number
/// (high bits), so a slot reused `window` collectives later starts from zero without a reset.
struct alignas(64) chunk_counter {
  std::atomic<std::uint64_t> word{0};
  static constexpr int count_bits = 24;
  static constexpr std::uint64_t count_mask = (std::uint64_t{1} << count_bits) - 1;
  /// Adds one unless the count reached `limit`; returns the count before the call.
  std::uint64_t add(std::uint64_t seq, std::uint64_t limit) {
    const std::uint64_t tag = (seq + 1) << count_bits;
    std::uint64_t v = word.load(std::memory_order_relaxed);
    for (;;) {
      const std::uint64_t cur = (v & ~count_mask) == tag ? (v & count_mask) : 0;
      if (cur >= limit) return cur;
      if (word.compare_exchange_weak(v, tag | (cur + 1), std::memory_order_acq_rel,
                                     std::memory_order_relaxed))
        return cur;
    }
  }
  std::uint64_t get(std::uint64_t seq) const {
    const std::uint64_t v = word.load(std::memory_order_acquire);
    return (v & ~count_mask) == ((seq + 1) << count_bits) ? (v & count_mask) : 0;
  }
};

/// One rank's descriptor of one window slot, and its publication word, in one cache line: the
/// peer that sees the word has the descriptor too (one cache miss per peer, not two).
struct alignas(64) coll_slot {
  std::atomic<std::uint64_t> published{0};  // c+1 once collective c is described here
  coll_meta m;
};
static_assert(sizeof(coll_slot) == 64, "a slot is one cache line");

struct alignas(64) counters {
  std::atomic<std::uint64_t> finished{0};  // collectives whose work this rank finished
  std::atomic<std::uint64_t> busy{0};      // c+1 while working on collective c
};

class p2p_state;

struct message {
  int source = 0;
  int tag = 0;
  dtype dt = dtype::u8;
  std::size_t bytes = 0;
  std::vector<std::byte> payload;         // eager, queued: a copy of the data
  const void* data = nullptr;             // rendezvous or direct delivery: the sender's buffer
  std::shared_ptr<p2p_state> sender{};    // rendezvous: completed when matched
};

struct mailbox {
  std::mutex m;
  std::list<message> unexpected;
  std::list<std::shared_ptr<p2p_state>> posted;
};

class coll_state;
struct group_state;

struct alignas(64) rank_local {
  std::uint64_t next = 0;       // sequence number of the next collective
  std::uint64_t published = 0;  // collectives published by this rank
  std::deque<std::shared_ptr<coll_state>> fifo;
  comm::detail::schedule_tags sched_tags;
  std::uint64_t splits = 0;
  std::uint64_t shared = 0;
  // Finished collective states, reused while no request refers to them (no allocation per
  // call; see communicator::post_collective).
  std::vector<std::shared_ptr<coll_state>> pool;
  // A lower bound of every rank's `finished` counter, as this rank last saw them: a slot whose
  // collective is known finished everywhere is reused without reading the peers' counters
  // again (one cache miss per call less; the departure wait has just seen them).
  std::uint64_t all_finished = 0;
};

struct split_entry {
  std::shared_ptr<group_state> group;
  int remaining = 0;
};

/// One communicator's shared memory (a world, or a group made by split).
struct group_state {
  group_state(std::shared_ptr<world_state> w, int n)
      : world(std::move(w)),
        size(n),
        ctr(new counters[static_cast<std::size_t>(n)]),
        slots(new coll_slot[static_cast<std::size_t>(n) * window]),
        stage(new (std::align_val_t(64)) std::byte[static_cast<std::size_t>(n) * window * stage_bytes]),
        boxes(new mailbox[2 * static_cast<std::size_t>(n)]),
        locals(static_cast<std::size_t>(n)),
        next_chunk(new chunk_counter[window]),
        done_chunks(new chunk_counter[window]) {}
  ~group_state() { ::operator delete[](stage, std::align_val_t(64)); }
  group_state(const group_state&) = delete;
  group_state& operator=(const group_state&) = delete;

  std::byte* stage_slot(int rank, std::uint64_t seq) {
    return stage + (static_cast<std::size_t>(rank) * window + seq % window) * stage_bytes;
  }
  coll_meta& slot(int rank, std::uint64_t seq) { return line(rank, seq).m; }
  coll_slot& line(int rank, std::uint64_t seq) {
    return slots[static_cast<std::size_t>(rank) * window + seq % window];
  }
  /// True when every rank published collective `seq` (a slot is rewritten only after every
  /// rank finished the collective it held, so a waiter for `seq` never sees a later one).
  bool all_arrived(std::uint64_t seq) {
    for (int q = 0; q < size; ++q)
      if (line(q, seq).published.load(std::memory_order_acquire) <= seq) return false;
    return true;
  }
  mailbox& box(int ctx, int rank) { return boxes[static_cast<std::size_t>(ctx * size + rank)]; }

  std::shared_ptr<world_state> world;
  int size;
  std::unique_ptr<counters[]> ctr;
  std::unique_ptr<coll_slot[]> slots;
  std::byte* stage;
  std::unique_ptr<mailbox[]> boxes;
  std::vector<rank_local> locals;
  std::unique_ptr<chunk_counter[]> next_chunk, done_chunks;  // per window slot
  std::mutex split_m;
  std::map<std::pair<std::uint64_t, int>, split_entry> splits;
  // Objects shared by all ranks of the group (e.g. a partial collective's state), created by
  // the first rank that asks for the k-th one.
  std::mutex shared_m;
  std::map<std::uint64_t, std::pair<std::shared_ptr<void>, int>> shared;
};

inline bool all_at_least(const group_state& g, std::atomic<std::uint64_t> counters::*field,
                         std::uint64_t v) {
  for (int q = 0; q < g.size; ++q)
    if ((g.ctr[static_cast<std::size_t>(q)].*field).load(std::memory_order_acquire) < v)
      return false;
  return true;
}

/// The smallest value of a counter over the group's ranks.
inline std::uint64_t least_of(const group_state& g, std::atomic<std::uint64_t> counters::*field) {
  std::uint64_t v = ~std::uint64_t{0};
  for (int q = 0; q < g.size; ++q)
    v = std::min(v, (g.ctr[static_cast<std::size_t>(q)].*field).load(std::memory_order_acquire));
  return v;
}

template <class T>
std::size_t owner_lo(std::size_t count, int parts, int k) {
  // Chunk boundaries on 64-byte lines, so owners never write the same cache line.
  constexpr std::size_t line = std::max<std::size_t>(1, 64 / sizeof(T));
  const std::size_t lines = (count + line - 1) / line;
  return std::min(count, comm::detail::chunk_lo(lines, parts, k) * line);
}

}  // namespace detail

}  // namespace heterograd::comm::inproc
