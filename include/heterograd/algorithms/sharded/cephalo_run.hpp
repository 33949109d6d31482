#pragma once
// Training with a Cephalo plan (Guo, Anand, Chen, Daudjee, "Cephalo: Harnessing Heterogeneous
// GPU Clusters for Training Transformer Models", ICS'25; #20): rank d runs a_d micro-batches of
// m_d samples (compute follows speed) and owns a fraction f_d of the sharded training state
// (memory follows capacity), the plan of balance/cephalo.hpp. One step on rank d, over any
// transport with tagged send/recv (inproc threads, MPI):
//
//   p       = allgather_v of every rank's parameter shard            (sharded_state::gather_all)
//   G_d     = g_{d,0} + g_{d,1} + ... + g_{d,a_d-1}                   (micro-batch mean gradients,
//                                                                      added in order)
//   G_d    <- G_d * w_d,   w_d = float(m_d / B) (rounded once)        (sample weight)
//   ĝ       = ((G_0 + G_1) + ... + G_{n-1}) restricted to the shards   (reduce_scatter_v, sum)
//   (p_d, s_d) <- U(p_d, ĝ_d, s_d)                                    (the owner's fused update)
//
// With Σ_d a_d m_d = B, Σ_d w_d G_d = (1/B) Σ_j ∇ℓ_j: the gradient of the mean loss over the
// global batch, whatever the plan; only the float summation order depends on it. Rank d's
// samples are [o_d, o_d + a_d m_d) of the global batch with o_d = Σ_{q<d} a_q m_q, its micro-
// batch k the k-th m_d of them (cephalo_samples). Every rank reduces each bucket once per step
// (its accumulation stays local), so ranks with different a_d issue the same collectives.
//
// Memory (cephalo_memory_of): the sharded state of memory.hpp (its shard and scratch; its
// bucket buffers are the next two items), the whole model's gathered parameters, the local
// gradient accumulator and one micro-batch's gradient (S elements each: the model computes its
// gradient as one flat vector), and the activations of m_d samples. A rank over its budget is refused by name at construction,
// on every rank, before any collective.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/algorithms/sharded/checkpoint.hpp"
#include "heterograd/algorithms/sharded/layout.hpp"
#include "heterograd/algorithms/sharded/memory.hpp"
#include "heterograd/algorithms/sharded/state.hpp"
#include "heterograd/balance/cephalo.hpp"
#include "heterograd/core/clock.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/nn/mlp.hpp"

