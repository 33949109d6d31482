#pragma once
// The discrete-event engine of the simulator: a virtual clock, n workers that run one job at a
// time, and user timers. Single-threaded and deterministic: events are ordered by
// (time, sequence number), the sequence number being the order in which they were scheduled,
// so two events at the same virtual time are always delivered in the same order.
//
// A job is "worker w computes something (a gradient at model version v, or H local steps)".
// The engine does not compute: the caller does the real computation when it starts the job
// (on the parameters as they are at that virtual time, i.e. exactly what a worker reading
// version v would see) and keeps the result until the engine delivers the job's
// `job_finished` event at its virtual finish time. A cancelled job is removed from the queue
// and never delivered (Ringmaster ASGD's "calculation stops", Maranjyan, Tyurin, Richtarik,
// ICML 2025, Alg. 5). A worker can be made to wait (SSP/DSSP blocking, Zhao et al., ICDCS
// 2019) and is released by the caller at the virtual time the condition holds; it can start
// its next job at that same instant.
//
// Memory is O(workers + timers pending): one record per worker, a pool of timer records with
// an intrusive free list, and one indexed 4-ary heap holding at most one entry per busy
// worker and per pending timer. Nothing allocates on the hot path (start, finish, cancel,
// timer reuse) once the heap has reached its high-water mark; the constructor reserves room
// for every worker.
//
// Every scheduling call and every delivered event is folded into a 64-bit trace hash, so two
// runs can be compared by one number (see trace_hash()).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <concepts>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "heterograd/core/error.hpp"

namespace heterograd::sim {

using worker_id = std::uint32_t;

/// A timer handle: slot in the low 32 bits, the slot's generation in the high 32 bits, so a
/// handle to a timer that already fired or was cancelled is recognised as stale.
using timer_id = std::uint64_t;

inline constexpr double never = std::numeric_limits<double>::infinity();

enum class worker_state : std::uint8_t {
  idle,     ///< no job, not blocked
  busy,     ///< computing a job
  waiting,  ///< blocked by the policy until release()
};

/// What happened. Only job_finished and timer are delivered by next(); the others are
/// recorded in the trace hash.
enum class event_kind : std::uint8_t {
  job_started = 1,
  job_finished = 2,
  job_cancelled = 3,
  wait_began = 4,
  worker_released = 5,
  timer_scheduled = 6,
  timer = 7,
  timer_cancelled = 8,
};

/// A job as the engine knows it.
struct job {
  worker_id worker = 0;
  std::uint64_t index = 0;  ///< k: this worker's k-th job (0-based; cancelled jobs count)
  std::uint64_t tag = 0;    ///< the caller's payload, e.g. the model version it computes at
  double start = 0;         ///< virtual start time
  double finish = 0;        ///< virtual finish time (never = does not finish)
};

/// A delivered event. For job_finished, `job` is the finished job and `worker` its worker.
/// For timer, `timer` is its handle and `tag` the caller's payload.
struct event {
  event_kind kind = event_kind::job_finished;
  double time = 0;
  worker_id worker = 0;
  struct job job {};
  timer_id timer = 0;
  std::uint64_t tag = 0;
};

/// Per-worker accounting, in virtual seconds. busy + idle + waiting = now (the worker's whole
/// life); `wasted` is the part of `busy` spent on jobs that were cancelled.
struct worker_stats {
  std::uint64_t jobs_started = 0;
  std::uint64_t jobs_finished = 0;
  std::uint64_t jobs_cancelled = 0;
  double busy = 0;
  double idle = 0;
  double waiting = 0;
  double wasted = 0;
  /// Finished jobs per virtual second over [0, now] (0 at time 0).
  double throughput = 0;
};

namespace detail {

/// One step of the trace hash: FNV-1a over 64-bit words (offset basis and prime of FNV-1a
/// 64) followed by a xor-shift, so that differences in high bits (a float's exponent) reach
/// the low bits too.
constexpr std::uint64_t fnv_offset = 0xcbf29ce484222325ull;
constexpr std::uint64_t fnv_prime = 0x100000001b3ull;
inline std::uint64_t hash_word(std::uint64_t h, std::uint64_t word) {
  h = (h ^ word) * fnv_prime;
  return h ^ (h >> 29);
}
inline std::uint64_t double_bits(double x) {
  std::uint64_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

}  // namespace detail

class engine {
 public:
  /// `workers` > 0 workers, all idle at virtual time 0. `timers_hint` reserves room for that
  /// many concurrently pending timers.
  explicit engine(std::size_t workers, std::size_t timers_hint = 16) {
    require(workers > 0, "engine.workers", workers, "must be > 0 (an empty worker list)");
    require(workers < timer_bit, "engine.workers", workers, "must be < 2^23");
    workers_.resize(workers);
    heap_pos_.resize(workers);
    heap_.reserve(workers + timers_hint);
    timers_.reserve(timers_hint);
  }

