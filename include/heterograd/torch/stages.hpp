#pragma once
// A torch::nn::Sequential split at named top-level children into S pipeline stages, a
// stage_model (algorithms/pipeline/concepts.hpp), so that simulate_pipeline, sequential_step
// and run_pipeline_over (threads, MPI ranks) run LibTorch stages unchanged (issue 47).
//
// Stage s is a Sequential of the network's own children [start_s, start_{s+1}) (the same module
// objects, as sequential_chain's modules). Its parameters are laid over its slice of the
// caller's flat buffer (flat_module, in the network's parameters() order, so the flat buffer
// is the whole network's), and its backward accumulates LibTorch's gradients straight into the
// slice of the caller's gradient buffer (each parameter's .grad is a view of it): g += the
// slice's gradient is autograd's own accumulation, no copy. Across a stage boundary the floats
// cross as follows: a forward copies its input once into a tensor the slot owns (the contract
// lets the caller free x), and returns its output as a span over the output tensor's memory
// (no copy); a backward lays its dy tensor over the caller's span (no copy) and copies
// d(loss)/d(input) once into dx.
//
// Each (stage, slot) keeps its forward's input and output tensors, and through them the
// autograd graph, until its backward or release. Batch norm computes with the micro-batch's
// statistics and updates the stage's running statistics at each forward (training mode), in
// the order of the stage's forwards (m = 0..M-1 under GPipe and 1F1B alike).
//
// The loss (last stage) is LibTorch's cross-entropy over [rows, classes] logits, summed over the
// rows and multiplied by the pipeline's scale (1 / B): the unsplit network's B-row step with
// that loss is what a one-micro-batch pipeline equals bitwise (tested).
//
// Weights: a backward must see the memory its forward computed with (LibTorch's graph keeps
// the forward's parameter tensors), so the synchronous pipeline and the asynchronous one
// without stashing or SpecTrain (both pass the one flat buffer to every call) run; stashing and
// SpecTrain, which hand a backward other memory, are refused by name (they would need the
// stage's forward recomputed at the backward's weights).
//
// activation_bytes(s, rows): what a slot of stage s keeps at the children's boundaries, the
// input tensor and every child's output, rows x (input width + the children's output widths)
// floats, from the shape probe at construction; autograd's saved intermediates inside a child
// (batch norm's normalised input, a convolution's im2col) are not counted. live and peak bytes
// per stage add and drop that figure as slots fill and empty, so the peak is the schedule's
// in-flight bound times one slot's bytes (tested for GPipe and 1F1B).
//
// Not thread-safe across calls on the same stage; different stages may run on different
// threads (each touches only its own children), as the threads runtime does.

#include <torch/torch.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "heterograd/algorithms/pipeline/concepts.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/torch/chain.hpp"
#include "heterograd/torch/module.hpp"

