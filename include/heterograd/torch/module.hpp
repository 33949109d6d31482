#pragma once
// A LibTorch module on heterograd's flat buffers (component heterograd::torch, HG_HAS_TORCH).
//
// flat_module lays every parameter of a torch::nn::Module over one contiguous float buffer and
// every gradient over another, so an algorithm of heterograd (which works on span<float>)
// updates the module in place: no copy per step. Autograd accumulates into the existing .grad
// tensors in place (they are defined and never released here), so a backward pass writes the
// flat gradient buffer itself.
//
// The buffer layout is the module's parameters() order (registration order, depth first): for a
// torch::nn::Linear, the weight (row-major out x in) then the bias, the layout of heterograd's
// nn::mlp, so the same numbers mean the same model in both.
//
// Floating-point buffers (batch-norm running means and variances) get a third flat buffer,
// buffers(). They never enter a gradient: in training mode a batch-norm layer normalises by
// the batch's own statistics and only records the running ones. What an algorithm does with
// them is a choice the caller makes explicitly, per method (buffer_rule, synchronise_buffers):
// average them where replicas average (local SGD, FedAvg, BSP), keep them local, or reset them
// and re-estimate them on the model being evaluated (estimate_batch_norm). Integer buffers
// (batch norm's num_batches_tracked) stay where LibTorch keeps them.
//
// Requirements, checked with std::invalid_argument naming the tensor: every parameter and
// floating-point buffer is float32, on one device, and the module shares no parameter between
// two places (a shared tensor would be laid twice).

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/core/span.hpp"

namespace heterograd::libtorch {

/// Where one tensor sits in a flat buffer.
struct slot {
  std::string name;            ///< the module's dotted name ("layer1.0.conv1.weight")
  std::size_t offset = 0;      ///< in floats
  std::vector<std::int64_t> shape;
  std::size_t size() const {
    std::size_t n = 1;
    for (const auto s : shape) n *= static_cast<std::size_t>(s);
    return n;
  }
};

/// What replicas do with their floating-point buffers when they synchronise.
enum class buffer_rule {
  average,  ///< set every replica's buffers to the replicas' mean (as their parameters)
  local,    ///< each replica keeps its own
  reset,    ///< batch norm's running statistics back to mean 0, variance 1 (re-estimate them)
};

/// A module whose parameters, gradients and floating-point buffers are views into three flat
/// buffers: owned here (on the module's device), or the caller's (rebind).
class flat_module {
 public:
  /// Takes the module as it is: its current parameter and buffer values are copied into the
  /// flat buffers once, here. flat_module holds the module.
  explicit flat_module(std::shared_ptr<torch::nn::Module> module) : module_(std::move(module)) {
    if (!module_) throw std::invalid_argument("heterograd::libtorch::flat_module: null module");
    torch::NoGradGuard no_grad;
    std::set<const void*> seen;
    bool first = true;
    auto check = [&](const std::string& what, const std::string& name, const torch::Tensor& t) {
      if (t.scalar_type() != torch::kFloat)
        throw std::invalid_argument("heterograd::libtorch::flat_module: " + what + " '" + name + "' is " +
                                    std::string(c10::toString(t.scalar_type())) + "; expected float32");
      if (first) device_ = t.device();
      else if (t.device() != device_)
        throw std::invalid_argument("heterograd::libtorch::flat_module: " + what + " '" + name + "' is on " +
                                    t.device().str() + ", the others on " + device_.str() +
                                    "; expected one device");
      first = false;
      if (t.numel() > 0 && t.data_ptr() && !seen.insert(t.data_ptr()).second)
        throw std::invalid_argument("heterograd::libtorch::flat_module: " + what + " '" + name +
                                    "' shares its memory with another tensor of the module; expected "
                                    "each parameter once");
    };
    const auto params = module_->named_parameters(/*recurse=*/true);
    std::size_t n = 0;
    for (const auto& p : params) {
      check("parameter", p.key(), p.value());
      params_layout_.push_back({p.key(), n, p.value().sizes().vec()});
      n += static_cast<std::size_t>(p.value().numel());
    }
    std::size_t nb = 0;
    for (const auto& b : float_buffers()) {
      check("buffer", b.key(), b.value());
      buffers_layout_.push_back({b.key(), nb, b.value().sizes().vec()});
      nb += static_cast<std::size_t>(b.value().numel());
    }
    const auto opts = options();
    owned_params_ = torch::empty({static_cast<std::int64_t>(n)}, opts);
    owned_grads_ = torch::zeros({static_cast<std::int64_t>(n)}, opts);
    buffers_ = torch::empty({static_cast<std::int64_t>(nb)}, opts);
    std::size_t i = 0;
    for (const auto& p : params) view_of(owned_params_, params_layout_[i++]).copy_(p.value());
    i = 0;
    for (const auto& b : float_buffers()) {
      auto t = b.value();
      const slot& s = buffers_layout_[i++];
      auto view = view_of(buffers_, s);
      view.copy_(t);
      t.set_data(view);
    }
    bind(owned_params_, owned_grads_);
  }

