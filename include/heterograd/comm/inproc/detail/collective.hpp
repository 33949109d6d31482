#pragma once
// The state of one inproc collective call: publication, agreement, this rank's
// share of the work on the peers' buffers, and the departure wait.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "heterograd/comm/inproc/detail/group_state.hpp"
#include "heterograd/comm/inproc/limits.hpp"
#include "heterograd/comm/reduce.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/types.hpp"

namespace heterograd::comm::inproc {

namespace detail {

using comm::detail::real_clock;
using comm::detail::request_state;

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
    const bool unwinding = std::uncaught_exceptions() > 0;
    try {
      g_->world->abort(r_, "heterograd: comm: " + describe() + " was abandoned while pending (" +
                               (unwinding ? "the rank unwound from an exception"
                                          : "its request was dropped without wait") +
                               ")",
                       unwinding);  // provisional: the exception's message follows (issue 46)
    } catch (...) {
      g_->world->abort(r_, std::string(), unwinding);  // no memory for the reason: abort all the same
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
    return std::string(collective_name(me_.kind)) + " of " + std::to_string(me_.count) + " " +
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
    if (m.kind == collective::allreduce && m.count > 0 &&
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
    if (me_.count == 0 && me_.kind != collective::barrier && me_.kind != collective::split)
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
        why = std::string("rank ") + std::to_string(q) + " called " + collective_name(o.kind);
      } else if (o.kind == collective::barrier || o.kind == collective::split) {
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
        throw mismatch_error("heterograd: comm: mismatched " + std::string(collective_name(me_.kind)) +
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
      case collective::barrier: return false;
      case collective::split: compute_split(); return false;
      case collective::allreduce: return allreduce_typed<T>();
      case collective::reduce_scatter: {
        // Rank r reduces block r of every input: n*(m/n) elements read, m/n written.
        const std::size_t b = m / static_cast<std::size_t>(n);
        T* out = static_cast<T*>(me_.out);
        std::memcpy(out, in_of<T>(0) + static_cast<std::size_t>(r_) * b, b * sizeof(T));
        for (int q = 1; q < n; ++q)
          comm::detail::combine(me_.op, out, in_of<T>(q) + static_cast<std::size_t>(r_) * b, b);
        if (me_.op == reduce_op::avg) comm::detail::divide(out, n, b);
        return true;
      }
      case collective::allgather: {
        // n*m elements read and written.
        T* out = static_cast<T*>(me_.out);
        for (int q = 0; q < n; ++q)
          std::memcpy(out + static_cast<std::size_t>(q) * m, in_of<T>(q), m * sizeof(T));
        return true;
      }
      case collective::broadcast: {
        if (r_ != me_.root) std::memcpy(me_.out, out_of<T>(me_.root), m * sizeof(T));
        return true;
      }
      case collective::gather: {
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

}  // namespace detail

}  // namespace heterograd::comm::inproc
