#pragma once
// The asynchronous server and its workers over any transport (heterograd/comm): the same
// policy objects the simulator drives (runtime/sim.hpp), now with real workers on threads
// (inproc, runtime/async_threads.hpp) or MPI ranks. A policy is a server_policy
// (runtime/concepts.hpp); the arrival it is handed, the worker-time model and the update
// records are the simulator's (runtime::arrival, sim::worker_time_model, sim::recorder).
//
//   serve<T>(policy, transport, options[, time_model])   on the server rank (default 0)
//   work<T>(transport, dim, compute, options[, time_model])  on every other rank
//   worker_client<T>: pull(params) / push(grads)          for framework authors' own loops
//                     (pull(memory, params) / push(memory, grads): a device worker's
//                     buffers staged through one host buffer; runtime/staging.hpp)
//
// Protocol (tags options.tag_base + 0..3, headers of u64):
//   server -> worker  job header of five {kind: 1 compute | 0 stop, version, job index, start
//                     time bits, batch}, then (compute) the parameters;
//   worker -> server  result header of four {kind: 1 result | 2 bye | 3 refused job, version,
//                     job index, 0 (refused job: the worker's dim)}, then (result) the gradient.
// Every message's size is the protocol's: a receive takes exactly its buffer (comm's
// recv_options), so a peer's message of another size or element type is refused by the
// transport, never written. The server counts a refused message, hands nothing of it to the
// policy and evicts its worker (remote_summary::refused, evicted: no job is sent to it again,
// its goodbye is not waited for); in virtual_time order the run fails instead (the simulator's
// order needs that result), as it does in real_time order once no worker can deliver. A
// worker refuses a job payload of another size than its dim (the server's dim differs) by
// sending kind 3 with its dim, then fails naming both sizes: each side names the cause.
// The server receives from any source (the parameter-server pattern) and hands each result
// to policy.on_arrival with a control handle offering the simulator's members (applied /
// buffered / discarded, restart, hold, release, interrupt, busy, waiting, version_of, now,
// workers: async_control; set_batch as the simulator's async_runtime has it), so a policy
// runs unchanged. A job's batch is options.batch until the policy's set_batch(w, b) gives
// worker w another for its next jobs (OmniLearn's ASP controller): the job carries it, the
// worker computes with it (worker_client::batch(), a compute that takes one) and both sides
// ask the worker-time model at it. Holding a worker = not sending it a job; releasing =
// sending one. Interrupting = sending a new job at once: a worker that sees a new job before
// it pushes abandons its computation ("calculation stops"); a result that still arrives for a
// stopped job is dropped, never handed to the policy.
//
// A policy may have ready(t) -> bool: in virtual_time order the server calls it before it
// waits for the result finishing at virtual time t; false ends the run there (then shutdown).
//
// Arrival order:
//   real_time:    results are handed over as they arrive (any-source receive).
//   virtual_time: with a worker-time model, each job gets the virtual duration the simulator
//                 would give it (model.duration(w, k, start, batch)); results are handed over in
//                 (virtual finish, start order) order, waiting for the real result of the
//                 earliest. This is the simulator's order exactly, so a deterministic policy
//                 gives bitwise the same parameters as under runtime::async_runtime, while the
//                 gradients are computed in parallel on real workers (tested).
// With time_scale > 0 a worker's job lasts time_scale * duration wall seconds (it sleeps for
// what its compute left, polling for a new job every millisecond so that it can be stopped;
// runtime/pacing.hpp); in real_time order the server's clock (now(), arrival times, the
// horizon, a job's start time) then counts wall seconds / time_scale: model units, the
// simulator's, so that a worker-time model's outages happen on the wall clock and a run's
// times compare with the simulated run's. Each worker reports where its wall time went (worker_report: pull,
// compute, paced sleep, push) and, paced, the jobs whose compute alone took longer.
//
// Nothing waits forever: every receive has options.timeout (a held worker waits at most that
// long for its next job); a timeout or a transport failure is rethrown. Except at the end: a
// run that met its stopping rule is complete, so shutdown (stop every worker, collect the
// goodbyes) waits up to options.shutdown_grace for workers still inside a computation (they
// see the stop only when it returns; their results are dropped), and a worker still silent
// then is left behind and counted (remote_summary::abandoned), not an error: the completed
// run's results stand. A worker whose goodbye finds the server gone just ends.

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
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/comm/concepts.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/clock.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/runtime/concepts.hpp"
#include "heterograd/runtime/pacing.hpp"
#include "heterograd/sim/recorder.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace heterograd::runtime {

