#pragma once
// eager-SGD: data-parallel SGD over partial allreduces (Li, Ben-Nun, Di Girolamo, Alistarh,
// Hoefler, PPoPP 2020, #21).
//
// Every rank computes its gradient and contributes it to round t of a partial allreduce:
//   solo      the first rank to arrive fires the round;
//   majority  the round's initiator (drawn uniformly per round from a seed all ranks share)
//             fires it, so in expectation half the contributions are fresh;
// and any round fires once every rank arrived. Ranks that arrived before the round fired
// contribute fresh; a rank arriving after its round fired takes that round's result at once
// and its gradient is kept and folded into the next round that fires (stale, never dropped).
// Every rank applies the same result to its model, so the replicas stay identical; over a
// run that ends with a flush round (a round that waits for every rank and folds in everything
// pending), the sum of the applied results equals the sum of all computed gradients (times
// 1/n with averaging: result = sum / n over all ranks, fresh or not).
// Staleness bound B: round t fires only when every rank has taken the result of round t - B.
//
// This file holds the per-rank round (detail::eager_round: post, wait for the round, apply
// its result), the policy for runtime::async_runtime (a rank's arrival is a job's end; ranks
// that wait for their round are held and released when it fires) and a worker-time model
// that delays a random subset of ranks each step (the paper's injected imbalance). The round
// is written once and run three ways: in the simulator over sequential_partial, whose rounds
// are comm::partial_rounds, the state inproc's partial allreduce fires (so a simulated round
// fires and sums exactly as comm's would with the same arrivals); by the threads and MPI
// runtimes (run_round, the round contract of exchange.hpp) and by the per-worker helper
// sync::eager_worker (workers.hpp) over the transport's partial allreduce
// (inproc::partial_allreduce, mpi::partial_allreduce).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "heterograd/algorithms/sync/common.hpp"
#include "heterograd/algorithms/sync/detail/cluster.hpp"
#include "heterograd/algorithms/sync/exchange.hpp"
#include "heterograd/comm/partial.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/clock.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::algorithms::sync {

enum class partial_mode { solo, majority };
inline constexpr choice<partial_mode> partial_modes[] = {{"solo", partial_mode::solo},
                                                         {"majority", partial_mode::majority}};

struct eager_config {
  partial_mode mode = partial_mode::majority;
  std::uint64_t seed = 0;       ///< majority: initiator draws (shared by all ranks)
  bool average = true;          ///< result = sum / n (eager-SGD) or the plain sum
  std::size_t staleness_bound = 4;  ///< B
  std::uint64_t rounds = 0;     ///< rounds to run, the last one a flush (0: unbounded)
  /// A worker's gradient with an infinity or a NaN: fail (nonfinite_gradient_error), skip or
  /// zero (nonfinite.hpp; detail/cluster.hpp says what each does in a round).
  nonfinite_policy nonfinite = nonfinite_policy::fail;

  static constexpr auto description() {
    return describe("eager",
                    describe_field("mode", &eager_config::mode,
                                   "partial allreduce: majority (a random initiator's round) or solo",
                                   partial_modes),
                    describe_field("staleness_bound", &eager_config::staleness_bound,
                                   "B: rounds a late gradient may lag", closed(1, 1u << 30)),
                    describe_field("seed", &eager_config::seed, "majority: the initiator draws' seed"),
                    describe_field("average", &eager_config::average,
                                   "a round's result is sum / n (eager-SGD), else the plain sum"),
                    describe_field("rounds", &eager_config::rounds,
                                   "rounds to run, the last one a flush (0: unbounded)"),
                    describe_field("nonfinite", &eager_config::nonfinite,
                                   "a gradient with an infinity or a NaN", nonfinite_policies));
  }

  void validate() const { validate_fields(*this); }
  /// The transport's firing policy for these rounds.
  comm::partial_policy partial_policy() const {
    return mode == partial_mode::solo ? comm::partial_policy::solo()
                                      : comm::partial_policy::majority(seed);
  }
  /// The transport's options for these rounds (avg: sum / n over all ranks).
  comm::partial_options partial_options() const {
    comm::partial_options o;
    o.op = average ? comm::reduce_op::avg : comm::reduce_op::sum;
    o.staleness_bound = static_cast<int>(staleness_bound);
    return o;
  }
};

