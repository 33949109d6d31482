#pragma once
// The local SGD family: workers take local optimizer steps on their own replicas and
// synchronise their models now and then.
//
//   period H                  every worker takes H local steps per round, then the models are
//                             averaged (Stich 2019; FedAvg, McMahan et al. 2017);
//   per-worker H_i            worker i takes H_i steps (biased local SGD, #1: H_gpu = 32 for
//                             fast workers, H_cpu = 1 for slow ones, so that every worker
//                             finishes a round in about the same time);
//   post-local SGD            the first `warmup_steps` rounds are synchronous (one step each),
//                             then local (Lin, Stich, Patel, Jaggi, ICLR 2020);
//   hierarchical              groups average every H1 = period steps, everyone every
//                             H2 = global_period steps (H2 a multiple of H1; Lin et al. 2020);
//   device sampling           K of the p workers train in a round, drawn uniformly without
//                             replacement from a counter RNG, and the average of those K
//                             becomes everyone's model (LFSGD of #18, Haddadpour & Mahdavi);
//   gossip                    x_j <- sum_l W_jl x_l with a doubly stochastic W (NFSGD of #18);
//   averaging                 uniform (1/n), sample-weighted (b_i H_i / sum_j b_j H_j: the
//                             samples each worker processed in the round), or FedNova-
//                             normalised (weights p_i = b_i / B, see weights.hpp);
//   outer optimizer           the average is handed to an outer optimizer that treats
//                             anchor - average as a gradient (DiLoCo's Nesterov, FedAvgM,
//                             FedAdam: optim/outer.hpp); the anchor is the model of the last
//                             global synchronisation. no_outer keeps the average;
//   optimizer-state policy    keep_local / average / reset at each synchronisation;
//   transforms (#16)          parameters are mapped to a common form before averaging and
//                             back after.
//
// Round structure under runtime::round_runtime: round r = every worker's local steps of that
// round, then one synchronisation (global, a group's, or gossip). Use steps_time<Model> so a
// round's duration is the sum of its steps' durations. Hierarchical group rounds are timed as
// barriers over all workers with group_sync_time (a round_runtime has one barrier).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/algorithms/sync/common.hpp"
#include "heterograd/algorithms/sync/detail/blend.hpp"
#include "heterograd/algorithms/sync/detail/cluster.hpp"
#include "heterograd/algorithms/sync/detail/rank.hpp"
#include "heterograd/algorithms/sync/exchange.hpp"
#include "heterograd/algorithms/sync/weights.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/blend.hpp"
#include "heterograd/kernels/memory.hpp"

namespace heterograd::algorithms::sync {

struct local_sgd_config {
  std::size_t period = 8;                   ///< H (H1 when hierarchical), local steps per round
  std::vector<std::size_t> local_steps{};   ///< per-worker H_i; overrides period when non-empty
  std::size_t warmup_steps = 0;             ///< post-local SGD: synchronous steps first
  std::vector<std::size_t> groups{};        ///< hierarchical: group id of each worker
  std::size_t global_period = 0;            ///< H2 in local steps (0: every round is global)
  std::size_t sampled = 0;                  ///< device sampling: K workers per round (0: all)
  std::uint64_t seed = 0;                   ///< seed of the device-sampling draws
  std::optional<mixing_matrix> gossip{};    ///< gossip averaging instead of a global average
  averaging weighting = averaging::uniform;
  state_policy states = state_policy::keep_local;
  double sync_time = 0.0;                   ///< virtual seconds of a global synchronisation
  double group_sync_time = 0.0;             ///< ... of a group synchronisation
  /// A worker's gradient with an infinity or a NaN: fail (nonfinite_gradient_error), skip or
  /// zero (nonfinite.hpp; detail/cluster.hpp says what each does in a round).
  nonfinite_policy nonfinite = nonfinite_policy::fail;

