#pragma once
// The asynchronous server and its workers over any transport (heterograd/comm): the same
// policy objects the simulator drives (runtime/sim.hpp), with real workers on threads
// (inproc, runtime/async_threads.hpp) or MPI ranks. The protocol, the arrival orders, the
// refusal of a peer's malformed message and the shutdown are described in docs/runtime.md.
//
//   serve<T>(policy, transport, options[, time_model])   on the server rank (default 0)
//   work<T>(transport, dim, compute, options[, time_model])  on every other rank
//   worker_client<T>: pull(params) / push(grads)          for framework authors' own loops;
//                     worker_client(t, dim, o, joining) joins a running elastic run, leave()
//                     leaves it (remote_options::membership; docs/elastic.md)
//                     (pull(memory, params) / push(memory, grads): a device worker's
//                     buffers staged through one host buffer; runtime/staging.hpp)
//   run_remote(policy, transport, compute, options)       one call for every rank
//
// Nothing waits forever: every receive has options.timeout; shutdown waits at most
// options.shutdown_grace for workers still computing.

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <queue>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/comm/concepts.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/clock.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/hash.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/runtime/concepts.hpp"
#include "heterograd/runtime/pacing.hpp"
#include "heterograd/sim/recorder.hpp"
#include "heterograd/sim/worker_time.hpp"


#include "heterograd/runtime/detail/protocol.hpp"
#include "heterograd/runtime/detail/remote_server.hpp"
#include "heterograd/runtime/server_types.hpp"

namespace heterograd::runtime {

/// worker_client's tag for a worker that joins a running run (an absent slot: a restarted
/// worker, or a spare rank that starts late).
struct joining_t {};
inline constexpr joining_t joining{};

/// Runs the server of `policy` on this rank until a stopping rule of `o` holds, then stops
/// every worker. `model` (a worker-time model) is needed for arrival_order::virtual_time.
template <class T, class Policy, class Transport, optional_time_model Model = no_time_model>
  requires server_policy<Policy, T, detail::remote_server<T, Policy, Transport, Model>>
remote_summary serve(Policy& policy, const Transport& transport, const remote_options& o = {},
                     const Model& model = {}) {
  o.validate();
  detail::remote_server<T, Policy, Transport, Model> s(policy, transport, o, model);
  return s.run();
}

/// The worker side for framework authors: pull the model, compute, push the gradient.
///     worker_client<float> c(transport, dim);
///     while (c.pull(params)) { grads = my_backward(params); c.push(grads); }
template <class T, class Transport>
class worker_client {
 public:
  worker_client(const Transport& t, std::size_t dim, const remote_options& o = {})
      : t_(t), o_((o.validate(), o)), tags_(o.tag_base), dim_(dim) {
    require(dim > 0, "dim", dim, "must be > 0");
    require(t.rank() != o.server_rank, "transport.rank", t.rank(), "must not be the server rank");
    server_ = o.server_rank;
    post();
  }
  /// A worker joining a running run (membership.elastic): sends the join, then takes the
  /// welcome: the current model, whose FNV-1a must equal the server's before anything is
  /// computed (a comm_error names both hashes otherwise). Jobs sent to this slot's earlier
  /// worker and never taken are discarded first. A refusal (another model size, a slot that
  /// is a member) is a comm_error naming the server's reason.
  worker_client(const Transport& t, std::size_t dim, const remote_options& o, joining_t)
      : t_(t), o_((o.validate(), o)), tags_(o.tag_base), dim_(dim) {
    require(dim > 0, "dim", dim, "must be > 0");
    require(t.rank() != o.server_rank, "transport.rank", t.rank(), "must not be the server rank");
    server_ = o.server_rank;
    join();
  }

  /// This worker's index (its rank among the workers).
  worker_id worker() const { return static_cast<worker_id>(detail::worker_of_rank(t_.rank(), server_)); }
  std::uint64_t version() const { return h_[1]; }
  std::uint64_t job_index() const { return h_[2]; }
  /// Start time of the current job (virtual or real seconds, as the server counts).
  double start_time() const { return detail::double_of(h_[3]); }
  /// The current job's batch (remote_options::batch, or what the policy's set_batch gave).
  std::size_t batch() const { return static_cast<std::size_t>(h_[4]); }

