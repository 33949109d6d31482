#pragma once
// Per-worker helpers of the synchronous family: what a framework calls from its own training
// loop, one object per rank, over any transport (comm::inproc, comm::mpi, or the user's own;
// heterograd/comm/concepts.hpp). The user owns the parameter and gradient buffers and passes
// them to step(params, grads) after each backward pass:
//
//     auto w = sync::bsp_worker<float, optim::sgd, comm::inproc::communicator>(
//         comm, optim::sgd({.lr = 0.1}), params, /*all ranks' b_i=*/{8, 24});
//     for (...) { compute_gradient(params, grads); w.step(params, grads); }
//
//   bsp_worker        one synchronous step: the sample-weighted gradient allreduce
//                     (weights b_i / B) then the optimizer step, or the optimizer step then
//                     the weighted parameter allreduce (and the optimizer-state policy);
//   local_sgd_worker  local optimizer steps; at the end of each round of the schedule (H or
//                     H_i steps, post-local warm-up, hierarchical groups via split(), device
//                     sampling, gossip via send/recv with the mixing matrix's neighbours) the
//                     round's synchronisation, the outer optimizer and the state policy;
//   selsync_worker    the SelSync trigger on ||g||, a one-integer vote allreduce, then a
//                     synchronous step or a local one;
//   eager_worker      eager-SGD's step over the transport's partial allreduce (solo or
//                     majority; comm::inproc::partial_allreduce, comm::mpi::partial_allreduce).
//
// Each helper's step is the simulated policy's per-rank step (detail/rank.hpp,
// selsync.hpp, local_sgd.hpp, eager.hpp), run on this rank's own state over the transport
// (transport_exchange, exchange.hpp); the simulator runs the same steps over its sequential
// exchange, whose rank-order sums are the inproc weighted allreduce's (detail/blend.hpp):
// with the inproc transport and equal inputs the helpers reproduce the simulated policies
// bit for bit (tested). Every rank must call the helpers' collective
// members in the same order (they are collectives); each blocks until its collective ends or
// its deadline (worker_options::timeout) passes, and transport errors propagate as the
// transport's exceptions.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/algorithms/sync/bsp.hpp"
#include "heterograd/algorithms/sync/common.hpp"
#include "heterograd/algorithms/sync/detail/blend.hpp"
#include "heterograd/algorithms/sync/detail/rank.hpp"
#include "heterograd/algorithms/sync/exchange.hpp"
#include "heterograd/algorithms/sync/eager.hpp"
#include "heterograd/algorithms/sync/local_sgd.hpp"
#include "heterograd/algorithms/sync/selsync.hpp"
#include "heterograd/algorithms/sync/weights.hpp"
#include "heterograd/comm/partial.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/clock.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/blend.hpp"
#include "heterograd/kernels/memory.hpp"
#include "heterograd/kernels/reduce.hpp"