  static constexpr auto description() {
    return describe("local_sgd",
                    describe_field("period", &local_sgd_config::period,
                                   "H: local steps per round (the fastest worker's with speed_proportional)",
                                   with_note(at_least(1), "(H = 0 never averages)")),
                    describe_field("local_steps", &local_sgd_config::local_steps,
                                   "per-worker H_i (overrides period)", at_least(1)),
                    describe_field("weighting", &local_sgd_config::weighting, "model averaging weights",
                                   averagings),
                    describe_field("states", &local_sgd_config::states, "optimizer states at a sync",
                                   state_policies),
                    describe_field("warmup_steps", &local_sgd_config::warmup_steps,
                                   "post-local SGD: synchronous steps first"),
                    describe_field("groups", &local_sgd_config::groups,
                                   "hierarchical: the group id of each worker ([]: none)"),
                    describe_field("global_period", &local_sgd_config::global_period,
                                   "H2 in local steps, a multiple of period (0: every round is global)"),
                    describe_field("sampled", &local_sgd_config::sampled,
                                   "device sampling: K workers per round (0: all)"),
                    describe_field("seed", &local_sgd_config::seed, "the device-sampling draws' seed"),
                    describe_field("sync_time", &local_sgd_config::sync_time,
                                   "virtual seconds of a global synchronisation", finite_at_least(0)),
                    describe_field("group_sync_time", &local_sgd_config::group_sync_time,
                                   "virtual seconds of a group synchronisation", finite_at_least(0)),
                    describe_field("nonfinite", &local_sgd_config::nonfinite,
                                   "a gradient with an infinity or a NaN", nonfinite_policies));
  }

  /// The fields' own rules (description()), then those between fields and the workers.
  void validate(std::size_t workers) const {
    validate_fields(*this);
    if (!local_steps.empty()) require_same_size("local_sgd.local_steps", local_steps.size(), "workers", workers);
    if (!groups.empty()) {
      require_same_size("local_sgd.groups", groups.size(), "workers", workers);
      require(local_steps.empty(), "local_sgd.local_steps (count)", local_steps.size(),
              "must be 0 with hierarchical groups (groups share H1)");
    }
    if (global_period != 0) {
      require(!groups.empty(), "local_sgd.global_period", global_period,
              "needs groups (hierarchical averaging)");
      require(global_period % period == 0, "local_sgd.global_period", global_period,
              "must be a multiple of period (H2 = k * H1)");
    }
    require(sampled <= workers, "local_sgd.sampled", sampled, "must be <= workers");
    if (gossip) {
      require_same_size("local_sgd.gossip.size", gossip->size(), "workers", workers);
      require(groups.empty() && sampled == 0, "local_sgd.gossip", "set",
              "cannot be combined with groups or device sampling");
      require(weighting != averaging::fednova, "local_sgd.weighting", "fednova",
              "cannot be combined with gossip");
      require(states != state_policy::average, "local_sgd.states", "average",
              "cannot be combined with gossip (use keep_local or reset)");
    }
  }
};

/// Where a round's synchronisation happens.
enum class sync_scope { global, group, gossip };

/// The pure schedule of a local SGD configuration: local steps per worker and round, the
/// round's scope and its sampled workers. A value; the same on every worker and runtime.
class local_sgd_schedule {
 public:
  local_sgd_schedule() = default;
  local_sgd_schedule(std::size_t workers, local_sgd_config cfg)
      : n_(workers), cfg_((cfg.validate(workers), std::move(cfg))) {}

