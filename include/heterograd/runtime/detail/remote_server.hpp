#pragma once
// The remote server's loop (runtime/server.hpp's serve): per-worker state, the control handle
// a policy steers workers with, the arrival orders, refusals and shutdown (docs/runtime.md);
// membership (remote_options::membership: leaves, joins, learned deadlines; docs/elastic.md).

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
#include "heterograd/core/hash.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/runtime/concepts.hpp"
#include "heterograd/runtime/membership.hpp"
#include "heterograd/runtime/pacing.hpp"
#include "heterograd/sim/recorder.hpp"
#include "heterograd/sim/worker_time.hpp"


#include "heterograd/runtime/detail/protocol.hpp"
#include "heterograd/runtime/server_types.hpp"

namespace heterograd::runtime::detail {

/// The server's side: per-worker state, the control handle's implementation.
template <class T, class Policy, class Transport, class Model>
class remote_server : public sim::reports_outcomes<remote_server<T, Policy, Transport, Model>> {
 public:
  enum class state : std::uint8_t { idle, busy, waiting, evicted, absent };

  remote_server(Policy& p, const Transport& t, const remote_options& o, const Model& m)
      : policy_(p), t_(t), o_(o), model_(m), tags_(o.tag_base), n_(checked_workers(p, t, o)),
        state_(n_, state::idle), next_job_(n_, 0), job_(n_, 0), version_(n_, 0),
        start_(n_, 0.0), batch_(n_, o.batch), job_batch_(n_, o.batch), batches_sent_(n_, 0), payload_(p.dim()),
        outbox_(n_), jobs_finished_(n_, 0), held_(n_, 0.0), held_since_(n_, 0.0), evicted_(n_),
        log_(n_), sent_wall_(n_, 0.0), first_job_(n_, 0), deadlines_(n_, o.membership.deadline) {
    o.membership.validate(n_);
    for (const auto w : o.membership.absent) state_[w] = state::absent;
  }

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
    require(state_.at(w) != state::absent, "worker", w, "must be a member to restart (it left)");
    require(state_.at(w) == state::idle, "worker", w, "must be idle to restart");
    if (real_clock_) sent_wall_[w] = wall();
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
    // Slots absent from the start leave before anything runs (no job is lost), as in the
    // simulator's churn (runtime/sim.hpp).
    if constexpr (has_on_leave<Policy, remote_server>)
      for (const auto w : o_.membership.absent) policy_.on_leave(*this, static_cast<worker_id>(w));
    if constexpr (requires { policy_.on_start(*this); }) {
      policy_.on_start(*this);
    } else {
      for (std::size_t w = 0; w < n_; ++w)
        if (state_[w] != state::absent) restart(static_cast<worker_id>(w));
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
    s.refused_late = refused_late_;
    s.lost = lost_;
    s.membership = std::move(events_);
    s.membership_refusals = std::move(membership_refusals_);
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
    const bool live = view && kind == 1 && std::exchange(send_live_, false) && !o_.copy_jobs;
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
      if (auto why = refusal(p)) {
        if (late(w, h)) {  // a gone membership's result, malformed too: refused, the slot kept
          ++refused_late_;
          return {w, true};
        }
        return refuse(from, "result payload", why->second);
      }
      settle_live_sends();  // a result may reach the policy next
    } else if (h[0] == 3) {
      return refuse(from, "job", "the worker refused its job: it holds " + std::to_string(h[3]) +
                                     " parameters, the server sends " + std::to_string(payload_.size()));
    } else if (h[0] != bye_kind && !(o_.membership.elastic && (h[0] == leave_kind || h[0] == join_kind))) {
      return refuse(from, "result header",
                    "kind " + std::to_string(h[0]) + " (expected 1: result, 2: goodbye, 3: refused job" +
                        (o_.membership.elastic ? ", 4: leave, 5: join)" : ")"));
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

  // A result of a membership that ended: its worker left or was declared gone, or the slot
  // has a new member since that job.
  bool late(worker_id w, const std::array<std::uint64_t, 4>& h) const {
    return h[0] == result_kind && (state_[w] == state::absent || h[2] < first_job_[w]);
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
      incoming in{};
      try {
        in = receive(comm::any_source, h, receive_wait());
      } catch (const comm::timeout_error&) {
        if (!o_.membership.elastic) throw;
        tick();
        declare_silent();  // a busy worker past its deadline is gone; else wait again
        continue;
      }
      const worker_id w = in.worker;
      tick();
      if (in.refused) continue;
      if (h[0] == leave_kind || h[0] == join_kind) {
        on_membership(w, h);
        continue;
      }
      if (late(w, h)) {
        ++refused_late_;  // a worker that left or was declared gone: never handed over
        continue;
      }
      if (!current(w, h)) {
        ++s.dropped;
        continue;
      }
      if (now_ > o_.horizon || (o_.stop && o_.stop->load(std::memory_order_acquire))) return false;
      deadlines_.record(w, wall() - sent_wall_[w]);
      a = arrival{w, h[1], h[2], start_[w], now_};
      return true;
    }
  }

