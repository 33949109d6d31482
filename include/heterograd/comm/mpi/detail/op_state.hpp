#pragma once
// A posted MPI operation: its MPI requests, in stages, polled against its deadline.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "heterograd/comm/mpi/detail/comm_state.hpp"
#include "heterograd/comm/mpi/detail/error.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/types.hpp"

namespace heterograd::comm::mpi {

namespace detail {

using comm::detail::real_clock;
using comm::detail::request_state;

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

  /// A new MPI request slot of the current stage, for an MPI_I* call to fill in.
  MPI_Request* add_request() {
    reqs_.push_back(MPI_REQUEST_NULL);
    return &reqs_.back();
  }

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
    if (c_->polite || c_->mpi_yields) {
      crowded_idle(until);
      return;
    }
    if (idles_ < 20000) {
      if (!c_->mpi_yields) std::this_thread::yield();
    } else {
      // Long waits (a straggler): poll every 20 us instead of burning a core.
      std::this_thread::sleep_until(std::min(until, real_clock::now() + std::chrono::microseconds(20)));
    }
  }

  /// A wait on a node with more ranks than cores. A yielding poll stays runnable, so every
  /// waiting rank still takes its share of a core from the ranks with work: a server with 8
  /// workers waiting for their jobs on 2 cores got a fraction of one and made 36-86% fewer
  /// updates than the same run on threads (docs/experiments.md, Real runs). Past a 50 us
  /// poll, the wait sleeps between polls for an eighth of how long it has waited (20 us to
  /// 1 ms): a message is then seen at most 12.5% (or 20 us) later than by a spinning wait.
  void crowded_idle(real_clock::time_point until) {
    const auto now = real_clock::now();
    if (idles_ == 1) idle_since_ = now;
    const auto waited = now - idle_since_;
    if (waited < std::chrono::microseconds(50)) {
      if (!c_->mpi_yields) std::this_thread::yield();
      return;
    }
    const auto nap = std::clamp<real_clock::duration>(waited / 8, std::chrono::microseconds(20),
                                                      std::chrono::milliseconds(1));
    std::this_thread::sleep_until(std::min(until, now + nap));
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
  real_clock::time_point idle_since_{};
  unsigned polls_ = 0;
};

}  // namespace detail

}  // namespace heterograd::comm::mpi