enum class arrival_order : std::uint8_t { real_time, virtual_time };

/// No worker-time model: jobs take their real time (and virtual_time ordering is unavailable).
struct no_time_model {};

/// What the remote runtimes accept as a model: the simulator's worker-time models, or none.
/// A worker's side of a real run, measured on its own clock (wall seconds): the jobs it
/// computed and pushed, the time spent waiting for and receiving each job (pull), computing,
/// sleeping to its job's model time (paced: o.time_scale > 0) and sending the result (push);
/// with pacing, the jobs whose compute alone took longer than the model's time (the model
/// was violated) and by how much in all.
struct worker_report {
  std::uint64_t jobs = 0;
  double pull_seconds = 0;
  double compute_seconds = 0;
  double paced_seconds = 0;
  double push_seconds = 0;
  std::uint64_t violations = 0;
  double overrun_seconds = 0;
};

template <class M>
concept optional_time_model = std::same_as<M, no_time_model> || sim::worker_time_model<M>;

struct remote_options {
  int server_rank = 0;  ///< the server's rank; workers are the others, in rank order
  int tag_base = 30000;  ///< four tags from here
  seconds timeout{120.0};  ///< every receive's deadline
  arrival_order order = arrival_order::real_time;
  /// Wall seconds a job lasts per unit of its model duration (0: not paced; pacing.hpp).
  double time_scale = 0.0;
  // Stopping rules of the server (whichever comes first).
  std::uint64_t max_updates = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t max_arrivals = std::numeric_limits<std::uint64_t>::max();
  double horizon = std::numeric_limits<double>::infinity();  ///< virtual (or real) seconds
  /// Every job's batch until the policy's set_batch changes a worker's (the simulator's
  /// async_runtime batch argument, default 1 there too): sent with the job, and the batch the
  /// worker-time model is asked at.
  std::size_t batch = 1;
  /// Optional: set by another thread to end a real_time run at its next arrival (that result
  /// is not handed over), as a stopping rule would.
  const std::atomic<bool>* stop = nullptr;
  /// real_time order: the clock's reading when the run starts (a resumed run goes on with
  /// its time, so that the horizon and the policies' clocks continue).
  double start_time = 0;
  /// How long shutdown waits, in all, for the goodbyes of workers still computing when the
  /// run ends (a computation cannot be cut short; the run's results stand either way).
  seconds shutdown_grace{600.0};

  void validate() const {
    require(tag_base >= 0 && tag_base <= 32767 - 4, "remote_options.tag_base", tag_base,
            "must be in [0, 32763]");
    require(timeout.count() > 0, "remote_options.timeout", timeout.count(), "must be > 0");
    require(std::isfinite(time_scale) && time_scale >= 0, "remote_options.time_scale",
            time_scale, "must be finite and >= 0");
    require(!std::isnan(horizon) && horizon >= 0, "remote_options.horizon", horizon, "must be >= 0");
    require(max_updates > 0, "remote_options.max_updates", max_updates, "must be > 0");
    require(batch > 0, "remote_options.batch", batch, "must be > 0");
    require(std::isfinite(start_time) && start_time >= 0, "remote_options.start_time", start_time,
            "must be finite and >= 0");
    require(shutdown_grace.count() >= 0 && shutdown_grace.count() < 1e300,
            "remote_options.shutdown_grace", shutdown_grace.count(), "must be finite and >= 0");
  }
};

