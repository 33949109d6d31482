#pragma once
// The progress thread and round protocol of the mpi partial allreduce.

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "heterograd/comm/mpi/detail/error.hpp"
#include "heterograd/comm/mpi/detail/matched_receive.hpp"
#include "heterograd/comm/partial.hpp"
#include "heterograd/comm/reduce.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/types.hpp"

namespace heterograd::comm::mpi {

namespace detail {

template <class T>
class partial_engine {
 public:
  partial_engine(MPI_Comm parent, std::size_t count, partial_policy p, partial_options o,
                 comm::detail::time_source clock)
      : count_(count), policy_(p), opt_(o), clock_(std::move(clock)) {
    check(MPI_Comm_dup(parent, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &n_);
    const auto B = static_cast<std::size_t>(o.staleness_bound);
    pending_.assign(count, T{});
    work_.assign(count, T{});
    results_.assign(B, std::vector<T>(count));
    reports_.resize(B);
    meta_.resize(2 * static_cast<std::size_t>(n_));
    thread_ = std::thread([this] { run(); });
  }
  ~partial_engine() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && !abandoned_) MPI_Comm_free(&comm_);
  }
  partial_engine(const partial_engine&) = delete;
  partial_engine& operator=(const partial_engine&) = delete;

  int rank() const { return rank_; }
  int size() const { return n_; }
  std::size_t count() const { return count_; }
  const partial_options& options() const { return opt_; }

  // --- user side (under m_) ---------------------------------------------------------------
  std::mutex m_;
  std::condition_variable cv_;
  std::int64_t user_round_ = -1;  // the round the user waits in (fresh candidate), or -1
  bool user_flush_ = false;
  T* user_buf_ = nullptr;
  std::int64_t consumed_ = -1;   // last round whose result the user has
  std::int64_t snapshot_ = 0;    // rounds snapshotted by the progress thread
  std::int64_t fired_ = 0;       // rounds whose result is stored
  std::vector<T> pending_;
  std::int64_t pending_origin_ = -1;
  std::vector<std::vector<T>> results_;
  std::vector<round_report> reports_;
  round_report delivered_{};
  std::exception_ptr error_{};

  /// Registers the user's arrival for `round`; true if it completed at once (late).
  bool arrive(std::int64_t round, T* buf, bool flush, round_report& out) {
    std::lock_guard<std::mutex> l(m_);
    if (error_) std::rethrow_exception(error_);
    if (round < snapshot_) {
      // Late: the round was snapshotted without this rank's fresh part. Keep it.
      comm::detail::combine(reduce_op::sum, pending_.data(), buf, count_);
      if (pending_origin_ < 0) pending_origin_ = round;
      user_round_ = round;
      user_buf_ = buf;
      late_ = true;
      return collect_late(round, out);
    }
    user_round_ = round;
    user_buf_ = buf;
    user_flush_ = flush;
    late_ = false;
    return false;
  }

  /// Under m_: whether the user's round completed (copies result and report).
  bool poll(std::int64_t round, round_report& out) {
    if (error_) std::rethrow_exception(error_);
    if (late_) return collect_late(round, out);
    if (consumed_ >= round) {
      out = delivered_;
      return true;
    }
    return false;
  }

  void fail_user(std::exception_ptr e) {
    std::lock_guard<std::mutex> l(m_);
    if (!error_) error_ = e;
  }

 private:
  bool collect_late(std::int64_t round, round_report& out) {
    if (fired_ <= round) return false;  // snapshotted, result not in yet
    const auto slot = static_cast<std::size_t>(round % opt_.staleness_bound);
    std::memcpy(user_buf_, results_[slot].data(), count_ * sizeof(T));
    out = reports_[slot];
    consumed_ = round;
    user_round_ = -1;
    user_buf_ = nullptr;
    late_ = false;
    cv_.notify_all();
    return true;
  }

  enum tags { tag_arrive = 1, tag_fire = 2 };

  // --- progress thread ------------------------------------------------------------------------
  void run() {
    try {
      loop();
    } catch (...) {
      fail_user(std::current_exception());
      abandoned_ = true;  // requests may still be in flight: never free the communicator
      cv_.notify_all();
    }
  }