namespace heterograd::algorithms::sync {

namespace detail {

template <class Optimizer, class Memory, class T>
using worker_state_t = decltype(std::declval<const Optimizer&>().init(
    std::declval<const typename Memory::policy_type&>(),
    std::declval<span<T, typename Memory::memory_space>>()));

template <class Transport>
std::size_t checked_rank(const Transport& t, std::size_t workers, const std::string& who) {
  require(t.size() >= 1, who + ".transport.size", t.size(), "must be >= 1");
  require_same_size(who + ".batches", workers, "transport.size", static_cast<std::size_t>(t.size()));
  return static_cast<std::size_t>(t.rank());
}

/// The non-finite policy on a rank's own gradient g, in place, run by the rank's memory. On
/// host vectors: nonfinite.hpp's scan. Off the host: one finiteness flag read back (the
/// step's scalar transfer); zero and skip rewrite g with a kernel; only fail downloads g, to
/// name its first bad element.
template <class Memory, class T, class S>
algorithms::nonfinite_outcome screen_gradient(const Memory& memory, nonfinite_policy p, span<T, S> g,
                                              std::string_view method, std::uint64_t worker,
                                              std::uint64_t step, std::string_view step_meaning) {
  if constexpr (kernels::host_vectors_v<Memory, T>) {
    return algorithms::apply_nonfinite_policy(p, span<T>(g.data(), g.size()), method, worker, step,
                                              step_meaning);
  } else {
    const span<const T, S> cg(g);
    if (memory.read(g.size(), [&](const auto& policy) { return kernels::all_finite(policy, cg); }))
      return algorithms::nonfinite_outcome::finite;
    switch (p) {
      case nonfinite_policy::zero:
        memory.run(g.size(), [&](const auto& policy) { kernels::finite_or_zero(policy, cg, g); });
        return algorithms::nonfinite_outcome::zeroed;
      case nonfinite_policy::skip:
        memory.run(g.size(), [&](const auto& policy) { kernels::fill(policy, g, T(0)); });
        return algorithms::nonfinite_outcome::skipped;
      case nonfinite_policy::fail: break;
    }
    const auto h = memory.download(cg);
    const std::size_t bad = algorithms::first_nonfinite(span<const T>(h));
    throw nonfinite_gradient_error(method, worker, step, step_meaning, bad,
                                   bad < h.size() ? static_cast<double>(h[bad]) : 0.0);
  }
}

/// What every helper holds: the transport, the optimizer and this rank's state, the
/// transform, and the memory of this rank's parameters (kernels/memory.hpp), which makes the
/// helper's buffers, once, and runs every kernel of a step.
template <class T, class Optimizer, class Transport, class Transform, class Memory>
class worker_core {
 public:
  using memory_space = typename Memory::memory_space;
  using state_type = worker_state_t<Optimizer, Memory, T>;

  worker_core(Transport t, Optimizer opt, span<T, memory_space> params, Transform tr,
              worker_options o, Memory memory)
      : t_(std::move(t)), opt_(std::move(opt)), tr_(std::move(tr)), o_((o.validate(), o)),
        memory_(std::move(memory)), st_(init_state(params)) {}

  const Transport& transport() const { return t_; }
  std::size_t rank() const { return static_cast<std::size_t>(t_.rank()); }
  std::size_t workers() const { return static_cast<std::size_t>(t_.size()); }
  const state_type& optimizer_state() const { return st_; }
  /// This rank's optimizer state (to restore a checkpointed one).
  state_type& optimizer_state() { return st_; }
  const Optimizer& optimizer() const { return opt_; }
  const worker_options& options() const { return o_; }
  const Memory& memory() const { return memory_; }
  /// This rank's gradients dropped by the skip policy.
  std::uint64_t nonfinite_skipped() const { return skipped_; }

 protected:
  using pspan = span<T, memory_space>;
  using cspan = span<const T, memory_space>;

  void update(cspan g, pspan p) { replica_of().update(g, p); }
  // The config's non-finite policy on this rank's own gradient (a framework's loop passes
  // its own; the policies' already went through cluster::compute_gradient: a no-op scan here).
  void screen_in_place(nonfinite_policy p, pspan g, std::uint64_t step, std::string_view method) {
    if (screen_gradient(memory_, p, g, method, rank(), step, "this rank's step count") ==
        algorithms::nonfinite_outcome::skipped)
      ++skipped_;
  }
  // The same on a read-only gradient: a screened copy (in a buffer of the memory, made once)
  // when it is not finite.
  cspan screen(nonfinite_policy p, cspan g, std::uint64_t step, std::string_view method) {
    bool finite = false;
    if constexpr (kernels::host_vectors_v<Memory, T>)
      finite = algorithms::first_nonfinite(span<const T>(g.data(), g.size())) == g.size();
    else
      finite = memory_.read(g.size(), [&](const auto& policy) { return kernels::all_finite(policy, g); });
    if (finite) return g;
    if (scratch_.size() != g.size()) scratch_ = memory_.template make<T>(g.size());
    const pspan copy = kernels::view(memory_, scratch_);
    replica_of().copy(g, copy);
    screen_in_place(p, copy, step, method);
    return cspan(copy);
  }
  /// This rank's optimizer, state, transform and memory for a per-rank step (detail/rank.hpp).
  replica<Optimizer, state_type, Transform, Memory> replica_of() {
    return {opt_, st_, tr_, memory_, rank()};
  }
  /// The exchange over transport `t` (this rank's collectives block in the call).
  template <class Tr>
  transport_exchange<Tr> exchange(const Tr& t) const {
    return transport_exchange<Tr>(t, o_);
  }
  Transport t_;
  Optimizer opt_;
  Transform tr_;
  worker_options o_;
  Memory memory_;
  state_type st_;
  std::uint64_t skipped_ = 0;
  typename Memory::template vector<T> scratch_{};