struct remote_summary {
  std::uint64_t arrivals = 0;  ///< results handed to the policy
  std::uint64_t dropped = 0;   ///< results of stopped jobs, never handed over
  double end_time = 0;         ///< virtual (virtual_time) or real seconds
  /// Workers whose goodbye did not come within shutdown_grace (still computing at the end).
  std::uint64_t abandoned = 0;
  /// Messages refused: of another size or element type than the protocol's (nothing of them
  /// was written or handed over), a header of an unknown kind, a worker's refusal of its job.
  std::uint64_t refused = 0;
  /// Per worker: why it was evicted ("" when it was not). A worker whose message is refused
  /// is sent no job again (real_time order; virtual_time order fails the run instead).
  std::vector<std::string> evicted;
  std::vector<std::uint64_t> jobs_finished;  ///< results handed over, per worker
  /// Per worker: the time it was held (hold() to release(), or to the run's end) and the
  /// jobs it was sent, in the server's clock's units.
  std::vector<double> held;
  std::vector<std::uint64_t> jobs_sent;
  /// The server's update records: outcome counts and staleness histograms, also per worker
  /// (only these tables: the engine's accounting is the simulator's). A summary that is not
  /// the server's (a worker rank's, or one not yet filled) holds one worker and no update.
  sim::recorder log{1};
  /// Each worker's own report (runtime::run_threads fills it, in worker order; under MPI a
  /// worker rank's run_remote returns its report here, alone).
  std::vector<worker_report> workers;
};

namespace detail {

struct tags {
  int job_header, job_payload, result_header, result_payload;
  explicit tags(int base) : job_header(base), job_payload(base + 1), result_header(base + 2),
                            result_payload(base + 3) {}
};

inline std::uint64_t bits_of(double x) { return std::bit_cast<std::uint64_t>(x); }
inline double double_of(std::uint64_t b) { return std::bit_cast<double>(b); }

inline int worker_rank(int worker, int server_rank) { return worker < server_rank ? worker : worker + 1; }
inline int worker_of_rank(int rank, int server_rank) { return rank < server_rank ? rank : rank - 1; }

/// The server's side: per-worker state, the control handle's implementation.
template <class T, class Policy, class Transport, class Model>
class remote_server : public sim::reports_outcomes<remote_server<T, Policy, Transport, Model>> {
 public:
  enum class state : std::uint8_t { idle, busy, waiting, evicted };

  remote_server(Policy& p, const Transport& t, const remote_options& o, const Model& m)
      : policy_(p), t_(t), o_(o), model_(m), tags_(o.tag_base), n_(checked_workers(p, t, o)),
        state_(n_, state::idle), next_job_(n_, 0), job_(n_, 0), version_(n_, 0),
        start_(n_, 0.0), batch_(n_, o.batch), job_batch_(n_, o.batch), batches_sent_(n_, 0), payload_(p.dim()),
        outbox_(n_), jobs_finished_(n_, 0), held_(n_, 0.0), held_since_(n_, 0.0), evicted_(n_),
        log_(n_) {}

  // ---- the control handle's members ---------------------------------------------------
  double now() const { return now_; }
  std::size_t workers() const { return n_; }
  bool busy(worker_id w) const { return state_.at(w) == state::busy; }
  bool waiting(worker_id w) const { return state_.at(w) == state::waiting; }
  std::uint64_t version_of(worker_id w) const {
    require(busy(w), "worker", w, "must be busy (it has no job)");
    return version_[w];
  }
  void restart(worker_id w) {
    require(state_.at(w) == state::idle, "worker", w, "must be idle to restart");
    const std::uint64_t k = next_job_[w]++;
    job_[w] = k;
    version_[w] = policy_.version();
    start_[w] = now_;
    job_batch_[w] = batch_[w];
    batches_sent_[w] += job_batch_[w];
    state_[w] = state::busy;
    if constexpr (!std::is_same_v<Model, no_time_model>) {
      if (o_.order == arrival_order::virtual_time) {
        const double d = model_.duration(w, k, now_, job_batch_[w]);
        require(!std::isnan(d) && d >= 0.0, "duration", d, "must be >= 0 (from the worker-time model)");
        queue_.push(pending{now_ + d, seq_++, w, k});
      }
    }
    send_job(w, 1);
  }
  void hold(worker_id w) {
    require(state_.at(w) == state::idle, "worker", w, "must be idle to wait");
    state_[w] = state::waiting;
    held_since_[w] = now_;
  }
  void release(worker_id w) {
    require(state_.at(w) == state::waiting, "worker", w, "must be waiting to be released");
    state_[w] = state::idle;
    held_[w] += now_ - held_since_[w];
    restart(w);
  }
  void interrupt(worker_id w) {
    require(busy(w), "worker", w, "must be busy to interrupt");
    log_.record_update(w, policy_.version() - version_[w], sim::update_outcome::interrupted);
    state_[w] = state::idle;  // its result, if it still comes, is for a job no longer current
    restart(w);
  }
  /// Batch of worker w's next jobs (a running job keeps the batch it was sent with).
  void set_batch(worker_id w, std::size_t b) {
    require(w < n_, "worker", w, "must be < the number of workers");
    require(b > 0, "batch", b, "must be > 0");
    batch_[w] = b;
  }
  /// Jobs sent to worker w so far (the running one included), and the sum of their batches.
  /// A worker computes every job it is sent (an interrupted one too, up to its end), so these
  /// are what its sample stream will have drawn once it has taken them all: a checkpoint at a
  /// cut records them, and a resume on other ranks moves their streams there.
  std::uint64_t jobs_sent(worker_id w) const { return next_job_.at(w); }
  std::uint64_t batches_sent(worker_id w) const { return batches_sent_.at(w); }
  // applied, buffered, discarded: sim::reports_outcomes, into log_.
  sim::recorder& outcome_log() { return log_; }

