#pragma once
// Sharded training state with uneven shards (FSDP / ZeRO-3 with Cephalo's uneven fractions):
// each rank holds its shard of the parameters, of the gradients and of the optimizer state
// (layout.hpp), gathers the parameters of a bucket when its forward or backward needs them,
// reduce-scatters a bucket's gradients into the owners' shards, and updates its own shard
// with the fused optimizer.
//
// Papers: Rajbhandari, Rasley, Ruwase, He, "ZeRO: Memory Optimizations Toward Training
// Trillion Parameter Models", SC'20 (stage 3: parameters, gradients and optimizer state
// partitioned); Zhao et al., "PyTorch FSDP: Experiences on Scaling Fully Sharded Data
// Parallel", VLDB'23 (per-unit all-gather before use, freed after; reduce-scatter of
// gradients); Guo, Anand, Chen, Daudjee, "Cephalo: Harnessing Heterogeneous GPU Clusters for
// Training Transformer Models", ICS'25 (shards of uneven fractions, in proportion to memory).
//
// Update rule of step t on rank r, for every bucket b (S_b elements, rank r's piece P_{b,r}):
//   p_b      = allgather_v(p_{b,0}, ..., p_{b,n-1})             gather(), before use
//   g_{b,q}  = rank q's gradient of bucket b                     the caller's backward
//   ĝ_{b,r}  = (g_{b,0} + g_{b,1} + ... + g_{b,n-1})[P_{b,r}]    reduce_gradients(), rank order,
//              (/ n for avg)                                      then / n for avg
//   (p_r, s_r) <- U(p_r, ĝ_r, s_r, t)                            apply(): the fused optimizer
// With an element-wise U (sgd, momentum, nesterov, adam, adamw, adagrad: element i of the
// result reads element i only, and the step count) the shards are bitwise the replicated run
// that allreduces the full gradient in rank order (the inproc allreduce's order) and applies U
// to the full vector. LAMB's trust ratio needs each tensor's norms: its tensors must be the
// buckets, every cut inside a bucket at a multiple of kernels::lamb_chunk (8192) elements, and
// the ranks exchange the per-chunk norms (allgather_v of 16 bytes per chunk), so every rank
// combines a tensor's chunks with kernels::lamb's fixed tree: bitwise kernels::lamb again.
//
// Bytes moved per rank and step (E bytes per element, s_r = shard_size(r), S = size()):
// each gather of the whole model receives S - s_r and sends (n-1)·s_r elements; the
// reduce-scatter sends S - s_r and receives (n-1)·s_r. With equal fractions and FSDP's two
// gathers (forward, backward) that is 3·(n-1)/n·S·E each way, 1.5x a ring allreduce's
// 2·(n-1)/n·S·E, for a memory of about (2 + k)·S·E/n instead of (2 + k)·S·E (k optimizer
// slots; memory.hpp).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <thrust/system/cpp/execution_policy.h>

#include "heterograd/algorithms/sharded/checkpoint.hpp"
#include "heterograd/algorithms/sharded/detail/lamb.hpp"
#include "heterograd/algorithms/sharded/layout.hpp"
#include "heterograd/algorithms/sharded/memory.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/comm/uneven.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/updates.hpp"
#include "heterograd/optim/concepts.hpp"
#include "heterograd/optim/optimizers.hpp"