/// Worker-time model with injected imbalance: job k of every worker takes the base time, and
/// `delayed` ranks drawn uniformly per k (the same draw for all workers) take `delay` more.
template <class Model>
class subset_delay_time {
 public:
  subset_delay_time(Model base, std::size_t workers, std::size_t delayed, double delay,
                    std::uint64_t seed)
      : base_(std::move(base)), n_(workers), k_(delayed), delay_(delay), seed_(seed) {
    require(delayed <= workers, "subset_delay.delayed", delayed, "must be <= workers");
    require(delay >= 0 && delay < 1e300, "subset_delay.delay", delay, "must be finite and >= 0");
  }
  bool is_delayed(std::uint32_t w, std::uint64_t k) const {
    std::vector<std::size_t> p(n_);
    for (std::size_t i = 0; i < n_; ++i) p[i] = i;
    counter_rng(seed_, 0xde1a7ull).shuffle(p.begin(), p.end(), k * n_);
    return std::find(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(k_), w) !=
           p.begin() + static_cast<std::ptrdiff_t>(k_);
  }
  double duration(std::uint32_t w, std::uint64_t k, double t, std::size_t b) const {
    return base_.duration(w, k, t, b) + (is_delayed(w, k) ? delay_ : 0.0);
  }

 private:
  Model base_;
  std::size_t n_, k_;
  double delay_;
  std::uint64_t seed_;
};

namespace detail {

/// One rank's eager-SGD round, the only implementation (eager_worker's; the policy's on
/// threads and MPI over transport_partial, and in the simulator over sequential_partial):
/// `grads` goes to the partial allreduce's next round (a flush waits for every rank and folds
/// in everything pending), the round's result replaces it and the optimizer step applies its
/// first params.size() elements (what follows them, the stop votes of run_round, is not a
/// gradient). With a `staging` buffer (eager_worker on memory the transports cannot reach:
/// their partial allreduces hold host buffers), the round runs on it: `grads` is downloaded
/// into it, reduced there, and the result uploaded back, by the rank's memory (one transfer
/// of grads.size() values each way).
template <class Partial, class Rep, class T, class S>
step_task<bool> eager_round(Partial p, Rep rep, span<T, S> params, span<T, S> grads, bool flush,
                            std::span<T> staging = {}) {
  span<T> reduced;
  if (!staging.empty()) {
    require_same_size("eager.staging", staging.size(), "eager.grads", grads.size());
    rep.memory.download(span<const T, S>(grads), staging);
    reduced = span<T>(staging.data(), staging.size());
  } else if constexpr (std::is_same_v<S, host_space>) {
    reduced = grads;
  } else {
    throw std::invalid_argument("eager_round: gradients off the host need a staging buffer");
  }
  if (flush)
    co_await p.flush(reduced);
  else
    co_await p.allreduce(reduced);
  if (!staging.empty()) rep.memory.upload(std::span<const T>(staging.data(), staging.size()), grads);
  rep.update(span<const T, S>(grads.first(params.size())), params);
  co_return true;
}

}  // namespace detail

template <class T, class Optimizer, class Grad>
class eager_sgd : public detail::replicated<T, Optimizer, Grad> {
  using base = detail::replicated<T, Optimizer, Grad>;
  using base::c_;

 public:
  eager_sgd(std::size_t workers, span<const T> init, Optimizer opt, Grad grad,
            std::vector<std::size_t> batches, eager_config cfg = {})
      : base((cfg.validate(), workers), init, std::move(opt), std::move(grad), std::move(batches),
             identity_transform{}),
        cfg_(cfg), round_of_(workers, 0), fresh_(workers, std::vector<T>(init.size())),
        partial_(static_cast<int>(workers), init.size(), cfg_.partial_policy(),
                 cfg_.partial_options()),
        steps_(workers), computed_(workers, std::vector<double>(init.size(), 0.0)),
        late_(workers, 0) {
    c_.set_nonfinite(cfg_.nonfinite, "eager_sgd");
    partial_.rounds.fired_sum.assign(init.size(), 0.0);
    // The last configured round is a flush (comm's flush()): known from the start, so a
    // restored run keeps it.
    if (cfg_.rounds != 0) partial_.rounds.flush_round = static_cast<std::int64_t>(cfg_.rounds) - 1;
  }

