#pragma once
// SLIDE's workload on real text (Chen et al., "SLIDE: In Defense of Smart Algorithms over
// Hardware Acceleration for Large-Scale Deep Learning Systems", MLSys 2020; issue 49): next-word
// prediction over a large vocabulary, on data::make_word_samples's (context, target) pairs.
//
// The model. h = [E[c_1], ..., E[c_k]], the k context words' embeddings side by side (E has
// V + 1 rows of width d: the V word ids and bos, data::vocabulary::bos() == V; h has k d
// entries, so a word's place in the context matters), then a softmax layer over the V word
// ids (W: V x k d, then b: V; nn::lsh_softmax_layer's layout). Id 0 (<unk>) is a class that is
// never a target. Both parts train: the output layer's gradient with respect to h goes, slice
// j, to the row of E of context word j (a word that appears twice gets both slices).
//
// Two trainers on the same model:
//   - SLIDE (train_slide_words): one sample at a time over the active neurons that the LSH
//     tables retrieve (plus the target), Hogwild over `threads` threads (relaxed atomic loads
//     and stores of every weight, lsh_layer.hpp); the tables rebuilt on the layer's decaying
//     schedule. With threads == 1 it is sequential and deterministic.
//   - dense (train_dense_words): mini-batch SGD over all V neurons with GEMMs (BLAS when the
//     build has it: the CPU baseline SLIDE compares against), the batch's mean gradient.
// word_accuracy scores both the same way: the argmax over all V neurons (never the LSH
// candidates), top-1 against the target.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/data/text.hpp"
#include "heterograd/kernels/gemm.hpp"
#include "heterograd/nn/loss.hpp"
#include "heterograd/nn/lsh_layer.hpp"

namespace heterograd::nn {

/// The word model's sizes: V output classes, k context words, embedding width d.
struct word_model_shape {
  std::size_t vocabulary = 0;
  std::size_t context = 0;
  std::size_t dim = 0;

  void validate() const {
    require(vocabulary >= 2, "word_model_shape.vocabulary", vocabulary, "must be >= 2 (<unk> and one word)");
    require_positive("word_model_shape.context", context);
    require_positive("word_model_shape.dim", dim);
  }
  std::size_t embedding_rows() const { return vocabulary + 1; }
  std::size_t input() const { return context * dim; }  ///< the output layer's input width, k d
  std::size_t output_params() const { return vocabulary * input() + vocabulary; }
};

/// The parameters: E ((V + 1) x d) and the output layer (W, b).
struct word_model {
  word_model_shape shape;
  std::vector<float> embedding, output;

