#pragma once
// Decoupled, locally supervised training (DGL / InfoPro style) with PGL's periodic global
// guidance (#8, Bhatti & Moon 2022).
//
// The MLP's dense layers are split into K contiguous modules. Module k < K-1 ends in an
// auxiliary head, a small classifier on the module's output, and learns from the head's
// cross-entropy alone: gradients never cross module boundaries (no global backpropagation,
// no backward locking), so module k can update as soon as it has run forward. The last module
// ends in the network's own output layer and needs no head. Each module body and each head
// has its own optimizer.
//
// PGL: on selected iterations the whole network takes one end-to-end backpropagation step on
// the global loss instead (heads untouched). The schedule is "every P iterations" and/or
// "during the first fraction f of the epochs" [Bhatti & Moon, ICML'22 HAET workshop, #8: the
// paper's exact schedule is not available; ours is inferred, see docs/references.md].
//
// With K = 1 a step is exactly an end-to-end step: the same forward, loss and backward calls
// on the same buffers, and the same optimizer on the whole buffer (tested bitwise).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "heterograd/algorithms/decoupled/concepts.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/nn/mlp.hpp"

namespace heterograd::algorithms::decoupled {

/// Module boundaries over L layers: module k holds layers [bounds[k], bounds[k+1]).
using module_bounds = std::vector<std::size_t>;

/// K modules over L layers with layer counts differing by at most one (earlier modules take
/// the extra layers). K must be in [1, L].
inline module_bounds even_split(std::size_t layers, std::size_t modules) {
  require(modules >= 1 && modules <= layers, "decoupled.modules", modules,
          "must be in [1, number of dense layers = " + std::to_string(layers) + "]");
  module_bounds b{0};
  for (std::size_t k = 0; k < modules; ++k)
    b.push_back(b.back() + layers / modules + (k < layers % modules ? 1 : 0));
  return b;
}

inline void validate_bounds(const module_bounds& b, std::size_t layers) {
  require(b.size() >= 2 && b.front() == 0 && b.back() == layers, "decoupled.bounds.size", b.size(),
          "must start at 0, end at the number of layers and hold at least one module");
  for (std::size_t k = 0; k + 1 < b.size(); ++k)
    require(b[k] < b[k + 1], "decoupled.bounds[" + std::to_string(k + 1) + "]", b[k + 1],
            "must be strictly increasing (no empty module)");
}

/// PGL's global-guidance schedule.
struct pgl_schedule {
  std::size_t period = 0;       // a global step every `period` iterations (0: never)
  double epoch_fraction = 0.0;  // all steps global during the first fraction of epochs
  std::size_t total_epochs = 1;

  // total_epochs is the run's length, not a setting: not described.
  static constexpr auto description() {
    return describe("pgl",
                    describe_field("period", &pgl_schedule::period,
                                   "PGL: a global step every P iterations (0: never)"),
                    describe_field("epoch_fraction", &pgl_schedule::epoch_fraction,
                                   "PGL: global steps during this first fraction of epochs", closed(0, 1)));
  }
  void validate() const {
    validate_fields(*this);
    require_positive("pgl.total_epochs", total_epochs);
  }
  bool global(std::size_t iteration, std::size_t epoch) const {
    if (period > 0 && (iteration + 1) % period == 0) return true;
    return static_cast<double>(epoch) <
           std::round(epoch_fraction * static_cast<double>(total_epochs));
  }
};

struct local_learning_config {
  module_bounds bounds;                  // empty: even_split(layers, modules)
  std::size_t modules = 2;               // K, used when bounds is empty
  std::vector<std::size_t> head_hidden;  // hidden widths of each auxiliary head ({} = linear)
  pgl_schedule pgl;                      // global guidance (default: none)
  std::uint64_t seed = 1;                // head initialisation

  // The constructor checks these (after splitting the layers into modules).
  static constexpr auto description() {
    return describe("local_learning",
                    describe_field("modules", &local_learning_config::modules,
                                   "K gradient-isolated modules (1: end-to-end backprop)", at_least(1)),
                    describe_field("head_hidden", &local_learning_config::head_hidden,
                                   "hidden widths of each auxiliary head", above(0)),
                    describe_field("pgl", &local_learning_config::pgl, "periodic global guidance"));
  }
};

/// One module's local step result.
struct module_step {
  float loss = 0;
  span<const float> output;  // rows x width of the module's output (valid until its next step)
};

template <module_optimizer Opt>
class local_learning {
 public:
  /// `net`: the architecture; `params`: its flat parameters (copied in); `make_opt(n)` returns
  /// a fresh optimizer for a slice of n parameters.
  template <class MakeOpt>
  local_learning(const nn::mlp<float>& net, std::vector<float> params, local_learning_config cfg,
                 MakeOpt make_opt)
      : cfg_(std::move(cfg)), net_(net), params_(std::move(params)) {
    require_same_size("local_learning.params", params_.size(), "num_params", net.num_params());
    const std::size_t L = net.num_layers();
    if (cfg_.bounds.empty()) cfg_.bounds = even_split(L, cfg_.modules);
    validate_bounds(cfg_.bounds, L);
    for (std::size_t h = 0; h < cfg_.head_hidden.size(); ++h)
      require_positive("local_learning.head_hidden[" + std::to_string(h) + "]",
                       cfg_.head_hidden[h]);
    cfg_.pgl.validate();
    const std::size_t K = cfg_.bounds.size() - 1;
    grads_.assign(params_.size(), 0.0f);
    for (std::size_t k = 0; k < K; ++k) {
      bodies_.push_back(net);  // each module owns a workspace (pipelines run them concurrently)
      body_opt_.push_back(make_opt(slice_size(k)));
      if (k + 1 < K) {
        std::vector<std::size_t> sizes{net.sizes()[cfg_.bounds[k + 1]]};
        sizes.insert(sizes.end(), cfg_.head_hidden.begin(), cfg_.head_hidden.end());
        sizes.push_back(net.classes());
        heads_.emplace_back(sizes, net.config());
        head_params_.emplace_back(heads_.back().num_params());
        heads_.back().init(head_params_.back(), cfg_.seed + k);
        head_grads_.emplace_back(heads_.back().num_params());
        head_opt_.push_back(make_opt(heads_.back().num_params()));
        dout_.emplace_back();
      }
    }
  }