  // ---- membership (remote_options::membership; docs/elastic.md) -------------------------
  double wall() const { return real_clock_->now().count(); }
  void tick() { now_ = o_.start_time + wall() / (o_.time_scale > 0 ? o_.time_scale : 1.0); }

  // How long the next receive may wait: the timeout, or less when a busy worker's learned
  // deadline comes first.
  seconds receive_wait() const {
    if (!o_.membership.elastic) return o_.timeout;
    const double t = wall();
    double wait = o_.timeout.count();
    for (std::size_t w = 0; w < n_; ++w)
      if (state_[w] == state::busy)
        wait = std::min(wait, sent_wall_[w] + deadlines_.deadline(w, o_.timeout.count()) - t);
    return seconds{std::max(wait, 1e-3)};
  }

  // Every busy worker silent past its deadline is declared gone.
  void declare_silent() {
    const double t = wall();
    for (std::size_t w = 0; w < n_; ++w) {
      if (state_[w] != state::busy) continue;
      const double d = deadlines_.deadline(w, o_.timeout.count());
      const double silent = t - sent_wall_[w];
      if (silent >= d) leave(static_cast<worker_id>(w), membership_event::kind::gone, silent, d);
    }
  }

  // Worker w stops being a member: its job in flight is forgotten (a late result is refused),
  // a held worker is let go, its pending sends are withdrawn, then the policy's on_leave.
  void leave(worker_id w, membership_event::kind k, double silent = 0, double deadline = 0) {
    const auto live = std::count_if(state_.begin(), state_.end(), [](state x) {
      return x != state::absent && x != state::evicted;
    });
    if (live <= 1) {
      const std::string why = k == membership_event::kind::gone
                                  ? "was silent for " + std::to_string(silent) + " s, past its deadline of " +
                                        std::to_string(deadline) + " s,"
                                  : "left";
      throw comm::comm_error("heterograd: serve: worker " + std::to_string(w) + " " + why +
                             " and no worker remains to go on");
    }
    if (state_[w] == state::busy) ++lost_;
    if (state_[w] == state::waiting) held_[w] += now_ - held_since_[w];
    state_[w] = state::absent;
    retire_outboxes(w);
    events_.push_back({k, w, now_, silent, deadline, policy_.version(), 0});
    if constexpr (has_on_leave<Policy, remote_server>) policy_.on_leave(*this, w);
  }

  // The sends to a worker that left are withdrawn (a transport that cannot withdraw them
  // leaves them to it); their buffers stay until the server ends.
  void retire_outboxes(worker_id w) {
    for (auto& b : outbox_[w]) {
      live_.erase(std::remove(live_.begin(), live_.end(), b.get()), live_.end());
      b->header = request_t{};
      b->payload = request_t{};
      retired_.push_back(std::move(b));
    }
    outbox_[w].clear();
  }

