#pragma once
// SelSync: selective synchronisation (Tyagi & Swany, "Accelerating Distributed ML Training via
// Selective Synchronization", IEEE CLUSTER 2023, arXiv 2307.07950, #9).
//
// Every step each worker computes its gradient g and its L2 norm N_t = ||g||, smooths it by a
// windowed EWMA over the last w norms (w = 25, smoothing alpha = 0.01),
//     S_t = sum_{k<w} (1 - alpha)^k N_{t-k} / sum_{k<w} (1 - alpha)^k,
// takes the relative change of the smoothed norm, delta_t = |S_t - S_{t-1}| / S_{t-1}, and
// smooths that by the same windowed EWMA:
//     delta~_t = sum_{k<w} (1 - alpha)^k delta_{t-k} / sum_{k<w} (1 - alpha)^k.
// Both smoothings are the authors' code's (their norm tracker returns its smoothed value, and
// the relative change of that is smoothed again). S exists from step w, delta from w + 1 and
// delta~ from step 2w; before that a worker votes 1. smooth_norm = false takes delta from the
// raw norms (S_t = N_t; delta~ from step w + 1), this library's reading before issue 50.
// A worker votes 1 ("synchronise") while delta~ is undefined or delta~ >= threshold, else 0.
// The votes are summed by a one-integer allreduce every step:
//     sum > 0  -> SYNC: parameter aggregation (default: step on the own gradient, then
//                 average the models) or gradient aggregation (average the gradients, then
//                 step);
//     sum = 0  -> LOCAL: every worker steps on its own gradient.
// With threshold 0 every step synchronises: SelSync is then exactly BSP in the same
// aggregation mode (tested bitwise). Where this differs from the authors' code (the norm of
// the whole gradient against their sum of per-tensor norms, the order of averaging and
// stepping, the warm-up's length) is listed in docs/references.md.
//
// Driving: the policy of runtime::round_runtime (one round = one step); communication_time(r) is
// vote_time plus sync_time when the round synchronises.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "heterograd/algorithms/sync/bsp.hpp"
#include "heterograd/algorithms/sync/common.hpp"
#include "heterograd/algorithms/sync/detail/cluster.hpp"
#include "heterograd/algorithms/sync/detail/rank.hpp"
#include "heterograd/algorithms/sync/exchange.hpp"
#include "heterograd/algorithms/sync/weights.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/reduce.hpp"

namespace heterograd::algorithms::sync {

struct selsync_config {
  double threshold = 0.3;  ///< Delta_thr (0: every step synchronises, i.e. BSP)
  std::size_t window = 25;  ///< w: both EWMA windows (the norm's and its relative change's)
  double alpha = 0.01;     ///< EWMA smoothing
  /// Smooth the gradient norm by the windowed EWMA before its relative change (the authors'
  /// code); false: the relative change of the raw norm.
  bool smooth_norm = true;
  aggregation mode = aggregation::parameters;
  averaging weighting = averaging::sample_weighted;
  state_policy states = state_policy::keep_local;
  double sync_time = 0.0;  ///< virtual seconds of a model or gradient allreduce
  double vote_time = 0.0;  ///< virtual seconds of the one-integer vote allreduce
  /// A worker's gradient with an infinity or a NaN: fail (nonfinite_gradient_error), skip or
  /// zero (nonfinite.hpp; detail/cluster.hpp says what each does in a round).
  nonfinite_policy nonfinite = nonfinite_policy::fail;

  static constexpr auto description() {
    return describe("selsync",
                    describe_field("threshold", &selsync_config::threshold,
                                   "Delta_thr on the EWMA of relative gradient-norm change (0: BSP)",
                                   finite_at_least(0)),
                    describe_field("window", &selsync_config::window,
                                   "w: both EWMA windows; no decision before step 2w (w + 1 without smooth_norm)",
                                   at_least(1)),
                    describe_field("alpha", &selsync_config::alpha, "EWMA smoothing", open_closed(0, 1)),
                    describe_field("smooth_norm", &selsync_config::smooth_norm,
                                   "smooth the gradient norm by the windowed EWMA before its relative "
                                   "change (the authors' code); false: the raw norm's relative change"),
                    describe_field("aggregation", &selsync_config::mode,
                                   "what a synchronising step averages", aggregations),
                    describe_field("weighting", &selsync_config::weighting, "aggregation weights",
                                   step_averagings),
                    describe_field("states", &selsync_config::states,
                                   "optimizer states after a parameter average", state_policies),
                    describe_field("sync_time", &selsync_config::sync_time,
                                   "virtual seconds of a model or gradient allreduce", finite_at_least(0)),
                    describe_field("vote_time", &selsync_config::vote_time,
                                   "virtual seconds of the one-integer vote allreduce", finite_at_least(0)),
                    describe_field("nonfinite", &selsync_config::nonfinite,
                                   "a gradient with an infinity or a NaN", nonfinite_policies));
  }