namespace heterograd::algorithms::sharded {

/// True for optimizers whose update of element i reads element i of the parameters, the
/// gradients and the slots, and the step count, nothing else: a shard's update is then the
/// full update's restriction. Specialise it for an element-wise optimizer of your own.
template <class O>
inline constexpr bool elementwise_v = false;
template <> inline constexpr bool elementwise_v<optim::sgd> = true;
template <> inline constexpr bool elementwise_v<optim::momentum> = true;
template <> inline constexpr bool elementwise_v<optim::nesterov> = true;
template <> inline constexpr bool elementwise_v<optim::adam> = true;
template <> inline constexpr bool elementwise_v<optim::adamw> = true;
template <> inline constexpr bool elementwise_v<optim::adagrad> = true;

/// The granularity of a layout for LAMB: cuts inside a tensor at multiples of its norms'
/// reduction chunk (detail/lamb.hpp).
inline constexpr std::size_t lamb_granularity = kernels::lamb_chunk;

/// What sharded_state can update: an element-wise optimizer, or LAMB (norms exchanged).
template <class O>
concept shardable_optimizer =
    optim::optimizer<O> && (elementwise_v<O> || std::same_as<O, optim::lamb>);

/// Per-call settings of the collectives of a sharded step.
struct step_options {
  comm::reduce_op op = comm::reduce_op::avg;  ///< the ranks' gradients: sum, or avg (sum / n)
  seconds timeout = comm::default_timeout;
  int tag = 0x5d0;  ///< in [0, 32767]; overlapping gathers need different tags
  bool check_counts = true;  ///< comm/uneven.hpp: counts checked across ranks on every call
  comm::uneven_options uneven() const { return {op, timeout, tag, check_counts}; }
};

/// The bytes rank r holds with optimizer O (memory.hpp; LAMB's pass 1 also writes copies of
/// its two slots, so that a failed norm exchange leaves the state as it was).
template <shardable_optimizer O>
rank_memory memory_of(const layout& l, int r) {
  rank_memory m = memory_of(l, r, O::state_slots);
  if constexpr (std::same_as<O, optim::lamb>) m.scratch += 2 * l.shard_size(r) * sizeof(float);
  return m;
}

/// One rank's sharded training state over host float buffers (see the header).
template <shardable_optimizer Optimizer>
class sharded_state {
 public:
  /// Rank `rank`'s shard of `initial` (the full parameter vector, the same on every rank) and
  /// a fresh optimizer state for it.
  sharded_state(Optimizer opt, layout l, int rank, std::span<const float> initial)
      : opt_(std::move(opt)), l_(std::move(l)), rank_(checked_rank(l_, rank)) {
    require_same_size("sharded_state.initial", initial.size(), "layout.size()", l_.size());
    check_optimizer();
    params_.resize(l_.shard_size(rank_));
    for (const auto& s : l_.segments(rank_))
      std::copy(initial.begin() + static_cast<std::ptrdiff_t>(s.global),
                initial.begin() + static_cast<std::ptrdiff_t>(s.global + s.count),
                params_.begin() + static_cast<std::ptrdiff_t>(s.local));
    state_ = opt_.init(thrust::cpp::par, span<const float>(params_.data(), params_.size()));
    grads_.assign(params_.size(), 0.0f);
    reduced_.assign(l_.buckets(), 0);
  }

  /// A resumed rank: its shard from a checkpoint, or from reshard() onto another layout.
  sharded_state(Optimizer opt, shard s)
      : opt_(std::move(opt)), l_(std::move(s.shard_layout)), rank_(checked_rank(l_, s.rank)),
        steps_(s.steps), params_(std::move(s.params)), state_(std::move(s.state)) {
    require_same_size("sharded_state.shard.params", params_.size(), "the layout's shard",
                      l_.shard_size(rank_));
    check_optimizer();
    check_state();
    grads_.assign(params_.size(), 0.0f);
    reduced_.assign(l_.buckets(), 0);
  }

  const Optimizer& optimizer() const { return opt_; }
  const layout& shard_layout() const { return l_; }
  int rank() const { return rank_; }
  std::int64_t steps() const { return steps_; }
  /// This rank's shard of the parameters, of the reduced gradients, and its optimizer state.
  std::span<const float> params() const { return params_; }
  std::span<const float> gradients() const { return grads_; }
  const optim::state<float>& optimizer_state() const { return state_; }

  /// Posts the gather of bucket b's parameters into `out` (bucket_size(b) elements, a buffer
  /// the caller reuses for every bucket: FSDP's free after use). Collective. The request reads
  /// this rank's shard: wait for it before apply().
  template <class Transport>
  [[nodiscard]] comm::request post_gather(const Transport& t, std::size_t b, span<float> out,
                                          const step_options& o = {}) const {
    check_call(t, b, "gather");
    const auto c = l_.counts(b);
    return comm::allgather_v(
        t, span<const float>(params_.data() + l_.shard_offset(b, rank_), c[index()]), out, c,
        o.uneven());
  }
  /// Gathers bucket b's parameters into `out` and waits. Collective.
  template <class Transport>
  void gather(const Transport& t, std::size_t b, span<float> out, const step_options& o = {}) const {
    post_gather(t, b, out, o).wait();
  }
  /// Gathers every bucket into `out` (size() elements): the whole model. Collective.
  template <class Transport>
  void gather_all(const Transport& t, span<float> out, const step_options& o = {}) const {
    require_same_size("sharded_state.gather_all.out", out.size(), "layout.size()", l_.size());
    for (std::size_t b = 0; b < l_.buckets(); ++b)
      gather(t, b, span<float>(out.data() + l_.bucket_offset(b), l_.bucket_size(b)), o);
  }