  // A leave or join header from worker w's rank (h[1]: the worker it names).
  void on_membership(worker_id w, const std::array<std::uint64_t, 4>& h) {
    const std::string who = "worker " + std::to_string(w) + " (rank " + std::to_string(rank_of(w)) + "): ";
    const char* what = h[0] == leave_kind ? "leave" : "join";
    if (h[1] != w)
      return refuse_membership(w, join_bad_worker, who + what + " names worker " + std::to_string(h[1]));
    if (h[0] == leave_kind) {
      if (state_[w] == state::absent || state_[w] == state::evicted)
        return refuse_membership(w, 0, who + "leave: it is not a member");
      settle_live_sends();
      return leave(w, membership_event::kind::leave);
    }
    if (h[3] != payload_.size())
      return refuse_membership(w, join_bad_dim, who + "join: it holds " + std::to_string(h[3]) +
                                                    " parameters, the server's model has " +
                                                    std::to_string(payload_.size()));
    if (state_[w] != state::absent)
      return refuse_membership(w, join_member, who + "join: it is a member (it has not left)");
    join(w);
  }

  // Counted and named; a joiner waiting on an absent slot is told why (a member's slot is
  // told nothing: its worker's jobs go on).
  void refuse_membership(worker_id w, std::uint64_t reason, std::string why) {
    ++refused_;
    membership_refusals_.push_back(std::move(why));
    if (reason == 0 || state_[w] != state::absent) return;
    auto& box = free_outbox(w);
    box.h = {join_refused_kind, reason, 0, 0, payload_.size()};
    box.header = t_.send(span<const std::uint64_t>(box.h.data(), box.h.size()), rank_of(w), tags_.job_header,
                         comm::send_options{.timeout = o_.timeout});
  }

  // Worker w joins: the welcome (version, the parameters' FNV-1a, dim) and the parameters,
  // then the policy's on_join, then its first job unless the policy held or started it.
  void join(worker_id w) {
    settle_live_sends();
    state_[w] = state::idle;
    deadlines_.forget(w);
    first_job_[w] = next_job_[w];
    auto& box = free_outbox(w);
    const auto x = policy_.params();
    box.params.assign(x.begin(), x.end());
    const std::uint64_t hash = fnv1a(box.params.data(), box.params.size() * sizeof(T));
    box.h = {welcome_kind, policy_.version(), hash, payload_.size(), 0};
    const int r = rank_of(w);
    const comm::send_options so{.timeout = o_.timeout};
    box.header = t_.send(span<const std::uint64_t>(box.h.data(), box.h.size()), r, tags_.job_header, so);
    box.payload = t_.send(span<const T>(box.params.data(), box.params.size()), r, tags_.job_payload, so);
    events_.push_back({membership_event::kind::join, w, now_, 0, 0, policy_.version(), hash});
    if constexpr (has_on_join<Policy, remote_server>) policy_.on_join(*this, w);
    if (state_[w] == state::idle) restart(w);
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
      for (std::size_t w = 0; w < n_; ++w)
        k += !bye[w] && state_[w] != state::evicted && state_[w] != state::absent;
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
      if (h[0] == bye_kind || h[0] == leave_kind) bye[in.worker] = true;
      else if (h[0] == join_kind) send_job(in.worker, stop_kind);  // too late: the run is over
      else ++s.dropped;
    }
    for (std::size_t w = 0; w < n_; ++w) {
      if (state_[w] == state::absent) continue;  // nobody may take them: left to the transport
      for (auto& box : outbox_[w]) {
        box->header.wait(o_.timeout);
        box->payload.wait(o_.timeout);
      }
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
  // Membership: when each worker's job was sent (wall seconds), the first job index of its
  // current membership (older results are late), the learned deadlines, the sends withdrawn
  // from workers that left, and what summary() reports.
  std::vector<double> sent_wall_;
  std::vector<std::uint64_t> first_job_;
  deadline_tracker deadlines_;
  std::vector<std::unique_ptr<outbox>> retired_;
  std::uint64_t refused_late_ = 0, lost_ = 0;
  std::vector<membership_event> events_;
  std::vector<std::string> membership_refusals_;
};

}  // namespace heterograd::runtime::detail
