#pragma once
// Pipelined backpropagation over S stages (contiguous layer ranges of an MLP) following a
// pipeline schedule (schedule.hpp), executed in the order a real pipeline with the given stage
// times would run it. Two update modes:
//   synchronous   DAPPLE / GPipe (#3): gradients of the M micro-batches are accumulated and
//                 applied once per step (after a flush): the same result as one large-batch
//                 step, whatever the schedule (tested bitwise against the sequential loop);
//   asynchronous  PipeDream-style: each stage applies its optimizer after every backward, so a
//                 micro-batch's forward and backward see different weights (weight staleness).
//                 SpecTrain (#19) replaces the forward weights with the prediction
//                 W_hat = W - s * lr * v, v = gamma v + (1 - gamma) g (smoothed gradient),
//                 s = the updates the stage applies between this forward and its backward.
//                 We smooth the optimizer's actual weight change d = gamma d + (1-gamma) dW
//                 and predict W_hat = W + s d: for plain SGD (dW = -lr g) this is SpecTrain's
//                 formula exactly, and it stays right for momentum or Adam, whose steps are not
//                 lr * g (with heavy-ball momentum 0.9 the step is ~10 lr g).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "heterograd/algorithms/decoupled/concepts.hpp"
#include "heterograd/algorithms/decoupled/local_learning.hpp"
#include "heterograd/algorithms/decoupled/schedule.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/nn/loss.hpp"
#include "heterograd/nn/mlp.hpp"

namespace heterograd::algorithms::decoupled {

enum class pipeline_update { synchronous, asynchronous };

struct pipelined_config {
  module_bounds bounds;      // stages over layers (empty: even_split(layers, stages))
  std::size_t stages = 2;
  pipeline_update update = pipeline_update::synchronous;
  bool spectrain = false;    // asynchronous only: predict forward weights
  float spectrain_gamma = 0.9f;   // smoothing of the weight change d
  std::vector<double> forward_time, backward_time;  // per stage (empty: 1 and 2)
};

/// Weight-prediction quality, accumulated over asynchronous backwards.
struct staleness_report {
  double stale_error = 0;      // sum ||W at forward - W at backward||^2
  double predicted_error = 0;  // sum ||W_hat - W at backward||^2 (with SpecTrain)
  std::size_t samples = 0;
};

template <module_optimizer Opt>
class pipelined_backprop {
 public:
  template <class MakeOpt>
  pipelined_backprop(const nn::mlp<float>& net, std::vector<float> params, pipelined_config cfg,
                     MakeOpt make_opt)
      : cfg_(std::move(cfg)), net_(net), params_(std::move(params)) {
    require_same_size("pipelined_backprop.params", params_.size(), "num_params", net.num_params());
    if (cfg_.bounds.empty()) cfg_.bounds = even_split(net.num_layers(), cfg_.stages);
    validate_bounds(cfg_.bounds, net.num_layers());
    const std::size_t S = cfg_.bounds.size() - 1;
    if (cfg_.forward_time.empty()) cfg_.forward_time.assign(S, 1.0);
    if (cfg_.backward_time.empty()) cfg_.backward_time.assign(S, 2.0);
    require(!cfg_.spectrain || cfg_.update == pipeline_update::asynchronous,
            "pipelined.spectrain", cfg_.spectrain, "needs asynchronous updates");
    require_in_range_co("pipelined.spectrain_gamma", static_cast<double>(cfg_.spectrain_gamma), 0.0,
                        1.0);
    grads_.assign(params_.size(), 0.0f);
    accum_.assign(params_.size(), 0.0f);
    velocity_.assign(params_.size(), 0.0f);
    for (std::size_t s = 0; s < S; ++s) opt_.push_back(make_opt(slice_size(s)));
  }

  std::size_t stages() const { return cfg_.bounds.size() - 1; }
  const std::vector<float>& params() const { return params_; }
  const staleness_report& staleness() const { return report_; }