  std::size_t workers() const { return n_; }
  const local_sgd_config& config() const { return cfg_; }
  bool warmup(std::uint64_t round) const { return round < cfg_.warmup_steps; }
  /// Local steps of worker w in `round` (0 for a worker not sampled).
  std::size_t steps(std::size_t w, std::uint64_t round) const {
    if (warmup(round)) return 1;
    if (cfg_.sampled != 0 && !is_sampled(w, round)) return 0;
    return cfg_.local_steps.empty() ? cfg_.period : cfg_.local_steps[w];
  }
  /// The largest steps() over workers and rounds.
  std::size_t max_steps() const {
    std::size_t m = std::max<std::size_t>(cfg_.period, 1);
    for (auto h : cfg_.local_steps) m = std::max(m, h);
    return m;
  }
  sync_scope scope(std::uint64_t round) const {
    if (warmup(round)) return cfg_.gossip ? sync_scope::gossip : sync_scope::global;
    if (cfg_.gossip) return sync_scope::gossip;
    if (cfg_.groups.empty() || cfg_.global_period == 0) return sync_scope::global;
    const std::uint64_t local_round = round - cfg_.warmup_steps;
    return ((local_round + 1) * cfg_.period) % cfg_.global_period == 0 ? sync_scope::global
                                                                        : sync_scope::group;
  }
  /// The workers that train in `round`, in increasing order (all of them without sampling).
  std::vector<std::size_t> participants(std::uint64_t round) const {
    std::vector<std::size_t> p(n_);
    for (std::size_t i = 0; i < n_; ++i) p[i] = i;
    if (cfg_.sampled == 0 || warmup(round)) return p;
    counter_rng(cfg_.seed, 0x5a3917ull).shuffle(p.begin(), p.end(), round * n_);
    p.resize(cfg_.sampled);
    std::sort(p.begin(), p.end());
    return p;
  }
  bool is_sampled(std::size_t w, std::uint64_t round) const {
    const auto p = participants(round);
    return std::binary_search(p.begin(), p.end(), w);
  }
  /// The members of worker w's group (w's group id), in increasing order.
  std::vector<std::size_t> group_of(std::size_t w) const {
    std::vector<std::size_t> g;
    for (std::size_t i = 0; i < n_; ++i)
      if (cfg_.groups[i] == cfg_.groups[w]) g.push_back(i);
    return g;
  }
  double communication_time(std::uint64_t round) const {
    return scope(round) == sync_scope::group ? cfg_.group_sync_time : cfg_.sync_time;
  }

 private:
  std::size_t n_ = 0;
  local_sgd_config cfg_;
};

/// A worker-time model for rounds of several local steps: job k of worker w (its round k)
/// lasts the sum of the base model's durations of its steps, step s of round k being the
/// base model's job k * max_steps + s (distinct coordinates for random models).
template <class Model>
class steps_time {
 public:
  steps_time(Model base, local_sgd_schedule s) : base_(std::move(base)), s_(std::move(s)) {}
  double duration(std::uint32_t w, std::uint64_t k, double t, std::size_t b) const {
    const std::size_t h = s_.steps(w, k);
    const std::uint64_t stride = s_.max_steps();
    double d = 0;
    for (std::size_t j = 0; j < h; ++j) d += base_.duration(w, k * stride + j, t + d, b);
    return d;
  }

