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
// MPI_THREAD_SERIALIZED per rank). Different ranks are different threads.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/comm/executor.hpp"
#include "heterograd/comm/reduce.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/schedule.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/clock.hpp"
#include "heterograd/core/concepts.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

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

class communicator;

namespace detail {

using comm::detail::real_clock;
using comm::detail::request_state;
using comm::detail::time_source;
using comm::detail::wait_policy;

/// Spin-free blocking for a whole world: an event count over one condition variable. A
/// notifier pays a fence and a load when nobody sleeps.
class notifier {
 public:
  void notify() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    notify_fenced();
  }
  /// notify() for a caller that issued a seq_cst fence after its last store.
  void notify_fenced() {
    if (sleepers_.load(std::memory_order_relaxed) > 0) {
      {
        std::lock_guard<std::mutex> l(m_);
        epoch_.fetch_add(1, std::memory_order_relaxed);
      }
      cv_.notify_all();
    }
  }
  /// Blocks until `ready()` may have become true, or `until`.
  template <class Ready>
  void block(Ready&& ready, real_clock::time_point until) {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const std::uint64_t key = epoch_.load(std::memory_order_acquire);
    if (!ready()) {
      std::unique_lock<std::mutex> l(m_);
      while (epoch_.load(std::memory_order_relaxed) == key) {
        if (cv_.wait_until(l, until) == std::cv_status::timeout) break;
      }
    }
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  std::atomic<int> sleepers_{0};
  std::atomic<std::uint64_t> epoch_{0};
  std::mutex m_;
  std::condition_variable cv_;
};

/// What all groups of one world share: the clock, the waiting policy, the abort flag.
struct world_state {
  world_state(int n, time_source c) : size(n), clock(std::move(c)) {
    policy = wait_policy::for_threads(static_cast<unsigned>(n));
    oversubscribed = static_cast<unsigned>(n) > std::max(1u, std::thread::hardware_concurrency());
  }
  int size;
  bool oversubscribed = false;  // ranks outnumber cores
  time_source clock;
  wait_policy policy;
  notifier note;
  std::atomic<bool> aborted{false};
  mutable std::mutex abort_m;
  int abort_rank = -1;
  std::string abort_what;
  // Every group of this world (the world's own and the splits'), for spawn's cleanup.
  std::mutex groups_m;
  std::vector<std::weak_ptr<struct group_state>> groups;

  /// The first abort wins; later ones are ignored.
  void abort(int rank, std::string what) {
    {
      std::lock_guard<std::mutex> l(abort_m);
      if (!aborted.load(std::memory_order_relaxed)) {
        abort_rank = rank;
        abort_what = std::move(what);
        aborted.store(true, std::memory_order_seq_cst);
      }
    }
    note.notify();
  }
  bool is_aborted() const { return aborted.load(std::memory_order_seq_cst); }
  aborted_error error() const {
    std::lock_guard<std::mutex> l(abort_m);
    return aborted_error(abort_rank, abort_what);
  }
};

enum class coll_kind : std::uint8_t {
  barrier,
  allreduce,
  reduce_scatter,
  allgather,
  broadcast,
  gather,
  split
};

inline const char* kind_name(coll_kind k) {
  switch (k) {
    case coll_kind::barrier: return "barrier";
    case coll_kind::allreduce: return "allreduce";
    case coll_kind::reduce_scatter: return "reduce_scatter";
    case coll_kind::allgather: return "allgather";
    case coll_kind::broadcast: return "broadcast";
    case coll_kind::gather: return "gather";
    case coll_kind::split: return "split";
  }
  return "collective";
}

/// A rank's description of one collective call.
struct coll_meta {
  coll_kind kind = coll_kind::barrier;
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
  int sched_tag = 0;
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

// --- collectives ---------------------------------------------------------------------------

class coll_state : public request_state {
 public:
  /// `pooled`: held by its rank's pool, which reuses it (see communicator::post_collective).
  coll_state(std::shared_ptr<group_state> g, int rank, coll_meta me, bool pooled = false)
      : g_(std::move(g)), r_(rank), me_(me), pooled_(pooled) {}

  /// Fails a collective that no rank will drive any more (spawn's ranks all returned) and, if
  /// pooled, lets go of the group: a pending state in the FIFO or the pool holds the group that
  /// holds it, a cycle nothing else breaks.
  void abandon() {
    fail(std::make_exception_ptr(comm_error(
        "heterograd: comm: " + describe() + " was still pending when every rank had returned")));
    if (pooled_) g_.reset();
  }

  /// Makes a finished state (held by nothing but its rank's pool) a new collective's.
  void reuse(std::shared_ptr<group_state> g, coll_meta me) {
    g_ = std::move(g);
    me_ = me;
    seq_ = 0;
    chunks_ = 0;
    last_chunk_ = false;
    phase_ = phase::posted;
    split_result.reset();
    split_rank = -1;
    rearm();
  }

  /// Called by the poster: sequence number, FIFO entry, publication if the window allows.
  void post(const std::shared_ptr<coll_state>& self) {
    auto& loc = g_->locals[static_cast<std::size_t>(r_)];
    seq_ = loc.next++;
    loc.fifo.push_back(self);
    try_publish();
  }

  std::shared_ptr<group_state> group() const { return g_; }
  const coll_meta& meta() const { return me_; }

  /// True when progress() may now advance (or fail): used to block without lost wake-ups.
  bool ready() const {
    if (g_->world->is_aborted()) return true;
    const auto& loc = g_->locals[static_cast<std::size_t>(r_)];
    if (!loc.fifo.empty() && loc.fifo.front().get() != this) return loc.fifo.front()->ready();
    switch (phase_) {
      case phase::posted:
        return all_at_least(*g_, &counters::finished, seq_ + 1 >= window ? seq_ + 1 - window : 0);
      case phase::published: return g_->all_arrived(seq_);
      case phase::computed: return departed();
    }
    return true;
  }

