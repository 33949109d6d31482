#pragma once
// The state every copy of an mpi communicator handle shares: its two duplicates, its
// failure and the abort notices exchanged with its peers, and its caches.

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "heterograd/comm/detail/frontend.hpp"
#include "heterograd/comm/mpi/detail/matched_receive.hpp"
#include "heterograd/comm/mpi/detail/shape_check.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/schedule.hpp"
#include "heterograd/comm/types.hpp"

namespace heterograd::comm::mpi {

namespace detail {

using comm::detail::wait_policy;

class op_state;

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
  shape_table shapes;
  comm::detail::schedule_tags sched_tags;
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
  // Abort notices from peers: matched any-source receives on coll, tag abort_tag (a notice's
  // text is the peer's: its size is learnt before it is read, matched_receive.hpp).
  static constexpr int abort_tag = 32767;
  static_assert(comm::detail::schedule_tag_end <= abort_tag, "schedules never send an abort notice's tag");
  static constexpr std::size_t notice_limit = 255;  // characters of a notice that are kept
  // Matched receives (matched_receive.hpp) still waiting for their message, in posting order.
  // Every operation on this communicator polls them as it progresses (op_state::progress), as
  // MPI progresses posted receives: two ranks that each wait on a rendezvous send to the other
  // before they wait on their receives would deadlock if a receive were taken only when its
  // own request is polled.
  std::mutex gate_m;
  std::vector<op_state*> gated;
  std::atomic<std::size_t> gated_count{0};
  comm_state* outer = nullptr;       // the internal state's owner: failures propagate there
  std::shared_ptr<comm_state> inner;  // the state of the internal communicator

  ~comm_state() {
    if (!owns) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) return;
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
    if (o->abort_rank >= 0 || o->coll == MPI_COMM_NULL) return false;  // one notice is enough
    int flag = 0;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status st;
    if (MPI_Improbe(MPI_ANY_SOURCE, abort_tag, o->coll, &flag, &msg, &st) != MPI_SUCCESS || !flag)
      return false;
    const std::size_t bytes = message_bytes(st);
    std::string text;
    if (bytes <= drain_limit_bytes) {
      text.resize(bytes);
      MPI_Mrecv(text.data(), static_cast<int>(bytes), MPI_CHAR, &msg, MPI_STATUS_IGNORE);
      text.resize(std::min(bytes, notice_limit));
    } else {
      set_aside(msg, bytes);
      text = "(a notice of " + std::to_string(bytes) + " bytes, not read)";
    }
    std::lock_guard<std::mutex> l(o->m);
    o->failure = "aborted by rank " + std::to_string(st.MPI_SOURCE) + ": " + text;
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

}  // namespace detail

}  // namespace heterograd::comm::mpi