  flat_module(const flat_module&) = delete;
  flat_module& operator=(const flat_module&) = delete;
  flat_module(flat_module&&) = default;
  flat_module& operator=(flat_module&&) = default;

  torch::nn::Module& module() { return *module_; }
  const std::shared_ptr<torch::nn::Module>& module_ptr() const { return module_; }

  /// Number of parameters (floats).
  std::size_t size() const { return params_layout_.empty() ? 0 : params_layout_.back().offset + params_layout_.back().size(); }
  /// The flat buffers as spans of memory space Space: host_space (the default) for a module on
  /// the CPU, device_space for one on a CUDA device. Another space than the module's device
  /// is std::invalid_argument naming both (a host span over CUDA memory would be dereferenced
  /// by host code).
  template <class Space = host_space>
  span<float, Space> params() { return {as_ptr<Space>(params_, "params"), size()}; }
  template <class Space = host_space>
  span<const float, Space> params() const { return {as_ptr<Space>(params_, "params"), size()}; }
  template <class Space = host_space>
  span<float, Space> grads() { return {as_ptr<Space>(grads_, "grads"), size()}; }
  template <class Space = host_space>
  span<const float, Space> grads() const { return {as_ptr<Space>(grads_, "grads"), size()}; }
  template <class Space = host_space>
  span<float, Space> buffers() {
    return {as_ptr<Space>(buffers_, "buffers"), static_cast<std::size_t>(buffers_.numel())};
  }
  template <class Space = host_space>
  span<const float, Space> buffers() const {
    return {as_ptr<Space>(buffers_, "buffers"), static_cast<std::size_t>(buffers_.numel())};
  }
  /// The device the module's tensors (and so the flat buffers) are on.
  const torch::Device& device() const { return device_; }
  /// The flat buffers as 1-D tensors over the same memory.
  const torch::Tensor& params_tensor() const { return params_; }
  const torch::Tensor& grads_tensor() const { return grads_; }
  const torch::Tensor& buffers_tensor() const { return buffers_; }
  const std::vector<slot>& params_layout() const { return params_layout_; }
  const std::vector<slot>& buffers_layout() const { return buffers_layout_; }

  void zero_grad() { grads_.zero_(); }

  /// Lays the parameters over `params` and the gradients over `grads` (the caller's memory, on
  /// the module's device, size() floats each; it must outlive its use here): afterwards the
  /// module computes with those values and backward accumulates into `grads`, with no copy.
  /// Rebinding to the memory already bound does nothing. The module must not write its
  /// parameters in forward or backward (no module of LibTorch does); an algorithm updating
  /// `params` between passes is the point. The flat buffers this object owns are released on
  /// the first rebind elsewhere.
  /// Host memory for a module on the CPU; rebind(span<float, device_space>, ...) for one on a
  /// CUDA device (another space is std::invalid_argument, as for params()).
  void rebind(span<float> params, span<float> grads) { rebind<host_space>(params, grads); }
  template <class Space>
  void rebind(span<float, Space> params, span<float, Space> grads) {
    check_space<Space>("rebind");
    if (params.size() != size() || grads.size() != size())
      throw std::invalid_argument("heterograd::libtorch::flat_module::rebind: expected " + std::to_string(size()) +
                                  " parameters and gradients, got " + std::to_string(params.size()) + " and " +
                                  std::to_string(grads.size()));
    if (params.data() == raw(params_) && grads.data() == raw(grads_)) return;
    const auto opts = options();
    const auto n = static_cast<std::int64_t>(size());
    bind(torch::from_blob(params.data(), {n}, opts), torch::from_blob(grads.data(), {n}, opts));
    owned_params_ = torch::Tensor();
    owned_grads_ = torch::Tensor();
  }