  void cancel() override {}

  /// The last request went while the collective is pending (the rank unwinds from an
  /// exception, or dropped the request): peers may be reading and writing this rank's
  /// buffers, which the caller is about to free. A collective cannot be withdrawn, so abort
  /// the world (peers fail with "aborted by rank r") and wait until no peer works on this
  /// collective any more (settle: a peer either saw the abort before it started its share, or
  /// is seen busy here and waited for), then leave the FIFO.
  void abandon_pending() noexcept override {
    if (!g_) return;
    try {
      g_->world->abort(r_, "heterograd: comm: " + describe() + " was abandoned while pending (" +
                               (std::uncaught_exceptions() > 0
                                    ? "the rank unwound from an exception"
                                    : "its request was dropped without wait") +
                               ")");
    } catch (...) {
      g_->world->abort(r_, std::string());  // no memory for the reason: abort all the same
    }
    settle();
    fail(std::make_exception_ptr(g_->world->error()));
    auto& fifo = g_->locals[static_cast<std::size_t>(r_)].fifo;
    for (auto it = fifo.begin(); it != fifo.end(); ++it) {
      if (it->get() == this) {
        fifo.erase(it);
        break;
      }
    }
    if (pooled_) g_.reset();
  }

 protected:
  std::string describe() const override {
    return std::string(kind_name(me_.kind)) + " of " + std::to_string(me_.count) + " " +
           std::string(dtype_name(me_.dt)) + " on rank " + std::to_string(r_);
  }

  bool progress() override {
    auto& loc = g_->locals[static_cast<std::size_t>(r_)];
    // Older collectives of this rank first (completion in posting order).
    while (!loc.fifo.empty() && loc.fifo.front().get() != this) {
      auto front = loc.fifo.front();
      if (!front->test()) return false;
      if (!loc.fifo.empty() && loc.fifo.front() == front) loc.fifo.pop_front();
    }
    try {
      if (step()) {
        pop();
        return true;
      }
      return false;
    } catch (...) {
      pop();
      throw;
    }
  }

  void idle(real_clock::time_point until) override {
    if (g_) g_->world->note.block([this] { return ready(); }, until);
  }

  // The adaptive spin budget lives in the waiting thread (inproc's ranks are threads), not in
  // the group: a wait whose collective completed may find the group gone (this state let go
  // of it when it left the FIFO, and a peer released the last reference), and it writes the
  // budget after that (ThreadSanitizer saw the write race the group's destruction).
  int* adaptive_spin() override {
    thread_local int spin = 64;
    return &spin;
  }

  void on_timeout(const std::string& what) override {
    g_->world->abort(r_, what);
    settle();
    fail(std::make_exception_ptr(timeout_error(what)));
    pop();
  }

 private:
  enum class phase { posted, published, computed };

  /// Leaves the rank's FIFO (the state is over) and lets go of the group: a pooled state must
  /// not keep its group alive.
  void pop() {
    auto& loc = g_->locals[static_cast<std::size_t>(r_)];
    if (!loc.fifo.empty() && loc.fifo.front().get() == this) loc.fifo.pop_front();
    if (pooled_) g_.reset();
  }

  void try_publish() {
    if (phase_ != phase::posted) return;
    auto& loc = g_->locals[static_cast<std::size_t>(r_)];
    if (loc.published != seq_) return;
    // The slot of seq_ held collective seq_ - window: every rank must be done with it.
    if (seq_ >= window && loc.all_finished < seq_ + 1 - window) {
      loc.all_finished = least_of(*g_, &counters::finished);
      if (loc.all_finished < seq_ + 1 - window) return;
    }
    coll_meta m = me_;
    if (m.kind == coll_kind::allreduce && m.count > 0 &&
        staged_allreduce(m.count * dtype_size(), g_->size)) {
      // Staged small allreduce: copy the input now (S bytes read + S written); peers read the
      // copy, so this rank's buffer is free again as soon as its own reduction is done.
      std::byte* s = g_->stage_slot(r_, seq_);
      std::memcpy(s, m.out, m.count * dtype_size());
      m.in = s;
    }
    coll_slot& line = g_->line(r_, seq_);
    line.m = m;
    ++loc.published;
    line.published.store(seq_ + 1, std::memory_order_release);
    // Wake sleepers only when their condition became true: the rank that completes the
    // arrivals notifies (the fence makes two racing last arrivals see each other, so at least
    // one notifies). Waking the world at every arrival makes 4 ranks on 2 cores trade the
    // cores among sleepers that only go back to sleep.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (g_->all_arrived(seq_)) g_->world->note.notify_fenced();
    phase_ = phase::published;
  }

  std::size_t dtype_size() const {
    switch (me_.dt) {
      case dtype::i8:
      case dtype::u8: return 1;
      case dtype::i32:
      case dtype::u32:
      case dtype::f32: return 4;
      default: return 8;
    }
  }

  /// Waits until no peer still works on this collective (they may touch this rank's buffers).
  void settle() {
    if (phase_ == phase::posted) return;
    for (int q = 0; q < g_->size; ++q) {
      const auto& c = g_->ctr[static_cast<std::size_t>(q)];
      while (c.busy.load(std::memory_order_seq_cst) == seq_ + 1 &&
             c.finished.load(std::memory_order_acquire) < seq_ + 1)
        std::this_thread::yield();
    }
  }

