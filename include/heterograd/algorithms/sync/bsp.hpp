#pragma once
// BSP data parallelism with sample-weighted aggregation (OmniLearn, Tyagi & Sharma, TPDS 2025,
// #7; Cephalo, #20).
//
// Worker i computes the mean gradient g_i of its b_i samples. DDP-style averaging by world
// size, (1/n) sum_i g_i, is the global-batch gradient only when every b_i is equal; with the
// weights w_i = b_i / B (B = sum_j b_j)
//     g = sum_i (b_i / B) g_i = (1/B) sum_i sum_{s in batch i} grad l_s,
// which is exactly the mean gradient of the global batch of B samples, whatever the b_i.
//
//   aggregation::gradients   g = sum_i w_i g_i (one allreduce), every worker steps with g;
//   aggregation::parameters  every worker steps on its own g_i, then x = sum_i w_i x_i (for
//                            plain SGD the same point up to rounding; with momentum the
//                            optimizer-state policy decides what happens to the states).
//
// Driving. This class is the policy of runtime::round_runtime (one round = one step):
//     runtime::round_runtime<sync::round_stats, Model> rt(n, model);
//     sync::bsp<float, optim::sgd, Grad> p(n, x0, optim::sgd({.lr = 0.1}), grad, {8, 24});
//     sync::run_rounds(rt, p, 100, runtime::run_options{});
// batch(w) gives the runtime each worker's b_i (the worker-time models scale with it) and
// communication_time() the configured per-step allreduce time. set_batches() lets a
// load-balancing policy (OmniLearn's controller) change the b_i between rounds; the weights
// follow.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "heterograd/algorithms/sync/common.hpp"
#include "heterograd/algorithms/sync/detail/cluster.hpp"
#include "heterograd/algorithms/sync/detail/rank.hpp"
#include "heterograd/algorithms/sync/exchange.hpp"
#include "heterograd/algorithms/sync/weights.hpp"
#include "heterograd/balance/concepts.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::algorithms::sync {

struct bsp_config {
  aggregation mode = aggregation::gradients;
  /// sample_weighted (b_i / B, the default) or uniform (1/n: what DDP does, for comparison).
  averaging weighting = averaging::sample_weighted;
  /// Optimizer states after a parameter average (parameters mode only).
  state_policy states = state_policy::keep_local;
  /// Virtual seconds of one synchronisation (e.g. a network model's ring_allreduce time).
  double sync_time = 0.0;
  /// A worker's gradient with an infinity or a NaN: fail (nonfinite_gradient_error), skip or
  /// zero (nonfinite.hpp; detail/cluster.hpp says what each does in a round).
  nonfinite_policy nonfinite = nonfinite_policy::fail;

  static constexpr auto description() {
    return describe("bsp",
                    describe_field("aggregation", &bsp_config::mode, "what a step averages", aggregations),
                    describe_field("weighting", &bsp_config::weighting,
                                   "aggregation weights (not fednova: FedNova normalises local steps)",
                                   step_averagings),
                    describe_field("states", &bsp_config::states,
                                   "optimizer states after a parameter average", state_policies),
                    describe_field("sync_time", &bsp_config::sync_time,
                                   "virtual seconds of one synchronisation", finite_at_least(0)),
                    describe_field("nonfinite", &bsp_config::nonfinite,
                                   "a gradient with an infinity or a NaN", nonfinite_policies));
  }

  void validate() const { validate_fields(*this); }
};

/// Aggregation weights of a synchronous step.
inline std::vector<double> step_weights(averaging a, const std::vector<std::size_t>& batches) {
  return a == averaging::uniform ? uniform_weights(batches.size()) : sample_weights(batches);
}

template <class T, class Optimizer, class Grad, class Transform = identity_transform>
class bsp : public detail::replicated<T, Optimizer, Grad, Transform> {
  using base = detail::replicated<T, Optimizer, Grad, Transform>;
  using base::c_;

 public:
  bsp(std::size_t workers, span<const T> init, Optimizer opt, Grad grad,
      std::vector<std::size_t> batches, bsp_config cfg = {}, Transform tr = {})
      : base((cfg.validate(), workers), init, std::move(opt), std::move(grad), std::move(batches),
             std::move(tr)),
        cfg_(cfg), limit_(workers), last_(workers) {
    decltype(c_)::require_state_policy(cfg_.states, "bsp.states");
    c_.set_nonfinite(cfg_.nonfinite, "bsp");
  }

  // --- runtime::round_runtime policy (batch(w): the base's) -------------------------------------
  double communication_time(std::uint64_t) const { return cfg_.sync_time; }
  /// Local steps of worker w in a round: one (a round is a step).
  std::size_t steps_in_round(std::size_t, std::uint64_t) const { return 1; }
  /// Worker w's work in `round`: its gradient (gradients mode) or its local step (parameters).
  void compute(std::size_t w, std::uint64_t round, std::uint64_t, round_stats& out) {
    if (!limit_.run_now(w, round)) return;
    work(w, out);
  }
  template <class Ctl>
  void on_round(Ctl& ctl, std::uint64_t, std::vector<round_stats>& results) {
    for (std::size_t w = 0; w < c_.workers(); ++w)
      if (limit_.take_deferred(w)) work(w, results[w]);
    synchronise();
    for (std::size_t w = 0; w < c_.workers(); ++w) {
      last_[w] = results[w];
      ctl.applied(static_cast<std::uint32_t>(w), 0);
    }
    ++rounds_;
  }
  /// Rounds past `limit` are not started (see run_rounds).
  void limit_rounds(std::uint64_t limit) { limit_.set(limit); }