  /// E ~ N(0, 1/d) per entry, W ~ N(0, 0.01^2), b = 0 (as lsh_softmax_layer::init).
  word_model(word_model_shape s, std::uint64_t seed) : shape(s) {
    shape.validate();
    embedding.resize(shape.embedding_rows() * shape.dim);
    output.assign(shape.output_params(), 0.0f);
    const counter_rng rng(seed, 0xe3bd);
    const double se = 1.0 / std::sqrt(static_cast<double>(shape.dim));
    for (std::size_t i = 0; i < embedding.size(); ++i) embedding[i] = static_cast<float>(rng.normal(i, 0.0, se));
    const counter_rng rw(seed, 0x0a7e);
    for (std::size_t i = 0; i < shape.vocabulary * shape.input(); ++i)
      output[i] = static_cast<float>(rw.normal(i, 0.0, 0.01));
  }
};

namespace detail {
/// Refuses samples the model cannot take: another context length, ids out of range.
inline void check_word_samples(const word_model_shape& s, const data::word_samples& d, const char* who) {
  const std::string key = std::string(who) + ".samples";
  require(d.context == s.context, key + ".context", d.context, "must equal word_model_shape.context");
  require_same_size(key + ".contexts", d.contexts.size(), "targets * context", d.targets.size() * s.context);
  for (std::uint32_t c : d.contexts)
    require(c < s.embedding_rows(), key + ".contexts", c, "must be a word id or bos, < vocabulary + 1");
  for (std::uint32_t t : d.targets)
    require(t >= 1 && t < s.vocabulary, key + ".targets", t, "must be a word id in [1, vocabulary)");
}

inline void check_order(span<const std::size_t> order, std::size_t n, const char* key) {
  for (std::size_t i : order) require(i < n, key, i, "must index a sample");
}

template <bool Atomic>
float load_weight(const float& v) {
  // atomic_ref<const float> is C++26: the reference is only loaded through.
  if constexpr (Atomic) return std::atomic_ref<float>(const_cast<float&>(v)).load(std::memory_order_relaxed);
  return v;
}
template <bool Atomic>
void store_weight(float& v, float x) {
  if constexpr (Atomic)
    std::atomic_ref<float>(v).store(x, std::memory_order_relaxed);
  else
    v = x;
}

/// h = [E[c_1], ..., E[c_k]] (k d entries).
template <bool Atomic>
void gather_context(const float* E, const std::uint32_t* ctx, std::size_t k, std::size_t d, float* h) {
  for (std::size_t j = 0; j < k; ++j)
    for (std::size_t i = 0; i < d; ++i) h[j * d + i] = load_weight<Atomic>(E[ctx[j] * d + i]);
}

/// E[c_j] -= lr dh[j d, (j + 1) d) for each context word j.
template <bool Atomic>
void update_context(float* E, const std::uint32_t* ctx, std::size_t k, std::size_t d, const float* dh, float lr) {
  for (std::size_t j = 0; j < k; ++j)
    for (std::size_t i = 0; i < d; ++i) {
      float& e = E[ctx[j] * d + i];
      store_weight<Atomic>(e, load_weight<Atomic>(e) - lr * dh[j * d + i]);
    }
}

/// One SLIDE sample: forward over the active set, the layer's update, then the context rows'.
template <bool Atomic>
float slide_word_step(const lsh_softmax_layer& layer, word_model& m, const data::word_samples& d, std::size_t s,
                      float lr, lsh_workspace& ws, std::vector<float>& h, std::vector<float>& dh) {
  const std::size_t k = m.shape.context, dim = m.shape.dim;
  const std::uint32_t* ctx = d.contexts.data() + s * k;
  gather_context<Atomic>(m.embedding.data(), ctx, k, dim, h.data());
  const float loss = layer.train_step<Atomic>(span<float>(m.output), span<const float>(h),
                                              static_cast<std::int32_t>(d.targets[s]), lr, ws, span<float>(dh));
  update_context<Atomic>(m.embedding.data(), ctx, k, dim, dh.data(), lr);
  return loss;
}
}  // namespace detail

/// SLIDE on the word model: `order` (sample indices; epochs and shuffling are the caller's)
/// over `threads` Hogwild threads, the tables rebuilt on the layer's schedule. The layer must
/// be (context * dim, vocabulary) of the model. always_atomic takes the Hogwild step (relaxed
/// atomics) on one thread too: an ablation of what the atomics cost.
inline lsh_train_report train_slide_words(lsh_softmax_layer& layer, word_model& m, const data::word_samples& d,
                                          span<const std::size_t> order, float lr, int threads = 1,
                                          bool always_atomic = false) {
  require(layer.dim() == m.shape.input() && layer.neurons() == m.shape.vocabulary, "train_slide_words.layer",
          layer.dim(), "must be an lsh_softmax_layer(context * dim, vocabulary) of the model");
  detail::check_word_samples(m.shape, d, "train_slide_words");
  detail::check_order(order, d.size(), "train_slide_words.order");
  struct scratch {
    std::vector<float> h, dh;
  };
  std::vector<scratch> sc(static_cast<std::size_t>(std::max(threads, 1)),
                          scratch{std::vector<float>(m.shape.input()), std::vector<float>(m.shape.input())});
  return hogwild_segments(layer, span<float>(m.output), order, threads,
                          [&](std::size_t s, int t, bool atomic, lsh_workspace& ws) {
                            auto& c = sc[static_cast<std::size_t>(t)];
                            return atomic || always_atomic ? detail::slide_word_step<true>(layer, m, d, s, lr, ws, c.h, c.dh)
                                          : detail::slide_word_step<false>(layer, m, d, s, lr, ws, c.h, c.dh);
                          });
}

/// The dense trainer's buffers (B x d, B x V, V x d), kept between calls.
struct dense_word_workspace {
  std::vector<float> h, z, dz, dw, dh;
};

namespace detail {
/// Z = H W^T + b for rows [0, B); returns nothing (Z in ws.z, B x V).
inline void dense_logits(const word_model& m, std::size_t B, dense_word_workspace& ws) {
  const std::size_t V = m.shape.vocabulary, dim = m.shape.input();
  ws.z.resize(B * V);
  const float* b = m.output.data() + V * dim;
  for (std::size_t r = 0; r < B; ++r) std::copy(b, b + V, ws.z.begin() + static_cast<std::ptrdiff_t>(r * V));
  kernels::gemm(kernels::transpose::no, kernels::transpose::yes, B, V, dim, 1.0f, ws.h.data(), dim,
                m.output.data(), dim, 1.0f, ws.z.data(), V);
}

/// One mini-batch of the dense trainer; returns the batch's summed loss.
inline double dense_word_batch(word_model& m, const data::word_samples& d, span<const std::size_t> rows, float lr,
                               dense_word_workspace& ws) {
  const std::size_t B = rows.size(), V = m.shape.vocabulary, k = m.shape.context, dim = m.shape.input();
  ws.h.resize(B * dim);
  for (std::size_t r = 0; r < B; ++r)
    gather_context<false>(m.embedding.data(), d.contexts.data() + rows[r] * k, k, m.shape.dim, ws.h.data() + r * dim);
  dense_logits(m, B, ws);
  double loss = 0;
  const float inv_b = 1.0f / static_cast<float>(B);
  ws.dz.resize(B * V);
  for (std::size_t r = 0; r < B; ++r) {  // dZ = (softmax - onehot) / B
    std::size_t am = 0;
    loss += softmax_cross_entropy_row(ws.z.data() + r * V, V, static_cast<std::int32_t>(d.targets[rows[r]]), 0.0f,
                                      inv_b, ws.dz.data() + r * V, am);
  }
  ws.dw.resize(V * dim);
  ws.dh.resize(B * dim);
  float* W = m.output.data();
  // dH = dZ W and dW = dZ^T H with the weights before the step, then the steps.
  kernels::gemm(kernels::transpose::no, kernels::transpose::no, B, dim, V, 1.0f, ws.dz.data(), V, W, dim, 0.0f,
                ws.dh.data(), dim);
  kernels::gemm(kernels::transpose::yes, kernels::transpose::no, V, dim, B, 1.0f, ws.dz.data(), V, ws.h.data(), dim,
                0.0f, ws.dw.data(), dim);
  for (std::size_t i = 0; i < V * dim; ++i) W[i] -= lr * ws.dw[i];
  float* b = W + V * dim;
  for (std::size_t r = 0; r < B; ++r)
    for (std::size_t j = 0; j < V; ++j) b[j] -= lr * ws.dz[r * V + j];
  for (std::size_t r = 0; r < B; ++r)
    update_context<false>(m.embedding.data(), d.contexts.data() + rows[r] * k, k, m.shape.dim, ws.dh.data() + r * dim,
                          lr);
  return loss;
}
}  // namespace detail

/// Dense mini-batch SGD: `order` in consecutive batches of `batch` (the last may be short);
/// returns the summed loss over the samples. BLAS threads are the caller's (set_blas_threads).
inline double train_dense_words(word_model& m, const data::word_samples& d, span<const std::size_t> order,
                                float lr, std::size_t batch, dense_word_workspace& ws) {
  require_positive("train_dense_words.batch", batch);
  detail::check_word_samples(m.shape, d, "train_dense_words");
  detail::check_order(order, d.size(), "train_dense_words.order");
  double loss = 0;
  for (std::size_t i = 0; i < order.size(); i += batch)
    loss += detail::dense_word_batch(m, d, order.subspan(i, std::min(batch, order.size() - i)), lr, ws);
  return loss;
}

/// Top-1 accuracy of the argmax over all V neurons on samples `which` (batched GEMMs).
inline double word_accuracy(const word_model& m, const data::word_samples& d, span<const std::size_t> which) {
  detail::check_word_samples(m.shape, d, "word_accuracy");
  detail::check_order(which, d.size(), "word_accuracy.which");
  if (which.empty()) return 0.0;
  const std::size_t V = m.shape.vocabulary, dim = m.shape.input(), k = m.shape.context, B = 256;
  dense_word_workspace ws;
  std::size_t hits = 0;
  for (std::size_t i = 0; i < which.size(); i += B) {
    const std::size_t n = std::min(B, which.size() - i);
    ws.h.resize(n * dim);
    for (std::size_t r = 0; r < n; ++r)
      detail::gather_context<false>(m.embedding.data(), d.contexts.data() + which[i + r] * k, k, m.shape.dim,
                                    ws.h.data() + r * dim);
    detail::dense_logits(m, n, ws);
    for (std::size_t r = 0; r < n; ++r) {
      const float* z = ws.z.data() + r * V;
      hits += static_cast<std::size_t>(std::max_element(z, z + V) - z) == d.targets[which[i + r]];
    }
  }
  return static_cast<double>(hits) / static_cast<double>(which.size());
}

}  // namespace heterograd::nn