  [[noreturn]] void throw_aborted() {
    settle();
    throw g_->world->error();
  }

  bool step() {
    if (g_->world->is_aborted()) throw_aborted();
    if (phase_ == phase::posted) {
      try_publish();
      if (phase_ == phase::posted) return false;
    }
    if (phase_ == phase::published) {
      if (!g_->all_arrived(seq_)) return false;
      auto& c = g_->ctr[static_cast<std::size_t>(r_)];
      c.busy.store(seq_ + 1, std::memory_order_seq_cst);
      if (g_->world->is_aborted()) {
        c.finished.store(seq_ + 1, std::memory_order_release);
        throw_aborted();
      }
      bool depart = false;
      try {
        depart = compute();
      } catch (...) {
        c.finished.store(seq_ + 1, std::memory_order_release);
        g_->world->note.notify();
        throw;
      }
      c.finished.store(seq_ + 1, std::memory_order_release);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (last_chunk_ || all_at_least(*g_, &counters::finished, seq_ + 1))
        g_->world->note.notify_fenced();
      phase_ = phase::computed;
      if (!depart) return true;
    }
    return departed();
  }

  /// True when no peer will write this rank's buffers any more: every chunk is done (chunked
  /// owner-computes) or every rank finished its share.
  bool departed() const {
    if (chunks_ > 0) return g_->done_chunks[seq_ % window].get(seq_) >= chunks_;
    if (!all_at_least(*g_, &counters::finished, seq_ + 1)) return false;
    auto& known = g_->locals[static_cast<std::size_t>(r_)].all_finished;
    known = std::max(known, seq_ + 1);
    return true;
  }

  /// Checks agreement and does this rank's share. Returns true when the caller must wait
  /// for every rank to finish before its buffers are free.
  bool compute() {
    check_agreement();
    // Empty buffers (all ranks agree on the count): nothing to move, and no null pointer may
    // reach memcpy.
    if (me_.count == 0 && me_.kind != coll_kind::barrier && me_.kind != coll_kind::split)
      return false;
    switch (me_.dt) {
      case dtype::i8: return compute_typed<std::int8_t>();
      case dtype::u8: return compute_typed<std::uint8_t>();
      case dtype::i32: return compute_typed<std::int32_t>();
      case dtype::u32: return compute_typed<std::uint32_t>();
      case dtype::i64: return compute_typed<std::int64_t>();
      case dtype::u64: return compute_typed<std::uint64_t>();
      case dtype::f32: return compute_typed<float>();
      case dtype::f64: return compute_typed<double>();
    }
    return true;
  }

  void check_agreement() {
    for (int q = 0; q < g_->size; ++q) {
      const coll_meta& o = g_->slot(q, seq_);
      std::string why;
      if (o.kind != me_.kind) {
        why = std::string("rank ") + std::to_string(q) + " called " + kind_name(o.kind);
      } else if (o.kind == coll_kind::barrier || o.kind == coll_kind::split) {
        continue;
      } else if (o.dt != me_.dt) {
        why = "rank " + std::to_string(q) + " passed " + std::string(dtype_name(o.dt)) +
              " elements, this rank " + std::string(dtype_name(me_.dt));
      } else if (o.count != me_.count) {
        why = "rank " + std::to_string(q) + " passed " + std::to_string(o.count) +
              " elements, this rank " + std::to_string(me_.count);
      } else if (o.op != me_.op) {
        why = "rank " + std::to_string(q) + " asked for " + std::string(reduce_op_name(o.op));
      } else if (o.weighted != me_.weighted) {
        why = "some ranks passed a weight and others did not";
      } else if (o.root != me_.root) {
        why = "rank " + std::to_string(q) + " named root " + std::to_string(o.root);
      }
      if (!why.empty())
        throw mismatch_error("heterograd: comm: mismatched " + std::string(kind_name(me_.kind)) +
                             " (collective #" + std::to_string(seq_) + ") on rank " +
                             std::to_string(r_) + ": " + why);
    }
  }

  template <class T>
  const T* in_of(int q) {
    return static_cast<const T*>(g_->slot(q, seq_).in);
  }
  template <class T>
  T* out_of(int q) {
    return static_cast<T*>(g_->slot(q, seq_).out);
  }

  template <class T>
  bool compute_typed() {
    const int n = g_->size;
    const std::size_t m = me_.count;
    switch (me_.kind) {
      case coll_kind::barrier: return false;
      case coll_kind::split: compute_split(); return false;
      case coll_kind::allreduce: return allreduce_typed<T>();
      case coll_kind::reduce_scatter: {
        // Rank r reduces block r of every input: n*(m/n) elements read, m/n written.
        const std::size_t b = m / static_cast<std::size_t>(n);
        T* out = static_cast<T*>(me_.out);
        std::memcpy(out, in_of<T>(0) + static_cast<std::size_t>(r_) * b, b * sizeof(T));
        for (int q = 1; q < n; ++q)
          comm::detail::combine(me_.op, out, in_of<T>(q) + static_cast<std::size_t>(r_) * b, b);
        if (me_.op == reduce_op::avg) comm::detail::divide(out, n, b);
        return true;
      }
      case coll_kind::allgather: {
        // n*m elements read and written.
        T* out = static_cast<T*>(me_.out);
        for (int q = 0; q < n; ++q)
          std::memcpy(out + static_cast<std::size_t>(q) * m, in_of<T>(q), m * sizeof(T));
        return true;
      }
      case coll_kind::broadcast: {
        if (r_ != me_.root) std::memcpy(me_.out, out_of<T>(me_.root), m * sizeof(T));
        return true;
      }
      case coll_kind::gather: {
        if (r_ == me_.root) {
          T* out = static_cast<T*>(me_.out);
          for (int q = 0; q < n; ++q)
            std::memcpy(out + static_cast<std::size_t>(q) * m, in_of<T>(q), m * sizeof(T));
        }
        return true;
      }
    }
    return true;
  }