  /// Waits for the next job and copies the model into `params` (size dim); false when the
  /// server says stop (the goodbye is sent then).
  bool pull(span<T> params) {
    require_same_size("params", params.size(), "dim", dim_);
    if (stop_at_join_) {  // the run was over when this worker joined
      stop_at_join_ = false;
      stopped_ = true;
      goodbye();
      return false;
    }
    require(!stopped_, "worker_client", "pull", "must not be called after a stop or a leave");
    try {
      next_.wait();
    } catch (const comm::size_error& e) {
      throw comm::size_error("heterograd: worker_client: job header", e);
    }
    h_ = incoming_[slot_];
    check_job_header(h_);
    if (h_[0] == 0) {
      stopped_ = true;
      goodbye();
      return false;
    }
    auto payload = t_.recv(params, server_, tags_.job_payload, comm::recv_options{.timeout = o_.timeout});
    try {
      payload.wait();
    } catch (const comm::size_error& e) {
      refuse_job();
      throw comm::size_error("heterograd: worker_client: job payload", e);
    }
    slot_ ^= 1;
    post();  // the next job (or a stop, or an interruption) may come at any time
    return true;
  }

  /// The same for a worker whose buffers live in `memory` (kernels/memory.hpp: a device
  /// worker over a host transport): the model arrives in a host buffer of this client, made
  /// once, and is uploaded into `params` (one upload of dim values per job).
  template <class Memory>
  bool pull(const Memory& memory, span<T, typename Memory::memory_space> params) {
    require_same_size("params", params.size(), "dim", dim_);
    staging_.resize(dim_);
    if (!pull(span<T>(staging_))) return false;
    memory.upload(std::span<const T>(staging_), params);
    return true;
  }
  /// push from a buffer in `memory`: one download of dim values into the client's host
  /// buffer, nothing when interrupted.
  template <class Memory>
  bool push(const Memory& memory, span<const T, typename Memory::memory_space> grads) {
    require_same_size("grads", grads.size(), "dim", dim_);
    if (interrupted()) return false;
    staging_.resize(dim_);
    memory.download(grads, std::span<T>(staging_));
    return push(span<const T>(staging_));
  }

  /// True when the server has sent a new job (or a stop) since the last pull: the current
  /// computation was interrupted and its push would be dropped.
  bool interrupted() { return stopped_ || next_.test(); }

  /// Leaves the run deliberately (membership.elastic): the server forgets this worker's job
  /// in flight and sends it nothing more; a job it already sent is taken and discarded here,
  /// so that a joiner on this slot finds no half-read job. Nothing is pushed after it.
  void leave() {
    if (stopped_) return;
    if (next_.test() && !next_.error() && incoming_[slot_][0] == detail::job_kind) {
      staging_.resize(dim_);
      try {
        t_.recv(span<T>(staging_), server_, tags_.job_payload, comm::recv_options{.timeout = o_.timeout}).wait();
      } catch (const comm::comm_error&) {
        // a payload the server withdrew or could not send: nothing to discard
      }
    }
    next_ = decltype(next_){};  // withdraws the posted receive
    const std::array<std::uint64_t, 4> h{detail::leave_kind, worker(), 0, 0};
    t_.send(span<const std::uint64_t>(h.data(), h.size()), server_, tags_.result_header,
            comm::send_options{.timeout = o_.timeout})
        .wait();
    stopped_ = true;
  }
  /// A joiner's check: the FNV-1a of the model it was welcomed with (equal to the server's,
  /// or the join threw) and that model's version; nothing for a worker that did not join.
  std::optional<std::uint64_t> joined_hash() const { return joined_hash_; }
  std::uint64_t joined_version() const { return joined_version_; }

  /// Sends the gradient of the current job; returns false (sending nothing) if interrupted.
  bool push(span<const T> grads) {
    require_same_size("grads", grads.size(), "dim", dim_);
    if (interrupted()) return false;
    const std::array<std::uint64_t, 4> h{1, h_[1], h_[2], 0};
    const comm::send_options so{.timeout = o_.timeout};
    auto a = t_.send(span<const std::uint64_t>(h.data(), h.size()), server_, tags_.result_header, so);
    auto b = t_.send(grads, server_, tags_.result_payload, so);
    a.wait();
    b.wait();
    return true;
  }

 private:
  // The header is the peer's: a kind other than stop/compute, a compute job of batch 0 or a
  // start time that is not a finite time >= 0 is a protocol error (a comm_error, as a
  // transport failure is), never a job.
  static void check_job_header(const std::array<std::uint64_t, 5>& h) {
    auto refuse = [](const std::string& what) {
      throw comm::comm_error("heterograd: worker_client: the server's job header has " + what);
    };
    if (h[0] > 1) refuse("kind " + std::to_string(h[0]) + " (expected 1: compute, or 0: stop)");
    if (h[0] == 0) return;
    if (h[4] == 0) refuse("batch 0 (a job's batch must be > 0)");
    const double t = detail::double_of(h[3]);
    if (!std::isfinite(t) || t < 0) refuse("start time " + std::to_string(t) + " (must be finite and >= 0)");
  }