  // --- runtime::async_runtime policy ------------------------------------------------------------
  /// Rounds fired so far.
  std::uint64_t version() const { return rounds_fired(); }
  /// Rank w's gradient at its replica, computed when its job starts.
  void compute(std::size_t w, std::uint64_t, std::uint64_t, std::vector<T>& out) {
    c_.compute_gradient(w);
    const auto g = c_.gradient(w);
    out.assign(g.begin(), g.end());
  }
  /// Rank w's gradient arrives: its round's step (detail::eager_round) starts over the
  /// in-memory partial allreduce. Late (the round fired): it completes at once and the rank
  /// goes on. Fresh: the rank is held until the round fires, which this arrival or a later
  /// one triggers; then the steps of the round's fresh ranks end in rank order.
  template <class Ctl, class Arrival>
  void on_arrival(Ctl& ctl, const Arrival& a, std::vector<T>& g) {
    const std::size_t w = a.worker;
    adopt_steps();
    // A gradient from a real worker (heterograd-run's threads / MPI) has not been through
    // compute(): the non-finite policy applies here too (a no-op scan for compute()'s).
    c_.screen(w, span<T>(g), round_of_.at(w));
    for (std::size_t i = 0; i < g.size(); ++i) computed_[w][i] += static_cast<double>(g[i]);
    const auto t = static_cast<std::int64_t>(round_of_[w]);
    const std::int64_t lag = partial_.rounds.next - t;
    fresh_[w].assign(g.begin(), g.end());
    start(w);
    if (lag > 0) {
      ++late_[w];
      ctl.buffered(static_cast<std::uint32_t>(w), static_cast<std::uint64_t>(lag));
      end_step(w);
      settle(ctl);
      if (finished(w)) ctl.hold(static_cast<std::uint32_t>(w));
      return;
    }
    ctl.hold(static_cast<std::uint32_t>(w));
    settle(ctl);
  }

  // --- observers (and the base's) ---------------------------------------------------------------
  /// Rounds whose result rank w has applied.
  std::uint64_t rounds_applied(std::size_t w) const { return round_of_.at(w); }
  std::uint64_t rounds_fired() const { return fresh_counts_.size(); }
  /// Ranks waiting for their round to fire (held by the simulator).
  std::size_t waiting_ranks() const {
    std::size_t k = 0;
    for (const auto& st : steps_) k += st.handle() ? 1 : 0;
    return k;
  }
  /// Contributions that arrived after their round fired.
  std::uint64_t late_contributions() const {
    std::uint64_t l = 0;
    for (auto v : late_) l += v;
    return l;
  }
  /// Sum of every gradient computed and contributed (accumulated per worker in double, then
  /// summed over workers in rank order), and sum of every round's result before the division
  /// by n (sim; under threads / MPI: the result times n when averaging), in double.
  std::vector<double> computed_sum() const {
    std::vector<double> s(partial_.rounds.fired_sum.size(), 0.0);
    for (const auto& c : computed_)
      for (std::size_t i = 0; i < s.size(); ++i) s[i] += c[i];
    return s;
  }
  const std::vector<double>& applied_sum() const { return partial_.rounds.fired_sum; }

  // --- the threads and MPI runtimes (runtime/rounds.hpp) --------------------------------------
  // Worker w's thread (or rank) touches only worker w's replica and counters.
  const eager_config& config() const { return cfg_; }

