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

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/comm/concepts.hpp"
#include "heterograd/comm/executor.hpp"
#include "heterograd/comm/reduce.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/schedule.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::comm::mpi {

/// The thread support MPI granted (MPI_Query_thread).
enum class thread_level { single, funneled, serialized, multiple };

inline const char* thread_level_name(thread_level t) {
  switch (t) {
    case thread_level::single: return "MPI_THREAD_SINGLE";
    case thread_level::funneled: return "MPI_THREAD_FUNNELED";
    case thread_level::serialized: return "MPI_THREAD_SERIALIZED";
    case thread_level::multiple: return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

inline std::ostream& operator<<(std::ostream& os, thread_level t) { return os << thread_level_name(t); }

/// The thread level of this process's MPI (MPI must be initialised).
inline thread_level query_thread_level() {
  int p = MPI_THREAD_SINGLE;
  MPI_Query_thread(&p);
  if (p == MPI_THREAD_MULTIPLE) return thread_level::multiple;
  if (p == MPI_THREAD_SERIALIZED) return thread_level::serialized;
  if (p == MPI_THREAD_FUNNELED) return thread_level::funneled;
  return thread_level::single;
}

class communicator;

namespace detail {

using comm::detail::real_clock;
using comm::detail::request_state;
using comm::detail::time_source;
using comm::detail::wait_policy;

inline std::string error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, static_cast<std::size_t>(len));
}

/// Throws the comm_error of an MPI error code.
inline void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  int cls = 0;
  MPI_Error_class(code, &cls);
  const std::string msg = std::string("heterograd: comm: ") + what + ": " + error_string(code);
  if (cls == MPI_ERR_TRUNCATE) throw truncation_error(msg);
  throw comm_error(msg);
}

template <class T>
MPI_Datatype datatype() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<U, double>) return MPI_DOUBLE;
  else if constexpr (std::is_signed_v<U> && sizeof(U) == 1) return MPI_INT8_T;
  else if constexpr (std::is_unsigned_v<U> && sizeof(U) == 1) return MPI_UINT8_T;
  else if constexpr (std::is_signed_v<U> && sizeof(U) == 4) return MPI_INT32_T;
  else if constexpr (std::is_unsigned_v<U> && sizeof(U) == 4) return MPI_UINT32_T;
  else if constexpr (std::is_signed_v<U> && sizeof(U) == 8) return MPI_INT64_T;
  else return MPI_UINT64_T;
}

inline MPI_Op mpi_op(reduce_op op) {
  switch (op) {
    case reduce_op::min: return MPI_MIN;
    case reduce_op::max: return MPI_MAX;
    default: return MPI_SUM;
  }
}

/// The ranks on this node outnumber its cores.
inline bool oversubscribed(int local_ranks) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<unsigned>(local_ranks) > hw;
}

/// Whether the MPI library itself yields the core while it waits for messages: OpenMPI's
/// `mpi_yield_when_idle`, which mpirun turns on when it places more ranks than slots
/// (--oversubscribe), read through the MPI tool interface. Every MPI_Test then calls
/// sched_yield when it found nothing to do, so a wait that yields too gives the core away
/// twice per poll. False when the library has no such variable (other MPI libraries) or the
/// tool interface is unavailable.
inline bool library_yields_when_idle() {
  // OpenMPI 4.1's MPI_T_init_thread overwrites the level MPI_Query_thread reports with the
  // one it is given: ask for the level MPI granted.
  int level = MPI_THREAD_SINGLE, provided = 0;
  MPI_Query_thread(&level);
  if (MPI_T_init_thread(level, &provided) != MPI_SUCCESS) return false;
  bool yields = false;
  int index = -1;
  if (MPI_T_cvar_get_index("mpi_yield_when_idle", &index) == MPI_SUCCESS) {
    char name[128];
    char desc[8];
    int name_len = sizeof(name), desc_len = sizeof(desc), verbosity = 0, bind = 0, scope = 0;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_T_enum enumtype;
    MPI_T_cvar_handle h;
    int count = 0;
    if (MPI_T_cvar_get_info(index, name, &name_len, &verbosity, &type, &enumtype, desc, &desc_len, &bind,
                            &scope) == MPI_SUCCESS &&
        MPI_T_cvar_handle_alloc(index, nullptr, &h, &count) == MPI_SUCCESS) {
      // OpenMPI declares it as a C bool; an int is read as an int.
      int size = 0;
      if (count == 1 && MPI_Type_size(type, &size) == MPI_SUCCESS && size >= 1 && size <= 8) {
        unsigned char value[8] = {};
        if (MPI_T_cvar_read(h, value) == MPI_SUCCESS)
          for (int i = 0; i < size; ++i) yields = yields || value[i] != 0;
      }
      MPI_T_cvar_handle_free(&h);
    }
  }
  MPI_T_finalize();
  return yields;
}

/// Shared by all copies of a handle.
struct comm_state {
  MPI_Comm comm = MPI_COMM_NULL;  // user traffic
  MPI_Comm coll = MPI_COMM_NULL;  // schedules and shape checks
  int rank = 0, size = 1;
  bool polite = false;        // waits yield between polls (see the constructor)
  bool mpi_yields = false;    // MPI yields the core inside its own idle polls
  bool group_crowded = false;  // some node of the group runs more ranks than it has cores
                               // (the algorithm choice uses it)
  wait_policy policy{};
  std::atomic<bool> failed{false};
  std::mutex m;
  std::string failure;
  std::map<int, std::tuple<std::size_t, int, int, int>> shapes;  // last shape per collective
  int sched_tag = 0;
  std::vector<MPI_Request> orphans;  // requests of collectives abandoned after a timeout
  // Receive buffers that a cancelled receive might still write into (after a failure): kept
  // until the handle goes.
  std::vector<std::unique_ptr<std::byte[]>> lost_scratch;
  // The schedules of the last shapes (building one allocates; a training loop repeats a few).
  struct cached_schedule {
    int algo = 0;
    std::size_t count = 0;
    std::shared_ptr<const schedule> s;
  };
  std::vector<cached_schedule> schedules;
  std::shared_ptr<const schedule> uncached;  // the last one of a non-default grouping
  // The last allreduce state per element type, reused by the next call once finished and
  // dropped (no allocation per call). A finished state holds no reference to this one (an
  // unfinished one does, until the next call of its type replaces it).
  std::shared_ptr<comm::detail::request_state> spare[8];
  bool owns = true;                  // frees comm and coll when destroyed
  // Abort notices from peers: one any-source receive on coll, tag abort_tag.
  static constexpr int abort_tag = 32767;
  MPI_Request abort_req = MPI_REQUEST_NULL;
  char abort_msg[256] = {};
  comm_state* outer = nullptr;       // the internal state's owner: failures propagate there
  std::shared_ptr<comm_state> inner;  // the state of the internal communicator