  void validate() const { validate_fields(*this); }
};

/// One worker's SelSync trigger: a value (a few numbers and two windows).
class selsync_trigger {
 public:
  selsync_trigger() = default;
  selsync_trigger(std::size_t window, double alpha, double threshold, bool smooth_norm = true)
      : window_(window), alpha_(alpha), threshold_(threshold), smooth_norm_(smooth_norm),
        deltas_(window, 0.0), norms_(smooth_norm ? window : 0, 0.0) {
    require(window >= 1, "selsync.window", window, "must be >= 1");
    require(alpha > 0 && alpha <= 1, "selsync.alpha", alpha, "must be in (0, 1]");
    require(std::isfinite(threshold) && threshold >= 0, "selsync.threshold", threshold,
            "must be finite and >= 0");
  }

  /// Feeds this step's gradient norm; returns the vote (1: synchronise).
  int observe(double grad_norm) {
    double level = grad_norm;
    if (smooth_norm_) {
      norms_[norms_filled_ % window_] = grad_norm;
      ++norms_filled_;
      if (norms_filled_ < window_) return vote();  // no smoothed norm yet
      level = ewma(norms_, norms_filled_);
    }
    if (seen_ > 0) {
      const double d = std::fabs(level - last_) / last_;  // inf or NaN when last_ = 0
      deltas_[filled_ % window_] = d;
      ++filled_;
    }
    last_ = level;
    ++seen_;
    return vote();
  }
  /// The current vote without a new observation.
  int vote() const {
    if (!ready()) return 1;
    const double s = smoothed();
    return s < threshold_ ? 0 : 1;  // NaN (a zero norm) votes to synchronise
  }
  bool ready() const { return filled_ >= window_; }
  /// The first observation (counted from 1) whose vote can be 0: 2w with the smoothed norm,
  /// w + 1 without.
  std::size_t first_decision() const { return smooth_norm_ ? 2 * window_ : window_ + 1; }
  /// delta~ over the last `window` relative changes (NaN before the window is full).
  double smoothed() const {
    return ready() ? ewma(deltas_, filled_) : std::numeric_limits<double>::quiet_NaN();
  }
  /// The norm whose relative change is taken: S_t, or the raw norm without smooth_norm (NaN
  /// before the first).
  double level() const { return seen_ > 0 ? last_ : std::numeric_limits<double>::quiet_NaN(); }
  friend bool operator==(const selsync_trigger&, const selsync_trigger&) = default;

  /// Checkpointing (core/archive.hpp): the windows and the counters; window, alpha, threshold
  /// and smooth_norm are configuration, rebuilt by the caller.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(deltas_, filled_, seen_, last_, norms_, norms_filled_);
  }

 private:
  // The windowed EWMA of a ring holding `filled` values (>= window): the newest weighs 1, the
  // one k steps older (1 - alpha)^k, normalised by the weights' sum.
  double ewma(const std::vector<double>& ring, std::size_t filled) const {
    double num = 0, den = 0, f = 1;
    for (std::size_t k = 0; k < window_; ++k) {
      const std::size_t idx = (filled - 1 - k) % window_;
      num += f * ring[idx];
      den += f;
      f *= 1.0 - alpha_;
    }
    return num / den;
  }

  std::size_t window_ = 25;
  double alpha_ = 0.01;
  double threshold_ = 0.3;
  bool smooth_norm_ = true;
  std::vector<double> deltas_;
  std::size_t filled_ = 0;
  std::uint64_t seen_ = 0;
  double last_ = 0;
  std::vector<double> norms_;
  std::size_t norms_filled_ = 0;
};