  std::size_t workers() const { return workers_.size(); }
  /// The virtual clock.
  double now() const { return now_; }

  worker_state state(worker_id w) const { return workers_[check(w, "worker")].state; }
  bool busy(worker_id w) const { return state(w) == worker_state::busy; }
  /// The job a busy worker is computing.
  const job& current_job(worker_id w) const {
    const auto& r = workers_[check(w, "worker")];
    require(r.state == worker_state::busy, "worker", w, "must be busy (it has no job)");
    return r.job;
  }
  /// Index of the next job worker w will start (= jobs started so far).
  std::uint64_t next_job_index(worker_id w) const { return workers_[check(w, "worker")].started; }
  std::size_t jobs_in_flight() const { return in_flight_; }
  std::size_t timers_pending() const { return heap_.size() - in_flight_; }
  /// Events delivered by next() so far.
  std::uint64_t events_delivered() const { return delivered_; }
  /// 64-bit hash of everything that happened so far: each start (time, worker, job index,
  /// tag, finish time), cancel, wait, release, timer and delivered event, in order.
  std::uint64_t trace_hash() const { return hash_; }

  /// Starts a job of `duration` virtual seconds (>= 0, or `never`) on idle worker w, at the
  /// current virtual time. Returns the job record.
  const job& start(worker_id w, double duration, std::uint64_t tag = 0) {
    check(w, "worker");
    require(!std::isnan(duration) && duration >= 0.0, "duration", duration,
            "must be >= 0 (a job cannot take negative or NaN time)");
    auto& r = workers_[w];
    require(r.state == worker_state::idle, "worker", w,
            r.state == worker_state::busy ? "must be idle to start a job (it is busy)"
                                          : "must be idle to start a job (it is waiting: release it first)");
    transition(r, worker_state::busy);
    r.job = job{w, r.started, tag, now_, now_ + duration};
    ++r.started;
    ++in_flight_;
    push(r.job.finish, w);
    trace(event_kind::job_started, w, r.job.index, tag, detail::double_bits(r.job.finish));
    return r.job;
  }

  /// Starts a job whose duration comes from a worker-time model: model.duration(w, k, now,
  /// batch), k = this worker's job index. Determinism: the duration depends only on the
  /// model's seed and (w, k, now, batch).
  template <class Model>
    requires requires(const Model& m, worker_id v, std::uint64_t k, double t, std::size_t b) {
      { m.duration(v, k, t, b) } -> std::convertible_to<double>;
    }
  const job& start(worker_id w, const Model& model, std::uint64_t tag, std::size_t batch = 1) {
    const auto& r = workers_[check(w, "worker")];
    return start(w, model.duration(w, r.started, now_, batch), tag);
  }

  /// Cancels the job of busy worker w: it is removed from the queue and will never be
  /// delivered. The worker becomes idle now; the time it computed counts as busy and wasted.
  job cancel(worker_id w) {
    check(w, "worker");
    auto& r = workers_[w];
    require(r.state == worker_state::busy, "worker", w, "must be busy to cancel its job");
    erase(heap_pos_[w]);
    --in_flight_;
    r.wasted += now_ - r.job.start;
    ++r.cancelled;
    transition(r, worker_state::idle);
    trace(event_kind::job_cancelled, w, r.job.index, r.job.tag, 0);
    return r.job;
  }