  /// Runs `sch` over the micro-batches (x[m], y[m]); returns the mean loss. In synchronous mode
  /// the accumulated mean gradient is applied once at the end.
  float run(const pipeline_schedule& sch, const std::vector<std::vector<float>>& x,
            const std::vector<std::vector<std::int32_t>>& y) {
    const std::size_t S = stages(), M = x.size();
    require_same_size("pipelined.schedule.stages", sch.size(), "stages", S);
    require_same_size("pipelined.labels", y.size(), "micro-batches", M);
    const auto st = execute_schedule(sch, cfg_.forward_time, cfg_.backward_time, M);
    // One workspace per (stage, micro-batch): several micro-batches are in flight per stage.
    std::vector<std::vector<nn::mlp<float>>> ws(S, std::vector<nn::mlp<float>>(M, net_));
    std::vector<std::vector<std::vector<float>>> out(S, std::vector<std::vector<float>>(M)),
        dgrad = out;
    std::vector<std::vector<std::vector<float>>> w_fwd(S, std::vector<std::vector<float>>(M)),
        w_hat = w_fwd;
    std::fill(accum_.begin(), accum_.end(), 0.0f);
    double loss = 0;
    for (const auto& t : st.order) {
      const std::size_t s = t.stage, m = t.op.micro_batch;
      const std::size_t first = cfg_.bounds[s], last = cfg_.bounds[s + 1];
      const std::size_t rows = y[m].size();
      if (t.op.kind == pass::forward) {
        const float* in = s == 0 ? x[m].data() : out[s - 1][m].data();
        std::vector<float> w;  // weights this forward uses (a copy only when they differ)
        const std::vector<float>* use = &params_;
        if (cfg_.spectrain) {
          w = params_;
          const float k = static_cast<float>(st.updates_between[s][m]);
          for (std::size_t j = offset(s); j < offset(s) + slice_size(s); ++j)
            w[j] += k * velocity_[j];  // W_hat = W + s d  (= W - s lr v for SGD, #19)
          use = &w;
        }
        if (cfg_.update == pipeline_update::asynchronous) {
          auto keep = [&](const std::vector<float>& from, std::vector<float>& to) {
            to.assign(from.begin() + static_cast<std::ptrdiff_t>(offset(s)),
                      from.begin() + static_cast<std::ptrdiff_t>(offset(s) + slice_size(s)));
          };
          keep(params_, w_fwd[s][m]);
          if (cfg_.spectrain) keep(w, w_hat[s][m]);
        }
        const auto o = ws[s][m].forward(*use, in, rows, first, last);
        out[s][m].assign(o.begin(), o.end());
      } else {
        std::vector<float> dout;
        if (s + 1 == S) {
          const std::size_t K = net_.classes();
          dout.resize(rows * K);
          for (std::size_t r = 0; r < rows; ++r) {
            std::size_t am = 0;
            loss += nn::softmax_cross_entropy_row(
                        out[s][m].data() + r * K, K, y[m][r],
                        static_cast<float>(net_.config().label_smoothing),
                        1.0f / static_cast<float>(rows), dout.data() + r * K, am) /
                    static_cast<double>(rows * M);
          }
        } else {
          dout = std::move(dgrad[s + 1][m]);
        }
        if (s > 0) dgrad[s][m].resize(rows * net_.sizes()[first]);
        ws[s][m].backward(params_, dout.data(), first, last, grads_,
                          s > 0 ? dgrad[s][m].data() : nullptr);
        const span<float> g(grads_.data() + offset(s), slice_size(s));
        if (cfg_.update == pipeline_update::synchronous) {
          float* a = accum_.data() + offset(s);
          for (std::size_t j = 0; j < g.size(); ++j) a[j] += g[j];
        } else {
          record_staleness(s, w_fwd[s][m], w_hat[s][m]);
          const span<float> w = slice(params_, s);
          before_.assign(w.begin(), w.end());
          opt_[s].step(w, span<const float>(g));
          for (std::size_t j = 0; j < w.size(); ++j) {
            float& d = velocity_[offset(s) + j];
            d = cfg_.spectrain_gamma * d + (1.0f - cfg_.spectrain_gamma) * (w[j] - before_[j]);
          }
        }
      }
    }
    if (cfg_.update == pipeline_update::synchronous) {
      const float inv = 1.0f / static_cast<float>(M);
      for (auto& a : accum_) a *= inv;
      for (std::size_t s = 0; s < S; ++s)
        opt_[s].step(slice(params_, s), span<const float>(slice(accum_, s)));
    }
    return static_cast<float>(loss);
  }

 private:
  std::size_t offset(std::size_t s) const { return net_.layer_offset(cfg_.bounds[s]); }
  std::size_t slice_size(std::size_t s) const {
    return net_.layer_offset(cfg_.bounds[s + 1]) - offset(s);
  }
  span<float> slice(std::vector<float>& v, std::size_t s) {
    return span<float>(v.data() + offset(s), slice_size(s));
  }
  // Distance of the weights current at the forward, and of the prediction (if any), to the
  // weights at backward time.
  void record_staleness(std::size_t s, const std::vector<float>& actual,
                        const std::vector<float>& predicted) {
    auto dist = [&](const std::vector<float>& w) {
      double e = 0;
      for (std::size_t j = 0; j < w.size(); ++j) {
        const double d = static_cast<double>(w[j]) - params_[offset(s) + j];
        e += d * d;
      }
      return e;
    };
    report_.stale_error += dist(actual);
    if (!predicted.empty()) report_.predicted_error += dist(predicted);
    ++report_.samples;
  }

  pipelined_config cfg_;
  nn::mlp<float> net_;
  std::vector<float> params_, grads_, accum_, velocity_, before_;
  std::vector<Opt> opt_;
  staleness_report report_;
};

}  // namespace heterograd::algorithms::decoupled