  ~comm_state() {
    if (!owns) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) return;
    if (abort_req != MPI_REQUEST_NULL) {
      MPI_Cancel(&abort_req);
      MPI_Wait(&abort_req, MPI_STATUS_IGNORE);
    }
    if (!orphans.empty()) {
      // An abandoned operation still references them, and a withdrawn receive that did not
      // complete may still write into its buffer: both are leaked on purpose.
      for (auto& b : lost_scratch) (void)b.release();
      return;
    }
    if (coll != MPI_COMM_NULL) MPI_Comm_free(&coll);
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }

  void fail(const std::string& why) {
    {
      std::lock_guard<std::mutex> l(m);
      if (!failed.load()) failure = why;
      failed.store(true);
    }
    if (outer) outer->fail(why);
  }
  /// fail(), and tell every peer with an abort notice (their pending and later operations
  /// fail with "aborted by rank r: why"): for a collective that this rank gave up on (a
  /// timeout, an MPI error), which the peers would otherwise wait out to their own deadlines.
  /// One notice per handle, the first reason; a rank that was itself told sends none.
  void fail_and_tell_peers(const std::string& why) {
    fail(why);
    comm_state* o = outer ? outer : this;
    o->send_abort_notices(why);
  }
  /// Sends the abort notice (on the outer state, which owns `coll`). The text stays in
  /// `notice` until the handle goes: MPI_Request_free lets the send finish on its own, but
  /// its buffer must live until it has.
  void send_abort_notices(std::string_view why) {
    {
      std::lock_guard<std::mutex> l(m);
      if (notice_sent || abort_rank >= 0) return;
      notice_sent = true;
      notice.assign(why.substr(0, 200));
    }
    for (int j = 0; j < size; ++j) {
      if (j == rank) continue;
      MPI_Request q;
      if (MPI_Isend(notice.data(), static_cast<int>(notice.size()), MPI_CHAR, j, abort_tag, coll,
                    &q) == MPI_SUCCESS)
        MPI_Request_free(&q);  // small and eager: completes on its own
    }
  }
  bool notice_sent = false;
  std::string notice;
  bool is_failed() { return failed.load() || (outer && outer->failed.load()) || poll_abort(); }
  /// is_failed() that polls for abort notices on one call in 16 only; operations in flight
  /// poll them anyway. Every post uses it: an MPI_Test runs the progress engine (a tenth of a
  /// small allreduce), and on a crowded node one that finds nothing yields the core, so a
  /// poll before every send and receive made a 1K-float ping-pong between 4 ranks on 2 cores
  /// 2.4x slower than MPI_Send/MPI_Recv (1.01-1.02x without it).
  bool is_failed_cheap() {
    if (failed.load() || (outer && outer->failed.load())) return true;
    return (++cheap_polls & 15) == 0 && poll_abort();
  }
  unsigned cheap_polls = 0;

  /// Checks for an abort notice from a peer (see communicator::abort).
  bool poll_abort() {
    comm_state* o = outer ? outer : this;
    if (o->abort_req == MPI_REQUEST_NULL) return false;
    int flag = 0;
    MPI_Status st;
    if (MPI_Test(&o->abort_req, &flag, &st) != MPI_SUCCESS || !flag) return false;
    o->abort_req = MPI_REQUEST_NULL;
    int len = 0;
    MPI_Get_count(&st, MPI_CHAR, &len);
    std::lock_guard<std::mutex> l(o->m);
    o->failure = "aborted by rank " + std::to_string(st.MPI_SOURCE) + ": " +
                 std::string(o->abort_msg, static_cast<std::size_t>(std::max(0, len)));
    o->abort_rank = st.MPI_SOURCE;
    o->failed.store(true);
    return true;
  }
  int abort_rank = -1;
  aborted_error error() {
    if (outer && outer->failed.load() && !failed.load()) return outer->error();
    std::lock_guard<std::mutex> l(m);
    if (abort_rank >= 0) return aborted_error(abort_rank, failure.substr(failure.find(": ") + 2));
    return aborted_error(rank, "the communicator failed earlier: " + failure);
  }
};

/// A posted MPI operation: one or more MPI requests, then an optional next stage (a shape
/// check is followed by the operation itself) and a completion step (averaging).
class op_state final : public request_state {
 public:
  using stage_fn = std::function<void(op_state&)>;

  /// `what` names the operation (a literal); `count` and `peer` complete error messages.
  op_state(std::shared_ptr<comm_state> c, const char* what, std::size_t count, int peer, bool collective)
      : c_(std::move(c)), what_(what), count_(count), peer_(peer), collective_(collective) {}
  ~op_state() override {
    for (auto& r : reqs_) {
      if (r == MPI_REQUEST_NULL) continue;
      int fin = 0;
      MPI_Finalized(&fin);
      if (fin) break;
      if (collective_) {
        std::lock_guard<std::mutex> l(c_->m);
        c_->orphans.push_back(r);
      } else {
        MPI_Request_free(&r);
      }
    }
  }

  std::vector<MPI_Request> reqs_;
  std::vector<MPI_Status> stats_;
  std::vector<stage_fn> stages_;  // run in order, each after the requests of the one before
  std::function<void()> done_;
  bool is_recv_ = false;

  void cancel() override {
    if (!is_recv_) return;
    for (auto& r : reqs_) {
      if (r == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&r);
      MPI_Status st;
      MPI_Wait(&r, &st);
    }
  }

 protected:
  std::string describe() const override {
    std::string d = std::string(what_) + " of " + std::to_string(count_) + " elements";
    if (peer_ >= 0) d += " with rank " + std::to_string(peer_);
    return d + " on rank " + std::to_string(c_->rank);
  }

  bool progress() override {
    if ((++polls_ & 63) == 0 && c_->poll_abort()) throw c_->error();
    for (;;) {
      for (std::size_t i = 0; i < reqs_.size(); ++i) {
        if (reqs_[i] == MPI_REQUEST_NULL) continue;
        int flag = 0;
        const int rc = MPI_Test(&reqs_[i], &flag, &stats_[i]);
        if (rc != MPI_SUCCESS) {
          if (collective_) c_->fail_and_tell_peers(describe() + " failed");
          check(rc == MPI_ERR_IN_STATUS ? stats_[i].MPI_ERROR : rc, what_);
        }
        if (!flag) return false;
      }
      if (next_stage_ < stages_.size()) {
        reqs_.clear();
        stats_.clear();
        stages_[next_stage_++](*this);
        stats_.resize(reqs_.size());
        continue;
      }
      if (is_recv_ && !stats_.empty()) {
        int bytes = 0;
        MPI_Get_count(&stats_[0], MPI_BYTE, &bytes);
        status_ = comm::status{stats_[0].MPI_SOURCE, stats_[0].MPI_TAG, static_cast<std::size_t>(bytes)};
      }
      if (done_) done_();
      return true;
    }
  }

  void idle(real_clock::time_point until) override {
    // MPI progresses only inside MPI calls: keep polling, and yield between polls unless MPI
    // already yields inside them (see comm_state::mpi_yields; twice per poll made a 1K
    // ping-pong between 4 ranks on 2 cores 2.1x slower than MPI_Send/MPI_Recv).
    ++idles_;
    if (idles_ < 20000) {
      if (!c_->mpi_yields) std::this_thread::yield();
    } else {
      // Long waits (a straggler): poll every 20 us instead of burning a core.
      std::this_thread::sleep_until(std::min(until, real_clock::now() + std::chrono::microseconds(20)));
    }
  }

  void on_timeout(const std::string& what) override {
    if (is_recv_) {
      cancel();
    } else if (collective_) {
      c_->fail_and_tell_peers(what);  // the peers would wait for this rank to their deadlines
    } else {
      c_->fail(what);
    }
    fail(std::make_exception_ptr(timeout_error(what)));
  }

 private:
  std::shared_ptr<comm_state> c_;
  const char* what_;
  std::size_t count_;
  int peer_;
  bool collective_;
  std::size_t next_stage_ = 0;
  long idles_ = 0;
  unsigned polls_ = 0;
};