 private:
  state_type init_state(pspan params) {
    require_positive("params.size", params.size());
    kernels::check_pointer(params, "params");
    return memory_.run(params.size(), [&](const auto& policy) { return opt_.init(policy, params); });
  }
};

}  // namespace detail

// ------------------------------------------------------------------------------------------
/// BSP with sample-weighted aggregation (bsp.hpp) for one rank.
template <class T, class Optimizer, class Transport, class Transform = identity_transform,
          class Memory = kernels::serial_host_memory>
class bsp_worker : public detail::worker_core<T, Optimizer, Transport, Transform, Memory> {
  using core = detail::worker_core<T, Optimizer, Transport, Transform, Memory>;
  using typename core::cspan;
  using typename core::pspan;

 public:
  /// `batches`: every rank's b_i (the same vector on all ranks). `params`: this rank's
  /// parameters (their size and memory initialise the optimizer state).
  bsp_worker(Transport t, Optimizer opt, span<T, typename core::memory_space> params,
             std::vector<std::size_t> batches,
             bsp_config cfg = {}, Transform tr = {}, worker_options o = {}, Memory memory = {})
      : core(std::move(t), std::move(opt), params, std::move(tr), o, std::move(memory)),
        cfg_((cfg.validate(), cfg)) {
    detail::checked_rank(this->t_, batches.size(), "bsp_worker");
    detail::require_state_policy<typename core::state_type>(cfg_.states, "bsp.states");
    set_batches(std::move(batches));
  }

  /// One synchronous step. `grads` is this rank's mean gradient over its b_i samples; in
  /// gradients mode it is replaced by the aggregate sum_i (b_i / B) g_i.
  void step(pspan params, pspan grads) {
    require_same_size("bsp_worker.grads", grads.size(), "bsp_worker.params", params.size());
    kernels::check_pointer(grads, "bsp_worker.grads");
    this->screen_in_place(cfg_.nonfinite, grads, steps_, "bsp_worker");
    auto ex = this->exchange(this->t_);
    detail::synchronous_step<T>(ex, this->replica_of(), cfg_.mode, cfg_.states,
                                weights_[this->rank()], params, cspan(grads), grads, pspan())
        .run();
    ++steps_;
  }

  /// New batch sizes (every rank's; call on every rank between steps): the weights follow.
  void set_batches(std::vector<std::size_t> b) {
    require_same_size("bsp_worker.batches", b.size(), "transport.size", this->workers());
    auto w = step_weights(cfg_.weighting, b);  // throws on a zero sum
    for (std::size_t i = 0; i < b.size(); ++i)
      require(b[i] >= 1, "bsp_worker.batches[" + std::to_string(i) + "]", b[i], "must be >= 1");
    batches_ = std::move(b);
    weights_ = std::move(w);
  }
  const std::vector<std::size_t>& batches() const { return batches_; }
  /// This rank's aggregation weight (b_i / B, or 1/n with uniform weighting).
  double weight() const { return weights_[this->rank()]; }
  std::uint64_t steps() const { return steps_; }
  const bsp_config& config() const { return cfg_; }

 private:
  bsp_config cfg_;
  std::vector<std::size_t> batches_;
  std::vector<double> weights_;
  std::uint64_t steps_ = 0;
};

// ------------------------------------------------------------------------------------------
/// The local SGD family (local_sgd.hpp) for one rank.
template <class T, class Optimizer, class Transport, class Outer = no_outer,
          class Transform = identity_transform, class Memory = kernels::serial_host_memory>
class local_sgd_worker : public detail::worker_core<T, Optimizer, Transport, Transform, Memory> {
  using core = detail::worker_core<T, Optimizer, Transport, Transform, Memory>;
  using typename core::cspan;
  using typename core::pspan;