namespace heterograd::algorithms::sharded {

/// Refuses a plan that cannot train a global batch of `global_batch` samples on `ranks` ranks:
/// std::invalid_argument naming the device, field, value and rule.
inline void check_cephalo_plan(const balance::cephalo_plan& plan, std::size_t global_batch,
                               int ranks) {
  require(plan.devices.size() == static_cast<std::size_t>(ranks), "cephalo_plan.devices (size)",
          plan.devices.size(), "must be the number of ranks (" + std::to_string(ranks) + ")");
  std::size_t samples = 0;
  double fractions = 0.0;
  for (std::size_t d = 0; d < plan.devices.size(); ++d) {
    const auto& p = plan.devices[d];
    const std::string at = "cephalo_plan.devices[" + std::to_string(d) + "].";
    require(p.micro_batch > 0, at + "micro_batch", p.micro_batch,
            "must be > 0 (every rank computes)");
    require(p.accumulation > 0, at + "accumulation", p.accumulation, "must be > 0");
    require(std::isfinite(p.shard_fraction) && p.shard_fraction >= 0.0, at + "shard_fraction",
            p.shard_fraction, "must be finite and >= 0");
    samples += p.micro_batch * p.accumulation;
    fractions += p.shard_fraction;
  }
  require(samples == global_batch, "cephalo_plan (sum of micro_batch * accumulation)", samples,
          "must equal the global batch B = " + std::to_string(global_batch) +
              " (one step is the gradient of B samples)");
  require(std::abs(fractions - 1.0) <= 1e-9, "cephalo_plan (sum of shard_fraction)", fractions,
          "must be 1 (within 1e-9): the shards cover the state once");
}

/// The layout of a plan: fraction f_d for rank d over the given buckets.
inline layout cephalo_layout(const balance::cephalo_plan& plan,
                             std::vector<std::size_t> bucket_sizes, std::size_t granularity = 1) {
  layout_config c{{}, std::move(bucket_sizes), granularity};
  for (const auto& d : plan.devices) c.fractions.push_back(d.shard_fraction);
  return layout(std::move(c));
}

/// Rank r's samples of the global batch: [first, second).
inline std::pair<std::size_t, std::size_t> cephalo_samples(const balance::cephalo_plan& plan,
                                                           int r) {
  std::size_t begin = 0;
  for (int q = 0; q < r; ++q) {
    const auto& p = plan.devices.at(static_cast<std::size_t>(q));
    begin += p.micro_batch * p.accumulation;
  }
  const auto& p = plan.devices.at(static_cast<std::size_t>(r));
  return {begin, begin + p.micro_batch * p.accumulation};
}

/// One layer per bucket: the MLP's layer sizes (W and b of layer l).
inline std::vector<std::size_t> mlp_buckets(const nn::mlp<float>& model) {
  std::vector<std::size_t> b;
  for (std::size_t l = 0; l < model.num_layers(); ++l) b.push_back(model.layer_params(l));
  return b;
}

/// The bytes of activations and backward workspace one sample keeps in nn::mlp: every layer's
/// output, the logits' gradient, and the two back-propagated rows of the widest layer.
inline std::size_t mlp_activation_bytes_per_sample(const nn::mlp<float>& model) {
  std::size_t widest = 0, outputs = 0;
  for (std::size_t l = 0; l < model.sizes().size(); ++l) {
    widest = std::max(widest, model.sizes()[l]);
    if (l > 0) outputs += model.sizes()[l];
  }
  return (outputs + model.classes() + 2 * widest) * sizeof(float);
}

/// The bytes rank r holds while training with a plan (see the header).
struct cephalo_memory {
  rank_memory state;               ///< the sharded state (memory.hpp)
  std::size_t gathered_model = 0;  ///< the whole model's parameters, S · E
  std::size_t accumulator = 0;     ///< the local gradient sum G_d, S · E
  std::size_t micro_gradient = 0;  ///< one micro-batch's gradient, S · E
  std::size_t activations = 0;     ///< m_d · activation bytes per sample
  std::size_t total() const {
    return state.total() + gathered_model + accumulator + micro_gradient + activations;
  }
};

template <shardable_optimizer O>
cephalo_memory cephalo_memory_of(const layout& l, int r, std::size_t micro_batch,
                                 std::size_t activation_bytes_per_sample) {
  cephalo_memory m;
  m.state = memory_of<O>(l, r);
  // The runner gathers every bucket straight into the gathered model and reduce-scatters
  // from the accumulator: no separate bucket buffers.
  m.state.gathered = m.state.gradient_bucket = 0;
  m.gathered_model = m.accumulator = m.micro_gradient = l.size() * sizeof(float);
  m.activations = micro_batch * activation_bytes_per_sample;
  return m;
}

/// Refuses a plan under which a rank needs more than its budget: std::invalid_argument naming
/// the rank, its worker, the bytes it needs (item by item) and its budget.
template <shardable_optimizer O>
void require_cephalo_within_budget(const balance::cephalo_plan& plan, const layout& l,
                                   std::span<const memory_budget> budgets,
                                   std::size_t activation_bytes_per_sample) {
  require(budgets.size() == static_cast<std::size_t>(l.ranks()), "memory_budgets (size)",
          budgets.size(), "must be one per rank (" + std::to_string(l.ranks()) + ")");
  for (int r = 0; r < l.ranks(); ++r) {
    const auto& b = budgets[static_cast<std::size_t>(r)];
    const std::size_t m_d = plan.devices.at(static_cast<std::size_t>(r)).micro_batch;
    const cephalo_memory m = cephalo_memory_of<O>(l, r, m_d, activation_bytes_per_sample);
    if (m.total() <= b.bytes) continue;
    throw std::invalid_argument(invalid_argument_message(
        "memory_budgets[" + std::to_string(r) + "] (worker '" + b.worker + "', bytes)", b.bytes,
        "rank " + std::to_string(r) + " (worker '" + b.worker + "') needs " +
            std::to_string(m.total()) + " bytes under the plan: sharded state " +
            std::to_string(m.state.total()) + " + gathered model " +
            std::to_string(m.gathered_model) + " + gradient accumulator " +
            std::to_string(m.accumulator) + " + micro-batch gradient " +
            std::to_string(m.micro_gradient) + " + activations of " + std::to_string(m_d) +
            " samples " + std::to_string(m.activations) + "; over its budget by " +
            std::to_string(m.total() - b.bytes) + " bytes"));
  }
}

/// The planner's memory model of this runner on `ranks` ranks (balance/cephalo.hpp's reserved +
/// act · m_d + state · f_d), an upper bound of cephalo_memory_of: with k optimizer slots (LAMB:
/// its 2 slot copies too), S elements in L layers, the largest of X elements, a rank's shard
/// holds at most f_d S + L elements and its largest piece at most f_d X + 1, so
///   state    = (S (2 + k) + (n - 1) X) · E          shard and reduce-scatter scratch, · f_d
///   reserved = (3 S + L (2 + k) + (n - 1)) · E      gathered model, accumulator, micro-batch
///                                                    gradient, and the cuts' rounding
///   act      = mlp_activation_bytes_per_sample.
/// Add the worker's own reserve to cephalo_reserved_bytes.
template <shardable_optimizer O>
balance::training_memory_model cephalo_memory_model(const nn::mlp<float>& model, int ranks) {
  std::size_t largest = 0;
  for (std::size_t l = 0; l < model.num_layers(); ++l)
    largest = std::max(largest, model.layer_params(l));
  const std::size_t slots = O::state_slots + (std::same_as<O, optim::lamb> ? 2 : 0);
  const auto peers = static_cast<std::size_t>(ranks - 1);
  return {static_cast<double>(mlp_activation_bytes_per_sample(model)),
          static_cast<double>((model.num_params() * (2 + slots) + peers * largest) * sizeof(float))};
}

template <shardable_optimizer O>
double cephalo_reserved_bytes(const nn::mlp<float>& model, int ranks) {
  const std::size_t slots = O::state_slots + (std::same_as<O, optim::lamb> ? 2 : 0);
  const auto peers = static_cast<std::size_t>(ranks - 1);
  return static_cast<double>(
      (3 * model.num_params() + model.num_layers() * (2 + slots) + peers) * sizeof(float));
}

/// Settings of a Cephalo run besides the plan.
struct cephalo_options {
  std::vector<memory_budget> budgets;             ///< one per rank, or empty: no budget enforced
  step_options step{.op = comm::reduce_op::sum};  ///< the reduce-scatter (op must be sum)
  /// Called after each micro-batch with (rank, micro-batch size): injected compute time in
  /// tests and benchmarks; empty: nothing.
  std::function<void(int, std::size_t)> after_micro_batch;
  /// The clock of last_measurement() (core/clock.hpp: injected, a manual_clock in tests).
  std::function<seconds()> now = [c = steady_clock()] { return c.now(); };
};

/// One rank of a Cephalo run of an nn::mlp (see the header).
template <shardable_optimizer O>
class cephalo_worker {
 public:
  /// A fresh run from the whole initial parameter vector (the same on every rank).
  cephalo_worker(nn::mlp<float> model, O opt, balance::cephalo_plan plan, std::size_t global_batch,
                 int rank, std::span<const float> initial, cephalo_options o = {})
      : model_(std::move(model)),
        plan_(checked(std::move(plan), global_batch, rank)),
        global_(global_batch),
        o_(std::move(o)),
        state_(std::move(opt), cephalo_layout(plan_, mlp_buckets(model_)), rank, initial) {
    finish();
  }
  /// A resumed run: a shard saved by a run of this plan, or reshard()ed onto
  /// cephalo_layout(plan, mlp_buckets(model)) from the shards of a run of another plan.
  cephalo_worker(nn::mlp<float> model, O opt, balance::cephalo_plan plan, std::size_t global_batch,
                 shard resumed, cephalo_options o = {})
      : model_(std::move(model)),
        plan_(checked(std::move(plan), global_batch, resumed.rank)),
        global_(global_batch),
        o_(std::move(o)),
        state_(std::move(opt), std::move(resumed)) {
    require(state_.shard_layout() == cephalo_layout(plan_, mlp_buckets(model_)),
            "cephalo_worker.resumed.shard_layout", std::string("another layout"),
            "must be the plan's layout: reshard() the old shards onto cephalo_layout(plan, "
            "mlp_buckets(model))");
    finish();
  }

