#pragma once
// The deep-learning papers' model families as LibTorch modules (component heterograd::torch):
// a LeNet-5-style CNN, a small ResNet and a byte-level causal transformer language model.
//
// Each is a torch::nn::Sequential whose top-level children have names (children(): "conv1",
// "layer2", "block0", ...), the names a decoupled method splits the network at. Shapes are
// checked when the model is made: an input it cannot take is a std::invalid_argument naming
// the shape and the rule.

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace heterograd::libtorch {

/// An image input: channels x height x width.
struct image_shape {
  std::int64_t channels = 1, height = 28, width = 28;
  std::string str() const {
    return std::to_string(channels) + "x" + std::to_string(height) + "x" + std::to_string(width);
  }
};

namespace detail {

inline void expect_image(const image_shape& s, std::int64_t min_side, const std::string& model) {
  if (s.channels < 1 || s.height < min_side || s.width < min_side)
    throw std::invalid_argument(model + " cannot take input " + s.str() + ": expected at least 1 channel and " +
                                std::to_string(min_side) + "x" + std::to_string(min_side) + " pixels");
}

}  // namespace detail

/// LeNet-5 as in LeCun et al. (1998) with ReLU and max pooling: conv 5x5 (6 maps, padded to
/// keep 28x28 inputs at 28x28), pool 2, conv 5x5 (16 maps), pool 2, dense 120, 84, classes.
/// Children: conv1 relu1 pool1 conv2 relu2 pool2 flatten fc1 relu3 fc2 relu4 fc3.
inline torch::nn::Sequential lenet5(image_shape in = {}, std::int64_t classes = 10) {
  detail::expect_image(in, 12, "lenet5");
  namespace nn = torch::nn;
  const std::int64_t h = ((in.height / 2) - 4) / 2, w = ((in.width / 2) - 4) / 2;
  nn::Sequential s;
  s->push_back("conv1", nn::Conv2d(nn::Conv2dOptions(in.channels, 6, 5).padding(2)));
  s->push_back("relu1", nn::ReLU());
  s->push_back("pool1", nn::MaxPool2d(nn::MaxPool2dOptions(2)));
  s->push_back("conv2", nn::Conv2d(nn::Conv2dOptions(6, 16, 5)));
  s->push_back("relu2", nn::ReLU());
  s->push_back("pool2", nn::MaxPool2d(nn::MaxPool2dOptions(2)));
  s->push_back("flatten", nn::Flatten());
  s->push_back("fc1", nn::Linear(16 * h * w, 120));
  s->push_back("relu3", nn::ReLU());
  s->push_back("fc2", nn::Linear(120, 84));
  s->push_back("relu4", nn::ReLU());
  s->push_back("fc3", nn::Linear(84, classes));
  return s;
}

/// A Sequential that can itself sit in a Sequential (a forward of one tensor).
struct stackImpl : torch::nn::SequentialImpl {
  using torch::nn::SequentialImpl::SequentialImpl;
  torch::Tensor forward(torch::Tensor x) { return torch::nn::SequentialImpl::forward(std::move(x)); }
};
TORCH_MODULE(stack);

/// A ResNet basic block (He et al., 2016): two 3x3 convolutions with batch norm, the input added
/// back (through a 1x1 convolution and batch norm where the shape changes).
struct basic_blockImpl : torch::nn::Module {
  basic_blockImpl(std::int64_t in, std::int64_t out, std::int64_t stride) {
    namespace nn = torch::nn;
    conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
    bn1 = register_module("bn1", nn::BatchNorm2d(out));
    conv2 = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(out, out, 3).padding(1).bias(false)));
    bn2 = register_module("bn2", nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      shortcut = register_module(
          "shortcut", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                                     nn::BatchNorm2d(out)));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::relu(bn1(conv1(x)));
    y = bn2(conv2(y));
    return torch::relu(y + (shortcut ? shortcut->forward(x) : x));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential shortcut{nullptr};
};
TORCH_MODULE(basic_block);

