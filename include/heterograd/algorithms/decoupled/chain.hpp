#pragma once
// A network as decoupled training sees it: K modules laid end to end over one flat parameter
// buffer, each with an auxiliary head but the last (module_chain). local_learning and its
// pipelines drive any chain; mlp_chain is heterograd's own MLP split at layer boundaries,
// heterograd::libtorch::sequential_chain (torch/chain.hpp) a torch::nn::Sequential split at
// named children, and any_chain holds either behind one type (a driver choosing at run time).
//
// What a chain computes, never how it steps: local_gradient(k) writes module k's slice of the
// gradient and its head's gradient from module k's local loss; global_gradient writes the whole
// gradient from the network's own loss (PGL's global step). local_learning owns the parameters,
// heads and optimizers and applies the steps.
//
// A chain computes in one memory space, its `memory_space` (host_space when it names none):
// parameters, gradients, heads, module inputs and outputs are spans or pointers of that space,
// and local_learning keeps its buffers in a memory of the same space. Labels are host data (a
// chain on a device moves each batch's labels itself, as it would its data).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/nn/mlp.hpp"

namespace heterograd::algorithms::decoupled {

/// The memory space a chain computes in: C::memory_space, host_space when C names none.
template <class C>
struct chain_space {
  using type = host_space;
};
template <class C>
  requires requires { typename C::memory_space; }
struct chain_space<C> {
  using type = typename C::memory_space;
};
template <class C>
using chain_space_t = typename chain_space<std::remove_cvref_t<C>>::type;

/// One module's local step result, its output in the chain's memory space.
template <class Space = host_space>
struct basic_module_step {
  float loss = 0;
  span<const float, Space> output;  // rows x width of the module's output (valid until its next step)
};
using module_step = basic_module_step<host_space>;

/// `c.modules()` K >= 1; `c.num_params()`; `c.module_offset(k)` for k in [0, K] (module k's
/// parameters are [offset(k), offset(k+1)) of the flat buffer, offset(K) = num_params());
/// `c.input_width(k)` floats per sample entering module k; `c.head_size(k)` the parameters of
/// module k's head (k < K-1); `c.init_head(k, head, seed)`; `c.local_gradient(k, params, x, y,
/// grads, head, head_grads)`: module k's local loss on rows = y.size() inputs x, writing
/// grads[offset(k), offset(k+1)) and head_grads (the last module: the network's loss, no head),
/// touching nothing of another module, so different modules may run concurrently;
/// `c.global_gradient(params, x, y, grads)`: the network's loss on the network's inputs x, the
/// whole gradient. Spans and x in the chain's memory space S, labels y on the host.
template <class C, class S = chain_space_t<C>>
concept module_chain = requires(C& c, const C& cc, std::size_t k, span<float, S> p, span<float, S> g,
                                const float* x, span<const std::int32_t> y, std::uint64_t seed) {
  { cc.modules() } -> std::convertible_to<std::size_t>;
  { cc.num_params() } -> std::convertible_to<std::size_t>;
  { cc.module_offset(k) } -> std::convertible_to<std::size_t>;
  { cc.input_width(k) } -> std::convertible_to<std::size_t>;
  { cc.head_size(k) } -> std::convertible_to<std::size_t>;
  c.init_head(k, p, seed);
  { c.local_gradient(k, p, x, y, g, p, g) } -> std::same_as<basic_module_step<S>>;
  { c.global_gradient(p, x, y, g) } -> std::convertible_to<float>;
};

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

/// The MLP's dense layers split into contiguous modules. Module k < K-1 ends in a head: a
/// small MLP (hidden widths `head_hidden`, {} = linear) from the module's output to the classes.
class mlp_chain {
 public:
  /// `bounds` empty: even_split(layers, modules).
  mlp_chain(const nn::mlp<float>& net, module_bounds bounds, std::size_t modules,
            const std::vector<std::size_t>& head_hidden)
      : net_(net), bounds_(std::move(bounds)) {
    const std::size_t L = net.num_layers();
    if (bounds_.empty()) bounds_ = even_split(L, modules);
    validate_bounds(bounds_, L);
    for (std::size_t h = 0; h < head_hidden.size(); ++h)
      require_positive("local_learning.head_hidden[" + std::to_string(h) + "]", head_hidden[h]);
    const std::size_t K = bounds_.size() - 1;
    for (std::size_t k = 0; k < K; ++k) {
      bodies_.push_back(net);  // each module owns a workspace (pipelines run them concurrently)
      if (k + 1 < K) {
        std::vector<std::size_t> sizes{net.sizes()[bounds_[k + 1]]};
        sizes.insert(sizes.end(), head_hidden.begin(), head_hidden.end());
        sizes.push_back(net.classes());
        heads_.emplace_back(sizes, net.config());
        dout_.emplace_back();
      }
    }
  }