  /// What a rank holds of its run over a partial allreduce: its next round, whether a fired
  /// round held a stop vote (the next round is the flush), and its message buffer when the
  /// ranks vote. A run over a real partial allreduce starts at round 0 (the allreduce's).
  struct rank_state {
    std::uint64_t round = 0;
    bool stopping = false;
    std::vector<T> voted;
  };
  rank_state shared_state() const { return {}; }
  /// Its rounds take a partial allreduce (exchange.hpp's round contract).
  using exchange_kind = partial_exchange_tag;
  /// The partial allreduce a run needs: the configured firing policy and options, over the
  /// parameters plus, when the ranks vote to stop, one element for the votes. A run ends
  /// after the configured rounds (eager.rounds, the last a flush) or by vote: with neither it
  /// would never end, and is refused.
  partial_allreduce_setup partial_setup(bool votes) const {
    require(cfg_.rounds > 0 || votes, "eager.rounds", cfg_.rounds,
            "must be > 0 on threads and MPI unless the ranks vote to stop (worker_options.stop)");
    return {cfg_.partial_policy(), cfg_.partial_options(),
            computed_.front().size() + (votes ? 1 : 0)};
  }
  /// Rank r.worker's round over a partial allreduce (the round contract of exchange.hpp, run
  /// by runtime::run_worker until the outcome says last): its gradient (the share of
  /// computed_sum()), then its round's step (detail::eager_round) on its replica. It is the
  /// last round after the configured rounds (eager.rounds; the last one a flush) or, when the
  /// ranks vote (r.votes), once a fired round's result held a vote: the message then carries
  /// parameter size + 1 elements, the last one this rank's vote (r.vote_stop), and the round
  /// after the first fired round whose result holds a vote is a flush and the last. Every
  /// rank takes every round's result, the same on every rank, so all of them see the votes of
  /// the same round and end together, however late a vote arrived. r.count (one worker per
  /// process) records each round's result and fresh count.
  template <partial_exchange<T> Ex>
  round_outcome run_round(rank_round<Ex>& r, rank_state& s) {
    const std::size_t w = r.worker, d = computed_[w].size();
    const bool last = s.stopping || (cfg_.rounds != 0 && s.round + 1 == cfg_.rounds);
    const double loss = c_.compute_gradient(w);
    const auto g = c_.mutable_gradient(w);
    for (std::size_t i = 0; i < g.size(); ++i) computed_[w][i] += static_cast<double>(g[i]);
    span<T> msg = g;
    if (r.votes) {
      s.voted.resize(d + 1);
      std::copy(g.begin(), g.end(), s.voted.begin());
      s.voted[d] = r.vote_stop ? T{1} : T{0};
      msg = span<T>(s.voted.data(), s.voted.size());
    }
    detail::eager_round(r.world, c_.replica_of(w), c_.mutable_params(w), msg, last).run();
    s.stopping = s.stopping || (r.votes && s.voted[d] > T{0});
    const auto& rep = r.world.last_report();
    const bool fresh = std::find(rep.fresh.begin(), rep.fresh.end(), static_cast<int>(w)) !=
                       rep.fresh.end();
    round_of_.at(w) = ++s.round;
    if (!fresh) ++late_[w];
    if (r.count) {
      const double scale = cfg_.average ? static_cast<double>(c_.workers()) : 1.0;
      auto& sum = partial_.rounds.fired_sum;
      for (std::size_t i = 0; i < d; ++i) sum[i] += static_cast<double>(msg[i]) * scale;
      fresh_counts_.push_back(rep.fresh.size());
    }
    return {.steps = 1, .loss = loss, .last = last};
  }
  /// The run of rank w over a partial allreduce built with partial_setup(o.stop): what
  /// runtime::run_worker does.
  template <class Partial>
  [[deprecated("use runtime::run_worker(policy, transport[, options, count]) or "
               "runtime::run_partial_worker(policy, partial[, options, count])")]]
  void run_rank(Partial& partial, std::size_t w, bool count, const worker_options& o = {}) {
    compute_end_hook hook;
    transport_partial<Partial> ex(partial, &hook);
    rank_round<transport_partial<Partial>> r{.world = ex, .worker = w, .count = count,
                                              .votes = static_cast<bool>(o.stop)};
    auto s = (partial_setup(r.votes), shared_state());
    run_rank_rounds(*this, r, s, std::numeric_limits<std::uint64_t>::max(), o, hook);
  }
  /// Fresh contributions per fired round.
  const std::vector<std::size_t>& fresh_counts() const { return fresh_counts_; }