  double weight_sum() {
    double s = 0;
    for (int q = 0; q < g_->size; ++q) s += g_->slot(q, seq_).weight;
    if (me_.op == reduce_op::avg && !(s > 0.0))
      throw comm_error("heterograd: comm: weighted average with a zero sum of weights");
    return s;
  }

  template <class T>
  bool allreduce_typed() {
    const int n = g_->size;
    const std::size_t m = me_.count;
    const bool weighted = me_.weighted;
    const double wsum = weighted ? weight_sum() : 0.0;
    const double div = comm::detail::average_divisor(weighted, wsum, n);
    if (staged_allreduce(m * sizeof(T), n)) {
      // Staged: reduce the n staged copies into this rank's buffer (n*m read, m written).
      T* out = static_cast<T*>(me_.out);
      if (weighted) {
        comm::detail::scaled_copy(out, in_of<T>(0), g_->slot(0, seq_).weight, m);
        for (int q = 1; q < n; ++q)
          comm::detail::scaled_add(out, in_of<T>(q), g_->slot(q, seq_).weight, m);
      } else {
        std::memcpy(out, in_of<T>(0), m * sizeof(T));
        for (int q = 1; q < n; ++q) comm::detail::combine(me_.op, out, in_of<T>(q), m);
      }
      if (me_.op == reduce_op::avg) comm::detail::divide(out, div, m);
      return false;
    }
    if (g_->world->oversubscribed) return claimed_owner_computes<T>(weighted, div);
    // Owner-computes: chunk r of every buffer, in blocks that stay in L1.
    reduce_range<T>(owner_lo<T>(m, n, r_), owner_lo<T>(m, n, r_ + 1), weighted, div);
    return true;
  }

  /// Reduces elements [lo, hi) of every rank's buffer and writes the result into all of
  /// them, in blocks that stay in L1. Per block of b elements: n*b read, n*b written (the
  /// accumulator stays in cache).
  template <class T>
  void reduce_range(std::size_t lo, std::size_t hi, bool weighted, double div) {
    const int n = g_->size;
    constexpr std::size_t block = 8192 / sizeof(T);
    alignas(64) T acc[block];
    for (std::size_t b = lo; b < hi; b += block) {
      const std::size_t len = std::min(block, hi - b);
      if (weighted) {
        comm::detail::scaled_copy(acc, out_of<T>(0) + b, g_->slot(0, seq_).weight, len);
        for (int q = 1; q < n; ++q)
          comm::detail::scaled_add(acc, out_of<T>(q) + b, g_->slot(q, seq_).weight, len);
      } else {
        std::memcpy(acc, out_of<T>(0) + b, len * sizeof(T));
        for (int q = 1; q < n; ++q) comm::detail::combine(me_.op, acc, out_of<T>(q) + b, len);
      }
      if (me_.op == reduce_op::avg) comm::detail::divide(acc, div, len);
      for (int q = 0; q < n; ++q) std::memcpy(out_of<T>(q) + b, acc, len * sizeof(T));
    }
  }

  /// Owner-computes when ranks outnumber cores: chunks are claimed from a shared counter by
  /// whichever ranks run, instead of chunk r waiting for rank r to be scheduled. A rank that
  /// wakes after the work is done claims nothing and leaves; so a descheduled rank costs its
  /// peers no second wake-up at the departure. Same bytes as the static split (2*N*S), same
  /// per-element summation order, so the result is bitwise the same.
  template <class T>
  bool claimed_owner_computes(bool weighted, double div) {
    const std::size_t m = me_.count;
    constexpr std::size_t block = 8192 / sizeof(T);
    // About 8 chunks per rank (whole L1 blocks): enough for the running ranks to share the
    // work, few enough that the counter's cache line is not contended.
    const std::size_t want = m / (8 * static_cast<std::size_t>(g_->size)) + 1;
    const std::size_t grain = (want + block - 1) / block * block;
    chunks_ = (m + grain - 1) / grain;
    auto& next = g_->next_chunk[seq_ % window];
    auto& done = g_->done_chunks[seq_ % window];
    for (;;) {
      const std::uint64_t k = next.add(seq_, chunks_);
      if (k >= chunks_) break;
      const std::size_t lo = static_cast<std::size_t>(k) * grain;
      reduce_range<T>(lo, std::min(m, lo + grain), weighted, div);
      if (done.add(seq_, chunks_) + 1 == chunks_) last_chunk_ = true;
    }
    return true;
  }

  void compute_split();

 public:
  std::shared_ptr<group_state> split_result{};
  int split_rank = -1;