  /// Blocks idle worker w from now until release(w).
  void wait(worker_id w) {
    hand_over(w, worker_state::idle, worker_state::waiting, event_kind::wait_began,
              "must be idle to wait");
  }

  /// Unblocks waiting worker w now; it is idle and may start its next job at this instant.
  void release(worker_id w) {
    hand_over(w, worker_state::waiting, worker_state::idle, event_kind::worker_released,
              "must be waiting to be released");
  }

  /// A timer delivered at virtual time `at` (>= now) with the caller's `tag`.
  timer_id schedule_at(double at, std::uint64_t tag = 0) {
    require(!std::isnan(at) && at >= now_, "at", at, "must be >= the current virtual time");
    std::uint32_t slot;
    if (free_timer_ != no_slot) {
      slot = free_timer_;
      free_timer_ = timers_[slot].next_free;
    } else {
      require(timers_.size() < timer_bit, "timers", timers_.size(), "must be < 2^23 pending");
      slot = static_cast<std::uint32_t>(timers_.size());
      timers_.push_back({});
    }
    auto& t = timers_[slot];
    t.tag = tag;
    t.pending = true;
    push(at, timer_bit | slot);
    const timer_id id = (static_cast<std::uint64_t>(t.generation) << 32) | slot;
    trace(event_kind::timer_scheduled, 0, id, tag, detail::double_bits(at));
    return id;
  }
  timer_id schedule_after(double delay, std::uint64_t tag = 0) {
    require(!std::isnan(delay) && delay >= 0.0, "delay", delay, "must be >= 0");
    return schedule_at(now_ + delay, tag);
  }
  /// Cancels a pending timer; false if it already fired or was cancelled.
  bool cancel_timer(timer_id id) {
    const auto slot = static_cast<std::uint32_t>(id);
    if (slot >= timers_.size()) return false;
    auto& t = timers_[slot];
    if (!t.pending || t.generation != static_cast<std::uint32_t>(id >> 32)) return false;
    erase(t.heap_pos);
    free_slot(slot);
    trace(event_kind::timer_cancelled, 0, id, 0, 0);
    return true;
  }

  /// Virtual time of the next event, or `never`.
  double next_time() const { return heap_.empty() ? never : time_of(heap_.front()); }

  /// Moves the clock to `t` without delivering anything; t must not pass the next event.
  void advance_to(double t) {
    require(!std::isnan(t) && t >= now_, "t", t, "must be >= the current virtual time");
    require(t <= next_time(), "t", t, "must not pass the next pending event");
    now_ = t;
  }

  /// Delivers the next event if its time is <= `until`: the clock moves to its time, a
  /// finished job's worker becomes idle. Otherwise moves the clock to `until` (when finite)
  /// and returns false. Events at `never` are never delivered.
  bool next(event& out, double until = never) {
    const double t = next_time();
    if (t > until || t == never) {
      if (until != never && until > now_) now_ = until;
      return false;
    }
    const std::uint32_t ref = ref_of(heap_.front());
    erase(0);
    now_ = t;
    ++delivered_;
    if (ref & timer_bit) {
      const std::uint32_t slot = ref & ~timer_bit;
      auto& t = timers_[slot];
      out.kind = event_kind::timer;
      out.time = now_;
      out.worker = 0;
      out.timer = (static_cast<std::uint64_t>(t.generation) << 32) | slot;
      out.tag = t.tag;
      free_slot(slot);
      trace(event_kind::timer, 0, out.timer, out.tag, 0);
    } else {
      const worker_id w = ref;
      auto& r = workers_[w];
      --in_flight_;
      ++r.finished;
      transition(r, worker_state::idle);
      out.kind = event_kind::job_finished;
      out.time = now_;
      out.worker = w;
      out.job = r.job;
      out.tag = r.job.tag;
      trace(event_kind::job_finished, w, r.job.index, r.job.tag, 0);
    }
    return true;
  }