 private:
  Model base_;
  local_sgd_schedule s_;
};

namespace detail {

/// The weights of a round's average over `members` (increasing worker ids), worker m having
/// batch batches[m] and taken steps_of(m) local steps in the round: uniform 1/K,
/// sample-weighted b_m H_m / sum_j b_j H_j (the samples processed in the round), or FedNova's
/// normalised weights with the anchor's (weights.hpp). `states`: what the optimizer-state
/// policy of a global average weighs with (FedNova: p_m = b_m / B; else the models').
/// One formula for the simulated policy and the per-rank helper (workers.hpp).
struct round_weights {
  std::vector<double> models;
  double anchor = 0;
  std::vector<double> states;
};
template <class StepsOf>
round_weights member_weights(averaging a, const std::vector<std::size_t>& batches,
                             const std::vector<std::size_t>& members, StepsOf steps_of) {
  round_weights r;
  if (a == averaging::uniform) {
    r.models.assign(members.size(), 1.0 / static_cast<double>(members.size()));
    r.states = r.models;
    return r;
  }
  std::vector<std::size_t> b;
  for (auto m : members) b.push_back(batches[m]);
  if (a == averaging::fednova) {
    std::vector<std::size_t> tau;
    for (auto m : members) tau.push_back(steps_of(m));
    r.states = sample_weights(b);
    const auto f = fednova_weights(r.states, tau);
    r.anchor = f.anchor;
    r.models = f.workers;
    return r;
  }
  std::vector<std::size_t> samples;
  for (auto m : members) samples.push_back(batches[m] * steps_of(m));
  r.models = sample_weights(samples);
  r.states = r.models;
  return r;
}

/// This rank's weight among `members` (increasing ranks), and whether it is one.
inline double weight_of(const std::vector<std::size_t>& members, const std::vector<double>& w,
                        std::size_t me, bool* member) {
  const auto it = std::lower_bound(members.begin(), members.end(), me);
  *member = it != members.end() && *it == me;
  return *member ? w[static_cast<std::size_t>(it - members.begin())] : 0.0;
}

/// Gossip's buffers of a rank whose replica is Rep: buffers of its memory.
template <class Rep, class T>
using gossip_buffers =
    std::vector<typename std::remove_cvref_t<decltype(std::declval<Rep>().memory)>::template vector<T>>;

/// Round r's global synchronisation of one rank (local_sgd_sync's `global` case).
template <class T, class S, class Ex, class Rep, class Outer, class OuterState>
step_task<bool> local_sgd_global(Ex& world, Rep rep, const local_sgd_schedule& sched,
                                 const std::vector<std::size_t>& batches, const Outer& outer,
                                 OuterState& os, span<T, S> anchor, std::uint64_t r,
                                 span<T, S> params, span<T, S> model) {
  const std::size_t me = rep.rank;
  const std::size_t n = params.size();
  const auto members = sched.participants(r);
  const auto w = member_weights(sched.config().weighting, batches, members,
                                [&sched, r](std::size_t m) { return sched.steps(m, r); });
  bool member = false;
  const double mine = weight_of(members, w.models, me, &member);
  if (!member) rep.fill(params, T(0));
  rep.tr.to_common(me, params);  // non-members map zeros: harmless
  co_await world.allreduce(span<const T, S>(params), params, mine);
  // FedNova's affine term, added last like a sum over the members and the anchor.
  if (w.anchor != 0.0)
    rep.memory.run(n, [&](const auto& p) {
      kernels::axpby(p, static_cast<T>(w.anchor), span<const T, S>(anchor), T(1), params);
    });
  if (!model.empty()) rep.copy(span<const T, S>(params), model);
  if constexpr (is_no_outer_v<Outer>) {
    rep.copy(span<const T, S>(params), anchor);
  } else {
    // The average is overwritten with the anchor next: the outer step may use it for its
    // pseudo-gradient (no scratch buffer per round).
    rep.memory.run(n, [&](const auto& p) {
      if constexpr (requires { outer.step_in_place(p, params, os, anchor); })
        outer.step_in_place(p, params, os, anchor);
      else
        outer.step(p, span<const T, S>(params), os, anchor);
    });
  }
  rep.copy(span<const T, S>(anchor), params);
  rep.tr.from_common(me, params);
  bool smember = false;
  const double smine = weight_of(members, w.states, me, &smember);
  co_await apply_state_policy<T>(world, rep, sched.config().states, smine, smember, params);
  co_return true;
}

/// Round r's synchronisation within this rank's group (local_sgd_sync's `group` case).
template <class T, class S, class GroupEx, class Rep>
step_task<bool> local_sgd_group(GroupEx& group, Rep rep, const local_sgd_schedule& sched,
                                const std::vector<std::size_t>& batches, std::uint64_t r,
                                span<T, S> params, span<T, S> model) {
  const std::size_t me = rep.rank;
  const auto members = sched.group_of(me);
  const auto w = member_weights(sched.config().weighting, batches, members,
                                [&sched, r](std::size_t m) { return sched.steps(m, r); }).models;
  bool member = false;
  const double mine = weight_of(members, w, me, &member);
  rep.tr.to_common(me, params);
  co_await group.allreduce(span<const T, S>(params), params, mine);
  if (!model.empty()) rep.copy(span<const T, S>(params), model);
  rep.tr.from_common(me, params);
  co_await apply_state_policy<T>(group, rep, sched.config().states, mine, true, params);
  co_return true;
}

/// Gossip's buffers for this round: buf[0] for this rank's model (intact while its sends are
/// out), buf[1 + k] for in-neighbour k's; made by the rank's memory ((in-degree + 1) * n
/// values), kept when `buf` already has that shape.
template <class T, class Rep, class Buffers>
void shape_gossip_buffers(Rep& rep, Buffers& buf, std::size_t in_degree, std::size_t n) {
  if (buf.size() == in_degree + 1 && buf[0].size() == n) return;
  buf.clear();
  for (std::size_t k = 0; k <= in_degree; ++k)
    buf.push_back(rep.memory.template make<T>(n));
}

/// Round r's gossip of one rank (local_sgd_sync's `gossip` case).
template <class T, class S, class Ex, class Rep, class Buffers>
step_task<bool> local_sgd_gossip(Ex& world, Rep rep, const local_sgd_schedule& sched,
                                 span<T, S> anchor, span<T, S> params, Buffers& buf) {
  const auto& W = *sched.config().gossip;
  const std::size_t me = rep.rank;
  const std::size_t n = params.size();
  const std::size_t ranks = sched.workers();
  rep.tr.to_common(me, params);
  std::vector<std::size_t> to, from;
  for (std::size_t j = 0; j < ranks; ++j)
    if (j != me && W(j, me) != 0.0) to.push_back(j);
  for (std::size_t l = 0; l < ranks; ++l)
    if (l != me && W(me, l) != 0.0) from.push_back(l);
  shape_gossip_buffers<T>(rep, buf, from.size(), n);
  rep.copy(span<const T, S>(params), kernels::view(rep.memory, buf[0]));
  std::vector<span<T, S>> into;
  for (std::size_t k = 0; k < from.size(); ++k) into.push_back(kernels::view(rep.memory, buf[1 + k]));
  // neighbours() is optional in an exchange (exchange.hpp): without it, no gossip.
  if constexpr (requires { world.neighbours(kernels::cview(rep.memory, buf[0]), to, from, into); })
    co_await world.neighbours(kernels::cview(rep.memory, buf[0]), to, from, std::move(into));
  else
    throw std::invalid_argument("local_sgd.gossip: the exchange has no neighbours() (gossip's "
                                "point-to-point messages)");
  std::vector<span<const T, S>> xs;
  std::vector<double> wj;
  std::size_t k = 0;
  for (std::size_t l = 0; l < ranks; ++l) {
    if (W(me, l) == 0.0) continue;
    xs.push_back(kernels::cview(rep.memory, buf[l == me ? 0 : 1 + k++]));
    wj.push_back(W(me, l));
  }
  const auto tw = cast_weights<T>(wj);
  rep.memory.run(n, [&](const auto& p) { kernels::weighted_sum(p, params, xs, std::span<const T>(tw)); });
  // No global model exists: the anchor follows worker 0's (what the runtimes evaluate).
  if (me == 0) rep.copy(span<const T, S>(params), anchor);
  rep.tr.from_common(me, params);
  if (sched.config().states == state_policy::reset) rep.reset(params);
  co_return true;
}

/// The round-r synchronisation of one rank (every rank of the run calls it, trained or not):
///   global  x <- the weighted average of the round's participants' models in the common
///           form (a non-participant contributes zeros with weight 0), plus FedNova's anchor
///           term last; the outer optimizer (or none) makes it the new anchor, which becomes
///           the model; then the optimizer-state policy with the states' weights;
///   group   the same average over this rank's group (`group`: the exchange of its group),
///           no anchor, no outer optimizer;
///   gossip  x_me <- sum_l W(me, l) x_l over the nonzero entries of row me in increasing l:
///           this rank's model goes to every j with W(j, me) != 0 and comes back from every
///           l with W(me, l) != 0 (bytes: (in-degree + out-degree + 2) * S); rank 0's result
///           becomes its anchor (no global model exists: the anchor is worker 0's model as of
///           the last round).
/// `anchor` and `os` are this rank's copies of the anchor and the outer state (the same on
/// every rank); `model` (when not empty) receives the global or group average. Every buffer
/// is in memory space S (the rank's memory, rep.memory, runs every kernel and makes gossip's
/// buffers); the only host values are the weights and, under SelSync, the votes. `gossip`
/// (when given) keeps gossip's buffers from round to round (made on the first, reused after:
/// the per-rank helper's); without it they are made for the round.
template <class T, class S, class Ex, class GroupEx, class Rep, class Outer, class OuterState,
          class Buffers = gossip_buffers<Rep, T>>
step_task<bool> local_sgd_sync(Ex& world, GroupEx* group, Rep rep, const local_sgd_schedule& sched,
                               const std::vector<std::size_t>& batches, const Outer& outer,
                               OuterState& os, span<T, S> anchor, std::uint64_t r,
                               span<T, S> params, span<T, S> model, Buffers* gossip = nullptr) {
  switch (sched.scope(r)) {
    case sync_scope::global:
      co_await local_sgd_global<T>(world, rep, sched, batches, outer, os, anchor, r, params, model);
      break;
    case sync_scope::group:
      co_await local_sgd_group<T>(*group, rep, sched, batches, r, params, model);
      break;
    case sync_scope::gossip: {
      Buffers local;
      co_await local_sgd_gossip<T>(world, rep, sched, anchor, params, gossip != nullptr ? *gossip : local);
      break;
    }
  }
  co_return true;
}

}  // namespace detail

template <class T, class Optimizer, class Grad, class Outer = no_outer,
          class Transform = identity_transform>
class local_sgd : public detail::replicated<T, Optimizer, Grad, Transform> {
  using base = detail::replicated<T, Optimizer, Grad, Transform>;
  using base::c_;