  /// Checkpointing (core/archive.hpp): visits the mutable state in a fixed order; `ar(...)`
  /// writes or reads it: the replicas, every rank's round, the partial allreduce's rounds
  /// (each rank's last round taken, who waits for its round and with which gradient, the late
  /// contributions carried to the next round that fires, the last B results, the next round),
  /// the audit sums and counts. The majority initiator is drawn from (seed, round), so the
  /// next round is its whole RNG state. A rank waiting for its round is a suspended step:
  /// reading re-creates it, registered in that round. Configuration (optimizer, mode, seed,
  /// B) is rebuilt by the caller.
  template <class Archive>
  void serialize(Archive& ar) {
    auto& s = partial_.rounds;
    const std::size_t n = c_.workers();
    std::vector<char> waiting(n, 0);
    for (std::size_t j = 0; j < n; ++j) waiting[j] = steps_[j].handle() ? 1 : 0;
    ar(c_, round_of_, s.consumed, waiting, fresh_, s.pending, s.pending_origin, s.results,
       computed_, s.fired_sum, fresh_counts_, s.next, late_);
    if constexpr (!Archive::saving) {
      for (std::size_t j = 0; j < n; ++j) {
        const auto ju = static_cast<int>(j);
        steps_[j] = step_task<bool>{};
        s.withdraw(ju, s.arrived_round[j]);
        if (!waiting[j]) continue;
        s.arrived_round[j] = s.next;
        s.arrived_buf[j] = fresh_[j].data();
        start(j);
      }
    }
  }

 private:
  bool finished(std::size_t w) const {
    return cfg_.rounds != 0 && round_of_[w] >= cfg_.rounds;
  }
  // A waiting rank's step refers to its owner (the replicas, the partial allreduce): after a
  // move the new owner re-creates them (each is registered in its round, unfired: a round
  // fires and its steps end within one on_arrival, so it only waits again).
  void adopt_steps() {
    if (owner_ == this) return;
    for (std::size_t j = 0; j < steps_.size(); ++j)
      if (steps_[j].handle()) start(j);
    owner_ = this;
  }
  // Rank w's step for its round, on its replica, started: it runs until its round's result
  // is in (late) or suspends until the round fires.
  void start(std::size_t w) {
    owner_ = this;
    const std::uint64_t t = round_of_[w];
    steps_[w] = detail::eager_round(partial_.rank(w, t), c_.replica_of(w), c_.mutable_params(w),
                                    span<T>(fresh_[w]),
                                    cfg_.rounds != 0 && t + 1 == cfg_.rounds);
    steps_[w].handle().resume();
  }
  // Rank w's step ends (its round's result is applied): the error it raised surfaces here.
  void end_step(std::size_t w) {
    if (!steps_[w].done()) steps_[w].handle().resume();
    (void)steps_[w].result();
    steps_[w] = step_task<bool>{};
    ++round_of_[w];
  }
  // Ends the steps of every rank whose round fired, in rank order, and fires the rounds that
  // may fire next, until none does.
  template <class Ctl>
  void settle(Ctl& ctl) {
    auto& s = partial_.rounds;
    const std::size_t n = c_.workers();
    for (;;) {
      while (fresh_counts_.size() < static_cast<std::size_t>(s.next))
        fresh_counts_.push_back(
            s.reports[fresh_counts_.size() % static_cast<std::size_t>(cfg_.staleness_bound)]
                .fresh.size());
      for (std::size_t j = 0; j < n; ++j) {
        if (!steps_[j].handle() ||
            !s.complete(static_cast<int>(j), static_cast<std::int64_t>(round_of_[j])))
          continue;
        end_step(j);
        ctl.applied(static_cast<std::uint32_t>(j), 0);
        if (!finished(j)) ctl.release(static_cast<std::uint32_t>(j));
      }
      if (!s.try_fire(seconds{0})) return;
    }
  }

  eager_config cfg_;
  std::vector<std::uint64_t> round_of_;
  std::vector<std::vector<T>> fresh_;  // rank w's contribution, then its round's result
  sequential_partial<T> partial_;
  std::vector<step_task<bool>> steps_;  // rank w's step waiting for its round, or empty
  const eager_sgd* owner_ = this;       // the object steps_ were started on
  std::vector<std::vector<double>> computed_;
  std::vector<std::size_t> fresh_counts_;
  std::vector<std::uint64_t> late_;
};

}  // namespace heterograd::algorithms::sync
