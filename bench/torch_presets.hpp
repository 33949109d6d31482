#pragma once
// What the LibTorch preset benchmarks share (bench/models_torch.cpp, and the MPI peer
// bench/compare/hg_torch_local_sgd_mpi.cpp): standardised Fashion-MNIST as tensors, the presets
// by number (0 LeNet-5, 1 ResNet-8, 2 the byte-level transformer) from one seed, rank r's batch
// at step s (32 images, or 8 sequences of 128 bytes drawn once from a fixed generator: a step's
// cost does not depend on the text), one LibTorch and one OpenBLAS thread per rank, and the
// settings PyTorch's peer (bench/compare/torch_ddp.py) uses too: batch 32 per rank, SGD with
// momentum 0.9 at lr 0.01.
#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "heterograd/data/idx.hpp"
#include "heterograd/torch/models.hpp"

extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace hg_bench_torch {

inline constexpr std::int64_t batch = 32;      // images a rank and step
inline constexpr std::int64_t sequences = 8;   // the transformer's sequences a rank and step

/// Samples (images or sequences) of one rank's step.
inline std::int64_t batch_of_preset(std::int64_t preset) { return preset == 2 ? sequences : batch; }
inline constexpr double lr = 0.01, momentum = 0.9;

struct images {
  torch::Tensor x, y;  // [n, 1, 28, 28] standardised by the training set's mean and deviation, [n] int64
};

inline const std::pair<images, images>& fashion() {
  static const std::pair<images, images> d = [] {
    const auto tt = heterograd::data::load_fashion_mnist();
    auto tensors = [](const heterograd::data::dataset& ds) {
      const auto n = static_cast<std::int64_t>(ds.size());
      images r;
      r.x = torch::from_blob(const_cast<float*>(ds.features.data()), {n, 1, 28, 28}, torch::kFloat).clone();
      r.y = torch::from_blob(const_cast<std::int32_t*>(ds.labels.data()), {n}, torch::kInt).to(torch::kLong);
      return r;
    };
    std::pair<images, images> r{tensors(tt.train), tensors(tt.test)};
    const auto mean = r.first.x.mean(), sd = r.first.x.std();
    r.first.x = (r.first.x - mean) / sd;
    r.second.x = (r.second.x - mean) / sd;
    return r;
  }();
  return d;
}
inline const images& train() { return fashion().first; }

/// Test accuracy of `net` (evaluation mode: batch norm's running statistics) on the first
/// 2000 test images: what the peers report beside their speed, after the same samples.
inline double accuracy(torch::nn::SequentialImpl& net) {
  torch::NoGradGuard no_grad;
  const bool was = net.is_training();
  net.eval();
  const auto& t = fashion().second;
  const auto logits = net.forward(t.x.narrow(0, 0, 2000));
  net.train(was);
  return logits.argmax(1).eq(t.y.narrow(0, 0, 2000)).to(torch::kDouble).mean().item<double>();
}

inline void one_thread() {
#if defined(_OPENMP)
  omp_set_num_threads(1);
#endif
  if (openblas_set_num_threads) openblas_set_num_threads(1);
}

inline const char* preset_name(std::int64_t preset) {
  return preset == 0 ? "lenet5" : preset == 1 ? "resnet8" : "transformer";
}

inline torch::nn::Sequential make(std::int64_t preset) {
  torch::manual_seed(1);
  if (preset == 2) return heterograd::libtorch::byte_transformer();
  return preset == 0 ? heterograd::libtorch::lenet5() : heterograd::libtorch::resnet8();
}

/// 2 MiB of bytes from a fixed generator: the transformer's "corpus".
inline const torch::Tensor& bytes() {
  static const torch::Tensor t = [] {
    auto g = at::detail::createCPUGenerator(7);
    return torch::randint(0, 256, {2 << 20}, g, torch::TensorOptions().dtype(torch::kLong));
  }();
  return t;
}

/// Rank r's batch at step s of R ranks (consecutive slices, wrapping around the training set;
/// the transformer: sequences of 128 bytes, targets one byte later).
inline std::pair<torch::Tensor, torch::Tensor> batch_of(std::int64_t preset, std::size_t s, std::size_t r,
                                                        std::size_t R) {
  const std::int64_t b = batch_of_preset(preset);
  if (preset == 2) {
    constexpr std::int64_t ctx = 128;
    const std::int64_t per = (bytes().size(0) - 1) / (b * ctx);
    const std::int64_t k = static_cast<std::int64_t>((s * R + r) % static_cast<std::size_t>(per)) * b * ctx;
    return {bytes().narrow(0, k, b * ctx).view({b, ctx}), bytes().narrow(0, k + 1, b * ctx).view({b, ctx})};
  }
  const auto& d = train();
  const std::int64_t per = d.x.size(0) / b;
  const std::int64_t k = static_cast<std::int64_t>((s * R + r) % static_cast<std::size_t>(per)) * b;
  return {d.x.narrow(0, k, b), d.y.narrow(0, k, b)};
}

/// Mean cross-entropy: over the images, or over every position of the sequences.
inline torch::Tensor loss_of(torch::nn::SequentialImpl& net, const torch::Tensor& x, const torch::Tensor& y) {
  const auto logits = net.forward(x);
  if (logits.dim() == 3)
    return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(2)}), y.reshape({-1}));
  return torch::nn::functional::cross_entropy(logits, y);
}

}  // namespace hg_bench_torch