 public:
  using outer_state = decltype(std::declval<const Outer&>().init(
      std::declval<const typename Memory::policy_type&>(), std::declval<pspan>()));
  using vector_type = typename Memory::template vector<T>;

  /// Collective (hierarchical groups split the transport). The anchor (the model of the last
  /// global synchronisation) starts as `params`, which must be equal on every rank.
  local_sgd_worker(Transport t, Optimizer opt, pspan params, std::vector<std::size_t> batches,
                   local_sgd_config cfg, Outer outer = {}, Transform tr = {},
                   worker_options o = {}, Memory memory = {})
      : core(std::move(t), std::move(opt), params, std::move(tr), o, std::move(memory)),
        sched_((detail::checked_rank(this->t_, batches.size(), "local_sgd_worker"), batches.size()),
               std::move(cfg)),
        batches_(std::move(batches)), outer_(std::move(outer)),
        anchor_(copy_of(params)), outer_state_(this->memory_.run(params.size(), [&](const auto& p) {
          return outer_.init(p, kernels::view(this->memory_, anchor_));
        })) {
    const auto& c = sched_.config();
    (void)sample_weights(batches_);  // validates the batches (non-empty, positive sum)
    for (std::size_t i = 0; i < batches_.size(); ++i)
      require(batches_[i] >= 1, "batches[" + std::to_string(i) + "]", batches_[i], "must be >= 1");
    detail::require_state_policy<typename core::state_type>(c.states, "local_sgd.states");
    if constexpr (!detail::is_no_outer_v<Outer>)
      require(!c.gossip, "local_sgd.gossip", "set",
              "cannot be combined with an outer optimizer (there is no global average)");
    if constexpr (!has_tagged_messages_v<Transport, T, typename core::memory_space>)
      require(!c.gossip, "local_sgd.gossip", "set",
              "needs a transport with tagged send and receive (NCCL has none)");
    if (!c.groups.empty()) {
      if constexpr (has_split_v<Transport>) {
        const auto me = this->rank();
        group_.emplace(this->t_.split(static_cast<int>(c.groups[me]), static_cast<int>(me),
                                      comm::split_options{this->o_.timeout}));
      } else {
        throw std::invalid_argument(invalid_argument_message(
            "local_sgd.groups", "set",
            "needs a transport with split() (NCCL has none: build one communicator per group "
            "and run the group's rounds on it)"));
      }
    }
  }

  /// Local steps this rank takes in the current round (0: not sampled; call skip_round).
  std::size_t steps_this_round() const { return sched_.steps(this->rank(), round_); }
  /// Local steps taken in the current round so far.
  std::size_t steps_done() const { return done_; }

  /// One local optimizer step with this rank's gradient; after the round's last step, the
  /// round's synchronisation (collective). Returns true when it synchronised.
  bool step(pspan params, cspan grads) {
    require_same_size("local_sgd_worker.grads", grads.size(), "local_sgd_worker.params",
                      params.size());
    kernels::check_pointer(grads, "local_sgd_worker.grads");
    require(steps_this_round() > 0, "local_sgd_worker.step (round)", round_,
            "this rank is not sampled in this round: call skip_round");
    this->update(this->screen(sched_.config().nonfinite, grads, local_steps_, "local_sgd_worker"), params);
    ++local_steps_;
    if (++done_ < steps_this_round()) return false;
    synchronise(params);
    return true;
  }

  /// A rank that takes no step this round (device sampling) joins its synchronisation.
  void skip_round(pspan params) {
    require(steps_this_round() == 0, "local_sgd_worker.skip_round (round)", round_,
            "this rank trains in this round: call step");
    synchronise(params);
  }

  std::uint64_t round() const { return round_; }
  /// Local steps taken over the run.
  std::uint64_t local_steps() const { return local_steps_; }
  const local_sgd_schedule& schedule() const { return sched_; }
  /// The model of the last global synchronisation, in the memory (a std::vector on the host).
  const vector_type& anchor() const { return anchor_; }
  const outer_state& outer_optimizer_state() const { return outer_state_; }