/// The mismatch message of a shape check (pairs (x, -x) reduced with MPI_MAX: equal on every
/// rank iff max(x) == min(x)), or an empty string when the ranks agree.
inline std::string shape_mismatch(const std::int64_t* b, int rank) {
  static const char* field[] = {"collective", "element count", "element type", "operator or root"};
  for (int i = 0; i < 8; i += 2) {
    if (b[i] != -b[i + 1])
      return "heterograd: comm: mismatched collective on rank " + std::to_string(rank) +
             ": ranks passed different " + field[i / 2] + " (from " + std::to_string(-b[i + 1]) +
             " to " + std::to_string(b[i]) + ")";
  }
  return {};
}

/// Recursive doubling as a schedule (powers of two): log2 n steps, each an exchange of the
/// whole buffer with rank ^ d. Fewest steps, but every message is the whole buffer: past
/// OpenMPI's eager limit (4 KiB on shared memory) each one pays a rendezvous.
inline schedule recursive_doubling_allreduce(int rank, int size, std::size_t count) {
  schedule s{algorithm::recursive_halving_doubling, rank, size, count, {}};
  for (int d = 1; d < size; d *= 2) {
    schedule_step st;
    st.transfers.push_back({transfer::kind::send, rank ^ d, 0, count});
    st.transfers.push_back({transfer::kind::recv_reduce, rank ^ d, 0, count});
    s.steps.push_back(std::move(st));
  }
  return s;
}

/// An allreduce schedule run straight over MPI_Isend/MPI_Irecv on the internal communicator:
/// the deadline-honouring allreduce of the mpi transport.
///
/// Nothing is allocated per call once warm: the schedule comes from a per-shape cache, and
/// the state (with its receive buffer and its MPI requests, inline up to 8 per step) is
/// reused by the next call of its element type. Each step posts its receives, then its sends (segments of `seg` elements),
/// and is polled with one MPI_Testall per poll; received segments are combined in order as
/// they complete (when no send of the step reads the combined range). Waiting polls MPI
/// without sleeping while progress is recent, the way a blocking MPI call spins inside the
/// library, and checks the deadline between polls (see idle()).
template <class T>
class p2p_state final : public request_state {
 public:
  p2p_state() = default;

  /// (Re)starts the state on a new call. `inner` aliases the handle's shared state (keeping
  /// `outer`, its owner, alive) until the call completes. A state is reused by the next call
  /// of its element type once its request was dropped (see communicator::allreduce): its
  /// scratch and MPI request arrays are kept, so a training loop allocates nothing per call.
  void arm(std::shared_ptr<comm_state> inner, comm_state* outer, span<T> data,
           const std::shared_ptr<const schedule>& s, reduce_op op, int tag, std::size_t seg_elems, bool doubling) {
    rearm();
    c_ = std::move(inner);
    outer_ = outer;
    data_ = data;
    if (s_ != s) s_ = s;  // the same cached schedule: no reference counting
    op_ = op;
    tag_ = tag;
    seg_ = std::max<std::size_t>(1, seg_elems);
    doubling_ = doubling;
    nreqs_ = first_send_ = nreduces_ = next_reduce_ = step_ = 0;
    posted_ = false;
    complete_ = false;
    pending_ = nullptr;
    shape_kind_ = -1;
    shape_posted_ = false;
    std::size_t most = 0, scratch = 0;
    for (const auto& st : s_->steps) {
      std::size_t k = 0, r = 0;
      for (const auto& tr : st.transfers) {
        k += (tr.count + seg_ - 1) / seg_;
        if (tr.what == transfer::kind::recv_reduce) r += tr.count;
      }
      most = std::max(most, k);
      scratch = std::max(scratch, r);
    }
    if (most > inline_reqs) {
      if (heap_reqs_.size() < most) {
        heap_reqs_.resize(most);
        heap_reduces_.resize(most);
      }
      reqs_ = heap_reqs_.data();
      reduces_ = heap_reduces_.data();
    } else {
      reqs_ = inline_reqs_;
      reduces_ = inline_reduces_;
    }
    if (scratch_bytes_ < scratch * sizeof(T)) {
      scratch_bytes_ = scratch * sizeof(T);
      scratch_.reset(new std::byte[scratch_bytes_]);  // not zeroed: every byte is received first
    }
    progress_count_ = 0;
    seen_count_ = ~0ul;  // the first idle() starts the quiet time
  }

  /// Posts the first step (or the shape check) now, without reading the clock; an error is
  /// kept for progress() to throw.
  void start() {
    try {
      if (run()) complete();
    } catch (...) {
      pending_ = std::current_exception();
    }
  }

  /// Whether the next call may reuse this state: finished successfully, request dropped.
  static bool reusable(const std::shared_ptr<request_state>& st) {
    return st && st.use_count() == 1 && st->finished() && !st->error();
  }

  /// Adds the cross-rank shape check (a new shape) before the schedule.
  void check_shape_first(int kind, std::size_t count, dtype dt, int extra) {
    shape_kind_ = kind;
    const std::int64_t v[4] = {kind, static_cast<std::int64_t>(count), static_cast<int>(dt), extra};
    for (int i = 0; i < 4; ++i) {
      shape_[2 * i] = v[i];
      shape_[2 * i + 1] = -v[i];
    }
  }

