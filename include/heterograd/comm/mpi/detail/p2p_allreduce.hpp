#pragma once
// The mpi transport's point-to-point schedule engine: an allreduce schedule run
// straight over MPI_Isend/MPI_Irecv, allocation-free once warm.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "heterograd/comm/mpi/detail/comm_state.hpp"
#include "heterograd/comm/mpi/detail/error.hpp"
#include "heterograd/comm/mpi/detail/shape_check.hpp"
#include "heterograd/comm/reduce.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/schedule.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::comm::mpi {

namespace detail {

using comm::detail::real_clock;
using comm::detail::request_state;

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
    shape_pending_ = false;
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
  void check_shape_first(const call_shape& shape) {
    shape_pending_ = true;
    shape_kind_ = shape.kind;
    shape.pairs(shape_);
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
    if (shape_pending_ && !shape_done()) return poll_failed();
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
    shape_pending_ = false;
    ++progress_count_;
    const std::string why = shape_mismatch(shape_, c_->rank);
    if (!why.empty()) {
      // Forget the shape so that the next call checks again.
      outer_->shapes.forget(shape_kind_);
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
  bool shape_pending_ = false;  // the shape check runs before the schedule
  collective shape_kind_ = collective::allreduce;
  bool shape_posted_ = false;
  std::int64_t shape_[8] = {};
  MPI_Request shape_req_ = MPI_REQUEST_NULL;
};

}  // namespace detail

}  // namespace heterograd::comm::mpi