namespace detail {

/// A worker's vote on its (screened) gradient: the trigger on ||g||_2, computed with the
/// deterministic reduction (the same bits on every backend and thread count; sizeof(T)
/// bytes per element). Run by the rank's memory: off the host the norm is the vote's one
/// scalar transfer.
template <class Memory, class T, class S>
int selsync_vote(selsync_trigger& trigger, const Memory& memory, span<const T, S> g) {
  return trigger.observe(
      memory.read(g.size(), [&](const auto& policy) { return kernels::l2_norm(policy, g); }));
}

/// One rank's SelSync step after its vote: the one-integer allreduce of the votes, then BSP's
/// synchronising step with weight w (some rank voted 1) or a local step on the own gradient.
/// Returns whether it synchronised.
template <class T, class S, class Ex, class Rep>
step_task<bool> selsync_step(Ex& ex, Rep rep, const selsync_config& cfg, double w, int vote,
                             span<T, S> params, span<const T, S> grads, span<T, S> agg,
                             span<T, S> model) {
  std::int64_t votes = vote;
  co_await ex.allreduce_sum(span<std::int64_t>(&votes, 1));
  const bool sync = votes > 0;
  if (sync)
    co_await synchronous_step<T>(ex, rep, cfg.mode, cfg.states, w, params, grads, agg, model);
  else
    rep.update(grads, params);
  co_return sync;
}

}  // namespace detail

template <class T, class Optimizer, class Grad, class Transform = identity_transform>
class selsync : public detail::replicated<T, Optimizer, Grad, Transform> {
  using base = detail::replicated<T, Optimizer, Grad, Transform>;
  using base::c_;

 public:
  selsync(std::size_t workers, span<const T> init, Optimizer opt, Grad grad,
          std::vector<std::size_t> batches, selsync_config cfg = {}, Transform tr = {})
      : base((cfg.validate(), workers), init, std::move(opt), std::move(grad), std::move(batches),
             std::move(tr)),
        cfg_(cfg), limit_(workers),
        triggers_(workers, selsync_trigger(cfg_.window, cfg_.alpha, cfg_.threshold, cfg_.smooth_norm)),
        votes_(workers, 0), stats_(workers) {
    decltype(c_)::require_state_policy(cfg_.states, "selsync.states");
    c_.set_nonfinite(cfg_.nonfinite, "selsync");
  }

  // --- runtime::round_runtime policy (batch(w): the base's) -------------------------------------
  void compute(std::size_t w, std::uint64_t round, std::uint64_t, round_stats& out) {
    if (!limit_.run_now(w, round)) return;
    work(w);
    out = stats_[w];
  }
  /// Called when every worker finished the step: the vote decides the cost of the round.
  double communication_time(std::uint64_t) {
    run_deferred();
    return step_communication_time(vote_sum() > 0);
  }
  /// Virtual seconds of a step that synchronises or not: the vote allreduce, plus the model
  /// or gradient allreduce when it synchronises (heterograd-run times its real steps by it).
  double step_communication_time(bool synchronises) const {
    return cfg_.vote_time + (synchronises ? cfg_.sync_time : 0.0);
  }
  /// Local steps of worker w in a round: one (a round is a step).
  std::size_t steps_in_round(std::size_t, std::uint64_t) const { return 1; }
  template <class Ctl>
  void on_round(Ctl& ctl, std::uint64_t, std::vector<round_stats>& results) {
    run_deferred();
    finish();
    for (std::size_t w = 0; w < c_.workers(); ++w) {
      results[w] = stats_[w];
      ctl.applied(static_cast<std::uint32_t>(w), 0);
    }
  }
  void limit_rounds(std::uint64_t limit) { limit_.set(limit); }

  /// One step without a runtime.
  void step() {
    for (std::size_t w = 0; w < c_.workers(); ++w) work(w);
    finish();
  }

  /// What a rank of a real runtime holds of shared round state: nothing (runtime/rounds.hpp).
  struct rank_state {};
  rank_state shared_state() const { return {}; }
  /// Its rounds take a collective exchange (exchange.hpp's round contract).
  using exchange_kind = collective_exchange_tag;

