#pragma once
// A torch::nn::Sequential as a decoupled module chain (algorithms/decoupled/chain.hpp): split
// at named top-level children into K modules, each module but the last with an auxiliary head,
// so that local_learning, PGL and the module pipelines over threads and ranks train it with
// LibTorch's real forward and backward passes.
//
// Module k is a Sequential of the network's own children (the same module objects: the whole
// network and the modules compute with one set of tensors); its parameters and gradients are
// laid over its slice of the caller's flat buffers (flat_module::rebind, no copy), in the
// network's parameters() order, so the flat parameters are the whole network's. Each module
// keeps its own floating-point buffers (batch norm's running statistics: local, never averaged).
//
// The heads follow the local-learning papers' small auxiliary networks (Belilovsky et al.,
// "Decoupled Greedy Learning of CNNs", ICML 2020; Wang et al., "Revisiting Locally Supervised
// Learning", ICLR 2021): on a feature map C x H x W, a 3x3 convolution with ReLU per width of
// `head_channels`, average pooling to at most 2 x 2 and a dense layer to the classes; on a
// flat feature vector, dense layers of those widths with ReLU and a dense layer to the classes.
// A module is trained on its head's cross-entropy; its output enters the next module detached
// (no gradient crosses a module boundary).

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "heterograd/algorithms/decoupled/chain.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/torch/models.hpp"
#include "heterograd/torch/module.hpp"

namespace heterograd::libtorch {

/// Who splits a network at its children, for the errors: "sequential_chain", its count key
/// ("modules") and what one part is called ("module").
struct split_names {
  const char* who;
  const char* count_key;
  const char* part;
};

/// The child indices where each of the parts starts, and the end (names.size()): the parts
/// start at the children named in `split` (parts 2..K; the first starts at child 0), or, with
/// `split` empty, `count` groups of consecutive children differing in size by at most one.
/// Throws std::invalid_argument naming the entry that is not a child, is the first child or
/// does not come after the previous one (an empty part), or a count outside [1, children].
inline std::vector<std::size_t> child_starts(const std::vector<std::string>& names,
                                             const std::vector<std::string>& split, std::size_t count,
                                             const split_names& w) {
  const std::size_t n = names.size();
  const std::string who(w.who), part(w.part);
  if (n == 0) throw std::invalid_argument(who + ": the network has no children");
  std::vector<std::size_t> starts{0};
  if (split.empty()) {
    if (count < 1 || count > n)
      throw std::invalid_argument(who + ": " + w.count_key + ": " + std::to_string(count) +
                                  " must be in [1, number of children = " + std::to_string(n) + "]");
    for (std::size_t k = 0; k + 1 < count; ++k) starts.push_back(starts.back() + n / count + (k < n % count));
  }
  std::string all;
  for (const auto& s : names) all += (all.empty() ? "" : ", ") + s;
  for (std::size_t i = 0; i < split.size(); ++i) {
    std::size_t at = n;
    for (std::size_t c = 0; c < n; ++c)
      if (names[c] == split[i]) at = c;
    const std::string key = who + ": split[" + std::to_string(i) + "]: '" + split[i] + "' ";
    if (at == n) throw std::invalid_argument(key + "is not a child of the network (its children: " + all + ")");
    if (at == 0)
      throw std::invalid_argument(key + "is the network's first child, where " + part + " 1 starts; expected the children "
                                  "where " + part + "s 2..K start (children: " + all + ")");
    if (at <= starts.back())
      throw std::invalid_argument(key + "must come after '" + names[starts.back()] + "' in the network's order (" +
                                  part + " " + std::to_string(starts.size()) + " would be empty; children: " + all + ")");
    starts.push_back(at);
  }
  starts.push_back(n);
  return starts;
}

struct chain_options {
  /// The children at which modules 2..K start, in the network's order ({} : `modules` groups of
  /// children differing in count by at most one).
  std::vector<std::string> split;
  std::size_t modules = 2;
  /// Widths of each head's hidden layers (3x3 convolutions on a feature map, dense on a vector).
  std::vector<std::int64_t> head_channels;
  std::int64_t classes = 10;
  double label_smoothing = 0.0;
  /// One sample's shape entering the network (C, H, W for an image).
  std::vector<std::int64_t> input;
  /// LibTorch's intra-op (OpenMP) threads for each call on the calling thread (0: as they are).
  int threads = 0;
  /// Applied to the network's input before module 0 (standardisation); empty: none.
  std::function<torch::Tensor(const torch::Tensor&)> prepare;
};

class sequential_chain {
 public:
  /// `net`'s current parameters are what flat_module copies once; the caller's flat buffers
  /// replace them at the first call (rebind). Throws std::invalid_argument naming the split
  /// entry that is not a child, out of order or empty, or the input shape the network cannot
  /// take.
  sequential_chain(torch::nn::Sequential net, chain_options opt) : net_(std::move(net)), opt_(std::move(opt)) {
    if (opt_.input.empty()) throw std::invalid_argument("sequential_chain: input: expected one sample's shape");
    if (opt_.classes < 1) throw std::invalid_argument("sequential_chain: classes: expected at least 1");
    const auto children = net_->named_children();
    std::vector<std::string> names;
    for (const auto& c : children) names.push_back(c.key());
    const std::vector<std::size_t> starts = module_starts(names);
    std::vector<torch::nn::AnyModule> any(net_->begin(), net_->end());
    threads_here();
    torch::NoGradGuard no_grad;
    std::vector<std::int64_t> shape{1};
    shape.insert(shape.end(), opt_.input.begin(), opt_.input.end());
    torch::Tensor x = torch::zeros(shape);
    const bool was_training = net_->is_training();
    net_->eval();  // the shape probe leaves batch norm's statistics as they are
    for (std::size_t k = 0; k + 1 < starts.size(); ++k) {
      stack body;
      for (std::size_t c = starts[k]; c < starts[k + 1]; ++c) body->push_back(names[c], any[c]);
      in_shape_.push_back(x.sizes().vec());
      try {
        x = body->forward(x);
      } catch (const std::exception& e) {
        throw std::invalid_argument("sequential_chain: input: the network cannot take " + shape_str(opt_.input) +
                                    " (module " + std::to_string(k) + " from '" + names[starts[k]] +
                                    "'): " + first_line(e.what()));
      }
      bodies_.push_back(std::make_unique<flat_module>(body.ptr()));
      if (bodies_.back()->size() == 0)
        throw std::invalid_argument("sequential_chain: split: module " + std::to_string(k) + " (from '" +
                                    names[starts[k]] + "') has no parameters; expected each module to learn");
      offsets_.push_back(total_);
      total_ += bodies_.back()->size();
      if (k + 2 < starts.size()) heads_.push_back(make_head(x.sizes().vec()));
    }
    offsets_.push_back(total_);
    if (x.dim() != 2 || x.size(1) != opt_.classes)
      throw std::invalid_argument("sequential_chain: classes: the network's output is " + shape_str(x.sizes().vec()) +
                                  "; expected [rows, " + std::to_string(opt_.classes) + "]");
    net_->train(was_training);
    out_.resize(bodies_.size());
  }