 private:
  std::shared_ptr<group_state> g_;
  int r_;
  coll_meta me_;
  std::uint64_t seq_ = 0;
  std::uint64_t chunks_ = 0;  // chunked owner-computes: chunks of this collective
  bool last_chunk_ = false;   // this rank finished the last chunk (it wakes the others)
  phase phase_ = phase::posted;
  const bool pooled_;
};

inline void coll_state::compute_split() {
  if (me_.color < 0) return;
  std::vector<std::pair<int, int>> members;  // (key, parent rank)
  for (int q = 0; q < g_->size; ++q) {
    const coll_meta& o = g_->slot(q, seq_);
    if (o.color == me_.color) members.emplace_back(o.key, q);
  }
  std::sort(members.begin(), members.end());
  for (std::size_t i = 0; i < members.size(); ++i)
    if (members[i].second == r_) split_rank = static_cast<int>(i);
  const std::uint64_t id = g_->locals[static_cast<std::size_t>(r_)].splits;
  std::lock_guard<std::mutex> l(g_->split_m);
  auto& e = g_->splits[{id, me_.color}];
  if (!e.group) {
    e.group = std::make_shared<group_state>(g_->world, static_cast<int>(members.size()));
    {
      // Expired entries go first: a weak_ptr would keep a dead group's allocation alive.
      std::lock_guard<std::mutex> lw(g_->world->groups_m);
      std::erase_if(g_->world->groups, [](const auto& w) { return w.expired(); });
      g_->world->groups.push_back(e.group);
    }
    e.remaining = static_cast<int>(members.size());
  }
  split_result = e.group;
  if (--e.remaining == 0) g_->splits.erase({id, me_.color});
}

// --- point to point ---------------------------------------------------------------------------

class p2p_state : public request_state, public std::enable_shared_from_this<p2p_state> {
 public:
  enum class role { send, recv };
  p2p_state(std::shared_ptr<group_state> g, int ctx, int rank, role k, int peer, int tag,
            dtype dt, void* buf, std::size_t bytes)
      : g_(std::move(g)), ctx_(ctx), r_(rank), role_(k), peer_(peer), tag_(tag), dt_(dt),
        buf_(buf), bytes_(bytes) {}

  // Set under the owning mailbox's lock; read by the waiting thread.
  std::atomic<int> outcome{0};  // 0 pending, 1 done, 2 failed
  std::exception_ptr err{};
  comm::status st{};

  role kind() const { return role_; }
  int peer() const { return peer_; }
  int tag() const { return tag_; }
  dtype dt() const { return dt_; }
  void* buffer() const { return buf_; }
  std::size_t bytes() const { return bytes_; }

  /// Removes this operation from its mailbox if it is still unmatched.
  void cancel() override {
    if (outcome.load(std::memory_order_acquire) != 0) return;
    const int owner = role_ == role::recv ? r_ : peer_;
    mailbox& mb = g_->box(ctx_, owner);
    std::lock_guard<std::mutex> l(mb.m);
    if (role_ == role::recv) {
      mb.posted.remove_if([this](const std::shared_ptr<p2p_state>& p) { return p.get() == this; });
    } else {
      mb.unexpected.remove_if([this](const message& m) { return m.sender.get() == this; });
    }
  }

  /// The last request went while unmatched: withdraw the buffer (a delivery copies under the
  /// same mailbox lock, so once cancel() returns nobody reads or writes it). The operation
  /// fails alone, as a receive that times out does.
  void abandon_pending() noexcept override { cancel(); }

 protected:
  std::string describe() const override {
    return std::string(role_ == role::send ? "send to " : "receive from ") +
           (peer_ == any_source ? std::string("any rank") : "rank " + std::to_string(peer_)) +
           " (tag " + std::to_string(tag_) + ", " + std::to_string(bytes_) + " bytes) on rank " +
           std::to_string(r_);
  }
  bool progress() override {
    const int o = outcome.load(std::memory_order_acquire);
    if (o == 1) {
      status_ = st;
      return true;
    }
    if (o == 2) std::rethrow_exception(err);
    if (g_->world->is_aborted()) {
      cancel();
      if (outcome.load(std::memory_order_acquire) == 0) throw g_->world->error();
      return progress();
    }
    return false;
  }
  void idle(real_clock::time_point until) override {
    g_->world->note.block(
        [this] { return outcome.load(std::memory_order_acquire) != 0 || g_->world->is_aborted(); },
        until);
  }
  void on_timeout(const std::string& what) override {
    cancel();
    if (outcome.load(std::memory_order_acquire) == 0) {
      fail(std::make_exception_ptr(timeout_error(what)));
    } else {
      try {
        if (progress()) finish();
      } catch (...) {
        fail(std::current_exception());
      }
    }
  }

 private:
  std::shared_ptr<group_state> g_;
  int ctx_, r_;
  role role_;
  int peer_, tag_;
  dtype dt_;
  void* buf_;
  std::size_t bytes_;
};

inline bool matches(int want_src, int want_tag, int src, int tag) {
  return (want_src == any_source || want_src == src) && (want_tag == any_tag || want_tag == tag);
}

/// Delivers message `m` into receive `r` (under the receiver's mailbox lock). Both sides
/// learn about a truncation or an element-type mismatch.
inline void deliver(message& m, p2p_state& r, notifier& note) {
  // The sender (rendezvous) and the receiver each get their own exception object: one object
  // rethrown and released in two threads is legal, but its reference count lives in the
  // uninstrumented libstdc++, so ThreadSanitizer reported the release as a race.
  auto fail = [&]() -> std::exception_ptr {
    if (m.dt != r.dt())
      return std::make_exception_ptr(mismatch_error(
          "heterograd: comm: message from rank " + std::to_string(m.source) + " (tag " +
          std::to_string(m.tag) + ") holds " + std::string(dtype_name(m.dt)) +
          " elements, the receive expects " + std::string(dtype_name(r.dt()))));
    if (m.bytes > r.bytes())
      return std::make_exception_ptr(truncation_error(
          "heterograd: comm: message from rank " + std::to_string(m.source) + " (tag " +
          std::to_string(m.tag) + ") has " + std::to_string(m.bytes) +
          " bytes, the receive buffer only " + std::to_string(r.bytes())));
    return {};
  };
  std::exception_ptr e = fail();
  if (!e) {
    if (m.bytes)
      std::memcpy(r.buffer(), m.data ? m.data : static_cast<const void*>(m.payload.data()),
                  m.bytes);
    r.st = comm::status{m.source, m.tag, m.bytes};
  }
  if (e) r.err = e;
  r.outcome.store(e ? 2 : 1, std::memory_order_release);
  if (m.sender) {
    if (e) m.sender->err = fail();
    m.sender->outcome.store(e ? 2 : 1, std::memory_order_release);
  }
  note.notify();
}

}  // namespace detail

/// A rank's handle on an inproc group. Cheap to copy; copies share the group.
class communicator {
 public:
  communicator() = default;

