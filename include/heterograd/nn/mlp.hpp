#pragma once
// Multi-layer perceptron on one flat parameter buffer: dense layers with ReLU between them and
// softmax cross-entropy (optional label smoothing) on the last. Layer l maps sizes[l] inputs to
// sizes[l+1] outputs with W_l (row-major out x in) followed by b_l in the buffer. With two
// sizes it is softmax regression. GEMMs go through kernels::gemm (BLAS when available).
//
// Forward and backward also run over a sub-range of layers, which is what decoupled
// (locally supervised) modules and pipelines use.
//
// The object owns its activation workspace: use one instance per worker thread.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/gemm.hpp"
#include "heterograd/nn/loss.hpp"

namespace heterograd::nn {

/// A mini-batch: `x` is size() rows of the model's input width, `y` the labels.
template <class T>
struct batch {
  span<const T> x;
  span<const std::int32_t> y;
  std::size_t size() const { return y.size(); }
};

/// Sums over a batch: cross-entropy loss and correct top-1 predictions.
struct eval_result {
  double loss_sum = 0;
  std::size_t correct = 0;
  std::size_t count = 0;
  double loss() const { return count ? loss_sum / static_cast<double>(count) : 0.0; }
  double accuracy() const {
    return count ? static_cast<double>(correct) / static_cast<double>(count) : 0.0;
  }
  eval_result& operator+=(const eval_result& o) {
    loss_sum += o.loss_sum;
    correct += o.correct;
    count += o.count;
    return *this;
  }
};

struct mlp_config {
  double label_smoothing = 0.0;  // in [0, 1)
};

template <class T = float>
class mlp {
 public:
  using value_type = T;

  explicit mlp(std::vector<std::size_t> sizes, mlp_config opt = {})
      : sizes_(std::move(sizes)), opt_(opt) {
    require(sizes_.size() >= 2, "mlp.sizes.size", sizes_.size(),
            "must be >= 2 (input width and number of classes)");
    for (std::size_t l = 0; l < sizes_.size(); ++l)
      require_positive("mlp.sizes[" + std::to_string(l) + "]", sizes_[l]);
    validate_label_smoothing(opt_.label_smoothing);
    offsets_.push_back(0);
    for (std::size_t l = 0; l + 1 < sizes_.size(); ++l)
      offsets_.push_back(offsets_.back() + sizes_[l + 1] * sizes_[l] + sizes_[l + 1]);
    acts_.resize(sizes_.size());
    grads_.resize(sizes_.size());
  }

  const std::vector<std::size_t>& sizes() const { return sizes_; }
  std::size_t num_layers() const { return sizes_.size() - 1; }
  std::size_t num_params() const { return offsets_.back(); }
  std::size_t input_dim() const { return sizes_.front(); }
  std::size_t classes() const { return sizes_.back(); }
  /// Offset of layer l's W in the flat buffer, and of the layer after the range [0, l).
  std::size_t layer_offset(std::size_t l) const { return offsets_.at(l); }
  std::size_t layer_params(std::size_t l) const { return offsets_.at(l + 1) - offsets_.at(l); }
  const mlp_config& config() const { return opt_; }

  /// He-uniform weights (bound sqrt(6 / fan_in)), zero biases, from counter_rng(seed).
  void init(span<T> params, std::uint64_t seed) const {
    require_same_size("mlp.init.params", params.size(), "num_params", num_params());
    const counter_rng rng(seed, 0x3170);
    for (std::size_t l = 0; l < num_layers(); ++l) {
      const T bound = std::sqrt(T(6) / static_cast<T>(sizes_[l]));
      const std::size_t w = sizes_[l + 1] * sizes_[l];
      T* p = params.data() + offsets_[l];
      for (std::size_t k = 0; k < w; ++k)
        p[k] = static_cast<T>(rng.uniform(offsets_[l] + k, -1.0, 1.0)) * bound;
      std::fill(p + w, p + w + sizes_[l + 1], T(0));
    }
  }