namespace heterograd::libtorch {

struct stages_options {
  /// The children at which stages 2..S start, in the network's order ({}: `stages` groups of
  /// children differing in count by at most one).
  std::vector<std::string> split;
  std::size_t stages = 2;
  std::int64_t classes = 10;
  double label_smoothing = 0.0;
  /// One sample's shape entering the network (C, H, W for an image).
  std::vector<std::int64_t> input;
  /// LibTorch's intra-op (OpenMP) threads for each call on the calling thread (0: as they are).
  int threads = 0;
};

class sequential_stages {
 public:
  /// Throws std::invalid_argument naming the split entry that is not a child, is the first
  /// child or does not come after the previous one, a stage count outside [1, children], the
  /// input shape the network cannot take, or an output that is not [rows, classes].
  sequential_stages(torch::nn::Sequential net, stages_options opt) : net_(std::move(net)), opt_(std::move(opt)) {
    require(!opt_.input.empty(), "sequential_stages.input", "[]", "expected one sample's shape");
    require(opt_.classes >= 1, "sequential_stages.classes", opt_.classes, "must be >= 1");
    std::vector<std::string> names;
    for (const auto& c : net_->named_children()) names.push_back(c.key());
    const auto starts = child_starts(names, opt_.split, opt_.stages, {"sequential_stages", "stages", "stage"});
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
      in_shape_.push_back(x.sizes().vec());
      std::size_t floats = static_cast<std::size_t>(x.numel());
      for (std::size_t c = starts[k]; c < starts[k + 1]; ++c) {
        body->push_back(names[c], any[c]);
        x = probe(any[c], x, names[c], shape);
        floats += static_cast<std::size_t>(x.numel());
      }
      slot_floats_.push_back(floats);
      bodies_.push_back(std::make_unique<flat_module>(body.ptr()));
      offsets_.push_back(total_);
      total_ += bodies_.back()->size();
      first_child_.push_back(names[starts[k]]);
    }
    offsets_.push_back(total_);
    in_shape_.push_back(x.sizes().vec());
    require(x.dim() == 2 && x.size(1) == opt_.classes, "sequential_stages.classes", opt_.classes,
            "the network's output is " + shape_str(x.sizes().vec()) + "; expected [rows, classes]");
    net_->train(was_training);
    const std::size_t S = bodies_.size();
    slots_.resize(S);
    bound_params_.assign(S, nullptr);
    bound_grads_.assign(S, nullptr);
    scratch_grads_.resize(S);
    live_bytes_.assign(S, 0.0);
    peak_bytes_.assign(S, 0.0);
  }

  sequential_stages(sequential_stages&&) = default;
  sequential_stages& operator=(sequential_stages&&) = default;

  std::size_t stages() const { return bodies_.size(); }
  std::size_t num_params() const { return total_; }
  std::size_t stage_offset(std::size_t s) const { return offsets_.at(s); }
  /// s = stages(): the output width (classes).
  std::size_t input_width(std::size_t s) const {
    std::size_t n = 1;
    const auto& sh = in_shape_.at(s);
    for (std::size_t d = 1; d < sh.size(); ++d) n *= static_cast<std::size_t>(sh[d]);
    return n;
  }
  double activation_bytes(std::size_t s, std::size_t rows) const {
    return static_cast<double>(rows * slot_floats_.at(s) * sizeof(float));
  }
  /// Bytes (activation_bytes) the busy slots of stage s hold now, and the most they held.
  double live_activation_bytes(std::size_t s) const { return live_bytes_.at(s); }
  double peak_activation_bytes(std::size_t s) const { return peak_bytes_.at(s); }
  void reset_peaks() { peak_bytes_ = live_bytes_; }
  /// Stage s's module (its children; batch norm's running statistics in buffers()).
  flat_module& stage_module(std::size_t s) { return *bodies_.at(s); }
  /// The child where stage s starts.
  const std::string& first_child(std::size_t s) const { return first_child_.at(s); }

  span<const float> forward(std::size_t s, std::size_t slot, span<const float> p, const float* x,
                            std::size_t rows) {
    threads_here();
    slot_state& st = slot_at(s, slot);
    require(!st.busy, "sequential_stages.forward.slot", slot,
            "holds a forward of stage " + std::to_string(s) + " not yet backpropagated or released");
    require_positive("sequential_stages.forward.rows", rows);
    bind_params(s, p);
    std::vector<std::int64_t> shape = in_shape_[s];
    shape[0] = static_cast<std::int64_t>(rows);
    st.in = torch::empty(shape, torch::kFloat);
    std::memcpy(st.in.data_ptr<float>(), x, rows * input_width(s) * sizeof(float));
    if (s > 0) st.in.requires_grad_(true);
    auto& body = *bodies_[s];
    body.module().train();
    st.out = dynamic_cast<torch::nn::SequentialImpl&>(body.module()).forward(st.in).contiguous();
    st.rows = rows;
    st.weights = p.data();
    st.busy = true;
    live_bytes_[s] += activation_bytes(s, rows);
    peak_bytes_[s] = std::max(peak_bytes_[s], live_bytes_[s]);
    return {st.out.data_ptr<float>(), static_cast<std::size_t>(st.out.numel())};
  }