 public:
  using outer_state = decltype(std::declval<const Outer&>().init(thrust::cpp::par,
                                                                 std::declval<std::vector<T>&>()));

  local_sgd(std::size_t workers, span<const T> init, Optimizer opt, Grad grad,
            std::vector<std::size_t> batches, local_sgd_config cfg, Outer outer = {},
            Transform tr = {})
      : base((cfg.validate(workers), workers), init, std::move(opt), std::move(grad),
             std::move(batches), std::move(tr)),
        sched_(workers, std::move(cfg)), outer_(std::move(outer)),
        anchor_(init.begin(), init.end()), outer_state_(outer_.init(thrust::cpp::par, anchor_)),
        limit_(workers), round_steps_(workers, 0), last_(workers) {
    decltype(c_)::require_state_policy(sched_.config().states, "local_sgd.states");
    c_.set_nonfinite(sched_.config().nonfinite, "local_sgd");
    if constexpr (!detail::is_no_outer_v<Outer>)
      require(!sched_.config().gossip, "local_sgd.gossip", "set",
              "cannot be combined with an outer optimizer (there is no global average)");
  }

  // --- runtime::round_runtime policy (batch(w): the base's) -------------------------------------
  double communication_time(std::uint64_t round) const { return sched_.communication_time(round); }
  /// Local steps of worker w in `round` (the schedule's; 0 for a worker not sampled).
  std::size_t steps_in_round(std::size_t w, std::uint64_t round) const {
    return sched_.steps(w, round);
  }
  void compute(std::size_t w, std::uint64_t round, std::uint64_t, round_stats& out) {
    if (!limit_.run_now(w, round)) return;
    work(w, round, out);
  }
  template <class Ctl>
  void on_round(Ctl& ctl, std::uint64_t round, std::vector<round_stats>& results) {
    for (std::size_t w = 0; w < c_.workers(); ++w)
      if (limit_.take_deferred(w)) work(w, round, results[w]);
    finish_round(round, results);
    for (std::size_t w = 0; w < c_.workers(); ++w)
      if (results[w].steps > 0) ctl.applied(static_cast<std::uint32_t>(w), 0);
  }
  void limit_rounds(std::uint64_t limit) { limit_.set(limit); }

