#pragma once
// An LSH-sparse softmax output layer (SLIDE, Chen et al., MLSys 2020, #11): for each input,
// the active neurons are those its LSH codes retrieve from the tables of neuron weights (plus
// the true label while training); forward, softmax cross-entropy and backward run over the
// active neurons only, and the SGD update touches only their rows. With threads the updates
// are Hogwild (Recht et al., NeurIPS 2011): one sample per thread at a time, no locks, each
// weight read and written with relaxed atomic loads and stores (a lost update is allowed, a
// torn one is not).
//
// Parameters: one flat buffer, W (neurons x dim, row-major) then b (neurons), the layout of
// nn::mlp's layers. The tables are rebuilt from W on a decaying schedule: after `first`
// samples, then after periods growing by `growth` each time (SLIDE rehashes often early, when
// the weights move fast, and rarely later).
//
// Per sample with A active neurons: hashing 2 K L dim flops (SimHash), forward 2 A dim,
// backward and update 3 A dim (reads and writes A rows of W: 8 A dim bytes).
//
// With every neuron active (zero code bits and unlimited buckets), the forward pass, the loss
// and the update are the dense layer's, operation for operation: the same bits.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/nn/loss.hpp"
#include "heterograd/nn/lsh.hpp"

namespace heterograd::nn {

/// Rebuild points: s_0 = first, s_{i+1} = s_i + ceil(first growth^(i+1)) samples.
struct rebuild_schedule {
  std::size_t first = 1000;
  double growth = 1.2;
  std::size_t max_period = 0;  ///< 0: unbounded

  void validate() const {
    require_positive("rebuild_schedule.first", first);
    require(growth >= 1.0, "rebuild_schedule.growth", growth, "must be >= 1 (a decaying rate)");
  }
  /// The period after rebuild i (i = 0 is the first period).
  std::size_t period(std::size_t i) const {
    const double p = std::ceil(static_cast<double>(first) * std::pow(growth, static_cast<double>(i)));
    const auto v = static_cast<std::size_t>(std::min(p, 1e18));
    return max_period ? std::min(v, max_period) : v;
  }
};

struct lsh_layer_config {
  lsh_config lsh{};
  rebuild_schedule rebuild{};
};

/// Work space of one thread (active set, logits, gradients, codes).
struct lsh_workspace {
  std::vector<std::uint32_t> active;
  std::vector<float> logits, dlogits;
  std::vector<std::uint32_t> codes;
  std::vector<std::uint32_t> stamp;
  std::uint32_t epoch = 0;
};

class lsh_softmax_layer {
 public:
  lsh_softmax_layer(std::size_t dim, std::size_t neurons, lsh_layer_config o = {})
      : dim_(dim), neurons_(neurons), o_(o), tables_(dim, o.lsh) {
    require_positive("lsh_softmax_layer.dim", dim_);
    require_positive("lsh_softmax_layer.neurons", neurons_);
    require(neurons_ <= 0xffffffffu, "lsh_softmax_layer.neurons", neurons_, "must fit 32 bits");
    o_.rebuild.validate();
  }

  std::size_t dim() const { return dim_; }
  std::size_t neurons() const { return neurons_; }
  std::size_t num_params() const { return neurons_ * dim_ + neurons_; }
  const lsh_layer_config& config() const { return o_; }
  const lsh_tables& tables() const { return tables_; }

  /// Gaussian weights N(0, scale^2), zero biases.
  void init(span<float> params, std::uint64_t seed, double scale = 0.01) const {
    require_same_size("lsh_softmax_layer.init.params", params.size(), "num_params", num_params());
    const counter_rng rng(seed, 0x5e1d);
    for (std::size_t i = 0; i < neurons_ * dim_; ++i) params[i] = static_cast<float>(rng.normal(i, 0.0, scale));
    std::fill(params.begin() + static_cast<std::ptrdiff_t>(neurons_ * dim_), params.end(), 0.0f);
  }

  /// Rehashes every neuron's weight row: neurons K L dim hashing work.
  void rebuild(span<const float> params) {
    require_same_size("lsh_softmax_layer.params", params.size(), "num_params", num_params());
    tables_.clear();
    std::vector<std::uint32_t> codes(o_.lsh.tables);
    for (std::size_t j = 0; j < neurons_; ++j) {
      tables_.hash(params.subspan(j * dim_, dim_), codes.data());
      tables_.insert(static_cast<std::uint32_t>(j), codes.data());
    }
    ++rebuilds_;
  }
  std::size_t rebuilds() const { return rebuilds_; }