 private:
  vector_type copy_of(pspan params) {
    auto a = this->memory_.template make<T>(params.size());
    this->replica_of().copy(cspan(params), kernels::view(this->memory_, a));
    return a;
  }
  /// The round's synchronisation (detail::local_sgd_sync, the simulated policy's too).
  void synchronise(pspan params) {
    auto world = this->exchange(this->t_);
    const pspan anchor = kernels::view(this->memory_, anchor_);
    if (group_) {
      auto group = this->exchange(*group_);
      detail::local_sgd_sync<T>(world, &group, this->replica_of(), sched_, batches_, outer_,
                                outer_state_, anchor, round_, params, pspan(), &gossip_)
          .run();
    } else {
      detail::local_sgd_sync<T>(world, static_cast<decltype(world)*>(nullptr), this->replica_of(),
                                sched_, batches_, outer_, outer_state_, anchor, round_, params,
                                pspan(), &gossip_)
          .run();
    }
    ++round_;
    done_ = 0;
  }

  local_sgd_schedule sched_;
  std::vector<std::size_t> batches_;
  Outer outer_;
  vector_type anchor_;
  outer_state outer_state_;
  std::vector<vector_type> gossip_;  // gossip's buffers, made on the first gossip round
  std::optional<Transport> group_;
  std::uint64_t round_ = 0;
  std::size_t done_ = 0;
  std::uint64_t local_steps_ = 0;
};

// ------------------------------------------------------------------------------------------
/// SelSync (selsync.hpp) for one rank.
template <class T, class Optimizer, class Transport, class Transform = identity_transform,
          class Memory = kernels::serial_host_memory>
class selsync_worker : public detail::worker_core<T, Optimizer, Transport, Transform, Memory> {
  using core = detail::worker_core<T, Optimizer, Transport, Transform, Memory>;
  using typename core::cspan;
  using typename core::pspan;

 public:
  selsync_worker(Transport t, Optimizer opt, pspan params, std::vector<std::size_t> batches,
                 selsync_config cfg = {}, Transform tr = {}, worker_options o = {}, Memory memory = {})
      : core(std::move(t), std::move(opt), params, std::move(tr), o, std::move(memory)),
        cfg_((cfg.validate(), cfg)), trigger_(cfg_.window, cfg_.alpha, cfg_.threshold, cfg_.smooth_norm) {
    detail::checked_rank(this->t_, batches.size(), "selsync_worker");
    detail::require_state_policy<typename core::state_type>(cfg_.states, "selsync.states");
    for (std::size_t i = 0; i < batches.size(); ++i)
      require(batches[i] >= 1, "batches[" + std::to_string(i) + "]", batches[i], "must be >= 1");
    weights_ = step_weights(cfg_.weighting, batches);
  }

  /// One step: vote on ||grads||, one-integer allreduce of the votes, then a synchronous
  /// step (some rank voted 1) or a local one. Returns true when it synchronised. In
  /// gradient-aggregation mode a synchronising step replaces `grads` by the aggregate.
  bool step(pspan params, pspan grads) {
    require_same_size("selsync_worker.grads", grads.size(), "selsync_worker.params", params.size());
    kernels::check_pointer(grads, "selsync_worker.grads");
    this->screen_in_place(cfg_.nonfinite, grads, steps_, "selsync_worker");
    const int vote = detail::selsync_vote(trigger_, this->memory_, cspan(grads));
    auto ex = this->exchange(this->t_);
    const bool sync = detail::selsync_step<T>(ex, this->replica_of(), cfg_, weights_[this->rank()],
                                              vote, params, cspan(grads), grads, pspan())
                          .run();
    syncs_ += sync ? 1 : 0;
    ++steps_;
    return sync;
  }

  const selsync_trigger& trigger() const { return trigger_; }
  std::uint64_t steps() const { return steps_; }
  std::uint64_t sync_steps() const { return syncs_; }
  const selsync_config& config() const { return cfg_; }