  std::size_t modules() const { return bodies_.size(); }
  std::size_t num_params() const { return net_.num_params(); }
  std::size_t module_offset(std::size_t k) const { return net_.layer_offset(bounds_.at(k)); }
  std::size_t input_width(std::size_t k) const { return net_.sizes()[bounds_.at(k)]; }
  std::size_t head_size(std::size_t k) const { return heads_.at(k).num_params(); }
  /// The whole network (evaluation).
  nn::mlp<float>& network() { return net_; }

  void init_head(std::size_t k, span<float> head, std::uint64_t seed) { heads_.at(k).init(head, seed); }

  module_step local_gradient(std::size_t k, span<float> params, const float* x, span<const std::int32_t> y,
                             span<float> grads, span<float> head, span<float> head_grads) {
    const std::size_t first = bounds_[k], last = bounds_[k + 1];
    auto& body = bodies_.at(k);
    if (k + 1 == modules()) return {body.loss_and_gradient_from(params, first, x, y, grads), {}};
    const auto out = body.forward(params, x, y.size(), first, last);
    dout_[k].resize(out.size());
    const float loss = heads_[k].loss_and_gradient_from(head, 0, out.data(), y, head_grads, {}, dout_[k].data());
    body.backward(params, dout_[k].data(), first, last, grads);
    return {loss, out};
  }

  float global_gradient(span<float> params, const float* x, span<const std::int32_t> y, span<float> grads) {
    return net_.loss_and_gradient(params, nn::batch<float>{span<const float>(x, y.size() * input_width(0)), y}, grads);
  }

 private:
  nn::mlp<float> net_;
  module_bounds bounds_;
  std::vector<nn::mlp<float>> bodies_, heads_;
  std::vector<std::vector<float>> dout_;
};

/// Any host module_chain behind one type (move-only; the chain it holds is moved in).
class any_chain {
  struct base {
    virtual ~base() = default;
    virtual std::size_t modules() const = 0;
    virtual std::size_t num_params() const = 0;
    virtual std::size_t module_offset(std::size_t k) const = 0;
    virtual std::size_t input_width(std::size_t k) const = 0;
    virtual std::size_t head_size(std::size_t k) const = 0;
    virtual void init_head(std::size_t k, span<float> head, std::uint64_t seed) = 0;
    virtual module_step local_gradient(std::size_t k, span<float> params, const float* x,
                                       span<const std::int32_t> y, span<float> grads, span<float> head,
                                       span<float> head_grads) = 0;
    virtual float global_gradient(span<float> params, const float* x, span<const std::int32_t> y,
                                  span<float> grads) = 0;
  };
  template <class C>
  struct held final : base {
    explicit held(C chain) : c(std::move(chain)) {}
    std::size_t modules() const override { return c.modules(); }
    std::size_t num_params() const override { return c.num_params(); }
    std::size_t module_offset(std::size_t k) const override { return c.module_offset(k); }
    std::size_t input_width(std::size_t k) const override { return c.input_width(k); }
    std::size_t head_size(std::size_t k) const override { return c.head_size(k); }
    void init_head(std::size_t k, span<float> head, std::uint64_t seed) override { c.init_head(k, head, seed); }
    module_step local_gradient(std::size_t k, span<float> params, const float* x, span<const std::int32_t> y,
                               span<float> grads, span<float> head, span<float> head_grads) override {
      return c.local_gradient(k, params, x, y, grads, head, head_grads);
    }
    float global_gradient(span<float> params, const float* x, span<const std::int32_t> y,
                          span<float> grads) override {
      return c.global_gradient(params, x, y, grads);
    }
    C c;
  };

 public:
  template <module_chain<host_space> C>
    requires(!std::is_same_v<std::remove_cvref_t<C>, any_chain>)
  any_chain(C chain)  // NOLINT(google-explicit-constructor): a chain is an any_chain
      : p_(std::make_unique<held<C>>(std::move(chain))) {}

  std::size_t modules() const { return p_->modules(); }
  std::size_t num_params() const { return p_->num_params(); }
  std::size_t module_offset(std::size_t k) const { return p_->module_offset(k); }
  std::size_t input_width(std::size_t k) const { return p_->input_width(k); }
  std::size_t head_size(std::size_t k) const { return p_->head_size(k); }
  void init_head(std::size_t k, span<float> head, std::uint64_t seed) { p_->init_head(k, head, seed); }
  module_step local_gradient(std::size_t k, span<float> params, const float* x, span<const std::int32_t> y,
                             span<float> grads, span<float> head, span<float> head_grads) {
    return p_->local_gradient(k, params, x, y, grads, head, head_grads);
  }
  float global_gradient(span<float> params, const float* x, span<const std::int32_t> y, span<float> grads) {
    return p_->global_gradient(params, x, y, grads);
  }

 private:
  std::unique_ptr<base> p_;
};

}  // namespace heterograd::algorithms::decoupled