  /// Where the decaying rebuild schedule stands: samples trained through hogwild_segments
  /// since the layer was made, the sample count of the next rebuild, the next period's index.
  /// The schedule runs across calls (training in chunks rebuilds as one long call would).
  struct schedule_position {
    std::size_t seen = 0, next = 0, index = 0;
  };
  schedule_position& position() { return position_; }

  /// The active neurons of x, ascending (plus `label` when >= 0).
  void active_set(span<const float> x, std::int64_t label, lsh_workspace& ws) const {
    if (ws.stamp.size() != neurons_) ws.stamp.assign(neurons_, 0), ws.epoch = 0;
    if (++ws.epoch == 0) std::fill(ws.stamp.begin(), ws.stamp.end(), 0), ws.epoch = 1;
    ws.codes.resize(o_.lsh.tables);
    tables_.hash(x, ws.codes.data());
    ws.active.clear();
    const std::uint32_t e = ws.epoch;
    tables_.for_each_candidate(ws.codes.data(), [&](std::uint32_t id) {
      if (ws.stamp[id] != e) ws.stamp[id] = e, ws.active.push_back(id);
    });
    if (label >= 0 && ws.stamp[static_cast<std::size_t>(label)] != e) {
      ws.stamp[static_cast<std::size_t>(label)] = e;
      ws.active.push_back(static_cast<std::uint32_t>(label));
    }
    std::sort(ws.active.begin(), ws.active.end());
  }

  /// One SGD step on (x, label) over the active neurons; returns the loss. Hogwild: every
  /// weight access is a relaxed atomic (several threads may step on the same parameters).
  /// dx, when not empty, receives the loss's gradient with respect to x over the active
  /// neurons, sum_k dz_k w_k with each row read just before its update (a layer below x then
  /// trains too, as SLIDE's hidden layers do).
  template <bool Hogwild = false>
  float train_step(span<float> params, span<const float> x, std::int32_t label, float lr, lsh_workspace& ws,
                   span<float> dx = {}) const {
    require_same_size("lsh_softmax_layer.params", params.size(), "num_params", num_params());
    require_same_size("lsh_softmax_layer.x", x.size(), "dim", dim_);
    require(dx.empty() || dx.size() == dim_, "lsh_softmax_layer.dx", dx.size(), "must be empty or dim long");
    std::fill(dx.begin(), dx.end(), 0.0f);
    require(label >= 0 && static_cast<std::size_t>(label) < neurons_, "lsh_softmax_layer.label", label,
            "must be in [0, neurons)");
    active_set(x, label, ws);
    const std::size_t a = ws.active.size();
    ws.logits.resize(a);
    ws.dlogits.resize(a);
    float* W = params.data();
    float* b = W + neurons_ * dim_;
    std::int32_t pos = 0;
    for (std::size_t k = 0; k < a; ++k) {
      const std::size_t j = ws.active[k];
      if (static_cast<std::int32_t>(j) == label) pos = static_cast<std::int32_t>(k);
      // Same order as the dense layer's GEMM element: acc = sum_i w_i x_i, then acc + b.
      float acc = 0;
      float* w = W + j * dim_;
      for (std::size_t i = 0; i < dim_; ++i) acc += load<Hogwild>(w[i]) * x[i];
      ws.logits[k] = acc + load<Hogwild>(b[j]);
    }
    std::size_t am = 0;
    const float loss = softmax_cross_entropy_row(ws.logits.data(), a, pos, 0.0f, 1.0f, ws.dlogits.data(), am);
    for (std::size_t k = 0; k < a; ++k) {
      const std::size_t j = ws.active[k];
      const float dz = ws.dlogits[k];
      float* w = W + j * dim_;
      for (std::size_t i = 0; i < dim_; ++i) {
        const float g = dz * x[i];
        const float old = load<Hogwild>(w[i]);
        if (!dx.empty()) dx[i] += dz * old;
        store<Hogwild>(w[i], old - lr * g);
      }
      store<Hogwild>(b[j], load<Hogwild>(b[j]) - lr * dz);
    }
    return loss;
  }

  /// The predicted class: argmax over the active neurons (use_lsh) or over all of them.
  std::uint32_t predict(span<const float> params, span<const float> x, bool use_lsh, lsh_workspace& ws) const {
    require_same_size("lsh_softmax_layer.params", params.size(), "num_params", num_params());
    require_same_size("lsh_softmax_layer.x", x.size(), "dim", dim_);
    const float* W = params.data();
    const float* b = W + neurons_ * dim_;
    auto score = [&](std::size_t j) {
      float acc = 0;
      for (std::size_t i = 0; i < dim_; ++i) acc += W[j * dim_ + i] * x[i];
      return acc + b[j];
    };
    std::uint32_t best = 0;
    float top = -INFINITY;
    if (use_lsh) {
      active_set(x, -1, ws);
      for (std::uint32_t j : ws.active)
        if (const float s = score(j); s > top) top = s, best = j;
    } else {
      for (std::size_t j = 0; j < neurons_; ++j)
        if (const float s = score(j); s > top) top = s, best = static_cast<std::uint32_t>(j);
    }
    return best;
  }