  std::size_t modules() const { return bodies_.size(); }
  const module_bounds& bounds() const { return cfg_.bounds; }
  const std::vector<float>& params() const { return params_; }
  const std::vector<float>& head_params(std::size_t k) const { return head_params_.at(k); }
  /// Module k's slice of the network parameters (what only module k's owner updates).
  span<float> module_params(std::size_t k) {
    require(k < modules(), "local_learning.module", k, "must be < number of modules");
    return slice(params_, k);
  }
  /// Module k's auxiliary head parameters (k < modules() - 1).
  span<float> head_params_mut(std::size_t k) { return span<float>(head_params_.at(k)); }
  nn::mlp<float>& network() { return net_; }

  /// Module k's local step on `rows` inputs `x` (width sizes[bounds[k]]) with labels `y`.
  /// Touches only module k's parameters, head and optimizers, so different modules may step
  /// concurrently.
  module_step step_module(std::size_t k, const float* x, span<const std::int32_t> y) {
    require(k < modules(), "local_learning.module", k, "must be < number of modules");
    const std::size_t first = cfg_.bounds[k], last = cfg_.bounds[k + 1];
    auto& body = bodies_[k];
    const span<float> g(grads_);
    module_step r;
    if (k + 1 == modules()) {
      r.loss = body.loss_and_gradient_from(params_, first, x, y, g);
      r.output = {};
    } else {
      const auto out = body.forward(params_, x, y.size(), first, last);
      dout_[k].resize(out.size());
      r.loss = heads_[k].loss_and_gradient_from(head_params_[k], 0, out.data(), y, head_grads_[k],
                                                {}, dout_[k].data());
      body.backward(params_, dout_[k].data(), first, last, g);
      head_opt_[k].step(span<float>(head_params_[k]), span<const float>(head_grads_[k]));
      r.output = out;
    }
    body_opt_[k].step(slice(params_, k), span<const float>(slice(grads_, k)));
    return r;
  }

  /// One training iteration on a batch: the global step when the PGL schedule says so, else
  /// every module's local step in order. Returns the last module's loss (the network's).
  float step(const nn::batch<float>& b, std::size_t iteration = 0, std::size_t epoch = 0) {
    if (cfg_.pgl.global(iteration, epoch)) return global_step(b);
    const float* x = b.x.data();
    float loss = 0;
    for (std::size_t k = 0; k < modules(); ++k) {
      const auto r = step_module(k, x, b.y);
      x = r.output.data();
      loss = r.loss;
    }
    return loss;
  }

  /// Checkpointing: the network and head parameters and every module's optimizers, in a
  /// fixed order; `ar(...)` writes or reads them (available when the optimizers have a
  /// serialize member). The rest is workspace, overwritten before it is read, and
  /// configuration, rebuilt by the caller.
  template <class Archive>
  void serialize(Archive& ar)
    requires requires(Opt& o) { o.serialize(ar); }
  {
    ar(params_, head_params_);
    for (auto& o : body_opt_) o.serialize(ar);
    for (auto& o : head_opt_) o.serialize(ar);
  }

  /// End-to-end backpropagation of the global loss; each module's optimizer applies its slice.
  float global_step(const nn::batch<float>& b) {
    const float loss = net_.loss_and_gradient(params_, b, grads_);
    for (std::size_t k = 0; k < modules(); ++k)
      body_opt_[k].step(slice(params_, k), span<const float>(slice(grads_, k)));
    return loss;
  }

 private:
  std::size_t slice_size(std::size_t k) const {
    return net_.layer_offset(cfg_.bounds[k + 1]) - net_.layer_offset(cfg_.bounds[k]);
  }
  span<float> slice(std::vector<float>& v, std::size_t k) {
    return span<float>(v.data() + net_.layer_offset(cfg_.bounds[k]), slice_size(k));
  }

  local_learning_config cfg_;
  nn::mlp<float> net_;
  std::vector<float> params_, grads_;
  std::vector<nn::mlp<float>> bodies_, heads_;
  std::vector<std::vector<float>> head_params_, head_grads_, dout_;
  std::vector<Opt> body_opt_, head_opt_;
};

}  // namespace heterograd::algorithms::decoupled