  const balance::cephalo_plan& plan() const { return plan_; }
  const sharded_state<O>& state() const { return state_; }
  int rank() const { return state_.rank(); }
  /// This rank's samples of the global batch: [first, second).
  std::pair<std::size_t, std::size_t> samples() const { return cephalo_samples(plan_, rank()); }
  /// The bytes this rank holds (cephalo_memory_of).
  cephalo_memory memory() const {
    return cephalo_memory_of<O>(state_.shard_layout(), rank(), device().micro_batch,
                                mlp_activation_bytes_per_sample(model_));
  }

  /// One step. `mine` holds this rank's a_d · m_d samples (samples() of the global batch).
  /// Returns this rank's share of the global mean loss, Σ_k w_d · loss_k (the ranks' shares
  /// sum to the mean loss over the B samples). Collective.
  template <class Policy, class Transport>
  double step(const Policy& policy, const Transport& t, const nn::batch<float>& mine) {
    const auto& p = device();
    const std::size_t width = model_.input_dim(), n = model_.num_params();
    require_same_size("cephalo_worker.step.mine (samples)", mine.size(),
                      "micro_batch * accumulation of this rank", p.micro_batch * p.accumulation);
    require_same_size("cephalo_worker.step.mine.x", mine.x.size(), "samples * input width",
                      mine.size() * width);
    state_.gather_all(t, span<float>(params_.data(), n), o_.step);
    const span<const float> params(params_.data(), n);
    const seconds start = o_.now();
    double loss = 0.0;
    for (std::size_t k = 0; k < p.accumulation; ++k) {
      const std::size_t at = k * p.micro_batch;
      const nn::batch<float> micro{
          span<const float>(mine.x.data() + at * width, p.micro_batch * width),
          span<const std::int32_t>(mine.y.data() + at, p.micro_batch)};
      float* into = k == 0 ? acc_.data() : micro_.data();
      loss += static_cast<double>(model_.loss_and_gradient(params, micro, span<float>(into, n)));
      if (k > 0)
        for (std::size_t i = 0; i < n; ++i) acc_[i] += micro_[i];
      if (o_.after_micro_batch) o_.after_micro_batch(rank(), p.micro_batch);
    }
    const float w = sample_weight();
    for (std::size_t i = 0; i < n; ++i) acc_[i] *= w;
    measured_ = {p.micro_batch * p.accumulation, p.accumulation, o_.now() - start, 0.0};
    state_.step(policy, t, span<const float>(acc_.data(), n), o_.step);
    return loss * static_cast<double>(w);
  }