  /// Accounting of worker w up to the current virtual time.
  /// Checkpointing: visits every member, in a fixed order, with `ar(members...)`; the archive
  /// writes or reads them (its choice). An engine restored into a copy of the same
  /// configuration continues exactly as the saved one would, trace hash included.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(workers_, heap_pos_, timers_, heap_, free_timer_, in_flight_, now_, seq_, delivered_,
       hash_);
  }

  worker_stats stats(worker_id w) const {
    const auto& r = workers_[check(w, "worker")];
    worker_stats s;
    s.jobs_started = r.started;
    s.jobs_finished = r.finished;
    s.jobs_cancelled = r.cancelled;
    s.busy = r.busy;
    s.idle = r.idle;
    s.waiting = r.waiting;
    s.wasted = r.wasted;
    const double open = now_ - r.since;
    switch (r.state) {
      case worker_state::idle: s.idle += open; break;
      case worker_state::busy: s.busy += open; break;
      case worker_state::waiting: s.waiting += open; break;
    }
    s.throughput = now_ > 0 ? static_cast<double>(r.finished) / now_ : 0.0;
    return s;
  }

 private:
  static constexpr unsigned ref_bits = 24;
  static constexpr std::uint64_t ref_mask = (std::uint64_t{1} << ref_bits) - 1;
  static constexpr std::uint32_t timer_bit = 1u << (ref_bits - 1);
  static constexpr std::uint64_t max_seq = (std::uint64_t{1} << (64 - ref_bits)) - 1;
  static constexpr std::uint32_t no_slot = 0xffffffffu;

  struct worker_record {
    worker_state state = worker_state::idle;
    struct job job {};
    std::uint64_t started = 0, finished = 0, cancelled = 0;
    double since = 0;  // time of the last state change
    double busy = 0, idle = 0, waiting = 0, wasted = 0;
  };
  struct timer_record {
    std::uint64_t tag = 0;
    std::uint32_t heap_pos = 0;
    std::uint32_t generation = 0;
    std::uint32_t next_free = no_slot;
    bool pending = false;
  };
  // 16 bytes: the heap compares (time, seq) without touching the records. `order` packs the
  // scheduling sequence number (high 40 bits) and the reference (low 24 bits: a worker id, or
  // timer_bit | timer slot).
  struct entry {
    std::uint64_t time_bits;
    std::uint64_t order;
  };

  std::size_t check(worker_id w, const char* name) const {
    require(w < workers_.size(), name, w, "must be < the number of workers");
    return w;
  }

  // wait and release: w must be in `from`; it moves to `to` now, traced as k.
  void hand_over(worker_id w, worker_state from, worker_state to, event_kind k, const char* rule) {
    check(w, "worker");
    auto& r = workers_[w];
    require(r.state == from, "worker", w, rule);
    transition(r, to);
    trace(k, w, r.started, 0, 0);
  }
  void transition(worker_record& r, worker_state to) {
    const double open = now_ - r.since;
    switch (r.state) {
      case worker_state::idle: r.idle += open; break;
      case worker_state::busy: r.busy += open; break;
      case worker_state::waiting: r.waiting += open; break;
    }
    r.since = now_;
    r.state = to;
  }

  void free_slot(std::uint32_t slot) {
    auto& t = timers_[slot];
    t.pending = false;
    ++t.generation;
    t.next_free = free_timer_;
    free_timer_ = slot;
  }

  void trace(event_kind k, worker_id w, std::uint64_t a, std::uint64_t b, std::uint64_t c) {
    std::uint64_t h = hash_;
    h = detail::hash_word(h, detail::double_bits(now_));
    h = detail::hash_word(h, static_cast<std::uint64_t>(k) | (static_cast<std::uint64_t>(w) << 8));
    h = detail::hash_word(h, a);
    h = detail::hash_word(h, b);
    h = detail::hash_word(h, c);
    hash_ = h;
  }