  void backward(std::size_t s, std::size_t slot, span<const float> p, span<const float> dy, span<float> g,
                span<float> dx) {
    threads_here();
    slot_state& st = busy_slot(s, slot, p, "sequential_stages.backward");
    require_same_size("sequential_stages.backward.dy", dy.size(), "rows x output width",
                      st.rows * input_width(s + 1));
    check_dx(s, st, dx);
    bind_grads(s, g);
    if (st.out.requires_grad())
      st.out.backward(torch::from_blob(const_cast<float*>(dy.data()), st.out.sizes(), torch::kFloat));
    finish(s, st, dx);
  }

  float loss_backward(std::size_t slot, span<const float> p, span<const std::int32_t> y, float scale,
                      span<float> g, span<float> dx) {
    threads_here();
    const std::size_t s = stages() - 1;
    slot_state& st = busy_slot(s, slot, p, "sequential_stages.loss_backward");
    require_same_size("sequential_stages.loss_backward.labels", y.size(), "the forward's rows", st.rows);
    for (const auto label : y)
      require(label >= 0 && label < opt_.classes, "sequential_stages.loss_backward.labels", label,
              "must be in [0, classes = " + std::to_string(opt_.classes) + ")");
    check_dx(s, st, dx);
    bind_grads(s, g);
    const auto loss = sum_cross_entropy(st.out, y) * scale;
    loss.backward();
    const float l = loss.item<float>();
    finish(s, st, dx);
    return l;
  }

  void release(std::size_t s, std::size_t slot) {
    slot_state& st = slot_at(s, slot);
    if (st.busy) live_bytes_[s] -= activation_bytes(s, st.rows);
    st = slot_state{};
  }

  /// The loss of the pipeline: LibTorch's cross-entropy of `logits` [rows, classes] against
  /// `y`, summed over the rows (multiply by 1 / B for a B-row batch's mean).
  torch::Tensor sum_cross_entropy(const torch::Tensor& logits, span<const std::int32_t> y) const {
    const auto labels =
        torch::from_blob(const_cast<std::int32_t*>(y.data()), {static_cast<std::int64_t>(y.size())}, torch::kInt)
            .to(torch::kLong);
    namespace F = torch::nn::functional;
    return F::cross_entropy(
        logits, labels, F::CrossEntropyFuncOptions().reduction(torch::kSum).label_smoothing(opt_.label_smoothing));
  }

 private:
  struct slot_state {
    torch::Tensor in, out;  // the forward's input (a leaf) and output: the graph between them
    std::size_t rows = 0;
    const float* weights = nullptr;  // the flat buffer the forward computed with
    bool busy = false;
  };

  static std::string shape_str(const std::vector<std::int64_t>& s) {
    std::string r = "[";
    for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
  }
  torch::Tensor probe(torch::nn::AnyModule& child, const torch::Tensor& x, const std::string& name,
                      const std::vector<std::int64_t>& shape) const {
    try {
      return child.forward(x);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      throw std::invalid_argument(invalid_argument_message("sequential_stages.input", shape_str(shape),
                                                           "the network's child '" + name + "' cannot take " +
                                                               shape_str(x.sizes().vec()) + ": " +
                                                               what.substr(0, what.find('\n'))));
    }
  }

  // Slots grow on demand (GPipe needs M per stage, 1F1B min(S - s, M)).
  slot_state& slot_at(std::size_t s, std::size_t slot) {
    require(s < stages(), "sequential_stages.stage", s, "must be < stages (" + std::to_string(stages()) + ")");
    auto& v = slots_[s];
    if (slot >= v.size()) v.resize(slot + 1);
    return v[slot];
  }
  slot_state& busy_slot(std::size_t s, std::size_t slot, span<const float> p, const std::string& key) {
    require(s < stages(), "sequential_stages.stage", s, "must be < stages (" + std::to_string(stages()) + ")");
    require(slot < slots_[s].size() && slots_[s][slot].busy, key + ".slot", slot,
            "holds no forward of stage " + std::to_string(s));
    slot_state& st = slots_[s][slot];
    require(p.data() == st.weights && p.size() == total_, key + ".params", static_cast<const void*>(p.data()),
            "must be the flat buffer the forward computed with (LibTorch's graph keeps the forward's weights; "
            "weight stashing and SpecTrain are not supported by LibTorch stages)");
    return st;
  }
  void check_dx(std::size_t s, const slot_state& st, span<float> dx) const {
    require(dx.empty() || dx.size() == st.rows * input_width(s), "sequential_stages.backward.dx", dx.size(),
            "must be empty or rows x input width (" + std::to_string(st.rows * input_width(s)) + ")");
  }