  bool valid() const { return g_ != nullptr; }
  int rank() const { return rank_; }
  int size() const { return g_ ? g_->size : 0; }
  bool aborted() const { return g_ && g_->world->is_aborted(); }

  /// Aborts the whole world: every pending and future operation fails on every rank.
  void abort(std::string_view why) const {
    require(valid(), "communicator", "empty", "must be a valid communicator");
    g_->world->abort(rank_, std::string(why));
  }
  /// Used by schedules: a collective that timed out leaves peers waiting, so abort.
  void abort_after_timeout(const std::string& why) const { g_->world->abort(rank_, why); }

  template <element T>
  request allreduce(span<T> data, const allreduce_options& o = {}) const {
    comm::detail::validate(o);
    require(!o.weight || std::is_floating_point_v<T>, "allreduce_options.weight",
            o.weight.value_or(0.0), "weights need a floating-point element type");
    check_valid();
    if (o.algo != algorithm::automatic && o.algo != algorithm::native) {
      if (g_->world->is_aborted()) return request::failed(std::make_exception_ptr(g_->world->error()));
      schedule s = make_allreduce_schedule(o.algo, rank_, size(), data.size(), sizeof(T), o.group_size);
      schedule_options so;
      so.op = o.op;
      so.weight = o.weight;
      so.timeout = o.timeout;
      if (o.segment_bytes) so.segment_bytes = o.segment_bytes;
      auto& loc = g_->locals[static_cast<std::size_t>(rank_)];
      so.tag = loc.sched_tag;
      loc.sched_tag = (loc.sched_tag + 2) & 0x3fffffff;
      return comm::detail::post_schedule(internal(), data, std::move(s), so, g_->world->clock,
                                         g_->world->policy);
    }
    detail::coll_meta m;
    m.kind = detail::coll_kind::allreduce;
    m.dt = dtype_of_v<T>;
    m.op = o.op;
    m.weighted = o.weight.has_value();
    m.weight = o.weight.value_or(1.0);
    m.count = data.size();
    m.out = data.data();
    return post_collective(m, o.timeout);
  }

  /// out[i] = reduction over ranks of in[rank*out.size() + i]; in.size() = size()*out.size().
  template <class U, element T>
    requires std::same_as<std::remove_const_t<U>, T>
  request reduce_scatter(span<U, host_space> in, span<T> out,
                         const reduce_scatter_options& o = {}) const {
    comm::detail::validate_timeout("reduce_scatter_options.timeout", o.timeout);
    check_valid();
    require_same_size("reduce_scatter.in", in.size(), "size() * out.size()",
                      out.size() * static_cast<std::size_t>(size()));
    detail::coll_meta m;
    m.kind = detail::coll_kind::reduce_scatter;
    m.dt = dtype_of_v<T>;
    m.op = o.op;
    m.count = in.size();
    m.in = in.data();
    m.out = out.data();
    return post_collective(m, o.timeout);
  }

  /// out = concatenation of every rank's `in` in rank order; out.size() = size()*in.size().
  template <class U, element T>
    requires std::same_as<std::remove_const_t<U>, T>
  request allgather(span<U, host_space> in, span<T> out, const allgather_options& o = {}) const {
    comm::detail::validate_timeout("allgather_options.timeout", o.timeout);
    check_valid();
    require_same_size("allgather.out", out.size(), "size() * in.size()",
                      in.size() * static_cast<std::size_t>(size()));
    detail::coll_meta m;
    m.kind = detail::coll_kind::allgather;
    m.dt = dtype_of_v<T>;
    m.count = in.size();
    m.in = in.data();
    m.out = out.data();
    return post_collective(m, o.timeout);
  }

  template <element T>
  request broadcast(span<T> data, int root, const broadcast_options& o = {}) const {
    comm::detail::validate_timeout("broadcast_options.timeout", o.timeout);
    check_valid();
    require_in_range_co("broadcast.root", root, 0, size());
    detail::coll_meta m;
    m.kind = detail::coll_kind::broadcast;
    m.dt = dtype_of_v<T>;
    m.root = root;
    m.count = data.size();
    m.in = data.data();
    m.out = data.data();
    return post_collective(m, o.timeout);
  }

  /// Gathers every rank's (small) `in` into `out` on `root` (out.size() = size()*in.size()
  /// there; ignored elsewhere).
  template <class U, element T>
    requires std::same_as<std::remove_const_t<U>, T>
  request gather(span<U, host_space> in, span<T> out, int root,
                 const gather_options& o = {}) const {
    comm::detail::validate_timeout("gather_options.timeout", o.timeout);
    check_valid();
    require_in_range_co("gather.root", root, 0, size());
    if (rank_ == root)
      require_same_size("gather.out", out.size(), "size() * in.size()",
                        in.size() * static_cast<std::size_t>(size()));
    detail::coll_meta m;
    m.kind = detail::coll_kind::gather;
    m.dt = dtype_of_v<T>;
    m.root = root;
    m.count = in.size();
    m.in = in.data();
    m.out = out.data();
    return post_collective(m, o.timeout);
  }