  // Entries order by the 128-bit key (time bits, seq, ref): a non-negative double's bits
  // order like its value, seq is unique, so one unsigned comparison (cmp + sbb, no branch)
  // decides, and the sift loops do not mispredict on ties.
  __extension__ using key_t = unsigned __int128;
  static key_t key(const entry& e) { return (static_cast<key_t>(e.time_bits) << 64) | e.order; }
  static bool before(const entry& a, const entry& b) { return key(a) < key(b); }
  static double time_of(const entry& e) {
    double t = 0;
    std::memcpy(&t, &e.time_bits, sizeof t);
    return t;
  }
  static std::uint32_t ref_of(const entry& e) {
    return static_cast<std::uint32_t>(e.order & ref_mask);
  }

  void place(std::size_t i, const entry& e) {
    heap_[i] = e;
    const std::uint32_t ref = ref_of(e);
    if (ref & timer_bit) {
      timers_[ref & ~timer_bit].heap_pos = static_cast<std::uint32_t>(i);
    } else {
      heap_pos_[ref] = static_cast<std::uint32_t>(i);
    }
  }
  void push(double time, std::uint32_t ref) {
    if (seq_ > max_seq) renumber();
    time += 0.0;  // -0.0 -> +0.0, so the bit pattern orders correctly
    heap_.push_back({});  // no allocation once capacity holds every worker and timer
    sift_up(heap_.size() - 1, entry{detail::double_bits(time), (seq_++ << ref_bits) | ref});
  }
  // A 4-ary heap: half the levels of a binary heap; the four children are adjacent 16-byte
  // entries (64 bytes, one or two cache lines). Each level moves one 16-byte entry and
  // writes one 4-byte heap position.
  static constexpr std::size_t arity = 4;
  void sift_up(std::size_t i, const entry& e) {
    while (i > 0) {
      const std::size_t parent = (i - 1) / arity;
      if (!before(e, heap_[parent])) break;
      place(i, heap_[parent]);
      i = parent;
    }
    place(i, e);
  }
  void sift_down(std::size_t i, const entry& e) {
    const std::size_t n = heap_.size();
    const key_t ke = key(e);
    for (;;) {
      const std::size_t first = arity * i + 1;
      if (first >= n) break;
      std::size_t c = first;
      key_t kc = key(heap_[first]);
      const std::size_t last = first + arity < n ? first + arity : n;
      for (std::size_t j = first + 1; j < last; ++j) {
        const key_t kj = key(heap_[j]);
        const bool smaller = kj < kc;
        c = smaller ? j : c;
        kc = smaller ? kj : kc;
      }
      if (!(kc < ke)) break;
      place(i, heap_[c]);
      i = c;
    }
    place(i, e);
  }
  void erase(std::size_t i) {
    const entry last = heap_.back();
    heap_.pop_back();
    if (i == heap_.size()) return;
    if (i > 0 && before(last, heap_[(i - 1) / arity])) {
      sift_up(i, last);
    } else {
      sift_down(i, last);
    }
  }
  // After 2^40 schedulings the sequence numbers are compacted, keeping their order: a sorted
  // array is a valid heap. Runs once per ~10^12 events.
  void renumber() {
    std::sort(heap_.begin(), heap_.end(), before);
    for (std::size_t i = 0; i < heap_.size(); ++i) {
      heap_[i].order = (static_cast<std::uint64_t>(i) << ref_bits) | ref_of(heap_[i]);
      place(i, heap_[i]);
    }
    seq_ = heap_.size();
  }

  std::vector<worker_record> workers_;
  // Heap positions of the workers' entries, apart from the records: every sift step writes
  // one, and a dense 4-byte array keeps those writes in cache at 10^4..10^5 workers.
  std::vector<std::uint32_t> heap_pos_;
  std::vector<timer_record> timers_;
  std::vector<entry> heap_;
  std::uint32_t free_timer_ = no_slot;
  std::size_t in_flight_ = 0;
  double now_ = 0;
  std::uint64_t seq_ = 0;
  std::uint64_t delivered_ = 0;
  std::uint64_t hash_ = detail::fnv_offset;
};

}  // namespace heterograd::sim