  // Tells the server that this worker cannot take its jobs (kind 3, with this worker's dim),
  // so that the server names the cause too instead of waiting for a result.
  void refuse_job() {
    const std::array<std::uint64_t, 4> h{3, 0, 0, dim_};
    try {
      t_.send(span<const std::uint64_t>(h.data(), h.size()), server_, tags_.result_header,
              comm::send_options{.timeout = o_.timeout})
          .wait();
    } catch (const comm::comm_error&) {
      // The server is gone: this worker's own error says why.
    }
  }

  void goodbye() {
    const std::array<std::uint64_t, 4> bye{detail::bye_kind, 0, 0, 0};
    try {
      t_.send(span<const std::uint64_t>(bye.data(), bye.size()), server_, tags_.result_header,
              comm::send_options{.timeout = o_.timeout})
          .wait();
    } catch (const comm::timeout_error&) {
      // The server stopped us and then stopped waiting (shutdown_grace): the run is over
      // and complete, so a goodbye nobody takes is no error.
    }
  }

  // The join (see the joining constructor): jobs of this slot's earlier worker are discarded
  // (header and payload), a stop means the run is over, then the welcome or a refusal.
  void join() {
    const std::array<std::uint64_t, 4> h{detail::join_kind, worker(), 0, dim_};
    const comm::recv_options ro{.timeout = o_.timeout};
    t_.send(span<const std::uint64_t>(h.data(), h.size()), server_, tags_.result_header,
            comm::send_options{.timeout = o_.timeout})
        .wait();
    staging_.resize(dim_);
    for (;;) {
      std::array<std::uint64_t, 5> j{};
      t_.recv(span<std::uint64_t>(j.data(), j.size()), server_, tags_.job_header, ro).wait();
      if (j[0] == detail::stop_kind) {
        stop_at_join_ = true;
        return;
      }
      if (j[0] == detail::join_refused_kind) throw comm::comm_error("heterograd: worker_client: join refused: " + join_refusal(j));
      if (j[0] != detail::job_kind && j[0] != detail::welcome_kind)
        throw comm::comm_error("heterograd: worker_client: the server's answer to a join has kind " +
                               std::to_string(j[0]) + " (expected 2: welcome, 3: refused)");
      try {
        t_.recv(span<T>(staging_), server_, tags_.job_payload, ro).wait();
      } catch (const comm::size_error&) {
        if (j[0] == detail::welcome_kind) throw;  // an old job of another size: discarded all the same
      }
      if (j[0] == detail::job_kind) continue;
      const std::uint64_t got = fnv1a(staging_.data(), dim_ * sizeof(T));
      if (got != j[2])
        throw comm::comm_error("heterograd: worker_client: the joined model's FNV-1a " + std::to_string(got) +
                               " differs from the server's " + std::to_string(j[2]) +
                               " (version " + std::to_string(j[1]) + "); nothing computed");
      joined_hash_ = got;
      joined_version_ = j[1];
      post();
      return;
    }
  }
  std::string join_refusal(const std::array<std::uint64_t, 5>& j) const {
    const std::string w = "worker " + std::to_string(worker());
    if (j[1] == detail::join_bad_dim)
      return w + " holds " + std::to_string(dim_) + " parameters, the server's model has " + std::to_string(j[4]);
    if (j[1] == detail::join_member) return w + " is a member of the run (its slot has not left)";
    if (j[1] == detail::join_bad_worker) return "the join named another worker than " + w + " (its sender)";
    return w + ": reason " + std::to_string(j[1]);
  }

  void post() {
    next_ = t_.recv(span<std::uint64_t>(incoming_[slot_].data(), 5), server_, tags_.job_header,
                    comm::recv_options{.timeout = o_.timeout});
  }