  request barrier(const barrier_options& o = {}) const {
    comm::detail::validate_timeout("barrier_options.timeout", o.timeout);
    check_valid();
    detail::coll_meta m;
    m.kind = detail::coll_kind::barrier;
    return post_collective(m, o.timeout);
  }

  /// Tagged send (tag >= 0). Completes at post up to eager_bytes, else when received.
  template <class U>
    requires element<std::remove_const_t<U>>
  request send(span<U, host_space> data, int dest, int tag, const send_options& o = {}) const {
    using T = std::remove_const_t<U>;
    comm::detail::validate_timeout("send_options.timeout", o.timeout);
    check_valid();
    require_in_range_co("send.dest", dest, 0, size());
    require_non_negative("send.tag", tag);
    if (g_->world->is_aborted()) return request::failed(std::make_exception_ptr(g_->world->error()));
    const std::size_t bytes = data.size() * sizeof(T);
    detail::message msg;
    msg.source = rank_;
    msg.tag = tag;
    msg.dt = dtype_of_v<T>;
    msg.bytes = bytes;
    std::shared_ptr<detail::p2p_state> st;
    if (bytes > eager_bytes) {
      st = std::make_shared<detail::p2p_state>(g_, ctx_, rank_, detail::p2p_state::role::send,
                                               dest, tag, msg.dt, nullptr, bytes);
      st->set_deadline(g_->world->clock, o.timeout, g_->world->policy);
      msg.data = data.data();
      msg.sender = st;
    }
    detail::mailbox& mb = g_->box(ctx_, dest);
    {
      std::lock_guard<std::mutex> l(mb.m);
      if (g_->world->is_aborted()) return request::failed(std::make_exception_ptr(g_->world->error()));
      for (auto it = mb.posted.begin(); it != mb.posted.end(); ++it) {
        if (detail::matches((*it)->peer(), (*it)->tag(), rank_, tag)) {
          auto r = *it;
          mb.posted.erase(it);
          if (!st) msg.data = data.data();  // delivered straight from the caller's buffer
          detail::deliver(msg, *r, g_->world->note);
          return request(st);
        }
      }
      if (!st) {
        msg.payload.resize(bytes);
        if (bytes) std::memcpy(msg.payload.data(), data.data(), bytes);
      }
      mb.unexpected.push_back(std::move(msg));
    }
    g_->world->note.notify();
    if (!st) return request::completed();
    return request(st);
  }

  /// Tagged receive; source may be any_source and tag any_tag. The request's status() says
  /// who sent the message, its tag and its size.
  template <element T>
  request recv(span<T> data, int source, int tag, const recv_options& o = {}) const {
    comm::detail::validate_timeout("recv_options.timeout", o.timeout);
    check_valid();
    require(source == any_source || (source >= 0 && source < size()), "recv.source", source,
            "must be a rank of the communicator or any_source");
    require(tag == any_tag || tag >= 0, "recv.tag", tag, "must be >= 0 or any_tag");
    if (g_->world->is_aborted()) return request::failed(std::make_exception_ptr(g_->world->error()));
    auto st = std::make_shared<detail::p2p_state>(g_, ctx_, rank_, detail::p2p_state::role::recv,
                                                  source, tag, dtype_of_v<T>, data.data(),
                                                  data.size() * sizeof(T));
    st->set_deadline(g_->world->clock, o.timeout, g_->world->policy);
    detail::mailbox& mb = g_->box(ctx_, rank_);
    {
      std::lock_guard<std::mutex> l(mb.m);
      if (g_->world->is_aborted()) return request::failed(std::make_exception_ptr(g_->world->error()));
      for (auto it = mb.unexpected.begin(); it != mb.unexpected.end(); ++it) {
        if (detail::matches(source, tag, it->source, it->tag)) {
          detail::deliver(*it, *st, g_->world->note);
          mb.unexpected.erase(it);
          return request(st);
        }
      }
      mb.posted.push_back(st);
    }
    return request(st);
  }

  /// Collective: ranks with the same color form a new communicator, ordered by (key, rank).
  /// A negative color leaves the rank out (it gets an invalid communicator).
  communicator split(int color, int key, const split_options& o = {}) const {
    comm::detail::validate_timeout("split_options.timeout", o.timeout);
    check_valid();
    detail::coll_meta m;
    m.kind = detail::coll_kind::split;
    m.color = color;
    m.key = key;
    auto st = std::make_shared<detail::coll_state>(g_, rank_, m);
    st->set_deadline(g_->world->clock, o.timeout, g_->world->policy);
    if (g_->world->is_aborted()) throw g_->world->error();
    st->post(st);
    request(st).wait();
    ++g_->locals[static_cast<std::size_t>(rank_)].splits;
    if (st->split_result) return communicator(st->split_result, st->split_rank);
    return communicator();
  }

  /// Internal: the world's clock, notifier and abort flag (for objects built on the group).
  const std::shared_ptr<detail::world_state>& detail_world() const { return g_->world; }

  /// Internal: the k-th shared object of this rank's calls: the first rank to ask creates it
  /// with make(); every rank of the group gets the same object.
  template <class Make>
  std::shared_ptr<void> detail_shared(Make&& make) const {
    check_valid();
    const std::uint64_t id = g_->locals[static_cast<std::size_t>(rank_)].shared++;
    std::lock_guard<std::mutex> l(g_->shared_m);
    auto& e = g_->shared[id];
    if (!e.first) {
      e.first = make();
      e.second = g_->size;
    }
    std::shared_ptr<void> obj = e.first;
    if (--e.second == 0) g_->shared.erase(id);
    return obj;
  }

  /// The same group on a separate message space: the schedules' traffic never meets user
  /// messages.
  communicator internal() const {
    communicator c = *this;
    c.ctx_ = 1;
    return c;
  }