  sequential_chain(sequential_chain&&) = default;
  sequential_chain& operator=(sequential_chain&&) = default;

  std::size_t modules() const { return bodies_.size(); }
  std::size_t num_params() const { return total_; }
  std::size_t module_offset(std::size_t k) const { return offsets_.at(k); }
  std::size_t input_width(std::size_t k) const {
    std::size_t n = 1;
    const auto& s = in_shape_.at(k);
    for (std::size_t d = 1; d < s.size(); ++d) n *= static_cast<std::size_t>(s[d]);
    return n;
  }
  std::size_t head_size(std::size_t k) const { return heads_.at(k)->size(); }

  /// Head k's parameters drawn by LibTorch's default initialisation under torch::manual_seed(seed).
  /// (Sets LibTorch's global generator.)
  void init_head(std::size_t k, span<float> head, std::uint64_t seed) {
    if (head.size() != head_size(k))
      throw std::invalid_argument("sequential_chain::init_head: expected " + std::to_string(head_size(k)) +
                                  " parameters, got " + std::to_string(head.size()));
    torch::manual_seed(seed);
    const flat_module fresh(make_head_module(head_input_.at(k)).ptr());
    std::memcpy(head.data(), fresh.params().data(), head.size() * sizeof(float));
  }

  algorithms::decoupled::module_step local_gradient(std::size_t k, span<float> params, const float* x,
                                                    span<const std::int32_t> y, span<float> grads, span<float> head,
                                                    span<float> head_grads) {
    threads_here();
    auto& body = bind(k, params, grads);
    body.zero_grad();
    body.module().train();
    torch::Tensor in = input(k, x, y.size());
    torch::Tensor h = as_sequential(body).forward(in);
    algorithms::decoupled::module_step r;
    if (k + 1 == modules()) {
      auto loss = cross_entropy(h, y);
      loss.backward();
      r.loss = loss.item<float>();
      return r;
    }
    auto& hd = *heads_[k];
    hd.rebind(head, head_grads);
    hd.zero_grad();
    auto loss = cross_entropy(as_sequential(hd).forward(h), y);
    loss.backward();
    r.loss = loss.item<float>();
    const torch::Tensor o = h.detach().contiguous();
    out_[k].resize(static_cast<std::size_t>(o.numel()));
    std::memcpy(out_[k].data(), o.data_ptr<float>(), out_[k].size() * sizeof(float));
    r.output = span<const float>(out_[k].data(), out_[k].size());
    return r;
  }