  // ---- the loop ---------------------------------------------------------------------------
  remote_summary run() {
    const steady_clock clock;
    real_clock_ = &clock;
    if (o_.order == arrival_order::real_time) now_ = o_.start_time;
    if constexpr (requires { policy_.on_start(*this); }) {
      policy_.on_start(*this);
    } else {
      for (std::size_t w = 0; w < n_; ++w) restart(static_cast<worker_id>(w));
    }
    remote_summary s;
    while (s.arrivals < o_.max_arrivals && policy_.version() < o_.max_updates) {
      arrival a;
      if (!next_result(a, s)) {
        require_a_worker_left();
        break;
      }
      ++s.arrivals;
      ++jobs_finished_[a.worker];
      state_[a.worker] = state::idle;
      policy_.on_arrival(*this, a, payload_);
      if (state_[a.worker] == state::idle) {
        send_live_ = true;  // send_job: this worker is in pull, it takes the model at once
        restart(a.worker);
      }
    }
    s.end_time = now_;
    for (std::size_t w = 0; w < n_; ++w)
      if (state_[w] == state::waiting) held_[w] += now_ - held_since_[w];
    shutdown(s);
    s.jobs_finished = jobs_finished_;
    s.held = held_;
    s.jobs_sent = next_job_;
    s.log = log_;
    s.refused = refused_;
    s.evicted = evicted_;
    return s;
  }

 private:
  // The checks come before any member is sized from the transport.
  static std::size_t checked_workers(const Policy& p, const Transport& t, const remote_options& o) {
    require(t.size() >= 2, "transport.size", t.size(), "must be >= 2 (a server and a worker)");
    require(t.rank() == o.server_rank, "transport.rank", t.rank(), "must be the server rank");
    const auto n = static_cast<std::size_t>(t.size() - 1);
    require_same_size("transport.size - 1", n, "policy.workers", p.workers());
    if constexpr (std::is_same_v<Model, no_time_model>) {
      require(o.order == arrival_order::real_time, "remote_options.order", "virtual_time",
              "needs a worker-time model");
    }
    return n;
  }

  struct pending {
    double finish;
    std::uint64_t seq;
    worker_id worker;
    std::uint64_t job;
    bool operator>(const pending& b) const {
      return finish > b.finish || (finish == b.finish && seq > b.seq);
    }
  };

  int rank_of(worker_id w) const { return worker_rank(static_cast<int>(w), o_.server_rank); }

  // The model goes out through per-worker outboxes, so the server never waits for a worker
  // to take a job. Usually one outbox per worker is enough (n x d memory): w took the previous
  // job before it pushed. Not when w is interrupted twice while it is still pushing the
  // result of an older job: with rendezvous sends (large models), w's push completes only
  // when the server receives it, which in virtual-time order may come after this send, so
  // waiting here for w to take the previous job would deadlock. A busy outbox is left alone
  // and another one is used instead (at most one per job sent and not yet taken).
  auto& free_outbox(worker_id w) {
    auto& pool = outbox_[w];
    for (auto& b : pool)
      if (b->header.test() && b->payload.test()) {
        b->header.wait(o_.timeout);  // rethrows a failed send
        b->payload.wait(o_.timeout);
        return *b;
      }
    pool.push_back(std::make_unique<outbox>());
    return *pool.back();
  }