  /// Forward through layers [first, last) on `rows` inputs `x` (rows x sizes[first]); ReLU
  /// follows every layer but the model's final one. Returns the output (rows x sizes[last]),
  /// valid until the next call.
  span<const T> forward(span<const T> params, const T* x, std::size_t rows, std::size_t first,
                        std::size_t last) {
    check_range(params, first, last);
    const T* in = x;
    for (std::size_t l = first; l < last; ++l) {
      const std::size_t nin = sizes_[l], nout = sizes_[l + 1];
      auto& out = acts_[l + 1];
      out.resize(rows * nout);
      const T* W = params.data() + offsets_[l];
      const T* b = W + nout * nin;
      for (std::size_t r = 0; r < rows; ++r) std::copy(b, b + nout, out.data() + r * nout);
      // out = in (rows x nin) * W^T (nin x nout) + out
      kernels::gemm(kernels::transpose::no, kernels::transpose::yes, rows, nout, nin, T(1), in, nin,
                    W, nin, T(1), out.data(), nout);
      if (l + 1 < num_layers())
        for (auto& v : out) v = v > T(0) ? v : T(0);
      in = out.data();
    }
    input_ = x;
    rows_ = rows;
    fwd_first_ = first;
    fwd_last_ = last;
    return span<const T>(acts_[last].data(), rows * sizes_[last]);
  }

  /// Backward through [first, last) after a forward over a range containing it (backward may
  /// walk a forward's layers one sub-range at a time, top first): `dout` is d(loss)/d
  /// (output of layer last-1, after its ReLU if any). Accumulates nothing: writes the range's
  /// gradients into grads[offset(first), offset(last)). When `dinput` is non-null it receives
  /// d(loss)/d(input of layer first) (rows x sizes[first]).
  void backward(span<const T> params, const T* dout, std::size_t first, std::size_t last,
                span<T> grads, T* dinput = nullptr) {
    check_range(params, first, last);
    require_same_size("mlp.backward.grads", grads.size(), "num_params", num_params());
    require(first >= fwd_first_ && last <= fwd_last_, "mlp.backward.first", first,
            "the range must lie inside the last forward's layer range");
    const std::size_t rows = rows_;
    std::vector<T> cur(dout, dout + rows * sizes_[last]);
    for (std::size_t l = last; l-- > first;) {
      const std::size_t nin = sizes_[l], nout = sizes_[l + 1];
      // ReLU mask of this layer's output (the last layer of the model has none).
      if (l + 1 < num_layers()) {
        const auto& out = acts_[l + 1];
        for (std::size_t k = 0; k < rows * nout; ++k)
          if (!(out[k] > T(0))) cur[k] = T(0);
      }
      const T* in = l == fwd_first_ ? input_ : acts_[l].data();
      T* dW = grads.data() + offsets_[l];
      T* db = dW + nout * nin;
      // dW = cur^T (nout x rows) * in (rows x nin)
      kernels::gemm(kernels::transpose::yes, kernels::transpose::no, nout, nin, rows, T(1),
                    cur.data(), nout, in, nin, T(0), dW, nin);
      std::fill(db, db + nout, T(0));
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t o = 0; o < nout; ++o) db[o] += cur[r * nout + o];
      if (l > first || dinput != nullptr) {
        auto& prev = grads_[l];
        prev.resize(rows * nin);
        const T* W = params.data() + offsets_[l];
        // d(in) = cur (rows x nout) * W (nout x nin)
        kernels::gemm(kernels::transpose::no, kernels::transpose::no, rows, nin, nout, T(1),
                      cur.data(), nout, W, nin, T(0), prev.data(), nin);
        if (l == first) {
          std::copy(prev.begin(), prev.end(), dinput);
        } else {
          cur.swap(prev);
        }
      }
    }
  }

  /// Mean loss over the batch; writes the full gradient into `grads`. If `per_sample_loss` is
  /// non-empty it receives each sample's loss (biased local SGD's score table).
  T loss_and_gradient(span<const T> params, const batch<T>& b, span<T> grads,
                      span<T> per_sample_loss = {}) {
    check_batch(b);
    return loss_and_gradient_from(params, 0, b.x.data(), b.y, grads, per_sample_loss);
  }