  /// Throws std::logic_error unless every parameter, gradient and floating-point buffer is
  /// still the view laid here (code that replaced a .grad or called set_data would leave
  /// heterograd updating memory the module no longer reads).
  void check_binding() const {
    std::size_t i = 0;
    for (const auto& p : module_->named_parameters(true)) {
      if (i == params_layout_.size())
        throw std::logic_error("heterograd::libtorch::flat_module: the module's parameters changed");
      const slot& s = params_layout_[i++];
      if (!at(p.value(), params_, s))
        throw std::logic_error("heterograd::libtorch::flat_module: parameter '" + p.key() + "' left the flat buffer");
      if (!p.value().grad().defined() || !at(p.value().grad(), grads_, s))
        throw std::logic_error("heterograd::libtorch::flat_module: the gradient of '" + p.key() +
                               "' left the flat buffer (was it set to None or replaced?)");
    }
    if (i != params_layout_.size())
      throw std::logic_error("heterograd::libtorch::flat_module: the module's parameters changed");
    i = 0;
    for (const auto& b : float_buffers()) {
      if (i == buffers_layout_.size() || !at(b.value(), buffers_, buffers_layout_[i++]))
        throw std::logic_error("heterograd::libtorch::flat_module: buffer '" + b.key() + "' left the flat buffer");
    }
  }

 private:
  std::vector<torch::OrderedDict<std::string, torch::Tensor>::Item> float_buffers() const {
    std::vector<torch::OrderedDict<std::string, torch::Tensor>::Item> out;
    for (const auto& b : module_->named_buffers(true))
      if (b.value().is_floating_point()) out.push_back(b);
    return out;
  }
  torch::TensorOptions options() const { return torch::TensorOptions().dtype(torch::kFloat).device(device_); }
  void bind(torch::Tensor params, torch::Tensor grads) {
    torch::NoGradGuard no_grad;
    params_ = std::move(params);
    grads_ = std::move(grads);
    std::size_t i = 0;
    for (const auto& p : module_->named_parameters(true)) {
      auto t = p.value();
      const slot& s = params_layout_[i++];
      t.set_data(view_of(params_, s));
      t.mutable_grad() = view_of(grads_, s);
    }
  }
  static torch::Tensor view_of(const torch::Tensor& flat, const slot& s) {
    return flat.narrow(0, static_cast<std::int64_t>(s.offset), static_cast<std::int64_t>(s.size())).view(s.shape);
  }
  static bool at(const torch::Tensor& t, const torch::Tensor& flat, const slot& s) {
    return t.numel() == 0 || (t.is_contiguous() && t.data_ptr<float>() == raw(flat) + s.offset &&
                              static_cast<std::size_t>(t.numel()) == s.size());
  }
  static float* raw(const torch::Tensor& t) { return t.defined() && t.numel() ? t.data_ptr<float>() : nullptr; }
  template <class Space>
  void check_space(const char* what) const {
    static_assert(std::is_same_v<Space, host_space> || std::is_same_v<Space, device_space>,
                  "flat_module's spans are host_space (CPU) or device_space (CUDA)");
    constexpr bool host = std::is_same_v<Space, host_space>;
    if (host ? device_.is_cpu() : device_.is_cuda()) return;
    throw std::invalid_argument(std::string("heterograd::libtorch::flat_module::") + what + ": a " +
                                Space::name + " span of a module on " + device_.str() + "; " +
                                (device_.is_cuda() ? "ask for params<device_space>() (CUDA memory)"
                                 : device_.is_cpu() ? "ask for params() (host memory)"
                                                    : "heterograd reaches CPU and CUDA tensors only"));
  }
  template <class Space>
  float* as_ptr(const torch::Tensor& t, const char* what) const {
    check_space<Space>(what);
    return raw(t);
  }