  // The job's model. Sent from the outbox's copy (8 B/param), so that the policy may change
  // its parameters while the send is in flight, except after an arrival (run: send_live_):
  // that worker just pushed and is in pull, so it takes the model as soon as it runs, and the
  // parameters change only in the policy's on_arrival, which the next result reaches after
  // settle_live_sends(). Then the send is straight from the parameters (a policy whose
  // params() is a view; an owning copy would die with this call), and the worker's copy
  // runs beside the server's receive of the next gradient instead of after a copy here.
  // Copy first, header next: a worker waiting in pull sees the header, then posts its
  // payload receive, and a send that finds that receive posted copies into it on the
  // server's thread; posted back to back, the payload is nearly always waiting when the
  // worker asks, so the worker's thread makes that copy.
  void send_job(worker_id w, std::uint64_t kind) {
    using params_t = std::remove_cvref_t<decltype(policy_.params())>;
    constexpr bool view = std::is_same_v<params_t, span<const T>> || std::is_same_v<params_t, span<T>>;
    const bool live = view && kind == 1 && std::exchange(send_live_, false);
    auto& box = free_outbox(w);
    const auto x = policy_.params();
    if (kind == 1 && !live) box.params.assign(x.begin(), x.end());  // 8 B/param
    box.h = {kind, version_[w], job_[w], bits_of(start_[w]), job_batch_[w]};
    const int r = rank_of(w);
    const comm::send_options so{.timeout = o_.timeout};
    box.header = t_.send(span<const std::uint64_t>(box.h.data(), box.h.size()), r, tags_.job_header, so);
    if (kind == 1) {
      const span<const T> m = live ? span<const T>(x.data(), x.size())
                                   : span<const T>(box.params.data(), box.params.size());
      box.payload = t_.send(m, r, tags_.job_payload, so);
      if (live) live_.push_back(&box);
    }
  }

  // The live sends are taken before the parameters they read can change (rethrows a failed
  // send; a worker that does not take its job within options.timeout is a timeout).
  void settle_live_sends() {
    for (outbox* b : live_) b->payload.wait(o_.timeout);
    live_.clear();
  }

  // One message from a worker: its header (and payload), or a refusal (refuse()).
  struct incoming {
    worker_id worker;
    bool refused;
  };

  // Receives one result header from `source` (any_source allowed) and its payload; returns
  // the worker and fills the header, or the refused message's worker.
  incoming receive(int source, std::array<std::uint64_t, 4>& h) { return receive(source, h, o_.timeout); }
  incoming receive(int source, std::array<std::uint64_t, 4>& h, seconds timeout) {
    comm::recv_options ro{.timeout = timeout};
    auto r = t_.recv(span<std::uint64_t>(h.data(), h.size()), source, tags_.result_header, ro);
    if (auto why = refusal(r)) return refuse(why->first, "result header", why->second);
    const int from = r.status().source;
    const auto w = static_cast<worker_id>(worker_of_rank(from, o_.server_rank));
    if (h[0] == 1) {
      auto p = t_.recv(span<T>(payload_.data(), payload_.size()), from, tags_.result_payload, ro);
      if (auto why = refusal(p)) return refuse(from, "result payload", why->second);
      settle_live_sends();  // a result may reach the policy next
    } else if (h[0] == 3) {
      return refuse(from, "job", "the worker refused its job: it holds " + std::to_string(h[3]) +
                                     " parameters, the server sends " + std::to_string(payload_.size()));
    } else if (h[0] != 2) {
      return refuse(from, "result header",
                    "kind " + std::to_string(h[0]) + " (expected 1: result, 2: goodbye, 3: refused job)");
    }
    return {w, false};
  }

  // The transport's refusal of a message (its sender and why), or nothing when it came whole.
  template <class Request>
  static std::optional<std::pair<int, std::string>> refusal(Request& r) {
    try {
      r.wait();
    } catch (const comm::size_error& e) {
      return std::pair<int, std::string>{e.source(), e.what()};
    } catch (const comm::mismatch_error& e) {
      if (e.source() < 0) throw;
      return std::pair<int, std::string>{e.source(), e.what()};
    }
    return std::nullopt;
  }