  /// The loss of layers [first, num_layers) applied to `x` (labels.size() rows of width
  /// sizes[first]) and its gradient: writes the parameter gradients of those layers into
  /// grads[offset(first), end) and, when `dinput` is non-null, d(loss)/d(x) into it. With
  /// first == 0 this is exactly loss_and_gradient (decoupled modules rely on that identity).
  T loss_and_gradient_from(span<const T> params, std::size_t first, const T* x,
                           span<const std::int32_t> labels, span<T> grads,
                           span<T> per_sample_loss = {}, T* dinput = nullptr) {
    require_same_size("mlp.grads", grads.size(), "num_params", num_params());
    const std::size_t rows = labels.size();
    require_positive("mlp.batch.size", rows);
    require(per_sample_loss.empty() || per_sample_loss.size() == rows,
            "mlp.per_sample_loss.size", per_sample_loss.size(), "must be 0 or the batch size");
    const auto logits = forward(params, x, rows, first, num_layers());
    const std::size_t K = classes();
    dlogits_.resize(rows * K);
    T total = 0;
    const T scale = T(1) / static_cast<T>(rows);
    const T eps = static_cast<T>(opt_.label_smoothing);
    for (std::size_t r = 0; r < rows; ++r) {
      require(labels[r] >= 0 && static_cast<std::size_t>(labels[r]) < K, "mlp.batch.y", labels[r],
              "must be in [0, classes)");
      std::size_t am = 0;
      const T l = softmax_cross_entropy_row(logits.data() + r * K, K, labels[r], eps, scale,
                                            dlogits_.data() + r * K, am);
      if (!per_sample_loss.empty()) per_sample_loss[r] = l;
      total += l;
    }
    backward(params, dlogits_.data(), first, num_layers(), grads, dinput);
    return total / static_cast<T>(rows);
  }

  /// Loss (with the model's label smoothing) and accuracy sums over a batch; no gradient.
  eval_result evaluate(span<const T> params, const batch<T>& b) {
    const std::size_t rows = check_batch(b);
    const auto logits = forward(params, b.x.data(), rows, 0, num_layers());
    eval_result e;
    const std::size_t K = classes();
    for (std::size_t r = 0; r < rows; ++r) {
      std::size_t am = 0;
      e.loss_sum += softmax_cross_entropy_row(logits.data() + r * K, K, b.y[r],
                                              static_cast<T>(opt_.label_smoothing), T(0),
                                              static_cast<T*>(nullptr), am);
      e.correct += static_cast<std::int32_t>(am) == b.y[r];
    }
    e.count = rows;
    return e;
  }

 private:
  void check_range(span<const T> params, std::size_t first, std::size_t last) const {
    require_same_size("mlp.params", params.size(), "num_params", num_params());
    require(first < last && last <= num_layers(), "mlp.layer_range.last", last,
            "must satisfy first < last <= num_layers");
  }
  std::size_t check_batch(const batch<T>& b) const {
    const std::size_t rows = b.size();
    require_positive("mlp.batch.size", rows);
    require_same_size("mlp.batch.x", b.x.size(), "batch size * input width", rows * input_dim());
    for (std::size_t r = 0; r < rows; ++r)
      require(b.y[r] >= 0 && static_cast<std::size_t>(b.y[r]) < classes(), "mlp.batch.y", b.y[r],
              "must be in [0, classes)");
    return rows;
  }

  std::vector<std::size_t> sizes_;
  mlp_config opt_;
  std::vector<std::size_t> offsets_;
  std::vector<std::vector<T>> acts_;   // acts_[l+1] = output of layer l
  std::vector<std::vector<T>> grads_;  // scratch for input gradients
  std::vector<T> dlogits_;
  const T* input_ = nullptr;
  std::size_t rows_ = 0;
  std::size_t fwd_first_ = 0, fwd_last_ = 0;
};

/// Softmax regression: an MLP without hidden layers.
template <class T = float>
mlp<T> softmax_regression(std::size_t inputs, std::size_t classes, mlp_config opt = {}) {
  return mlp<T>({inputs, classes}, opt);
}

}  // namespace heterograd::nn
