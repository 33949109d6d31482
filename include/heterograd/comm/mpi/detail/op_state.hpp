#pragma once
// A posted MPI operation: its MPI requests, in stages, polled against its deadline.

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "heterograd/comm/mpi/detail/comm_state.hpp"
#include "heterograd/comm/mpi/detail/error.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/types.hpp"

namespace heterograd::comm::mpi {

namespace detail {

using comm::detail::real_clock;
using comm::detail::request_state;

/// Polls the matched receives still waiting on `c` (and on its internal or owning state), in
/// posting order.
void poll_gates(comm_state& c);

/// A posted MPI operation: one or more MPI requests, then an optional next stage (a shape
/// check is followed by the operation itself) and a completion step (averaging).
class op_state final : public request_state {
 public:
  using stage_fn = std::function<void(op_state&)>;

  /// `what` names the operation (a literal); `count` and `peer` complete error messages.
  op_state(std::shared_ptr<comm_state> c, const char* what, std::size_t count, int peer, bool collective)
      : c_(std::move(c)), what_(what), count_(count), peer_(peer), collective_(collective) {}
  ~op_state() override {
    ungate();
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

  /// A step polled before the first stage's requests until it returns true (a matched receive:
  /// it posts its request once the message is there and its size is known). Registered with
  /// the communicator, whose every operation polls it (comm_state::gated). `source` and `tag`
  /// (MPI_ANY_SOURCE / MPI_ANY_TAG allowed) are what the gate matches; poll_gates runs the gate
  /// on them, or on the exact (source, tag) of a message it has seen (gates_detail::poll_one).
  void set_gate(std::function<bool(op_state&, int source, int tag)> g, int source, int tag) {
    std::lock_guard<std::mutex> l(c_->gate_m);
    gate_ = std::move(g);
    gate_source_ = source;
    gate_tag_ = tag;
    gated_.store(true, std::memory_order_release);
    c_->gated.push_back(this);
    c_->gated_count.fetch_add(1);
  }
  /// Runs the gate once (under the communicator's gate_m): true when it is done, with its
  /// request posted or its error kept for progress() to throw.
  bool run_gate(int source, int tag) noexcept {
    try {
      if (!gate_(*this, source, tag)) return false;
    } catch (...) {
      gate_error_ = std::current_exception();
    }
    gate_ = nullptr;
    stats_.resize(reqs_.size());
    gated_.store(false, std::memory_order_release);
    return true;
  }

  int gate_source() const { return gate_source_; }
  int gate_tag() const { return gate_tag_; }
  /// Whether this gate takes a message from `source` with `tag` (either may be a wildcard:
  /// then whether some message could match both).
  bool gate_matches(int source, int tag) const {
    const bool s = gate_source_ == source || gate_source_ == MPI_ANY_SOURCE || source == MPI_ANY_SOURCE;
    const bool t = gate_tag_ == tag || gate_tag_ == MPI_ANY_TAG || tag == MPI_ANY_TAG;
    return s && t;
  }

  /// A new MPI request slot of the current stage, for an MPI_I* call to fill in.
  MPI_Request* add_request() {
    reqs_.push_back(MPI_REQUEST_NULL);
    return &reqs_.back();
  }

  void cancel() override {
    if (!is_recv_) return;
    ungate();
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
    poll_gates(*c_);
    if (gated_.load(std::memory_order_acquire)) return false;
    if (gate_error_) std::rethrow_exception(std::exchange(gate_error_, nullptr));
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
  // Withdraws a gate that has not run to its end (a timeout, or the request dropped).
  void ungate() {
    if (!gated_.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> l(c_->gate_m);
    auto& g = c_->gated;
    const auto it = std::find(g.begin(), g.end(), this);
    if (it != g.end()) {
      g.erase(it);
      c_->gated_count.fetch_sub(1);
    }
    gate_ = nullptr;
    gated_.store(false, std::memory_order_release);
  }

  std::function<bool(op_state&, int, int)> gate_;
  int gate_source_ = MPI_ANY_SOURCE, gate_tag_ = MPI_ANY_TAG;
  std::atomic<bool> gated_{false};
  std::exception_ptr gate_error_;
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

namespace gates_detail {
/// Whether gate i of `g` may take a message now, and from which (source, tag): as MPI matches
/// posted receives, a message goes to the earliest posted receive that matches it. Where an
/// earlier gate still waiting could match what gate i matches, gate i peeks (MPI_Iprobe) and
/// runs on that message's exact (source, tag) only when no earlier gate matches it. Without
/// this, a message arriving between two gates' probes went to the later one (a schedule's
/// second segment took the first segment's message: a size_error when their sizes differed,
/// swapped data when they did not).
inline bool gate_target(const comm_state& c, const std::vector<op_state*>& g, std::size_t i, int& source,
                        int& tag) {
  source = g[i]->gate_source();
  tag = g[i]->gate_tag();
  const auto earlier_matches = [&](int s, int t) {
    for (std::size_t j = 0; j < i; ++j)
      if (g[j]->gate_matches(s, t)) return true;
    return false;
  };
  if (!earlier_matches(source, tag)) return true;
  int flag = 0;
  MPI_Status st;
  check(MPI_Iprobe(source, tag, c.comm, &flag, &st), "MPI_Iprobe");
  if (!flag || earlier_matches(st.MPI_SOURCE, st.MPI_TAG)) return false;
  source = st.MPI_SOURCE;
  tag = st.MPI_TAG;
  return true;
}

/// Polls the gates of `c` in posting order (gate_target).
inline void poll_one(comm_state& c) {
  if (c.gated_count.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> l(c.gate_m);
  auto& g = c.gated;
  for (std::size_t i = 0; i < g.size();) {
    int source = MPI_ANY_SOURCE, tag = MPI_ANY_TAG;
    bool ready = false;
    try {
      ready = gate_target(c, g, i, source, tag);
    } catch (...) {
      ready = true;  // MPI failed: the gate's own probe meets the failure and reports it
      source = g[i]->gate_source();
      tag = g[i]->gate_tag();
    }
    if (ready && g[i]->run_gate(source, tag)) {
      g.erase(g.begin() + static_cast<std::ptrdiff_t>(i));
      c.gated_count.fetch_sub(1);
    } else {
      ++i;
    }
  }
}
}  // namespace gates_detail

inline void poll_gates(comm_state& c) {
  gates_detail::poll_one(c);
  if (c.outer) gates_detail::poll_one(*c.outer);
  if (c.inner) gates_detail::poll_one(*c.inner);
}

}  // namespace detail

}  // namespace heterograd::comm::mpi