  // A worker's message is not the protocol's: counted, never handed over, its worker evicted.
  incoming refuse(int rank, const char* field, const std::string& why) {
    if (rank == o_.server_rank || rank < 0 || rank >= t_.size())
      throw comm::comm_error("heterograd: serve: " + std::string(field) + ": " + why);
    const auto w = static_cast<worker_id>(worker_of_rank(rank, o_.server_rank));
    ++refused_;
    const std::string text = "worker " + std::to_string(w) + " (rank " + std::to_string(rank) +
                             "): " + field + ": " + why;
    if (o_.order == arrival_order::virtual_time)
      throw comm::comm_error("heterograd: serve: " + text +
                             " (virtual_time order cannot go on without this worker's result)");
    if (state_[w] == state::waiting) held_[w] += now_ - held_since_[w];
    if (evicted_[w].empty()) evicted_[w] = text;
    state_[w] = state::evicted;
    return {w, true};
  }

  // A run that ends because no worker is busy ends with the cause when workers were evicted:
  // the policy waits for results that cannot come.
  void require_a_worker_left() const {
    const auto e = std::find_if(evicted_.begin(), evicted_.end(), [](const std::string& x) { return !x.empty(); });
    if (e == evicted_.end()) return;
    if (std::any_of(state_.begin(), state_.end(), [](state x) { return x == state::busy; })) return;
    throw comm::comm_error("heterograd: serve: no worker left to deliver a result; evicted " + *e);
  }

  bool current(worker_id w, const std::array<std::uint64_t, 4>& h) const {
    return h[0] == 1 && state_[w] == state::busy && h[2] == job_[w];
  }

  bool next_result(arrival& a, remote_summary& s) {
    std::array<std::uint64_t, 4> h{};
    if (o_.order == arrival_order::virtual_time) {
      // The earliest job in virtual time that is still current.
      while (!queue_.empty()) {
        const pending p = queue_.top();
        if (state_[p.worker] == state::busy && job_[p.worker] == p.job) break;
        queue_.pop();
      }
      if (queue_.empty()) return false;
      const pending p = queue_.top();
      if (p.finish > o_.horizon) {
        now_ = std::isfinite(o_.horizon) ? o_.horizon : now_;
        return false;
      }
      // A policy that ends the run itself (heterograd-run's evaluation loop) says so before
      // the server waits for a result it would not use: a slow worker's computation past the
      // end is then left to shutdown, never waited for with the per-message timeout.
      if constexpr (requires { { policy_.ready(p.finish) } -> std::convertible_to<bool>; }) {
        if (!policy_.ready(p.finish)) return false;
      }
      queue_.pop();
      for (;;) {  // results of stopped jobs of this worker come first: drop them
        const incoming in = receive(rank_of(p.worker), h);  // a refusal throws in this order
        if (current(in.worker, h)) break;
        ++s.dropped;
      }
      now_ = p.finish;
      a = arrival{p.worker, h[1], h[2], start_[p.worker], now_};
      return true;
    }
    for (;;) {
      if (std::none_of(state_.begin(), state_.end(), [](state x) { return x == state::busy; }))
        return false;  // every worker held or idle: nothing can arrive
      const incoming in = receive(comm::any_source, h);
      const worker_id w = in.worker;
      now_ = o_.start_time + real_clock_->now().count() / (o_.time_scale > 0 ? o_.time_scale : 1.0);
      if (in.refused) continue;
      if (!current(w, h)) {
        ++s.dropped;
        continue;
      }
      if (now_ > o_.horizon || (o_.stop && o_.stop->load(std::memory_order_acquire))) return false;
      a = arrival{w, h[1], h[2], start_[w], now_};
      return true;
    }
  }