  float global_gradient(span<float> params, const float* x, span<const std::int32_t> y, span<float> grads) {
    threads_here();
    for (std::size_t k = 0; k < modules(); ++k) {
      auto& body = bind(k, params, grads);
      body.zero_grad();
      body.module().train();
    }
    torch::Tensor h = input(0, x, y.size());
    for (auto& body : bodies_) h = as_sequential(*body).forward(h);
    auto loss = cross_entropy(h, y);
    loss.backward();
    return loss.item<float>();
  }

 private:
  static std::string shape_str(const std::vector<std::int64_t>& s) {
    std::string r = "[";
    for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
  }
  static std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }
  static torch::nn::SequentialImpl& as_sequential(flat_module& m) {
    return dynamic_cast<torch::nn::SequentialImpl&>(m.module());
  }

  std::vector<std::size_t> module_starts(const std::vector<std::string>& names) const {
    return child_starts(names, opt_.split, opt_.modules, {"sequential_chain", "modules", "module"});
  }

  torch::nn::Sequential make_head_module(const std::vector<std::int64_t>& out) const {
    namespace nn = torch::nn;
    nn::Sequential h;
    if (out.size() == 4) {  // [1, C, H, W]
      std::int64_t c = out[1];
      for (const auto w : opt_.head_channels) {
        h->push_back(nn::Conv2d(nn::Conv2dOptions(c, w, 3).padding(1)));
        h->push_back(nn::ReLU());
        c = w;
      }
      const std::int64_t ph = std::min<std::int64_t>(2, out[2]), pw = std::min<std::int64_t>(2, out[3]);
      h->push_back(nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({ph, pw})));
      h->push_back(nn::Flatten());
      h->push_back(nn::Linear(c * ph * pw, opt_.classes));
    } else if (out.size() == 2) {  // [1, F]
      std::int64_t f = out[1];
      for (const auto w : opt_.head_channels) {
        h->push_back(nn::Linear(f, w));
        h->push_back(nn::ReLU());
        f = w;
      }
      h->push_back(nn::Linear(f, opt_.classes));
    } else {
      throw std::invalid_argument("sequential_chain: split: a module's output " + shape_str(out) +
                                  " is neither a feature map [rows, C, H, W] nor a vector [rows, F]; split elsewhere");
    }
    return h;
  }
  std::unique_ptr<flat_module> make_head(const std::vector<std::int64_t>& out) {
    for (const auto w : opt_.head_channels)
      if (w < 1) throw std::invalid_argument("sequential_chain: head_channels: " + std::to_string(w) + " must be at least 1");
    head_input_.push_back(out);
    return std::make_unique<flat_module>(make_head_module(out).ptr());
  }

  flat_module& bind(std::size_t k, span<float> params, span<float> grads) {
    if (params.size() != total_ || grads.size() != total_)
      throw std::invalid_argument("sequential_chain: expected " + std::to_string(total_) + " parameters and gradients");
    auto& body = *bodies_[k];
    body.rebind(params.subspan(offsets_[k], body.size()), grads.subspan(offsets_[k], body.size()));
    return body;
  }

  torch::Tensor input(std::size_t k, const float* x, std::size_t rows) const {
    std::vector<std::int64_t> s = in_shape_.at(k);
    s[0] = static_cast<std::int64_t>(rows);
    torch::Tensor t = torch::from_blob(const_cast<float*>(x), s, torch::kFloat);
    return k == 0 && opt_.prepare ? opt_.prepare(t) : t;
  }

  torch::Tensor cross_entropy(const torch::Tensor& logits, span<const std::int32_t> y) const {
    const auto labels =
        torch::from_blob(const_cast<std::int32_t*>(y.data()), {static_cast<std::int64_t>(y.size())}, torch::kInt)
            .to(torch::kLong);
    return torch::nn::functional::cross_entropy(
        logits, labels, torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(opt_.label_smoothing));
  }

  void threads_here() const {
#ifdef _OPENMP
    if (opt_.threads > 0 && omp_get_max_threads() != opt_.threads) omp_set_num_threads(opt_.threads);
#endif
  }

  torch::nn::Sequential net_;
  chain_options opt_;
  std::vector<std::unique_ptr<flat_module>> bodies_, heads_;
  std::vector<std::vector<std::int64_t>> in_shape_, head_input_;
  std::vector<std::size_t> offsets_;
  std::size_t total_ = 0;
  std::vector<std::vector<float>> out_;  // module k's last output (module_step::output)
};

static_assert(algorithms::decoupled::module_chain<sequential_chain>);

}  // namespace heterograd::libtorch
