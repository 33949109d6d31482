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
// This file holds the policy for runtime::async_runtime (a rank's arrival is a job's end; ranks
// that wait for their round are held and released when it fires) and a worker-time model
// that delays a random subset of ranks each step (E6 of papers.md). The firing rule and the
// majority initiator are the transport layer's (comm::detail::should_fire,
// majority_initiator in heterograd/comm/partial.hpp), so the simulated rounds fire exactly
// when comm's partial_allreduce would. On threads and MPI the per-worker helper
// sync::eager_worker (workers.hpp) runs the same step over the transport's partial
// allreduce (inproc::partial_allreduce, mpi::partial_allreduce).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "heterograd/algorithms/sync/common.hpp"
#include "heterograd/algorithms/sync/detail/cluster.hpp"
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
                                   "B: rounds a late gradient may lag", closed(1, 1u << 30)));
  }

  void validate() const {
    algorithms::validate_nonfinite_policy("eager.nonfinite", nonfinite);
    require(staleness_bound >= 1 && staleness_bound <= 1u << 30, "eager.staleness_bound",
            staleness_bound, "must be in [1, 2^30]");
  }
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

/// One rank's eager-SGD round (eager_worker's, and the policy's on threads and MPI): `grads`
/// goes to the partial allreduce's next round (a flush waits for every rank and folds in
/// everything pending), the round's result replaces it and the optimizer step applies it.
template <class Partial, class Rep, class T>
void eager_round(Partial& p, Rep rep, span<T> params, span<T> grads, bool flush) {
  (flush ? p.flush(grads) : p.allreduce(grads)).wait();
  rep.update(span<const T>(grads), params);
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
        cfg_(cfg), policy_(cfg_.partial_policy()),
        round_of_(workers, 0), consumed_(workers, -1), arrived_(workers, 0),
        fresh_(workers, std::vector<T>(init.size())),
        pending_(workers, std::vector<T>(init.size(), T(0))), pending_origin_(workers, -1),
        results_(cfg_.staleness_bound, std::vector<T>(init.size())),
        computed_(workers, std::vector<double>(init.size(), 0.0)), applied_sum_(init.size(), 0.0),
        late_(workers, 0) {
    c_.set_nonfinite(cfg_.nonfinite, "eager_sgd");
  }

  // --- runtime::async_runtime policy ------------------------------------------------------------
  /// Rounds fired so far.
  std::uint64_t version() const { return next_; }
  /// Rank w's gradient at its replica, computed when its job starts.
  void compute(std::size_t w, std::uint64_t, std::uint64_t, std::vector<T>& out) {
    c_.compute_gradient(w);
    const auto g = c_.gradient(w);
    out.assign(g.begin(), g.end());
  }
  template <class Ctl, class Arrival>
  void on_arrival(Ctl& ctl, const Arrival& a, std::vector<T>& g) {
    const std::size_t w = a.worker;
    // A gradient from a real worker (heterograd-run's threads / MPI) has not been through
    // compute(): the non-finite policy applies here too (a no-op scan for compute()'s).
    c_.screen(w, span<T>(g), round_of_.at(w));
    const auto t = static_cast<std::int64_t>(round_of_[w]);
    for (std::size_t i = 0; i < g.size(); ++i) computed_[w][i] += static_cast<double>(g[i]);
    if (t < next_) {
      // Late: keep the gradient for the next round that fires; take round t's result now.
      for (std::size_t i = 0; i < g.size(); ++i) pending_[w][i] += g[i];
      if (pending_origin_[w] < 0) pending_origin_[w] = t;
      ++late_[w];
      ctl.buffered(static_cast<std::uint32_t>(w), static_cast<std::uint64_t>(next_ - t));
      take_result(w, t);
      try_fire(ctl);
      if (finished(w)) ctl.hold(static_cast<std::uint32_t>(w));
      return;
    }
    arrived_[w] = 1;
    fresh_[w].assign(g.begin(), g.end());
    ctl.hold(static_cast<std::uint32_t>(w));
    try_fire(ctl);
  }

  // --- observers (and the base's) ---------------------------------------------------------------
  /// Rounds whose result rank w has applied.
  std::uint64_t rounds_applied(std::size_t w) const { return round_of_.at(w); }
  std::uint64_t rounds_fired() const { return static_cast<std::uint64_t>(next_); }
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
    std::vector<double> s(applied_sum_.size(), 0.0);
    for (const auto& c : computed_)
      for (std::size_t i = 0; i < s.size(); ++i) s[i] += c[i];
    return s;
  }
  const std::vector<double>& applied_sum() const { return applied_sum_; }

  // --- the threads and MPI runtimes (runtime/rounds.hpp) --------------------------------------
  // Worker w's thread (or rank) touches only worker w's replica and counters.
  const eager_config& config() const { return cfg_; }
  /// Worker w's run over a partial allreduce until the configured rounds (eager.rounds > 0;
  /// the last one a flush) are over: each round its gradient (the share of computed_sum()),
  /// then eager_worker's round (detail::eager_round) on its replica. `count` (one worker per
  /// process) records each round's result and fresh count.
  template <class Partial>
  void run_rank(Partial& partial, std::size_t w, bool count) {
    for (std::uint64_t round = 0; round < cfg_.rounds; ++round) {
      c_.compute_gradient(w);
      const auto g = c_.mutable_gradient(w);
      for (std::size_t i = 0; i < g.size(); ++i) computed_[w][i] += static_cast<double>(g[i]);
      detail::eager_round(partial, c_.replica_of(w), c_.mutable_params(w), g,
                          round + 1 == cfg_.rounds);
      const auto& rep = partial.last_report();
      const bool fresh = std::find(rep.fresh.begin(), rep.fresh.end(), static_cast<int>(w)) !=
                         rep.fresh.end();
      round_of_.at(w) = round + 1;
      consumed_.at(w) = static_cast<std::int64_t>(round);
      if (!fresh) ++late_[w];
      if (!count) continue;
      const double scale = cfg_.average ? static_cast<double>(c_.workers()) : 1.0;
      for (std::size_t i = 0; i < g.size(); ++i)
        applied_sum_[i] += static_cast<double>(g[i]) * scale;
      fresh_counts_.push_back(rep.fresh.size());
      next_ = std::max<std::int64_t>(next_, static_cast<std::int64_t>(round) + 1);
    }
  }
  /// Fresh contributions per fired round.
  const std::vector<std::size_t>& fresh_counts() const { return fresh_counts_; }

  /// Checkpointing (core/archive.hpp): visits the mutable state in a fixed order; `ar(...)`
  /// writes or reads it: the replicas, every rank's round and consumed counters, the fresh
  /// contributions waiting for their round, the late ones carried to the next round that
  /// fires (pending_, pending_origin_), the last B results, the audit sums and the next
  /// round. The majority initiator is drawn from (seed, round), so the round counter next_
  /// is its whole RNG state. Configuration (optimizer, mode, seed, B) is rebuilt by the caller.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(c_, round_of_, consumed_, arrived_, fresh_, pending_, pending_origin_, results_, computed_,
       applied_sum_, fresh_counts_, next_, late_);
  }

 private:
  bool finished(std::size_t w) const {
    return cfg_.rounds != 0 && round_of_[w] >= cfg_.rounds;
  }
  void take_result(std::size_t w, std::int64_t t) {
    const auto& r = results_[static_cast<std::size_t>(t) % cfg_.staleness_bound];
    c_.apply(w, span<const T>(r));
    consumed_[w] = t;
    ++round_of_[w];
  }
  template <class Ctl>
  void try_fire(Ctl& ctl) {
    const std::size_t n = c_.workers();
    for (;;) {
      const std::int64_t t = next_;
      if (cfg_.rounds != 0 && static_cast<std::uint64_t>(t) >= cfg_.rounds) return;
      const auto B = static_cast<std::int64_t>(cfg_.staleness_bound);
      for (std::size_t j = 0; j < n; ++j)
        if (consumed_[j] < t - B) return;  // a result slot is still unread
      std::vector<bool> arrived(n, false);
      int arrivals = 0;
      for (std::size_t j = 0; j < n; ++j) {
        arrived[j] = arrived_[j] != 0;
        arrivals += arrived_[j] != 0 ? 1 : 0;
      }
      // The final round is a flush: it waits for every rank (comm's flush()).
      const bool flush = cfg_.rounds != 0 && static_cast<std::uint64_t>(t) + 1 == cfg_.rounds;
      if (flush && arrivals < static_cast<int>(n)) return;
      if (!comm::detail::should_fire(policy_, static_cast<std::uint64_t>(t), static_cast<int>(n),
                                     arrived, arrivals, seconds{0}, seconds{0}))
        return;
      // Rank order, fresh before stale (the transport's order): the same bits everywhere.
      auto& res = results_[static_cast<std::size_t>(t) % cfg_.staleness_bound];
      std::fill(res.begin(), res.end(), T(0));
      std::size_t fresh = 0;
      for (std::size_t j = 0; j < n; ++j) {
        if (arrived_[j]) {
          for (std::size_t i = 0; i < res.size(); ++i) res[i] += fresh_[j][i];
          ++fresh;
        }
        if (pending_origin_[j] >= 0) {
          for (std::size_t i = 0; i < res.size(); ++i) res[i] += pending_[j][i];
          std::fill(pending_[j].begin(), pending_[j].end(), T(0));
          pending_origin_[j] = -1;
        }
      }
      for (std::size_t i = 0; i < res.size(); ++i) applied_sum_[i] += static_cast<double>(res[i]);
      if (cfg_.average)
        for (auto& v : res) v = v / static_cast<T>(n);
      fresh_counts_.push_back(fresh);
      next_ = t + 1;
      for (std::size_t j = 0; j < n; ++j) {
        if (!arrived_[j]) continue;
        arrived_[j] = 0;
        take_result(j, t);
        ctl.applied(static_cast<std::uint32_t>(j), 0);
        if (!finished(j)) ctl.release(static_cast<std::uint32_t>(j));
      }
    }
  }

  eager_config cfg_;
  comm::partial_policy policy_;
  std::vector<std::uint64_t> round_of_;
  std::vector<std::int64_t> consumed_;
  std::vector<char> arrived_;
  std::vector<std::vector<T>> fresh_, pending_;
  std::vector<std::int64_t> pending_origin_;
  std::vector<std::vector<T>> results_;
  std::vector<std::vector<double>> computed_;
  std::vector<double> applied_sum_;
  std::vector<std::size_t> fresh_counts_;
  std::int64_t next_ = 0;
  std::vector<std::uint64_t> late_;
};

}  // namespace heterograd::algorithms::sync