 private:
  template <bool Atomic>
  static float load(float& v) {
    if constexpr (Atomic)
      return std::atomic_ref<float>(v).load(std::memory_order_relaxed);
    else
      return v;
  }
  template <bool Atomic>
  static void store(float& v, float x) {
    if constexpr (Atomic)
      std::atomic_ref<float>(v).store(x, std::memory_order_relaxed);
    else
      v = x;
  }

  std::size_t dim_, neurons_;
  lsh_layer_config o_;
  lsh_tables tables_;
  std::size_t rebuilds_ = 0;
  schedule_position position_{};
};

/// What a training run measured.
struct lsh_train_report {
  std::size_t samples = 0;
  std::size_t active_sum = 0;  ///< active neurons summed over samples
  std::size_t rebuilds = 0;
  double loss_sum = 0;
  double mean_active_fraction(std::size_t neurons) const {
    return samples ? static_cast<double>(active_sum) / (static_cast<double>(samples) * neurons) : 0.0;
  }
};

/// Runs step(sample, thread, atomic, workspace) -> loss for every sample of `order` on
/// `threads` threads (sample order[i] on thread i % threads; atomic when threads > 1), in
/// segments between the layer's table rebuilds: before its first sample, then on the decaying
/// schedule, counted across calls (layer.position()); all threads are joined at each rebuild.
/// The trainers below share it.
template <class Step>
lsh_train_report hogwild_segments(lsh_softmax_layer& layer, span<const float> params, span<const std::size_t> order,
                                  int threads, Step&& step) {
  require(threads >= 1, "hogwild_segments.threads", threads, "must be >= 1");
  const auto sched = layer.config().rebuild;
  auto& pos = layer.position();
  const auto n = static_cast<std::size_t>(threads);
  std::vector<lsh_workspace> ws(n);
  std::vector<lsh_train_report> part(n);
  for (std::size_t done = 0; done < order.size();) {
    if (pos.seen == pos.next) {
      layer.rebuild(params);
      pos.next = pos.seen + sched.period(pos.index++);
    }
    const std::size_t end = std::min(order.size(), done + (pos.next - pos.seen));
    auto body = [&](int t) {
      auto& r = part[static_cast<std::size_t>(t)];
      auto& w = ws[static_cast<std::size_t>(t)];
      for (std::size_t k = done + static_cast<std::size_t>(t); k < end; k += n) {
        r.loss_sum += step(order[k], t, threads > 1, w);
        r.active_sum += w.active.size();
        ++r.samples;
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
    body(0);
    for (auto& th : pool) th.join();
    pos.seen += end - done;
    done = end;
  }
  lsh_train_report rep;
  for (const auto& p : part) {
    rep.samples += p.samples;
    rep.active_sum += p.active_sum;
    rep.loss_sum += p.loss_sum;
  }
  rep.rebuilds = layer.rebuilds();
  return rep;
}

/// SGD over (x_s, y_s) for `epochs` passes in order `order` (a permutation of the samples per
/// epoch is the caller's), on `threads` Hogwild threads (1: sequential and deterministic).
/// Rebuilds the tables before the layer's first sample and whenever the decaying schedule says
/// so (between segments, all threads joined; the schedule continues across calls).
inline lsh_train_report train_lsh_layer(lsh_softmax_layer& layer, span<float> params,
                                        span<const float> features, span<const std::int32_t> labels,
                                        span<const std::size_t> order, float lr, int threads = 1) {
  require(threads >= 1, "train_lsh_layer.threads", threads, "must be >= 1");
  require_same_size("train_lsh_layer.features", features.size(), "labels.size() * dim",
                    labels.size() * layer.dim());
  for (std::size_t s : order) require(s < labels.size(), "train_lsh_layer.order", s, "must index a sample");
  for (std::int32_t y : labels)
    require(y >= 0 && static_cast<std::size_t>(y) < layer.neurons(), "train_lsh_layer.labels", y,
            "must be in [0, neurons)");
  require_same_size("train_lsh_layer.params", params.size(), "num_params", layer.num_params());
  return hogwild_segments(layer, params, order, threads, [&](std::size_t s, int, bool atomic, lsh_workspace& w) {
    const auto x = features.subspan(s * layer.dim(), layer.dim());
    return atomic ? layer.train_step<true>(params, x, labels[s], lr, w) : layer.train_step<false>(params, x, labels[s], lr, w);
  });
}

}  // namespace heterograd::nn