  /// Reduce-scatters this rank's gradient of bucket b (bucket_size(b) elements) into the
  /// owners' gradient shards (rank order; avg divides by n). Once per bucket and step.
  /// Collective.
  template <class Transport>
  void reduce_gradients(const Transport& t, std::size_t b, span<const float> grads,
                        const step_options& o = {}) {
    check_call(t, b, "reduce_gradients");
    require(o.op == comm::reduce_op::sum || o.op == comm::reduce_op::avg,
            "sharded_state.step_options.op", comm::reduce_op_name(o.op), "must be sum or avg");
    require(!reduced_[b], "sharded_state.reduce_gradients.bucket", b,
            "was already reduced this step (accumulate micro-batches locally, reduce once)");
    const auto c = l_.counts(b);
    comm::reduce_scatter_v(t, grads,
                           span<float>(grads_.data() + l_.shard_offset(b, rank_), c[index()]), c,
                           o.uneven())
        .wait();
    reduced_[b] = 1;
  }

  /// Applies the optimizer to this rank's shard once every bucket's gradients were reduced
  /// this step (LAMB exchanges its norms over `t`: collective). Nothing changes when it throws.
  template <class Policy, class Transport>
  void apply(const Policy& policy, const Transport& t, const step_options& o = {}) {
    for (std::size_t b = 0; b < l_.buckets(); ++b)
      require(reduced_[b], "sharded_state.apply (bucket " + std::to_string(b) + ")", "not reduced",
              "every bucket's gradients must be reduced (reduce_gradients) before apply");
    if constexpr (std::same_as<Optimizer, optim::lamb>) {
      detail::lamb_step(policy, t, opt_, l_, rank_, grads_, state_, params_, o.uneven());
    } else {
      (void)t;
      opt_.update(policy, span<const float>(grads_.data(), grads_.size()), state_,
                  span<float>(params_.data(), params_.size()));
    }
    std::fill(reduced_.begin(), reduced_.end(), 0);
    ++steps_;
  }

  /// One step from this rank's full gradient (size() elements): every bucket reduced, then
  /// apply. Collective.
  template <class Policy, class Transport>
  void step(const Policy& policy, const Transport& t, span<const float> grads,
            const step_options& o = {}) {
    require_same_size("sharded_state.step.grads", grads.size(), "layout.size()", l_.size());
    for (std::size_t b = 0; b < l_.buckets(); ++b)
      reduce_gradients(t, b, span<const float>(grads.data() + l_.bucket_offset(b), l_.bucket_size(b)), o);
    apply(policy, t, o);
  }

  /// This rank's checkpoint (checkpoint.hpp), taken between steps.
  shard save() const {
    for (std::size_t b = 0; b < l_.buckets(); ++b)
      require(!reduced_[b], "sharded_state.save (bucket " + std::to_string(b) + ")", "reduced",
              "a checkpoint is taken between steps (after apply, before the next reduce)");
    return shard{l_, rank_, steps_, params_, state_};
  }

 private:
  static int checked_rank(const layout& l, int r) {
    require(r >= 0 && r < l.ranks(), "sharded_state.rank", r,
            "must be in [0, " + std::to_string(l.ranks()) + ") (the layout's ranks)");
    return r;
  }
  std::size_t index() const { return static_cast<std::size_t>(rank_); }

  template <class Transport>
  void check_call(const Transport& t, std::size_t b, const char* what) const {
    require(t.size() == l_.ranks() && t.rank() == rank_,
            std::string("sharded_state.") + what + ".transport (rank)", t.rank(),
            "must be the state's rank " + std::to_string(rank_) + " of " +
                std::to_string(l_.ranks()) + " ranks (the transport has " +
                std::to_string(t.size()) + ")");
    require(b < l_.buckets(), std::string("sharded_state.") + what + ".bucket", b,
            "must be < " + std::to_string(l_.buckets()));
  }

  void check_optimizer() const {
    if constexpr (std::same_as<Optimizer, optim::lamb>) detail::check_lamb_layout(opt_, l_);
  }
  void check_state() const {
    const std::size_t n = params_.size();
    require(state_.kind == Optimizer::name(), "sharded_state.shard.state.kind", state_.kind,
            "must be '" + std::string(Optimizer::name()) + "' (the state of another optimizer)");
    if constexpr (std::same_as<Optimizer, optim::lamb>) {
      require(state_.slots.size() == 2 && state_.children.empty() && state_.counters.empty(),
              "sharded_state.shard.state.slots (count)", state_.slots.size(),
              "must be 2 (m, v), with no counters and no children");
      for (const auto& s : state_.slots)
        require_same_size("sharded_state.shard.state.slots[] (size)", s.size(), "the shard", n);
    } else {
      opt_.check_state(state_, n, "sharded_state.shard");
    }
  }

  Optimizer opt_;
  layout l_;
  int rank_ = 0;
  std::int64_t steps_ = 0;
  std::vector<float> params_, grads_;
  optim::state<float> state_;
  std::vector<unsigned char> reduced_;
};

}  // namespace heterograd::algorithms::sharded