  // Tells every worker to stop and collects their goodbyes (results still in flight are
  // dropped), so no message is left unreceived. A worker inside a computation answers when
  // it returns, which may be later than options.timeout: the goodbyes get shutdown_grace in
  // all (a result payload, once its header came, still gets options.timeout), and a timeout
  // then abandons the silent workers instead of failing the completed run.
  // An evicted worker is sent the stop too, but its goodbye is not waited for.
  void shutdown(remote_summary& s) {
    for (std::size_t w = 0; w < n_; ++w) send_job(static_cast<worker_id>(w), 0);
    std::vector<bool> bye(n_, false);
    auto silent = [&] {
      std::size_t k = 0;
      for (std::size_t w = 0; w < n_; ++w) k += !bye[w] && state_[w] != state::evicted;
      return k;
    };
    std::array<std::uint64_t, 4> h{};
    const steady_clock clock;
    const double until = clock.now().count() + o_.shutdown_grace.count();
    while (silent() > 0) {
      const double left = until - clock.now().count();
      incoming in{};
      try {
        if (left <= 0) throw comm::timeout_error("shutdown_grace passed");
        in = receive(comm::any_source, h, seconds{left});
      } catch (const comm::timeout_error&) {
        s.abandoned = silent();
        break;
      }
      if (in.refused) continue;
      if (h[0] == 2) bye[in.worker] = true;
      else ++s.dropped;
    }
    for (auto& pool : outbox_)
      for (auto& box : pool) {
        box->header.wait(o_.timeout);
        box->payload.wait(o_.timeout);
      }
  }

  Policy& policy_;
  const Transport& t_;
  remote_options o_;
  const Model& model_;
  tags tags_;
  std::size_t n_;
  std::vector<state> state_;
  std::vector<std::uint64_t> next_job_, job_, version_;
  std::vector<double> start_;
  std::vector<std::size_t> batch_, job_batch_;  // next jobs' batch, the running job's
  std::vector<std::uint64_t> batches_sent_;     // the sum of the batches of the jobs sent
  std::vector<T> payload_;
  using request_t = decltype(std::declval<const Transport&>().send(
      std::declval<span<const T>>(), 0, 0, comm::send_options{}));
  struct outbox {
    std::array<std::uint64_t, 5> h{};
    std::vector<T> params;
    request_t header{}, payload{};
  };
  std::vector<std::vector<std::unique_ptr<outbox>>> outbox_;  // stable addresses: sends in flight
  std::vector<outbox*> live_;  // sends straight from the policy's parameters, not yet taken
  bool send_live_ = false;
  std::priority_queue<pending, std::vector<pending>, std::greater<pending>> queue_;
  std::uint64_t seq_ = 0;
  double now_ = 0;
  const steady_clock* real_clock_ = nullptr;
  std::vector<std::uint64_t> jobs_finished_;
  std::vector<double> held_, held_since_;
  std::vector<std::string> evicted_;  // why each worker was evicted ("" : it was not)
  std::uint64_t refused_ = 0;
  sim::recorder log_;
};

}  // namespace detail

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
    try {
      next_.wait();
    } catch (const comm::size_error& e) {
      throw comm::size_error("heterograd: worker_client: job header", e);
    }
    h_ = incoming_[slot_];
    check_job_header(h_);
    if (h_[0] == 0) {
      stopped_ = true;
      const std::array<std::uint64_t, 4> bye{2, 0, 0, 0};
      try {
        t_.send(span<const std::uint64_t>(bye.data(), bye.size()), server_, tags_.result_header,
                comm::send_options{.timeout = o_.timeout})
            .wait();
      } catch (const comm::timeout_error&) {
        // The server stopped us and then stopped waiting (shutdown_grace): the run is over
        // and complete, so a goodbye nobody takes is no error.
      }
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
  std::vector<T> staging_;  // pull(memory, ...) / push(memory, ...): made on first use
};

/// A worker loop: compute(worker, version, job_index, span<const T> params, std::vector<T>&
/// grads), or compute(worker, version, job_index, batch, params, grads) with the job's batch,
/// for every job until the server stops it. With a worker-time model and o.time_scale > 0,
/// each job lasts time_scale * model.duration(..., batch) wall seconds in all
/// (runtime/pacing.hpp: the worker sleeps for what its compute left, polling every
/// millisecond for an interruption). Returns the worker's report (its jobs and where its
/// time went).
template <class T, class Transport, class Compute, optional_time_model Model = no_time_model>
worker_report work(const Transport& transport, std::size_t dim, Compute&& compute,
                   const remote_options& o = {}, const Model& model = {}) {
  o.validate();
  using clock = std::chrono::steady_clock;
  auto since = [](clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  };
  worker_client<T, Transport> c(transport, dim, o);
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
    if constexpr (requires { compute(w, c.version(), c.job_index(), c.batch(), x, grads); })
      compute(w, c.version(), c.job_index(), c.batch(), x, grads);
    else
      compute(w, c.version(), c.job_index(), x, grads);
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