  Transport t_;
  remote_options o_;
  detail::tags tags_;
  std::size_t dim_;
  int server_ = 0;
  std::array<std::array<std::uint64_t, 5>, 2> incoming_{};
  int slot_ = 0;
  std::array<std::uint64_t, 5> h_{};
  decltype(std::declval<const Transport&>().recv(std::declval<span<std::uint64_t>>(), 0, 0,
                                                 comm::recv_options{})) next_{};
  bool stopped_ = false;
  bool stop_at_join_ = false;
  std::optional<std::uint64_t> joined_hash_;
  std::uint64_t joined_version_ = 0;
  std::vector<T> staging_;  // pull(memory, ...) / push(memory, ...): made on first use
};

/// Thrown by a worker's compute to leave an elastic run (remote_options::membership.elastic):
/// work() then sends the leave (worker_client::leave: the job is not pushed, the server
/// forgets it) and returns the worker's report, marked `left`. Without membership.elastic it
/// fails the worker like any other exception.
struct leave_run : std::runtime_error {
  leave_run() : std::runtime_error("heterograd: runtime: leave_run (a worker leaving an elastic run)") {}
};

namespace detail {
// work()'s loop on a client made by the caller (a worker from the start, or a joiner).
template <class T, class Client, class Compute, class Model>
worker_report work_on(Client& c, std::size_t dim, Compute& compute, const remote_options& o, const Model& model) {
  using clock = std::chrono::steady_clock;
  auto since = [](clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  };
  std::vector<T> params(dim), grads(dim);
  const worker_id w = c.worker();
  constexpr bool timed = !std::is_same_v<std::remove_cvref_t<Model>, no_time_model>;
  std::optional<job_pacer> pacer;
  if (timed && o.time_scale > 0) pacer.emplace(o.time_scale);
  worker_report r;
  for (;;) {
    auto t = clock::now();
    const bool more = c.pull(span<T>(params.data(), dim));
    r.pull_seconds += since(t);
    if (!more) break;
    t = clock::now();
    if (pacer) pacer->start();
    const span<const T> x(params.data(), dim);
    try {
      if constexpr (requires { compute(w, c.version(), c.job_index(), c.batch(), x, grads); })
        compute(w, c.version(), c.job_index(), c.batch(), x, grads);
      else
        compute(w, c.version(), c.job_index(), x, grads);
    } catch (const leave_run&) {
      if (!o.membership.elastic) throw;
      c.leave();
      r.left = true;
      break;
    }
    if constexpr (timed) {
      if (pacer) {
        const auto j = pacer->finish(model.duration(w, c.job_index(), c.start_time(), c.batch()),
                                     [&] { return c.interrupted(); });
        r.compute_seconds += j.compute;
        r.paced_seconds += j.wall - j.compute;
      }
    }
    if (!pacer) r.compute_seconds += since(t);
    require_same_size("grads", grads.size(), "dim", dim);
    t = clock::now();
    c.push(span<const T>(grads.data(), dim));
    r.push_seconds += since(t);
    ++r.jobs;
  }
  if (pacer) {
    r.violations = pacer->violations();
    r.overrun_seconds = pacer->overrun_seconds();
  }
  return r;
}
}  // namespace detail

/// A worker loop: compute(worker, version, job_index, span<const T> params, std::vector<T>&
/// grads), or compute(worker, version, job_index, batch, params, grads) with the job's batch,
/// for every job until the server stops it (or compute throws leave_run). With a worker-time
/// model and o.time_scale > 0, each job lasts time_scale * model.duration(..., batch) wall
/// seconds in all (runtime/pacing.hpp: the worker sleeps for what its compute left, polling
/// every millisecond for an interruption). Returns the worker's report (its jobs and where
/// its time went).
template <class T, class Transport, class Compute, optional_time_model Model = no_time_model>
worker_report work(const Transport& transport, std::size_t dim, Compute&& compute,
                   const remote_options& o = {}, const Model& model = {}) {
  o.validate();
  worker_client<T, Transport> c(transport, dim, o);
  return detail::work_on<T>(c, dim, compute, o, model);
}

/// The same for a worker joining a running elastic run (worker_client's joining constructor):
/// the report carries the joined model's hash and version.
template <class T, class Transport, class Compute, optional_time_model Model = no_time_model>
worker_report work(const Transport& transport, std::size_t dim, Compute&& compute, const remote_options& o,
                   const Model& model, joining_t) {
  o.validate();
  worker_client<T, Transport> c(transport, dim, o, joining);
  worker_report r = detail::work_on<T>(c, dim, compute, o, model);
  r.joined_hash = c.joined_hash();
  r.joined_version = c.joined_version();
  return r;
}

/// Server on o.server_rank, workers elsewhere: one call for every rank of an MPI job (or of
/// any transport's group). Returns the server's summary on the server rank, {} elsewhere.
template <class T, class Policy, class Transport, class Compute,
          optional_time_model Model = no_time_model>
  requires server_policy<Policy, T, detail::remote_server<T, Policy, Transport, Model>>
remote_summary run_remote(Policy& policy, const Transport& transport, Compute&& compute,
                          const remote_options& o = {}, const Model& model = {}) {
  if (transport.rank() == o.server_rank) return serve<T>(policy, transport, o, model);
  remote_summary s;
  s.workers.push_back(work<T>(transport, policy.dim(), compute, o, model));
  return s;
}

}  // namespace heterograd::runtime