  /// Gathers the whole model into `out` (num_params elements). Collective.
  template <class Transport>
  void gather(const Transport& t, span<float> out) const {
    state_.gather_all(t, out, o_.step);
  }
  /// The last step's compute (its micro-batches and the local sum; no communication), for
  /// balance::fit_device_profile: samples a_d m_d, iterations a_d, time by options.now.
  const balance::worker_measurement& last_measurement() const { return measured_; }
  /// This rank's checkpoint, between steps (checkpoint.hpp).
  shard save() const { return state_.save(); }
  /// w_d = m_d / B, rounded once to float.
  float sample_weight() const {
    return static_cast<float>(static_cast<double>(device().micro_batch) /
                              static_cast<double>(global_));
  }

 private:
  static balance::cephalo_plan checked(balance::cephalo_plan p, std::size_t global, int rank) {
    check_cephalo_plan(p, global, static_cast<int>(p.devices.size()));
    require(rank >= 0 && static_cast<std::size_t>(rank) < p.devices.size(), "cephalo_worker.rank",
            rank, "must be a device of the plan");
    return p;
  }
  const balance::device_plan& device() const {
    return plan_.devices[static_cast<std::size_t>(rank())];
  }
  void finish() {
    require(o_.step.op == comm::reduce_op::sum, "cephalo_options.step.op",
            comm::reduce_op_name(o_.step.op),
            "must be sum (the sample weights m_d / B already make the mean)");
    if (!o_.budgets.empty())
      require_cephalo_within_budget<O>(plan_, state_.shard_layout(), o_.budgets,
                                       mlp_activation_bytes_per_sample(model_));
    params_.assign(model_.num_params(), 0.0f);
    acc_.assign(model_.num_params(), 0.0f);
    micro_.assign(model_.num_params(), 0.0f);
  }

  nn::mlp<float> model_;
  balance::cephalo_plan plan_;
  std::size_t global_ = 0;
  cephalo_options o_;
  sharded_state<O> state_;
  std::vector<float> params_, acc_, micro_;
  balance::worker_measurement measured_{0, 1, seconds{0}, 0.0};
};

}  // namespace heterograd::algorithms::sharded