  /// One round without a runtime: every worker's local steps in rank order, then the sync.
  void round() {
    std::vector<round_stats> r(c_.workers());
    for (std::size_t w = 0; w < c_.workers(); ++w) work(w, rounds_, r[w]);
    finish_round(rounds_, r);
  }

  // --- observers (and the base's) ---------------------------------------------------------------
  const std::vector<T>& anchor() const { return anchor_; }
  const outer_state& outer_optimizer_state() const { return outer_state_; }
  const local_sgd_schedule& schedule() const { return sched_; }
  std::uint64_t rounds() const { return rounds_; }
  std::uint64_t steps(std::size_t w) const { return c_.steps(w); }
  /// Mean loss of the last round over the workers that trained in it.
  double last_loss() const {
    double l = 0;
    std::size_t active = 0;
    for (const auto& r : last_)
      if (r.steps) {
        l += r.loss;
        ++active;
      }
    return active ? l / static_cast<double>(active) : 0.0;
  }
  void set_batches(std::vector<std::size_t> b) { c_.set_batches(std::move(b)); }
  const Outer& outer_optimizer() const { return outer_; }

  // --- the per-rank step (the sim's ranks below, the threads and MPI runtimes) ---------------
  /// What a rank of a real runtime holds of the shared round state: the round index, the
  /// anchor and the outer state (the same on every rank; each rank keeps its own copy).
  struct rank_state {
    std::uint64_t round = 0;
    std::vector<T> anchor;
    outer_state outer;
  };
  /// The shared round state now (take it before any rank moves).
  rank_state shared_state() const { return {rounds_, anchor_, outer_state_}; }
  /// Its rounds take a collective exchange (exchange.hpp's round contract).
  using exchange_kind = collective_exchange_tag;
  /// Each worker's group id (hierarchical averaging; empty: none): a runtime gives rank w
  /// the exchange of the ranks with its id as rank_round::group.
  const std::vector<std::size_t>& groups() const { return sched_.config().groups; }
  /// Worker w's round-r synchronisation over exchange `world` (`group`: its group's
  /// exchange, for hierarchical rounds) with its copies of the anchor and the outer state
  /// (detail::local_sgd_sync; local_sgd_worker runs the same); `model` as there.
  template <class Ex, class GroupEx>
  step_task<bool> rank_sync(Ex& world, GroupEx* group, std::size_t w, std::uint64_t r,
                            std::vector<T>& anchor, outer_state& os, span<T> model) {
    return detail::local_sgd_sync<T>(world, group, c_.replica_of(w), sched_, c_.batches(), outer_,
                                     os, span<T>(anchor), r, c_.mutable_params(w), model);
  }
  /// Rank r.worker's round over exchanges that never suspend (a real transport's; the round
  /// contract of exchange.hpp, run by runtime::run_worker): its local steps, then its
  /// synchronisation over r.world (r.group: its group's exchange in a group round) with its
  /// own round state `s`; r.count (one worker per process) advances rounds().
  template <exchange<T> Ex>
  round_outcome run_round(rank_round<Ex>& r, rank_state& s) {
    const std::size_t w = r.worker;
    work(w, s.round, last_.at(w));
    const bool synchronised = rank_sync(r.world, r.group, w, s.round, s.anchor, s.outer, {}).run();
    ++s.round;
    if (r.count) ++rounds_;
    return {.steps = last_[w].steps, .loss = last_[w].loss, .synchronised = synchronised};
  }
  template <class Ex>
  [[deprecated("use run_round(rank_round<Ex>&, rank_state&) (algorithms/sync/exchange.hpp)")]]
  void run_round(Ex& world, std::type_identity_t<Ex>* group, std::size_t w, rank_state& s,
                 bool count) {
    rank_round<Ex> r{.world = world, .group = group, .worker = w, .count = count};
    (void)run_round(r, s);
  }
  /// The anchor and outer state after a run under another runtime (one rank's copies).
  void set_shared(rank_state s) {
    require_same_size("local_sgd.anchor", s.anchor.size(), "params", anchor_.size());
    anchor_ = std::move(s.anchor);
    outer_state_ = std::move(s.outer);
  }