 private:
  selsync_config cfg_;
  selsync_trigger trigger_;
  std::vector<double> weights_;
  std::uint64_t steps_ = 0, syncs_ = 0;
};

// ------------------------------------------------------------------------------------------
/// eager-SGD (eager.hpp) for one rank over a partial allreduce (comm::inproc::partial_allreduce
/// or comm::mpi::partial_allreduce built with cfg.partial_policy() and cfg.partial_options()).
/// Memory: the rank's (kernels/memory.hpp): the optimizer state lives there and the screen and
/// update run there. The partial allreduces hold their rounds and late contributions in host
/// buffers (there is no device partial allreduce), so on a memory whose buffers are not
/// std::vectors each round is staged explicitly through one host buffer made once: the
/// gradient goes down and the round's result comes back up (one transfer of params.size()
/// values each way, beside the screen's scalar).
template <class T, class Optimizer, class Partial, class Memory = kernels::serial_host_memory>
class eager_worker {
  static constexpr bool staged = !kernels::host_vectors_v<Memory, T>;

 public:
  using memory_space = typename Memory::memory_space;
  using state_type = detail::worker_state_t<Optimizer, Memory, T>;

  eager_worker(Partial partial, Optimizer opt, span<T, memory_space> params,
               eager_config cfg = {}, Memory memory = {})
      : p_(std::move(partial)), opt_(std::move(opt)), cfg_((cfg.validate(), cfg)),
        memory_(std::move(memory)), st_(memory_.run(params.size(), [&](const auto& policy) {
          return opt_.init(policy, params);
        })),
        staging_(staged ? params.size() : 0) {
    require_same_size("eager_worker.params", params.size(), "partial_allreduce.count", p_.count());
    kernels::check_pointer(params, "eager_worker.params");
  }

  /// Contributes `grads` to this rank's next round (the last of cfg.rounds is a flush: it
  /// waits for every rank and folds in everything pending), waits for the round's result
  /// (in `grads`: the same on every rank) and applies it.
  void step(span<T, memory_space> params, span<T, memory_space> grads) {
    run(params, grads, cfg_.rounds != 0 && round_ + 1 == cfg_.rounds);
  }
  /// A flush round (every rank, as the same round): ends an unbounded run (eager.rounds = 0)
  /// with nothing left pending.
  void final_step(span<T, memory_space> params, span<T, memory_space> grads) {
    run(params, grads, true);
  }

  bool finished() const { return cfg_.rounds != 0 && round_ >= cfg_.rounds; }
  std::uint64_t round() const { return round_; }
  /// Who was fresh and stale in this rank's last round (the same on every rank).
  const comm::round_report& last_report() const { return p_.last_report(); }
  const state_type& optimizer_state() const { return st_; }
  state_type& optimizer_state() { return st_; }
  const eager_config& config() const { return cfg_; }
  /// This rank's gradients dropped by the skip policy.
  std::uint64_t nonfinite_skipped() const { return skipped_; }

 private:
  void run(span<T, memory_space> params, span<T, memory_space> grads, bool flush) {
    require(!finished(), "eager_worker.step (round)", round_,
            "the configured rounds are over (eager.rounds)");
    require_same_size("eager_worker.grads", grads.size(), "eager_worker.params", params.size());
    kernels::check_pointer(grads, "eager_worker.grads");
    if (detail::screen_gradient(memory_, cfg_.nonfinite, grads, "eager_worker",
                                static_cast<std::uint64_t>(p_.rank()), round_,
                                "this rank's round") == algorithms::nonfinite_outcome::skipped)
      ++skipped_;
    detail::eager_round(transport_partial<Partial>(p_),
                        detail::replica<Optimizer, state_type, identity_transform, Memory>{
                            opt_, st_, tr_, memory_, static_cast<std::size_t>(p_.rank())},
                        params, grads, flush, std::span<T>(staging_))
        .run();
    ++round_;
  }

  Partial p_;
  Optimizer opt_;
  identity_transform tr_;
  eager_config cfg_;
  Memory memory_;
  state_type st_;
  std::vector<T> staging_;  // empty on host vectors: the round runs on grads itself
  std::uint64_t round_ = 0;
  std::uint64_t skipped_ = 0;
};

}  // namespace heterograd::algorithms::sync