  std::shared_ptr<torch::nn::Module> module_;
  torch::Device device_ = torch::kCPU;
  torch::Tensor owned_params_, owned_grads_;  // this object's storage until a rebind elsewhere
  torch::Tensor params_, grads_, buffers_;
  std::vector<slot> params_layout_, buffers_layout_;
};

/// Batch norm's running statistics of every BatchNorm1d/2d/3d in `m` back to their initial
/// values (mean 0, variance 1, no batch seen).
inline void reset_batch_norm(torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  for (const auto& sub : m.modules(/*include_self=*/true)) {
    if (auto* b = dynamic_cast<torch::nn::BatchNorm1dImpl*>(sub.get())) b->reset_running_stats();
    else if (auto* b2 = dynamic_cast<torch::nn::BatchNorm2dImpl*>(sub.get())) b2->reset_running_stats();
    else if (auto* b3 = dynamic_cast<torch::nn::BatchNorm3dImpl*>(sub.get())) b3->reset_running_stats();
  }
}

/// Re-estimates batch norm's running statistics of `m` at its current parameters: resets them,
/// then runs `forward_batches(m)` (which forwards some training batches) in training mode with
/// a cumulative average (momentum none), so the statistics become the exact mean over those
/// batches; restores each layer's momentum and the module's mode. Gradients are not touched.
template <class Forward>
void estimate_batch_norm(torch::nn::Module& m, Forward&& forward_batches) {
  torch::NoGradGuard no_grad;
  const bool was_training = m.is_training();
  std::vector<std::pair<torch::nn::BatchNormOptions*, c10::optional<double>>> saved;
  for (const auto& sub : m.modules(true)) {
    torch::nn::BatchNormOptions* o = nullptr;
    if (auto* b = dynamic_cast<torch::nn::BatchNorm1dImpl*>(sub.get())) o = &b->options;
    else if (auto* b2 = dynamic_cast<torch::nn::BatchNorm2dImpl*>(sub.get())) o = &b2->options;
    else if (auto* b3 = dynamic_cast<torch::nn::BatchNorm3dImpl*>(sub.get())) o = &b3->options;
    if (o) {
      saved.emplace_back(o, o->momentum());
      o->momentum(c10::nullopt);
    }
  }
  reset_batch_norm(m);
  m.train(true);
  try {
    forward_batches(m);
  } catch (...) {
    for (auto& [o, mom] : saved) o->momentum(mom);
    m.train(was_training);
    throw;
  }
  for (auto& [o, mom] : saved) o->momentum(mom);
  m.train(was_training);
}

/// Applies `rule` to the replicas' floating-point buffers (all laid out alike: the same
/// architecture). average: each buffer becomes the replicas' mean, in double, rounded once.
inline void synchronise_buffers(buffer_rule rule, const std::vector<flat_module*>& replicas) {
  if (replicas.empty()) return;
  for (const auto* r : replicas)
    if (r->buffers_tensor().numel() != replicas.front()->buffers_tensor().numel())
      throw std::invalid_argument("heterograd::libtorch::synchronise_buffers: replicas of different "
                                  "architectures (buffer sizes differ)");
  switch (rule) {
    case buffer_rule::local: return;
    case buffer_rule::reset:
      for (auto* r : replicas) reset_batch_norm(r->module());
      return;
    case buffer_rule::average: {
      // LibTorch's own element-wise ops, so replicas on any one device (CPU or CUDA) average
      // where they are; the same double sum, in replica order, and one rounding.
      torch::NoGradGuard no_grad;
      const auto& first = replicas.front()->buffers_tensor();
      if (first.numel() == 0) return;
      for (const auto* r : replicas)
        if (r->buffers_tensor().device() != first.device())
          throw std::invalid_argument("heterograd::libtorch::synchronise_buffers: replicas on " +
                                      first.device().str() + " and " +
                                      r->buffers_tensor().device().str() + "; expected one device");
      auto sum = torch::zeros_like(first, torch::kDouble);
      for (const auto* r : replicas) sum.add_(r->buffers_tensor().to(torch::kDouble));
      const auto mean = sum.div_(static_cast<double>(replicas.size())).to(torch::kFloat);
      for (auto* r : replicas) r->buffers_tensor().copy_(mean);
      return;
    }
  }
}

}  // namespace heterograd::libtorch