  // Lays stage s's parameters over its slice of p (no copy; nothing when already there). Other
  // memory while a slot of s is busy would change the weights under a pending graph: refused.
  void bind_params(std::size_t s, span<const float> p) {
    require_same_size("sequential_stages.params", p.size(), "num_params", total_);
    const float* at = p.data() + offsets_[s];
    if (at == bound_params_[s]) return;
    for (const auto& st : slots_[s])
      require(!st.busy, "sequential_stages.forward.params", static_cast<const void*>(p.data()),
              "must be the flat buffer of stage " + std::to_string(s) +
                  "'s pending forwards (backpropagate or release them first)");
    auto& body = *bodies_[s];
    scratch_grads_[s].assign(body.size(), 0.0f);
    body.rebind(span<float>(const_cast<float*>(at), body.size()), span<float>(scratch_grads_[s]));
    bound_params_[s] = at;
    bound_grads_[s] = nullptr;
  }
  // Each parameter's .grad of stage s becomes a view of g's slice: autograd adds into it.
  void bind_grads(std::size_t s, span<float> g) {
    require_same_size("sequential_stages.grads", g.size(), "num_params", total_);
    float* at = g.data() + offsets_[s];
    if (at == bound_grads_[s]) return;
    auto& body = *bodies_[s];
    const auto flat = torch::from_blob(at, {static_cast<std::int64_t>(body.size())}, torch::kFloat);
    std::size_t i = 0;
    for (const auto& prm : body.module().named_parameters(true)) {
      const slot& l = body.params_layout()[i++];
      auto t = prm.value();
      t.mutable_grad() = flat.narrow(0, static_cast<std::int64_t>(l.offset), static_cast<std::int64_t>(l.size()))
                             .view(l.shape);
    }
    bound_grads_[s] = at;
  }
  // After a backward: dx = d(loss)/d(input) (one copy), the slot freed.
  void finish(std::size_t s, slot_state& st, span<float> dx) {
    if (!dx.empty()) {
      const torch::Tensor gi = st.in.grad();
      if (gi.defined())
        std::memcpy(dx.data(), gi.contiguous().data_ptr<float>(), dx.size() * sizeof(float));
      else
        std::fill(dx.begin(), dx.end(), 0.0f);  // the stage's output does not depend on its input
    }
    live_bytes_[s] -= activation_bytes(s, st.rows);
    st = slot_state{};
  }
  void threads_here() const {
#ifdef _OPENMP
    if (opt_.threads > 0 && omp_get_max_threads() != opt_.threads) omp_set_num_threads(opt_.threads);
#endif
  }

  torch::nn::Sequential net_;
  stages_options opt_;
  std::vector<std::unique_ptr<flat_module>> bodies_;
  std::vector<std::vector<std::int64_t>> in_shape_;  // per stage, and the output's at stages()
  std::vector<std::size_t> offsets_, slot_floats_;
  std::vector<std::string> first_child_;
  std::size_t total_ = 0;
  std::vector<std::vector<slot_state>> slots_;  // [stage][slot]
  std::vector<const float*> bound_params_;
  std::vector<float*> bound_grads_;
  std::vector<std::vector<float>> scratch_grads_;  // .grad until the first backward binds g
  std::vector<double> live_bytes_, peak_bytes_;
};

static_assert(algorithms::pipeline::stage_model<sequential_stages>);

}  // namespace heterograd::libtorch