  // --- the per-rank step (the sim's ranks above, the threads and MPI runtimes, selsync_worker)
  /// Worker w's step after its vote, over exchange `ex` (exchange.hpp; agg and model as in
  /// bsp::rank_step); returns whether it synchronised.
  template <class Ex>
  step_task<bool> rank_step(Ex& ex, std::size_t w, span<T> agg, span<T> model) {
    return detail::selsync_step<T>(ex, c_.replica_of(w), cfg_,
                                   step_weights(cfg_.weighting, c_.batches())[w], votes_[w],
                                   c_.mutable_params(w), c_.gradient(w), agg, model);
  }
  /// Rank r.worker's step over an exchange that never suspends (a real transport's; the
  /// round contract of exchange.hpp, run by runtime::run_worker): its gradient and vote, then
  /// its step, the aggregate replacing its gradient as selsync_worker's does; r.count (one
  /// worker per process) records the step's decision.
  template <exchange<T> Ex>
  round_outcome run_round(rank_round<Ex>& r, rank_state&) {
    const std::size_t w = r.worker;
    work(w);
    const bool synchronised = rank_step(r.world, w, c_.mutable_gradient(w), {}).run();
    if (r.count) {
      decisions_.push_back(synchronised);
      syncs_ += synchronised ? 1 : 0;
    }
    return {.steps = 1, .loss = stats_[w].loss, .synchronised = synchronised};
  }
  template <class Ex>
  [[deprecated("use run_round(rank_round<Ex>&, rank_state&) (algorithms/sync/exchange.hpp)")]]
  void run_round(Ex& ex, std::size_t w, bool count) {
    rank_round<Ex> r{.world = ex, .worker = w, .count = count};
    rank_state s;
    (void)run_round(r, s);
  }

  // --- observers (and the base's) ---------------------------------------------------------------
  const selsync_trigger& trigger(std::size_t w) const { return triggers_.at(w); }
  /// Per step: true if it synchronised.
  const std::vector<bool>& decisions() const { return decisions_; }
  std::uint64_t sync_steps() const { return syncs_; }
  std::uint64_t local_steps() const { return decisions_.size() - syncs_; }
  /// Every worker's delta~ after each step of the simulated runs (step() and the round
  /// runtime; the real runtimes leave it empty), step-major: [step * workers + w]; NaN while
  /// a worker's window fills. What the threshold is compared with.
  const std::vector<double>& smoothed_history() const { return smoothed_; }
  /// Mean loss of the workers' last step.
  double last_loss() const {
    double l = 0;
    for (const auto& s : stats_) l += s.loss / static_cast<double>(stats_.size());
    return l;
  }
  const selsync_config& config() const { return cfg_; }

  /// Checkpointing (core/archive.hpp): visits the mutable state in a fixed order; `ar(...)`
  /// writes or reads it. Configuration (optimizer, threshold, window, alpha, mode) is rebuilt by the caller.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(c_, limit_, triggers_, votes_, stats_, agg_, model_, decisions_, syncs_, smoothed_);
  }

 private:
  void work(std::size_t w) {
    stats_[w].steps = 1;
    stats_[w].loss = c_.compute_gradient(w);
    votes_[w] = detail::selsync_vote(triggers_[w], kernels::serial_host_memory{}, c_.gradient(w));
  }
  void run_deferred() {
    for (std::size_t w = 0; w < c_.workers(); ++w)
      if (limit_.take_deferred(w)) work(w);
  }
  long vote_sum() const {
    long s = 0;
    for (int v : votes_) s += v;  // the one-integer allreduce
    return s;
  }
  // Every worker's per-rank step over the sequential exchange (the vote allreduce, then BSP's
  // synchronising step or a local one); agg_ and model_ as in bsp's synchronise.
  void finish() {
    const bool grads = cfg_.mode == aggregation::gradients;
    const bool sync = vote_sum() > 0;
    if (sync) (grads ? agg_ : model_).resize(c_.params(0).size());
    this->run_ranks([&](auto& ex, std::size_t w) {
      return rank_step(ex, w, grads ? span<T>(agg_) : span<T>(),
                       !grads && w == 0 ? span<T>(model_) : span<T>());
    });
    decisions_.push_back(sync);
    syncs_ += sync ? 1 : 0;
    for (const auto& t : triggers_) smoothed_.push_back(t.smoothed());
  }

  selsync_config cfg_;
  detail::round_limit limit_;
  std::vector<selsync_trigger> triggers_;
  std::vector<int> votes_;
  std::vector<round_stats> stats_;
  std::vector<T> agg_, model_;
  std::vector<bool> decisions_;
  std::uint64_t syncs_ = 0;
  std::vector<double> smoothed_;
};

}  // namespace heterograd::algorithms::sync