  ~p2p_state() override {
    int fin = 0;
    bool pending = false;
    if (nreqs_ > 0 || shape_req_ != MPI_REQUEST_NULL) MPI_Finalized(&fin);
    if (!fin && (nreqs_ > 0 || shape_req_ != MPI_REQUEST_NULL)) {
      // Withdraw this call's receives (they may still target the pool's buffer); sends of a
      // collective cannot be withdrawn and are left to complete.
      for (std::size_t i = 0; i < nreqs_; ++i) {
        if (reqs_[i] != MPI_REQUEST_NULL && is_recv(i)) MPI_Cancel(&reqs_[i]);
      }
      const auto stop = real_clock::now() + std::chrono::milliseconds(100);
      for (std::size_t i = 0; i < nreqs_; ++i) {
        if (!is_recv(i)) continue;
        int flag = 0;
        while (reqs_[i] != MPI_REQUEST_NULL &&
               MPI_Test(&reqs_[i], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && !flag &&
               real_clock::now() < stop) {
        }
      }
      if (shape_req_ != MPI_REQUEST_NULL) {
        std::lock_guard<std::mutex> l(orphan_owner()->m);
        orphan_owner()->orphans.push_back(shape_req_);
      }
      for (std::size_t i = 0; i < nreqs_; ++i) {
        if (reqs_[i] == MPI_REQUEST_NULL) continue;
        if (is_recv(i)) pending = true;
        std::lock_guard<std::mutex> l(orphan_owner()->m);
        orphan_owner()->orphans.push_back(reqs_[i]);
      }
    }
    if (pending && scratch_) {
      // A receive may still write into it: never freed while the handle lives.
      std::lock_guard<std::mutex> l(c_->m);
      c_->lost_scratch.push_back(std::move(scratch_));
    }
  }

 protected:
  std::string describe() const override {
    return std::string(doubling_ ? "recursive doubling" : algorithm_name(s_->algo)) + " allreduce of " +
           std::to_string(data_.size()) + " elements on rank " + std::to_string(c_->rank);
  }

  bool progress() override {
    if (complete_) return true;
    if (pending_) std::rethrow_exception(std::exchange(pending_, nullptr));
    try {
      if (run()) complete();
      return complete_;
    } catch (const mismatch_error&) {
      throw;  // the group stays usable
    } catch (const aborted_error&) {
      throw;  // already failed
    } catch (...) {
      // Peers may wait for this rank's messages: the collective is broken for the group.
      c_->fail_and_tell_peers(describe() + " failed");
      throw;
    }
  }

  /// Advances as far as the messages that arrived allow: true when the allreduce completed.
  bool run() {
    if (shape_kind_ >= 0 && !shape_done()) return poll_failed();
    const auto& steps = s_->steps;
    while (step_ < steps.size()) {
      if (!posted_) post(steps[step_]);
      if (!advance()) return poll_failed();
      ++step_;
      ++progress_count_;
      posted_ = false;
      nreqs_ = 0;
    }
    if (op_ == reduce_op::avg) comm::detail::divide(data_.data(), c_->size, data_.size());
    return true;
  }

  /// The wait between deadline checks. MPI advances only inside MPI calls, so a waiter keeps
  /// polling: while the last progress is under 2 ms old it runs the schedule up to 64 polls
  /// back to back (one MPI_Testall each; a completed step is combined and the next one posted
  /// on the spot, with no pause and no clock read: a blocking MPI_Allreduce spins the same
  /// way, and anything between polls delays every step), then it yields between polls, and
  /// past 20 ms without progress (a straggler) sleeps 50 us between polls. When the node's
  /// ranks outnumber its cores the peer we wait for needs this core: every poll yields, here
  /// (polite) or inside MPI (OpenMPI's mpi_yield_when_idle), never in both.
  void idle(real_clock::time_point until) override {
    const auto now = real_clock::now();
    if (progress_count_ != seen_count_) {
      seen_count_ = progress_count_;
      quiet_since_ = now;
    }
    const auto quiet = now - quiet_since_;
    if (quiet > std::chrono::milliseconds(20)) {
      std::this_thread::sleep_until(std::min(until, now + std::chrono::microseconds(50)));
      return;
    }
    const bool spin = !c_->polite && quiet < std::chrono::milliseconds(2);
    if (!spin) std::this_thread::yield();
    for (int i = 0; i < (spin ? 64 : 1) && !complete_ && !pending_; ++i) {
      try {
        if (run()) complete();
      } catch (...) {
        pending_ = std::current_exception();  // progress() rethrows it (and fails the group)
      }
    }
  }

  void on_timeout(const std::string& what) override {
    c_->fail_and_tell_peers(what);  // the peers would wait for this rank to their deadlines
    fail(std::make_exception_ptr(timeout_error(what)));
  }

 private:
  static constexpr std::size_t inline_reqs = 8;
  struct pending_reduce {
    std::size_t req;  // index in reqs_
    std::size_t dst;  // offset in data_
    std::size_t src;  // offset in the scratch buffer
    std::size_t count;
  };

  void complete() {
    complete_ = true;
    c_.reset();  // a finished state parked for reuse must not keep the handle alive
  }

  comm_state* orphan_owner() const { return c_->outer ? c_->outer : c_.get(); }
  bool is_recv(std::size_t i) const { return i < first_send_; }

  bool poll_failed() {
    if ((++polls_ & 63) == 0 && c_->poll_abort()) throw c_->error();
    return false;
  }

  bool shape_done() {
    if (!shape_posted_) {
      check(MPI_Iallreduce(MPI_IN_PLACE, shape_, 8, MPI_INT64_T, MPI_MAX, c_->comm, &shape_req_),
            "MPI_Iallreduce (shape check)");
      shape_posted_ = true;
    }
    int flag = 0;
    check(MPI_Test(&shape_req_, &flag, MPI_STATUS_IGNORE), "MPI_Test (shape check)");
    if (!flag) return false;
    shape_kind_ = -1;
    ++progress_count_;
    const std::string why = shape_mismatch(shape_, c_->rank);
    if (!why.empty()) {
      // Forget the shape so that the next call checks again.
      outer_->shapes.erase(static_cast<int>(shape_[0]));
      throw mismatch_error(why);
    }
    return true;
  }

  void post(const schedule_step& st) {
    T* scratch = reinterpret_cast<T*>(scratch_.get());
    const MPI_Datatype dt = datatype<T>();
    nreqs_ = 0;
    nreduces_ = 0;
    next_reduce_ = 0;
    first_send_ = std::numeric_limits<std::size_t>::max();  // until the sends are posted
    std::size_t toff = 0;
    // Receives first, so that a peer's send finds them posted.
    for (const auto& tr : st.transfers) {
      if (tr.what == transfer::kind::send) continue;
      for (std::size_t k = 0; k < tr.count; k += seg_) {
        const int n = static_cast<int>(std::min(seg_, tr.count - k));
        T* dst = data_.data() + tr.offset + k;
        if (tr.what == transfer::kind::recv_reduce) {
          reduces_[nreduces_++] = {nreqs_, tr.offset + k, toff, static_cast<std::size_t>(n)};
          dst = scratch + toff;
          toff += static_cast<std::size_t>(n);
        }
        check(MPI_Irecv(dst, n, dt, tr.peer, tag_, c_->comm, &reqs_[nreqs_++]), "MPI_Irecv");
      }
    }
    first_send_ = nreqs_;
    for (const auto& tr : st.transfers) {
      if (tr.what != transfer::kind::send) continue;
      for (std::size_t k = 0; k < tr.count; k += seg_) {
        const int n = static_cast<int>(std::min(seg_, tr.count - k));
        check(MPI_Isend(data_.data() + tr.offset + k, n, dt, tr.peer, tag_, c_->comm, &reqs_[nreqs_++]),
              "MPI_Isend");
      }
    }
    // Combining during the step is safe only if no send of the step reads the combined ranges
    // (true of every schedule here; checked, not assumed).
    reduce_early_ = true;
    for (const auto& x : st.transfers) {
      if (x.what != transfer::kind::recv_reduce) continue;
      for (const auto& y : st.transfers)
        if (y.what == transfer::kind::send && x.offset < y.offset + y.count && y.offset < x.offset + x.count)
          reduce_early_ = false;
    }
    posted_ = true;
  }

  /// Polls the step once; true when it is complete (every segment received and combined).
  bool advance() {
    int all = 0;
    check(MPI_Testall(static_cast<int>(nreqs_), reqs_, &all, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (!all && nreduces_ > 1 && reduce_early_) {
      // Segmented: combine the prefix of segments already received (MPI_Test per segment,
      // in order, so the combination order stays fixed).
      while (next_reduce_ < nreduces_) {
        auto& r = reqs_[reduces_[next_reduce_].req];
        int flag = 1;
        if (r != MPI_REQUEST_NULL) check(MPI_Test(&r, &flag, MPI_STATUS_IGNORE), "MPI_Test");
        if (!flag) break;
        combine_next();
      }
      return false;
    }
    if (!all) return false;
    // Each combine reads 2n and writes n elements (n = the segment).
    while (next_reduce_ < nreduces_) combine_next();
    return true;
  }

  void combine_next() {
    const auto& pr = reduces_[next_reduce_++];
    comm::detail::combine(op_, data_.data() + pr.dst, reinterpret_cast<const T*>(scratch_.get()) + pr.src,
                          pr.count);
    ++progress_count_;
  }

  std::shared_ptr<comm_state> c_;  // null once complete (a parked state holds no handle)
  comm_state* outer_ = nullptr;
  span<T> data_{};
  std::shared_ptr<const schedule> s_;
  reduce_op op_ = reduce_op::sum;
  int tag_ = 0;
  std::size_t seg_ = 1;
  bool doubling_ = false;
  std::unique_ptr<std::byte[]> scratch_;  // the receive buffer, kept across reuses
  std::size_t scratch_bytes_ = 0;
  MPI_Request inline_reqs_[inline_reqs];
  pending_reduce inline_reduces_[inline_reqs];
  std::vector<MPI_Request> heap_reqs_;
  std::vector<pending_reduce> heap_reduces_;
  MPI_Request* reqs_ = nullptr;
  pending_reduce* reduces_ = nullptr;
  std::size_t nreqs_ = 0, first_send_ = 0, nreduces_ = 0, next_reduce_ = 0;
  std::size_t step_ = 0;
  bool posted_ = false;
  bool reduce_early_ = true;
  unsigned polls_ = 0;
  bool complete_ = false;
  std::exception_ptr pending_{};  // an error met in idle(), thrown by the next progress()
  unsigned long progress_count_ = 0, seen_count_ = 0;  // steps and segments done; seen by idle()
  real_clock::time_point quiet_since_ = real_clock::now();
  int shape_kind_ = -1;
  bool shape_posted_ = false;
  std::int64_t shape_[8] = {};
  MPI_Request shape_req_ = MPI_REQUEST_NULL;
};

}  // namespace detail

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

/// A rank's handle on an MPI communicator. Cheap to copy; copies share the duplicates.
class communicator {
 public:
  communicator() = default;

  /// Collective over `parent`: duplicates it (twice) for heterograd's use.
  explicit communicator(MPI_Comm parent, const split_options& o = {}) {
    (void)o;
    int init = 0;
    MPI_Initialized(&init);
    require(init != 0, "mpi::communicator", "MPI not initialised", "call MPI_Init_thread first");
    auto s = std::make_shared<detail::comm_state>();
    detail::check(MPI_Comm_dup(parent, &s->comm), "MPI_Comm_dup");
    detail::check(MPI_Comm_dup(parent, &s->coll), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(s->coll, MPI_ERRORS_RETURN);
    MPI_Comm_rank(s->comm, &s->rank);
    MPI_Comm_size(s->comm, &s->size);
    MPI_Comm local;
    int local_size = 1;
    if (MPI_Comm_split_type(s->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
      MPI_Comm_size(local, &local_size);
      MPI_Comm_free(&local);
    }
    const bool crowded = detail::oversubscribed(local_size);
    // A node with more ranks than cores needs waits that give the core away between polls,
    // unless MPI already does inside every poll (OpenMPI under --oversubscribe): yielding
    // twice per poll cost 10-20% at 4 ranks on 2 cores here (docs/performance.md).
    s->mpi_yields = detail::library_yields_when_idle();
    s->polite = crowded && !s->mpi_yields;
    // The allreduce algorithm depends on it, and every rank must pick the same one: the
    // choice uses whether any node of the group is oversubscribed.
    int any = crowded ? 1 : 0;
    detail::check(MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, s->comm), "MPI_Allreduce");
    s->group_crowded = any != 0;
    // MPI progresses only inside MPI calls, so waits keep polling; past a short spin they
    // yield between polls (a loaded or oversubscribed node then still runs the peer).
    s->policy = s->polite ? comm::detail::wait_policy{8, 2} : comm::detail::wait_policy{256, 0};
    detail::check(MPI_Irecv(s->abort_msg, sizeof(s->abort_msg) - 1, MPI_CHAR, MPI_ANY_SOURCE,
                            detail::comm_state::abort_tag, s->coll, &s->abort_req),
                  "MPI_Irecv");
    s->inner = std::make_shared<detail::comm_state>();
    s->inner->comm = s->coll;
    s->inner->owns = false;
    s->inner->outer = s.get();
    s->inner->rank = s->rank;
    s->inner->size = s->size;
    s->inner->polite = s->polite;
    s->inner->mpi_yields = s->mpi_yields;
    s->inner->group_crowded = s->group_crowded;
    s->inner->policy = s->policy;
    s_ = std::move(s);
  }

  bool valid() const { return s_ != nullptr; }
  int rank() const { return s_ ? s_->rank : 0; }
  int size() const { return s_ ? s_->size : 0; }
  /// The duplicate carrying this handle's user traffic.
  MPI_Comm native() const { return s_ ? s_->comm : MPI_COMM_NULL; }
  /// The thread level MPI granted this process.
  thread_level threads() const { return query_thread_level(); }
  /// True once an operation failed in a way that leaves the communicator unusable.
  bool failed() const { return s_ && s_->is_failed(); }

  /// Aborts the group without ending the job: tells every peer (their pending and later
  /// operations fail with "aborted by rank r: why") and marks this handle failed.
  void abort(std::string_view why) const {
    check_valid();
    s_->send_abort_notices(why);
    std::lock_guard<std::mutex> l(s_->m);
    if (!s_->failed.load()) {
      s_->failure = "aborted by rank " + std::to_string(rank()) + ": " + std::string(why.substr(0, 200));
      s_->abort_rank = rank();
    }
    s_->failed.store(true);
  }
  /// Ends every process of the job (MPI_Abort).
  [[noreturn]] void abort_job(int code = 1) const {
    MPI_Abort(s_ ? s_->comm : MPI_COMM_WORLD, code);
    std::abort();
  }
  /// Used by schedules run over this handle: a collective that timed out leaves the peers
  /// waiting, so they are told.
  void abort_after_timeout(const std::string& why) const { s_->fail_and_tell_peers(why); }

  template <element T>
  request allreduce(span<T> data, const allreduce_options& o = {}) const {
    comm::detail::validate(o);
    require(!o.weight || std::is_floating_point_v<T>, "allreduce_options.weight",
            o.weight.value_or(0.0), "weights need a floating-point element type");
    check_valid();
    if (s_->is_failed_cheap()) return request::failed(std::make_exception_ptr(s_->error()));
    const std::size_t bytes = data.size() * sizeof(T);
    if (blocking_requested(o)) return blocking_allreduce(data, o);
    const algorithm a = choose(o.algo, bytes);
    if (a != algorithm::native && !o.weight) {
      // The deadline-honouring default: a schedule straight over MPI_Isend/MPI_Irecv.
      const bool doubling = o.algo == algorithm::automatic && use_doubling(bytes);
      // The internal state carries the traffic (an internal() handle is its own).
      detail::comm_state* home = s_->inner ? s_->inner.get() : s_.get();
      auto& spare = home->spare[static_cast<int>(dtype_of_v<T>)];
      std::shared_ptr<detail::p2p_state<T>> st;
      if (detail::p2p_state<T>::reusable(spare)) {
        st = std::static_pointer_cast<detail::p2p_state<T>>(spare);
      } else {
        st = std::make_shared<detail::p2p_state<T>>();
        spare = st;
      }
      st->arm(std::shared_ptr<detail::comm_state>(s_, home), s_.get(), data,
              cached_schedule(doubling ? -1 : static_cast<int>(a), data.size(), o.group_size), o.op,
              s_->sched_tag, (o.segment_bytes ? o.segment_bytes : tuning.segment_bytes) / sizeof(T), doubling);
      s_->sched_tag = (s_->sched_tag + 2) % 30000;
      if (note_shape(1, data.size(), dtype_of_v<T>, static_cast<int>(o.op) * 2))
        st->check_shape_first(1, data.size(), dtype_of_v<T>, static_cast<int>(o.op) * 2);
      // No pause-spin phase before idle(): idle() polls MPI itself.
      st->set_deadline(comm::detail::time_source{}, o.timeout, comm::detail::wait_policy{0, 0});
      st->start();  // posts the first step now
      return request(std::move(st));
    }
    auto st = make_state("allreduce", data.size(), -1, true, o.timeout);
    add_shape_check(*st, 1, data.size(), dtype_of_v<T>, static_cast<int>(o.op) * 2 + (o.weight ? 1 : 0));
    if (a != algorithm::native) {
      // A schedule over the internal communicator's point-to-point messages.
      schedule_options so;
      so.op = o.op;
      so.weight = o.weight;
      so.timeout = o.timeout;
      so.segment_bytes = o.segment_bytes ? o.segment_bytes : tuning.segment_bytes;
      so.tag = s_->sched_tag;
      s_->sched_tag = (s_->sched_tag + 2) % 30000;
      schedule sch = make_allreduce_schedule(a, rank(), size(), data.size(), sizeof(T), o.group_size);
      if (st->stages_.empty()) {
        return comm::detail::post_schedule(internal(), data, std::move(sch), so, comm::detail::time_source{}, s_->policy);
      }
      // Shape check first, then the schedule (run to completion inside the request).
      auto inner = std::make_shared<request>();
      communicator in = internal();
      auto policy = s_->policy;
      st->stages_.push_back([inner, in, data, sch = std::move(sch), so, policy](detail::op_state&) mutable {
        *inner = comm::detail::post_schedule(in, data, std::move(sch), so, comm::detail::time_source{}, policy);
      });
      return chain(std::move(st), inner);
    }
    const double w = o.weight.value_or(1.0);
    auto wsum = std::make_shared<double>(w);
    auto c = s_;
    st->stages_.push_back([c, data, o, w, wsum](detail::op_state& s) {
      if (o.weight) detail_scale(data, w);
      s.reqs_.push_back(MPI_REQUEST_NULL);
      detail::check(MPI_Iallreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()),
                                   detail::datatype<T>(), detail::mpi_op(o.op), c->comm, &s.reqs_.back()),
                    "MPI_Iallreduce");
      if (o.weight && o.op == reduce_op::avg) {
        s.reqs_.push_back(MPI_REQUEST_NULL);
        detail::check(MPI_Iallreduce(MPI_IN_PLACE, wsum.get(), 1, MPI_DOUBLE, MPI_SUM, c->comm,
                                     &s.reqs_.back()),
                      "MPI_Iallreduce");
      }
    });
    if (o.op == reduce_op::avg) {
      const int n = size();
      const bool weighted = o.weight.has_value();
      st->done_ = [data, wsum, n, weighted] {
        const double d = comm::detail::average_divisor(weighted, *wsum, n);
        if (weighted && !(d > 0.0))
          throw comm_error("heterograd: comm: weighted average with a zero sum of weights");
        comm::detail::divide(data.data(), d, data.size());
      };
    }
    return start(std::move(st));
  }

  template <class U, element T>
    requires std::same_as<std::remove_const_t<U>, T>
  request reduce_scatter(span<U, host_space> in, span<T> out, const reduce_scatter_options& o = {}) const {
    comm::detail::validate_timeout("reduce_scatter_options.timeout", o.timeout);
    check_valid();
    require_same_size("reduce_scatter.in", in.size(), "size() * out.size()",
                      out.size() * static_cast<std::size_t>(size()));
    if (s_->is_failed_cheap()) return request::failed(std::make_exception_ptr(s_->error()));
    auto st = make_state("reduce_scatter", in.size(), -1, true, o.timeout);
    add_shape_check(*st, 2, in.size(), dtype_of_v<T>, static_cast<int>(o.op));
    auto c = s_;
    st->stages_.push_back([c, in, out, o](detail::op_state& s) {
      s.reqs_.push_back(MPI_REQUEST_NULL);
      detail::check(MPI_Ireduce_scatter_block(in.data(), out.data(), static_cast<int>(out.size()),
                                              detail::datatype<T>(), detail::mpi_op(o.op), c->comm,
                                              &s.reqs_.back()),
                    "MPI_Ireduce_scatter_block");
    });
    if (o.op == reduce_op::avg) {
      const int n = size();
      st->done_ = [out, n] { comm::detail::divide(out.data(), n, out.size()); };
    }
    return start(std::move(st));
  }

  template <class U, element T>
    requires std::same_as<std::remove_const_t<U>, T>
  request allgather(span<U, host_space> in, span<T> out, const allgather_options& o = {}) const {
    comm::detail::validate_timeout("allgather_options.timeout", o.timeout);
    check_valid();
    require_same_size("allgather.out", out.size(), "size() * in.size()",
                      in.size() * static_cast<std::size_t>(size()));
    if (s_->is_failed_cheap()) return request::failed(std::make_exception_ptr(s_->error()));
    auto st = make_state("allgather", in.size(), -1, true, o.timeout);
    add_shape_check(*st, 3, in.size(), dtype_of_v<T>, 0);
    auto c = s_;
    st->stages_.push_back([c, in, out](detail::op_state& s) {
      s.reqs_.push_back(MPI_REQUEST_NULL);
      detail::check(MPI_Iallgather(in.data(), static_cast<int>(in.size()), detail::datatype<T>(),
                                   out.data(), static_cast<int>(in.size()), detail::datatype<T>(),
                                   c->comm, &s.reqs_.back()),
                    "MPI_Iallgather");
    });
    return start(std::move(st));
  }

  template <element T>
  request broadcast(span<T> data, int root, const broadcast_options& o = {}) const {
    comm::detail::validate_timeout("broadcast_options.timeout", o.timeout);
    check_valid();
    require_in_range_co("broadcast.root", root, 0, size());
    if (s_->is_failed_cheap()) return request::failed(std::make_exception_ptr(s_->error()));
    auto st = make_state("broadcast", data.size(), root, true, o.timeout);
    add_shape_check(*st, 4, data.size(), dtype_of_v<T>, root);
    auto c = s_;
    st->stages_.push_back([c, data, root](detail::op_state& s) {
      s.reqs_.push_back(MPI_REQUEST_NULL);
      detail::check(MPI_Ibcast(data.data(), static_cast<int>(data.size()), detail::datatype<T>(),
                               root, c->comm, &s.reqs_.back()),
                    "MPI_Ibcast");
    });
    return start(std::move(st));
  }

  template <class U, element T>
    requires std::same_as<std::remove_const_t<U>, T>
  request gather(span<U, host_space> in, span<T> out, int root, const gather_options& o = {}) const {
    comm::detail::validate_timeout("gather_options.timeout", o.timeout);
    check_valid();
    require_in_range_co("gather.root", root, 0, size());
    if (rank() == root)
      require_same_size("gather.out", out.size(), "size() * in.size()",
                        in.size() * static_cast<std::size_t>(size()));
    if (s_->is_failed_cheap()) return request::failed(std::make_exception_ptr(s_->error()));
    auto st = make_state("gather", in.size(), root, true, o.timeout);
    add_shape_check(*st, 5, in.size(), dtype_of_v<T>, root);
    auto c = s_;
    st->stages_.push_back([c, in, out, root](detail::op_state& s) {
      s.reqs_.push_back(MPI_REQUEST_NULL);
      detail::check(MPI_Igather(in.data(), static_cast<int>(in.size()), detail::datatype<T>(),
                                out.data(), static_cast<int>(in.size()), detail::datatype<T>(),
                                root, c->comm, &s.reqs_.back()),
                    "MPI_Igather");
    });
    return start(std::move(st));
  }

  request barrier(const barrier_options& o = {}) const {
    comm::detail::validate_timeout("barrier_options.timeout", o.timeout);
    check_valid();
    if (s_->is_failed_cheap()) return request::failed(std::make_exception_ptr(s_->error()));
    auto st = make_state("barrier", 0, -1, true, o.timeout);
    auto c = s_;
    st->stages_.push_back([c](detail::op_state& s) {
      s.reqs_.push_back(MPI_REQUEST_NULL);
      detail::check(MPI_Ibarrier(c->comm, &s.reqs_.back()), "MPI_Ibarrier");
    });
    return start(std::move(st));
  }

  template <class U>
    requires element<std::remove_const_t<U>>
  request send(span<U, host_space> data, int dest, int tag, const send_options& o = {}) const {
    using T = std::remove_const_t<U>;
    comm::detail::validate_timeout("send_options.timeout", o.timeout);
    check_valid();
    require_in_range_co("send.dest", dest, 0, size());
    require(tag >= 0 && tag <= 32767, "send.tag", tag, "must be in [0, 32767]");
    if (s_->is_failed_cheap()) return request::failed(std::make_exception_ptr(s_->error()));
    auto st = make_state("send", data.size(), dest, false, o.timeout);
    st->reqs_.push_back(MPI_REQUEST_NULL);
    st->stats_.resize(1);
    detail::check(MPI_Isend(data.data(), static_cast<int>(data.size()), detail::datatype<T>(), dest,
                            tag, s_->comm, &st->reqs_.back()),
                  "MPI_Isend");
    return request(std::move(st));
  }

  template <element T>
  request recv(span<T> data, int source, int tag, const recv_options& o = {}) const {
    comm::detail::validate_timeout("recv_options.timeout", o.timeout);
    check_valid();
    require(source == any_source || (source >= 0 && source < size()), "recv.source", source,
            "must be a rank of the communicator or any_source");
    require(tag == any_tag || (tag >= 0 && tag <= 32767), "recv.tag", tag,
            "must be in [0, 32767] or any_tag");
    if (s_->is_failed_cheap()) return request::failed(std::make_exception_ptr(s_->error()));
    auto st = make_state("receive", data.size(), source, false, o.timeout);
    st->is_recv_ = true;
    st->reqs_.push_back(MPI_REQUEST_NULL);
    st->stats_.resize(1);
    detail::check(MPI_Irecv(data.data(), static_cast<int>(data.size()), detail::datatype<T>(),
                            source == any_source ? MPI_ANY_SOURCE : source,
                            tag == any_tag ? MPI_ANY_TAG : tag, s_->comm, &st->reqs_.back()),
                  "MPI_Irecv");
    return request(std::move(st));
  }

  /// Collective: MPI_Comm_split (blocking). A negative color gives an invalid communicator.
  communicator split(int color, int key, const split_options& o = {}) const {
    check_valid();
    if (s_->is_failed()) throw s_->error();
    MPI_Comm sub = MPI_COMM_NULL;
    detail::check(MPI_Comm_split(s_->comm, color < 0 ? MPI_UNDEFINED : color, key, &sub),
                  "MPI_Comm_split");
    if (sub == MPI_COMM_NULL) return {};
    communicator c(sub, o);
    MPI_Comm_free(&sub);
    return c;
  }

  /// The same group on the internal communicator (schedules' point-to-point traffic).
  communicator internal() const {
    communicator c;
    c.s_ = std::shared_ptr<detail::comm_state>(s_, s_->inner.get());  // keeps the owner alive
    return c;
  }

  /// The allreduce algorithm used for `bytes` per rank (automatic: a schedule over
  /// point-to-point messages; recursive doubling, when use_doubling(bytes), reports
  /// recursive_halving_doubling).
  algorithm choose(algorithm requested, std::size_t bytes) const {
    if (requested != algorithm::automatic) return requested;
    if (size() <= 1) return algorithm::native;
    if (use_doubling(bytes)) return algorithm::recursive_halving_doubling;
    if (oversubscribed()) {
      if (bytes <= tuning.oversubscribed_native_max_bytes) return algorithm::native;
      if (bytes <= tuning.oversubscribed_tree_max_bytes) return algorithm::tree;
    } else if (bytes <= tuning.native_max_bytes) {
      return algorithm::native;
    }
    if (size() == 2 || bytes <= tuning.rhd_max_bytes) return algorithm::recursive_halving_doubling;
    return algorithm::ring;
  }
  /// Whether the automatic allreduce of `bytes` per rank runs recursive doubling.
  bool use_doubling(std::size_t bytes) const {
    const int n = size();
    if (n <= 1 || (n & (n - 1)) != 0) return false;
    if (oversubscribed()) return bytes <= tuning.oversubscribed_doubling_max_bytes;
    return bytes <= tuning.doubling_max_bytes && bytes > tuning.native_max_bytes;
  }
  /// Whether this rank's waits yield the core between polls: its node runs more ranks than it
  /// has cores and MPI does not yield inside its own polls (library_yields_when_idle()).
  bool yields_between_polls() const { return s_ && s_->polite; }
  /// Whether some node of the group runs more of its ranks than it has cores (the same on
  /// every rank, so that every rank picks the same algorithm).
  bool oversubscribed() const { return s_ && s_->group_crowded; }
  /// Whether options ask for the blocking MPI_Allreduce: an infinite timeout
  /// (comm::no_wait_limit), unweighted, automatic or native algorithm. That mode cannot honour
  /// a deadline: a rank that never arrives blocks the others for good.
  static bool blocking_requested(const allreduce_options& o) {
    return (o.timeout == no_wait_limit || std::isinf(o.timeout.count())) && !o.weight &&
           (o.algo == algorithm::automatic || o.algo == algorithm::native);
  }

  mpi_allreduce_tuning tuning{};

 private:
  void check_valid() const { require(valid(), "communicator", "empty", "must be a valid communicator"); }

  template <class T>
  static void detail_scale(span<T> data, double w) {
    comm::detail::scaled_copy(data.data(), data.data(), w, data.size());
  }

  std::shared_ptr<detail::op_state> make_state(const char* what, std::size_t count, int peer,
                                               bool collective, seconds timeout) const {
    auto st = std::make_shared<detail::op_state>(s_, what, count, peer, collective);
    st->set_deadline(comm::detail::time_source{}, timeout, s_->policy);
    return st;
  }

  /// Records (kind, count, dtype, extra) as the last shape of its collective; true when it is
  /// new (or always, in debug builds), i.e. when the call must check it across ranks.
  bool note_shape(int kind, std::size_t count, dtype dt, int extra) const {
    auto shape = std::make_tuple(count, static_cast<int>(dt), extra, 0);
#if defined(NDEBUG)
    auto it = s_->shapes.find(kind);
    if (it != s_->shapes.end() && it->second == shape) return false;
#endif
    s_->shapes[kind] = shape;
    return true;
  }

  /// The schedule of (algo, count) on this group (algo -1: recursive doubling), cached.
  const std::shared_ptr<const schedule>& cached_schedule(int algo, std::size_t count, int group_size) const {
    auto& cache = (s_->inner ? s_->inner : s_)->schedules;
    if (!cache.empty() && cache[0].algo == algo && cache[0].count == count && (group_size == 0 || algo < 0))
      return cache[0].s;
    for (std::size_t i = 1; i < cache.size(); ++i) {
      if (cache[i].algo == algo && cache[i].count == count && (group_size == 0 || algo < 0)) {
        std::swap(cache[i], cache[0]);  // most recent first
        return cache[0].s;
      }
    }
    auto sch = std::make_shared<const schedule>(
        algo < 0 ? detail::recursive_doubling_allreduce(rank(), size(), count)
                 : make_allreduce_schedule(static_cast<algorithm>(algo), rank(), size(), count,
                                           sizeof(float), group_size));
    if (group_size != 0 && algo >= 0) {  // a non-default grouping: not cached
      auto& home = s_->inner ? s_->inner : s_;
      home->uncached = std::move(sch);
      return home->uncached;
    }
    if (cache.size() >= 8) cache.pop_back();
    cache.insert(cache.begin(), {algo, count, std::move(sch)});
    return cache[0].s;
  }

  /// The blocking mode (blocking_requested): MPI_Allreduce, completed on return.
  template <class T>
  request blocking_allreduce(span<T> data, const allreduce_options& o) const {
    if (note_shape(1, data.size(), dtype_of_v<T>, static_cast<int>(o.op) * 2)) {
      std::int64_t b[8] = {1, -1, static_cast<std::int64_t>(data.size()), -static_cast<std::int64_t>(data.size()),
                           static_cast<int>(dtype_of_v<T>), -static_cast<int>(dtype_of_v<T>),
                           static_cast<int>(o.op) * 2, -static_cast<int>(o.op) * 2};
      const int rc = MPI_Allreduce(MPI_IN_PLACE, b, 8, MPI_INT64_T, MPI_MAX, s_->coll);
      if (rc != MPI_SUCCESS) {
        s_->fail("blocking allreduce (shape check) failed");
        return request::failed(std::make_exception_ptr(comm_error(detail::error_string(rc))));
      }
      const std::string why = detail::shape_mismatch(b, rank());
      if (!why.empty()) {
        s_->shapes.erase(1);
        return request::failed(std::make_exception_ptr(mismatch_error(why)));
      }
    }
    const int rc = MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), detail::datatype<T>(),
                                 detail::mpi_op(o.op), s_->comm);
    if (rc != MPI_SUCCESS) {
      s_->fail("blocking allreduce failed");
      return request::failed(std::make_exception_ptr(
          comm_error("heterograd: comm: MPI_Allreduce: " + detail::error_string(rc))));
    }
    if (o.op == reduce_op::avg) comm::detail::divide(data.data(), size(), data.size());
    return request::completed();
  }

  /// Whether this call needs the cross-rank shape check (a new shape, or a debug build).
  bool shape_changes(int kind, std::size_t count, dtype dt, int extra) const {
#if defined(NDEBUG)
    auto it = s_->shapes.find(kind);
    return it == s_->shapes.end() || it->second != std::make_tuple(count, static_cast<int>(dt), extra, 0);
#else
    (void)kind, (void)count, (void)dt, (void)extra;
    return true;
#endif
  }

  /// Compares (kind, count, dtype, extra) across ranks when this rank sees a new shape (every
  /// time in debug builds). Uses MPI_MAX over (x, -x) pairs: max(-x) = -min(x).
  void add_shape_check(detail::op_state& st, int kind, std::size_t count, dtype dt, int extra) const {
    auto shape = std::make_tuple(count, static_cast<int>(dt), extra, 0);
    bool fresh = true;
#if defined(NDEBUG)
    auto it = s_->shapes.find(kind);
    fresh = it == s_->shapes.end() || it->second != shape;
#endif
    if (!fresh) return;
    s_->shapes[kind] = shape;
    auto buf = std::make_shared<std::vector<std::int64_t>>(std::vector<std::int64_t>{
        kind, -kind, static_cast<std::int64_t>(count), -static_cast<std::int64_t>(count),
        static_cast<int>(dt), -static_cast<int>(dt), extra, -extra});
    auto c = s_;
    st.stages_.push_back([c, buf](detail::op_state& s) {
      s.reqs_.push_back(MPI_REQUEST_NULL);
      detail::check(MPI_Iallreduce(MPI_IN_PLACE, buf->data(), 8, MPI_INT64_T, MPI_MAX, c->coll,
                                   &s.reqs_.back()),
                    "MPI_Iallreduce (shape check)");
    });
    st.stages_.push_back([c, buf, kind](detail::op_state&) {
      const auto& b = *buf;
      for (int i = 0; i < 8; i += 2) {
        if (b[static_cast<std::size_t>(i)] != -b[static_cast<std::size_t>(i + 1)]) {
          // Forget the shape so that the next call checks again.
          c->shapes.erase(kind);
          static const char* field[] = {"collective", "element count", "element type", "operator or root"};
          throw mismatch_error("heterograd: comm: mismatched collective on rank " +
                               std::to_string(c->rank) + ": ranks passed different " + field[i / 2] +
                               " (from " + std::to_string(-b[static_cast<std::size_t>(i + 1)]) +
                               " to " + std::to_string(b[static_cast<std::size_t>(i)]) + ")");
        }
      }
    });
  }

  request start(std::shared_ptr<detail::op_state> st) const {
    st->test();  // posts the first MPI call now; an error is stored in the request
    return request(std::move(st));
  }

  /// A request whose final stage is another request (a schedule after a shape check).
  request chain(std::shared_ptr<detail::op_state> st, std::shared_ptr<request> inner) const {
    struct chained final : comm::detail::request_state {
      std::shared_ptr<detail::op_state> first;
      std::shared_ptr<request> second;
      bool first_done = false;
      std::string describe() const override { return "allreduce"; }
      bool progress() override {
        if (!first_done) {
          if (!first->test()) return false;
          if (first->error()) std::rethrow_exception(first->error());
          first_done = true;
        }
        if (!second->test()) return false;
        if (second->error()) std::rethrow_exception(second->error());
        return true;
      }
      void idle(comm::detail::real_clock::time_point until) override {
        if (!first_done) return first->block(until);
        if (auto* s = comm::detail::request_access::state(*second)) return s->block(until);
      }
    };
    auto c = std::make_shared<chained>();
    c->first = std::move(st);
    c->second = std::move(inner);
    c->set_deadline(comm::detail::time_source{}, seconds{c->first->deadline().count() -
                                           comm::detail::time_source{}.now().count()},
                    s_->policy);
    return request(std::move(c));
  }

  std::shared_ptr<detail::comm_state> s_{};
};

static_assert(transport<communicator>);

/// Runs fn(); if it throws, aborts the group first (peers' operations fail with "aborted by
/// rank r" instead of waiting for this rank), then rethrows. The MPI counterpart of spawn.
template <class Fn>
void run_or_abort(const communicator& c, Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    c.abort(e.what());
    throw;
  } catch (...) {
    c.abort("unknown exception");
    throw;
  }
}

}  // namespace heterograd::comm::mpi