 private:
  friend class world;
  // Each rank's handle owns the group through a control block of its own: the states of its
  // calls copy and release it on every call, and a block shared by all ranks would be a
  // cache line that every rank writes on every call.
  communicator(std::shared_ptr<detail::group_state> g, int rank) : rank_(rank) {
    detail::group_state* p = g.get();
    g_ = std::shared_ptr<detail::group_state>(p, [keep = std::move(g)](detail::group_state*) {});
  }

  void check_valid() const { require(valid(), "communicator", "empty", "must be a valid communicator"); }

  request post_collective(const detail::coll_meta& m, seconds timeout) const {
    if (g_->world->is_aborted()) return request::failed(std::make_exception_ptr(g_->world->error()));
    // A pooled state that only the pool holds is over (it left the FIFO, and the caller
    // dropped its request): reuse it instead of allocating (~20 ns of a 0.4 us call).
    auto& pool = g_->locals[static_cast<std::size_t>(rank_)].pool;
    std::shared_ptr<detail::coll_state> st;
    for (auto& p : pool) {
      if (p.use_count() == 1) {
        st = p;
        st->reuse(g_, m);
        break;
      }
    }
    if (!st) {
      const bool pooled = pool.size() < 2 * window;
      st = std::make_shared<detail::coll_state>(g_, rank_, m, pooled);
      if (pooled) pool.push_back(st);
    }
    st->set_deadline(g_->world->clock, timeout, g_->world->policy);
    st->post(st);
    return request(std::move(st));
  }

  std::shared_ptr<detail::group_state> g_{};
  int rank_ = 0;
  int ctx_ = 0;
};

/// N ranks sharing one clock and one abort flag. Hand rank(r) to the thread that runs rank r.
class world {
 public:
  explicit world(int n) : world(n, steady_clock{}) {}
  template <heterograd::clock Clock>
  world(int n, Clock clock) {
    require(n >= 1, "world.size", n, "must be >= 1");
    w_ = std::make_shared<detail::world_state>(n, comm::detail::time_source(clock));
    g_ = std::make_shared<detail::group_state>(w_, n);
    w_->groups.push_back(g_);
  }
  int size() const { return w_->size; }
  communicator rank(int r) const {
    require_in_range_co("world.rank", r, 0, size());
    return communicator(g_, r);
  }
  void abort(int by_rank, std::string what) const { w_->abort(by_rank, std::move(what)); }
  bool aborted() const { return w_->is_aborted(); }

  /// Internal (spawn, once every rank's thread has ended): fails the collectives and drops the
  /// messages the ranks left pending, in every group of the world. A pending operation's state
  /// holds its group while the group's queues hold the state; nothing would free either.
  void detail_end() const {
    std::vector<std::shared_ptr<detail::group_state>> gs;
    {
      std::lock_guard<std::mutex> l(w_->groups_m);
      for (auto& wg : w_->groups)
        if (auto g = wg.lock()) gs.push_back(std::move(g));
    }
    for (auto& g : gs) {
      for (auto& loc : g->locals) {
        for (auto& st : loc.fifo) st->abandon();
        loc.fifo.clear();
      }
      for (int b = 0; b < 2 * g->size; ++b) {
        detail::mailbox& mb = g->boxes[static_cast<std::size_t>(b)];
        std::lock_guard<std::mutex> l(mb.m);
        mb.posted.clear();
        mb.unexpected.clear();
      }
    }
  }

 private:
  std::shared_ptr<detail::world_state> w_;
  std::shared_ptr<detail::group_state> g_;
};

/// Runs fn(communicator) on n ranks (rank 0 on the calling thread), joins them all, and
/// rethrows the first error. A rank that throws aborts the world first, so the others'
/// pending operations fail ("aborted by rank r") instead of waiting for it. If a rank's
/// thread cannot be created, spawn aborts the world, joins the ranks already started and
/// throws std::system_error ("could not start the thread of rank r of n: reason").
template <class Fn, heterograd::clock Clock>
void spawn(int n, Fn&& fn, Clock clock) {
  require(n >= 1, "spawn.n", n, "must be >= 1");
  world w(n, clock);
  std::mutex m;
  std::exception_ptr first{};
  auto body = [&](int r) {
    try {
      fn(w.rank(r));
    } catch (...) {
      auto e = std::current_exception();
      std::string what = "unknown exception";
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        what = x.what();
      } catch (...) {
      }
      {
        std::lock_guard<std::mutex> l(m);
        if (!first) first = e;
      }
      w.abort(r, what);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n - 1));
  for (int r = 1; r < n; ++r) {
    try {
      threads.emplace_back(body, r);
    } catch (...) {
      // No thread for rank r (no memory for its stack, a thread limit): the ranks already
      // running would wait for it in their first collective, and a joinable std::thread left
      // behind is std::terminate. Abort the world so they return, join them, then throw.
      const std::string why = "heterograd: comm: spawn could not start the thread of rank " +
                              std::to_string(r) + " of " + std::to_string(n);
      w.abort(r, why);
      for (auto& t : threads) t.join();
      w.detail_end();
      try {
        throw;
      } catch (const std::system_error& e) {
        throw std::system_error(e.code(), why);  // what(): why + ": " + the system's reason
      }
    }
  }
  body(0);
  for (auto& t : threads) t.join();
  w.detail_end();
  if (first) std::rethrow_exception(first);
}

template <class Fn>
void spawn(int n, Fn&& fn) {
  spawn(n, std::forward<Fn>(fn), steady_clock{});
}

}  // namespace heterograd::comm::inproc