  // --- one synchronous step without a runtime (all workers in rank order) ---------------------
  void step() {
    std::vector<round_stats> r(c_.workers());
    for (std::size_t w = 0; w < c_.workers(); ++w) work(w, r[w]);
    synchronise();
    last_ = r;
    ++rounds_;
  }

  /// What a rank of a real runtime holds of shared round state: nothing (runtime/rounds.hpp).
  struct rank_state {};
  rank_state shared_state() const { return {}; }
  /// Its rounds take a collective exchange (exchange.hpp's round contract).
  using exchange_kind = collective_exchange_tag;

  // --- the per-rank step (the sim's ranks above, the threads and MPI runtimes, bsp_worker) ----
  /// Worker w's synchronising step over exchange `ex` (exchange.hpp): the aggregate goes to
  /// `agg` in gradients mode, the average (common form) to `model` when it is not empty.
  template <class Ex>
  step_task<bool> rank_step(Ex& ex, std::size_t w, span<T> agg, span<T> model) {
    return detail::synchronous_step<T>(ex, c_.replica_of(w), cfg_.mode, cfg_.states,
                                       weights()[w], c_.mutable_params(w), c_.gradient(w), agg,
                                       model);
  }
  /// Rank r.worker's round over an exchange that never suspends (a real transport's; the
  /// round contract of exchange.hpp, run by runtime::run_worker): its gradient, then its step,
  /// the aggregate replacing its gradient as bsp_worker's does; r.count (one worker per
  /// process) advances rounds().
  template <exchange<T> Ex>
  round_outcome run_round(rank_round<Ex>& r, rank_state&) {
    const std::size_t w = r.worker;
    const round_stats s{1, c_.compute_gradient(w)};
    rank_step(r.world, w, c_.mutable_gradient(w), {}).run();
    last_.at(w) = s;
    if (r.count) ++rounds_;
    return {.steps = s.steps, .loss = s.loss};
  }
  template <class Ex>
  [[deprecated("use run_round(rank_round<Ex>&, rank_state&) (algorithms/sync/exchange.hpp)")]]
  void run_round(Ex& ex, std::size_t w, bool count) {
    rank_round<Ex> r{.world = ex, .worker = w, .count = count};
    rank_state s;
    (void)run_round(r, s);
  }

  // --- observers (and the base's) ---------------------------------------------------------------
  /// The aggregated gradient of the last gradients-mode step.
  span<const T> aggregated_gradient() const { return span<const T>(agg_); }
  std::vector<double> weights() const { return step_weights(cfg_.weighting, c_.batches()); }
  void set_batches(std::vector<std::size_t> b) { c_.set_batches(std::move(b)); }
  /// Takes every worker's batch size from a load-balancing policy (balance::balance_policy,
  /// e.g. balance::omnilearn_bsp after rebalance()); the aggregation weights become b_i / B,
  /// which is the policy's weight(w) for OmniLearn.
  template <balance::balance_policy Policy>
  void set_batches_from(const Policy& p) {
    std::vector<std::size_t> b(c_.workers());
    for (std::size_t w = 0; w < b.size(); ++w) b[w] = p.assignment(w);
    c_.set_batches(std::move(b));
  }
  std::uint64_t rounds() const { return rounds_; }
  /// Mean loss of the workers' last round.
  double last_loss() const {
    double l = 0;
    for (const auto& r : last_) l += r.loss / static_cast<double>(last_.size());
    return l;
  }
  const bsp_config& config() const { return cfg_; }

 private:
  // Every worker's gradient first, every step at the synchronisation (parameters mode too:
  // each replica's step reads only its own gradient, so the bits are those of stepping at
  // once), so a gradient refused by the non-finite policy leaves every replica as it was.
  void work(std::size_t w, round_stats& out) {
    out.steps = 1;
    out.loss = c_.compute_gradient(w);
  }
  // Every worker's per-rank step over the sequential exchange; the aggregate (gradients mode)
  // or rank 0's common-form average (parameters mode) is kept for the observers.
  void synchronise() {
    const bool grads = cfg_.mode == aggregation::gradients;
    (grads ? agg_ : model_).resize(c_.params(0).size());
    this->run_ranks([&](auto& ex, std::size_t w) {
      return rank_step(ex, w, grads ? span<T>(agg_) : span<T>(),
                       !grads && w == 0 ? span<T>(model_) : span<T>());
    });
  }

 public:
  /// Checkpointing (core/archive.hpp): visits the mutable state in a fixed order; `ar(...)`
  /// writes or reads it. Configuration (optimizer, hyper-parameters) is rebuilt by the caller.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(c_, limit_, agg_, model_, last_, rounds_);
  }

 private:
  bsp_config cfg_;
  detail::round_limit limit_;
  std::vector<T> agg_, model_;
  std::vector<round_stats> last_;
  std::uint64_t rounds_ = 0;
};

}  // namespace heterograd::algorithms::sync