/// A small ResNet for small images: a 3x3 stem of `width` maps, `stages` stages of one basic
/// block each (the first keeps the resolution, each next halves it and doubles the maps),
/// global average pooling and a dense classifier. stages = 3 is ResNet-8 (1 + 3 x 2 + 1
/// weighted layers; 77,754 parameters at width 16 on 28x28x1). Children: stem layer1 .. layerK pool fc.
inline torch::nn::Sequential resnet(image_shape in = {}, std::int64_t classes = 10, std::int64_t stages = 3,
                                    std::int64_t width = 16) {
  if (stages < 1 || stages > 6) throw std::invalid_argument("resnet: expected 1..6 stages, got " + std::to_string(stages));
  detail::expect_image(in, std::int64_t{1} << (stages - 1), "resnet with " + std::to_string(stages) + " stages");
  namespace nn = torch::nn;
  nn::Sequential s;
  s->push_back("stem", stack(nn::Conv2d(nn::Conv2dOptions(in.channels, width, 3).padding(1).bias(false)),
                                      nn::BatchNorm2d(width), nn::ReLU()));
  std::int64_t c = width;
  for (std::int64_t k = 0; k < stages; ++k) {
    const std::int64_t out = k == 0 ? width : 2 * c;
    s->push_back("layer" + std::to_string(k + 1), basic_block(c, out, k == 0 ? 1 : 2));
    c = out;
  }
  s->push_back("pool", stack(nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions(1)), nn::Flatten()));
  s->push_back("fc", nn::Linear(c, classes));
  return s;
}

/// ResNet-8: resnet() with 3 stages.
inline torch::nn::Sequential resnet8(image_shape in = {}, std::int64_t classes = 10) { return resnet(in, classes, 3); }

/// A byte-level language model's settings.
struct transformer_shape {
  std::int64_t vocabulary = 256;  ///< bytes
  std::int64_t context = 128;     ///< tokens a sequence holds
  std::int64_t layers = 2;
  std::int64_t width = 128;       ///< model dimension
  std::int64_t heads = 4;
  std::int64_t hidden = 512;      ///< feed-forward width
};

/// Token and learned position embeddings: [batch, T] token ids (int64) -> [batch, T, width].
struct embeddingImpl : torch::nn::Module {
  embeddingImpl(const transformer_shape& s) {
    tokens = register_module("tokens", torch::nn::Embedding(s.vocabulary, s.width));
    positions = register_module("positions", torch::nn::Embedding(s.context, s.width));
  }
  torch::Tensor forward(const torch::Tensor& ids) {
    const auto t = ids.size(1);
    if (t > positions->options.num_embeddings())
      throw std::invalid_argument("transformer: a sequence of " + std::to_string(t) + " tokens exceeds the context of " +
                                  std::to_string(positions->options.num_embeddings()));
    return tokens(ids) + positions(torch::arange(t, ids.options().dtype(torch::kLong))).unsqueeze(0);
  }
  torch::nn::Embedding tokens{nullptr}, positions{nullptr};
};
TORCH_MODULE(embedding);

/// One causal self-attention block (LibTorch's post-norm TransformerEncoderLayer, no dropout):
/// [batch, T, width] -> [batch, T, width]; position t attends to positions <= t.
struct causal_blockImpl : torch::nn::Module {
  causal_blockImpl(const transformer_shape& s) {
    layer = register_module("layer", torch::nn::TransformerEncoderLayer(
                                         torch::nn::TransformerEncoderLayerOptions(s.width, s.heads)
                                             .dim_feedforward(s.hidden)
                                             .dropout(0.0)
                                             .activation(torch::kGELU)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const auto t = x.size(1);
    if (mask.size(0) != t) mask = torch::full({t, t}, -std::numeric_limits<float>::infinity(), x.options()).triu(1);
    return layer(x.transpose(0, 1), mask).transpose(0, 1);
  }
  torch::nn::TransformerEncoderLayer layer{nullptr};
  torch::Tensor mask = torch::empty({0, 0});
};
TORCH_MODULE(causal_block);

/// A byte-level causal transformer language model: [batch, T] bytes -> [batch, T, 256] logits
/// of the next byte. Children: embed block0 .. blockL-1 norm head.
inline torch::nn::Sequential byte_transformer(const transformer_shape& s = {}) {
  if (s.vocabulary < 2 || s.context < 1 || s.layers < 1 || s.width < 1 || s.heads < 1 || s.hidden < 1)
    throw std::invalid_argument("byte_transformer: every size must be positive (vocabulary at least 2)");
  if (s.width % s.heads != 0)
    throw std::invalid_argument("byte_transformer: width " + std::to_string(s.width) +
                                " is not a multiple of heads " + std::to_string(s.heads));
  torch::nn::Sequential m;
  m->push_back("embed", embedding(s));
  for (std::int64_t l = 0; l < s.layers; ++l) m->push_back("block" + std::to_string(l), causal_block(s));
  m->push_back("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({s.width})));
  m->push_back("head", torch::nn::Linear(s.width, s.vocabulary));
  return m;
}

/// Parameters (floats) of a module.
inline std::size_t parameter_count(torch::nn::Module& m) {
  std::size_t n = 0;
  for (const auto& p : m.parameters()) n += static_cast<std::size_t>(p.numel());
  return n;
}

}  // namespace heterograd::libtorch