 private:
  void work(std::size_t w, std::uint64_t round, round_stats& out) {
    const std::size_t h = sched_.steps(w, round);
    double loss = 0;
    for (std::size_t s = 0; s < h; ++s) loss += c_.local_step(w);
    out.steps = h;
    out.loss = h ? loss / static_cast<double>(h) : 0.0;
    round_steps_[w] = h;
  }

  // Every worker's synchronisation over one sequential exchange (groups split from it).
  // Rank 0 works on the policy's anchor and outer state, the others on copies of them (the
  // same arithmetic on the same values: the copies end equal and are dropped). model_ gets
  // the global average, or the group average of the group with the largest first member.
  void finish_round(std::uint64_t round, const std::vector<round_stats>& results) {
    const auto& cfg = sched_.config();
    const std::size_t n = c_.workers();
    const sync_scope scope = sched_.scope(round);
    std::size_t recorder = n;  // the worker that records model_ (n: none)
    if (scope == sync_scope::global) recorder = 0;
    if (scope == sync_scope::group)
      for (std::size_t w = 0; w < n; ++w)
        if (sched_.group_of(w).front() == w) recorder = w;
    if (recorder < n) model_.resize(c_.dim());
    std::vector<std::vector<T>> anchors(scope == sync_scope::global ? n - 1 : 0, anchor_);
    std::vector<outer_state> outers(anchors.size(), outer_state_);
    sequential_exchange<T> ex(n);
    std::vector<typename sequential_exchange<T>::view> world, groups;
    for (std::size_t w = 0; w < n; ++w) world.push_back(ex.rank(w));
    if (!cfg.groups.empty()) groups = ex.split(cfg.groups);
    std::vector<step_task<bool>> steps;
    for (std::size_t w = 0; w < n; ++w)
      steps.push_back(rank_sync(world[w], groups.empty() ? nullptr : &groups[w], w, round,
                                w == 0 || anchors.empty() ? anchor_ : anchors[w - 1],
                                w == 0 || outers.empty() ? outer_state_ : outers[w - 1],
                                w == recorder ? span<T>(model_) : span<T>()));
    ex.run_in_rank_order(steps);
    last_ = results;
    ++rounds_;
  }

 public:
  /// Checkpointing (core/archive.hpp): visits the mutable state in a fixed order; `ar(...)`
  /// writes or reads it. Configuration (optimizer, hyper-parameters) is rebuilt by the caller.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(c_, anchor_, outer_state_, limit_, round_steps_, model_, last_, rounds_);
  }

 private:
  local_sgd_schedule sched_;
  Outer outer_;
  std::vector<T> anchor_;
  outer_state outer_state_;
  detail::round_limit limit_;
  std::vector<std::size_t> round_steps_;
  std::vector<T> model_;
  std::vector<round_stats> last_;
  std::uint64_t rounds_ = 0;
};

}  // namespace heterograd::algorithms::sync