  bool stopping() const { return stop_.load(std::memory_order_relaxed); }

  void pause(long& idle) {
    ++idle;
    if (idle < 200) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(idle < 2000 ? 20 : 200));
    }
  }

  void loop() {
    // Coordinator: ARRIVE messages. Others: FIRE messages. Matched receives of exactly one
    // int64 (matched_receive.hpp): a peer's message of another size fails the engine.
    std::int64_t in_msg = 0;
    const int in_tag = rank_ == 0 ? tag_arrive : tag_fire;
    std::map<std::int64_t, std::set<int>> arrivals;  // coordinator
    std::map<std::int64_t, seconds> first;           // coordinator
    std::set<std::int64_t> flush_rounds;             // coordinator
    std::int64_t fired_by_coord = 0;                 // coordinator: rounds fired
    std::int64_t fire_seen = 0;                      // rounds this rank was told to fire
    std::int64_t arrive_sent = -1;
    std::vector<MPI_Request> sends;
    std::vector<std::int64_t> send_bufs;
    std::int64_t t = 0;  // the round this thread works on
    long idle = 0;

    while (!stopping()) {
      bool busy = false;
      // 1. Incoming control messages.
      MPI_Status st;
      if (take_if_there(comm_, MPI_ANY_SOURCE, in_tag, &in_msg, 1, st)) {
        if (rank_ == 0) {
          const std::int64_t r = in_msg >> 1;
          if (r >= fired_by_coord) {
            if (arrivals[r].empty()) first[r] = clock_.now();
            arrivals[r].insert(st.MPI_SOURCE);
            if (in_msg & 1) flush_rounds.insert(r);
          }
        } else {
          fire_seen = std::max(fire_seen, in_msg + 1);
        }
        busy = true;
      }
      // 2. The user's arrival for round t.
      std::int64_t ur = -1;
      bool uflush = false;
      {
        std::lock_guard<std::mutex> l(m_);
        if (user_round_ == t && !late_) {
          ur = t;
          uflush = user_flush_;
        }
      }
      if (ur == t && arrive_sent < t) {
        arrive_sent = t;
        if (rank_ == 0) {
          if (arrivals[t].empty()) first[t] = clock_.now();
          arrivals[t].insert(0);
          if (uflush) flush_rounds.insert(t);
        } else {
          send_bufs.push_back(t * 2 + (uflush ? 1 : 0));
          sends.push_back(MPI_REQUEST_NULL);
          check(MPI_Isend(&send_bufs.back(), 1, MPI_INT64_T, 0, tag_arrive, comm_, &sends.back()),
                "MPI_Isend");
          // Complete it now: eager-sized, and send_bufs may reallocate.
          MPI_Status s2;
          check(MPI_Wait(&sends.back(), &s2), "MPI_Wait");
          sends.clear();
          send_bufs.clear();
        }
        busy = true;
      }
      // 3. Coordinator: fire the next round when its policy says so.
      if (rank_ == 0) {
        const std::int64_t r = fired_by_coord;
        auto& a = arrivals[r];
        std::vector<bool> arrived(static_cast<std::size_t>(n_), false);
        for (int j : a) arrived[static_cast<std::size_t>(j)] = true;
        const bool all_needed = flush_rounds.count(r) > 0;
        const int na = static_cast<int>(a.size());
        if ((!all_needed || na == n_) &&
            comm::detail::should_fire(policy_, static_cast<std::uint64_t>(r), n_, arrived, na,
                                      first.count(r) ? first[r] : seconds{0}, clock_.now())) {
          for (int j = 1; j < n_; ++j) {
            MPI_Request q;
            std::int64_t msg = r;
            check(MPI_Isend(&msg, 1, MPI_INT64_T, j, tag_fire, comm_, &q), "MPI_Isend");
            MPI_Status s2;
            check(MPI_Wait(&q, &s2), "MPI_Wait");
          }
          arrivals.erase(r);
          first.erase(r);
          flush_rounds.erase(r);
          ++fired_by_coord;
          fire_seen = fired_by_coord;
          busy = true;
        }
      }
      // 4. Round t fired and this rank's user took round t - B: snapshot and reduce.
      bool lag_ok;
      {
        std::lock_guard<std::mutex> l(m_);
        lag_ok = consumed_ >= t - opt_.staleness_bound;
      }
      if (fire_seen > t && lag_ok) {
        reduce_round(t);
        ++t;
        busy = true;
      }
      if (busy) {
        idle = 0;
      } else {
        pause(idle);
      }
    }
  }

  void reduce_round(std::int64_t t) {
    const std::size_t nn = static_cast<std::size_t>(n_);
    std::fill(meta_.begin(), meta_.end(), -1);
    bool fresh = false;
    {
      std::lock_guard<std::mutex> l(m_);
      fresh = user_round_ == t && !late_;
      std::fill(work_.begin(), work_.end(), T{});
      if (fresh) comm::detail::combine(reduce_op::sum, work_.data(), user_buf_, count_);
      if (pending_origin_ >= 0) {
        comm::detail::combine(reduce_op::sum, work_.data(), pending_.data(), count_);
        meta_[nn + static_cast<std::size_t>(rank_)] = static_cast<int>(t - pending_origin_);
        std::fill(pending_.begin(), pending_.end(), T{});
        pending_origin_ = -1;
      }
      meta_[static_cast<std::size_t>(rank_)] = fresh ? 1 : 0;
      snapshot_ = t + 1;
    }
    MPI_Request q[2];
    check(MPI_Iallreduce(MPI_IN_PLACE, work_.data(), static_cast<int>(count_), datatype<T>(),
                         MPI_SUM, comm_, &q[0]),
          "MPI_Iallreduce");
    check(MPI_Iallreduce(MPI_IN_PLACE, meta_.data(), static_cast<int>(meta_.size()), MPI_INT,
                         MPI_MAX, comm_, &q[1]),
          "MPI_Iallreduce");
    long idle = 0;
    for (;;) {
      int flag = 0;
      check(MPI_Testall(2, q, &flag, MPI_STATUSES_IGNORE), "MPI_Testall");
      if (flag) break;
      if (stopping()) {
        abandoned_ = true;
        throw comm_error("heterograd: comm: partial allreduce stopped with a round in flight");
      }
      pause(idle);
    }
    if (opt_.op == reduce_op::avg) comm::detail::divide(work_.data(), n_, count_);
    round_report rep;
    rep.round = static_cast<std::uint64_t>(t);
    rep.staleness.assign(nn, -1);
    if (policy_.what == partial_policy::kind::majority)
      rep.initiator = comm::detail::majority_initiator(policy_.seed, rep.round, n_);
    for (int j = 0; j < n_; ++j) {
      const auto ju = static_cast<std::size_t>(j);
      if (meta_[ju] == 1) rep.fresh.push_back(j);
      if (meta_[nn + ju] >= 0) {
        rep.stale.push_back(j);
        rep.staleness[ju] = meta_[nn + ju];
        rep.max_staleness = std::max(rep.max_staleness, meta_[nn + ju]);
      }
    }
    std::lock_guard<std::mutex> l(m_);
    const auto slot = static_cast<std::size_t>(t % opt_.staleness_bound);
    results_[slot] = work_;
    reports_[slot] = rep;
    fired_ = t + 1;
    if (fresh) {
      std::memcpy(user_buf_, work_.data(), count_ * sizeof(T));
      delivered_ = rep;
      consumed_ = t;
      user_round_ = -1;
      user_buf_ = nullptr;
    }
    cv_.notify_all();
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, n_ = 1;
  std::size_t count_;
  partial_policy policy_;
  partial_options opt_;
  comm::detail::time_source clock_;
  std::vector<T> work_;
  std::vector<int> meta_;
  bool late_ = false;
  std::atomic<bool> stop_{false};
  bool abandoned_ = false;
  std::thread thread_;
};

}  // namespace detail

}  // namespace heterograd::comm::mpi
