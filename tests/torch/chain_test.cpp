// heterograd/torch/chain.hpp: a torch::nn::Sequential as decoupled modules.
//
// - The split: modules start at the named children; the flat layout is the whole network's
//   (parameters() order), so an evaluation of the flat buffer needs no reordering.
// - Gradient isolation: module k's local gradient writes its own slice and head only.
// - PGL's global step is end-to-end backpropagation: its gradient equals the whole network's
//   (a flat_module of the same preset at the same parameters), bitwise; with K = 1 a
//   local_learning step is that step.
// - The module pipeline on threads equals the sequential loop bitwise (ResNet-8, 3 modules,
//   batch norm in every module).
// - Heads: conv 3x3 + pool 2x2 + dense on a feature map, dense on a vector; their sizes.
// - Bad input: a name the network lacks, names out of order, a module without parameters, an
//   input the network cannot take: std::invalid_argument naming the entry.
#include <torch/torch.h>

#include "heterograd/torch/chain.hpp"

#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "heterograd/algorithms/decoupled/local_learning.hpp"
#include "heterograd/algorithms/decoupled/pipeline.hpp"

namespace hg = heterograd;
namespace lt = heterograd::libtorch;
namespace dc = heterograd::algorithms::decoupled;

namespace {

struct one_thread {
  one_thread() {
    torch::manual_seed(3);
    torch::set_num_threads(1);
  }
};

// Plain SGD over a slice (the module optimizer of the tests).
struct sgd {
  float lr = 0.05f;
  void step(hg::span<float> p, hg::span<const float> g) {
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= lr * g[i];
  }
};

struct images {
  std::vector<float> x;
  std::vector<std::int32_t> y;
};

images batch_of(std::size_t rows, std::uint64_t seed, std::size_t pixels = 28 * 28) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  images b;
  b.x.resize(rows * pixels);
  for (auto& v : b.x) v = n(g);
  for (std::size_t r = 0; r < rows; ++r) b.y.push_back(static_cast<std::int32_t>(g() % 10));
  return b;
}

lt::chain_options options(std::vector<std::string> split, std::vector<std::int64_t> head = {}) {
  lt::chain_options o;
  o.split = std::move(split);
  o.head_channels = std::move(head);
  o.input = {1, 28, 28};
  return o;
}

std::vector<float> initial(torch::nn::Sequential net) {
  const lt::flat_module m(net.ptr());
  return {m.params().begin(), m.params().end()};
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(torch_chain)

BOOST_FIXTURE_TEST_CASE(modules_start_at_the_named_children_over_the_networks_layout, one_thread) {
  auto net = lt::resnet8();
  const auto p0 = initial(net);
  lt::sequential_chain c(net, options({"layer2", "layer3"}));
  BOOST_TEST(c.modules() == 3u);
  BOOST_TEST(c.num_params() == p0.size());
  // stem + layer1 | layer2 | layer3 + pool + fc, by the architecture's counts: stem 3x3x1x16
  // conv + batch norm 32; layer1 two 3x3x16x16 convs + 2 batch norms.
  const std::size_t stem = 9 * 16 + 32, layer1 = 2 * (9 * 16 * 16 + 32);
  const std::size_t layer2 = 9 * 16 * 32 + 9 * 32 * 32 + 2 * 64 + (16 * 32 + 64);  // + 1x1 shortcut with batch norm
  BOOST_TEST(c.module_offset(1) == stem + layer1);
  BOOST_TEST(c.module_offset(2) == stem + layer1 + layer2);
  BOOST_TEST(c.module_offset(3) == p0.size());
  BOOST_TEST(c.input_width(0) == 784u);
  BOOST_TEST(c.input_width(1) == 16u * 28 * 28);
  BOOST_TEST(c.input_width(2) == 32u * 14 * 14);
  // Heads: pool to 2 x 2 and a dense layer (no hidden width), or a 3x3 conv of 8 maps first.
  BOOST_TEST(c.head_size(0) == 16u * 4 * 10 + 10);
  lt::sequential_chain h(lt::resnet8(), options({"layer2"}, {8}));
  BOOST_TEST(h.head_size(0) == 9u * 16 * 8 + 8 + 8 * 4 * 10 + 10);
  // A flat feature vector (LeNet-5 split at fc2: fc1's 120 outputs): dense layers.
  lt::sequential_chain v(lt::lenet5(), options({"fc2"}, {20}));
  BOOST_TEST(v.input_width(1) == 120u);
  BOOST_TEST(v.head_size(0) == 120u * 20 + 20 + 20 * 10 + 10);
  // Without names: `modules` groups of children (ResNet-8 has 6: stem layer1 layer2 | layer3 pool fc).
  lt::chain_options even = options({});
  even.modules = 2;
  lt::sequential_chain e(lt::resnet8(), even);
  BOOST_TEST(e.module_offset(1) == stem + layer1 + layer2);
}

BOOST_FIXTURE_TEST_CASE(a_modules_local_gradient_writes_its_slice_and_head_only, one_thread) {
  auto net = lt::resnet8();
  auto p = initial(net);
  lt::sequential_chain c(net, options({"layer2", "layer3"}));
  const auto b = batch_of(4, 11);
  for (std::size_t k = 0; k < 3; ++k) {
    std::vector<float> g(p.size(), -7.0f);
    std::vector<float> head(k < 2 ? c.head_size(k) : 0), hgr(head.size(), -7.0f);
    if (k < 2) c.init_head(k, hg::span<float>(head), 5);
    // Module k's input: the previous modules' outputs on the batch.
    std::vector<float> x = b.x;
    for (std::size_t j = 0; j < k; ++j) {
      std::vector<float> hj(c.head_size(j)), gj(p.size()), hgj(hj.size());
      c.init_head(j, hg::span<float>(hj), 5);
      const auto r = c.local_gradient(j, hg::span<float>(p), x.data(), b.y, hg::span<float>(gj), hg::span<float>(hj),
                                      hg::span<float>(hgj));
      x.assign(r.output.begin(), r.output.end());
    }
    const auto r = c.local_gradient(k, hg::span<float>(p), x.data(), b.y, hg::span<float>(g), hg::span<float>(head),
                                    hg::span<float>(hgr));
    BOOST_TEST(std::isfinite(r.loss));
    BOOST_TEST(r.loss > 0.0f);
    std::size_t outside = 0, inside_set = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      const bool mine = i >= c.module_offset(k) && i < c.module_offset(k + 1);
      if (!mine && g[i] != -7.0f) ++outside;
      if (mine && g[i] != -7.0f) ++inside_set;
    }
    BOOST_TEST(outside == 0u, "module " << k);
    BOOST_TEST(inside_set > (c.module_offset(k + 1) - c.module_offset(k)) / 2, "module " << k);
    for (const float v : hgr) BOOST_TEST(v != -7.0f);
    BOOST_TEST(r.output.size() == (k < 2 ? 4 * c.input_width(k + 1) : 0u));
  }
}

BOOST_FIXTURE_TEST_CASE(the_global_step_is_the_whole_networks_gradient_bitwise, one_thread) {
  auto net = lt::resnet8();
  auto p = initial(net);
  lt::sequential_chain c(net, options({"layer2"}));
  const auto b = batch_of(6, 12);
  std::vector<float> g(p.size());
  const float loss = c.global_gradient(hg::span<float>(p), b.x.data(), hg::span<const std::int32_t>(b.y), hg::span<float>(g));
  // The preset as one module at the same parameters.
  lt::flat_module whole(lt::resnet8().ptr());
  std::copy(p.begin(), p.end(), whole.params().begin());
  whole.zero_grad();
  whole.module().train();
  const auto logits = dynamic_cast<torch::nn::SequentialImpl&>(whole.module())
                          .forward(torch::from_blob(const_cast<float*>(b.x.data()), {6, 1, 28, 28}));
  const auto y = torch::from_blob(const_cast<std::int32_t*>(b.y.data()), {6}, torch::kInt).to(torch::kLong);
  const auto ref = torch::nn::functional::cross_entropy(logits, y);
  ref.backward();
  BOOST_TEST(loss == ref.item<float>());
  BOOST_TEST(bitwise_equal(g, std::vector<float>(whole.grads().begin(), whole.grads().end())));
}

BOOST_FIXTURE_TEST_CASE(one_module_local_learning_is_end_to_end_sgd_bitwise, one_thread) {
  auto net = lt::lenet5();
  const auto p0 = initial(net);
  lt::chain_options o = options({});
  o.modules = 1;
  dc::local_learning<sgd, lt::sequential_chain> ll(lt::sequential_chain(net, o), p0, {}, [](std::size_t) { return sgd{}; });
  lt::flat_module ref(lt::lenet5().ptr());
  std::copy(p0.begin(), p0.end(), ref.params().begin());
  sgd opt;
  for (std::uint64_t t = 0; t < 5; ++t) {
    const auto b = batch_of(8, 100 + t);
    ll.step(hg::nn::batch<float>{b.x, b.y}, t);
    ref.zero_grad();
    const auto logits = dynamic_cast<torch::nn::SequentialImpl&>(ref.module())
                            .forward(torch::from_blob(const_cast<float*>(b.x.data()), {8, 1, 28, 28}));
    torch::nn::functional::cross_entropy(
        logits, torch::from_blob(const_cast<std::int32_t*>(b.y.data()), {8}, torch::kInt).to(torch::kLong))
        .backward();
    opt.step(ref.params(), ref.grads());
  }
  BOOST_TEST(bitwise_equal(ll.params(), std::vector<float>(ref.params().begin(), ref.params().end())));
}

BOOST_FIXTURE_TEST_CASE(the_module_pipeline_on_threads_equals_the_sequential_loop_bitwise, one_thread) {
  const auto p0 = initial(lt::resnet8());
  auto make = [](std::size_t) { return sgd{}; };
  const dc::local_learning_config cfg{.seed = 9};
  dc::local_learning<sgd, lt::sequential_chain> seq(lt::sequential_chain(lt::resnet8(), options({"layer2", "layer3"}, {4})),
                                                   p0, cfg, make);
  dc::local_learning<sgd, lt::sequential_chain> par(lt::sequential_chain(lt::resnet8(), options({"layer2", "layer3"}, {4})),
                                                   p0, cfg, make);
  const std::size_t T = 6;
  for (std::size_t t = 0; t < T; ++t) {
    const auto b = batch_of(4, 200 + t);
    seq.step(hg::nn::batch<float>{b.x, b.y}, t);
  }
  const auto rep = dc::run_pipeline(
      par,
      [](std::size_t t) {
        auto b = batch_of(4, 200 + t);
        return dc::activation_message{t, std::move(b.x), std::move(b.y)};
      },
      T, {.queue_capacity = 2});
  BOOST_TEST(bitwise_equal(seq.params(), par.params()));
  for (std::size_t k = 0; k < 2; ++k) BOOST_TEST(bitwise_equal(seq.head_params(k), par.head_params(k)), "head " << k);
  BOOST_TEST(rep.busy_seconds.size() == 3u);
  BOOST_TEST(seq.params() != p0);
}

BOOST_FIXTURE_TEST_CASE(a_split_the_network_cannot_take_is_refused_naming_the_entry, one_thread) {
  auto refused = [](std::vector<std::string> split, const std::string& expect, std::vector<std::int64_t> input = {1, 28, 28}) {
    lt::chain_options o = options(std::move(split));
    o.input = std::move(input);
    try {
      lt::sequential_chain c(lt::resnet8(), o);
    } catch (const std::invalid_argument& e) {
      const std::string w = e.what();
      BOOST_TEST(w.find(expect) != std::string::npos, w);
      return;
    }
    BOOST_FAIL("accepted a split it cannot take: " + expect);
  };
  refused({"layer9"}, "split[0]: 'layer9' is not a child of the network (its children: stem, layer1, layer2, layer3, pool, fc)");
  refused({"layer3", "layer2"}, "split[1]: 'layer2' must come after 'layer3'");
  refused({"stem"}, "split[0]: 'stem' is the network's first child");
  refused({"layer3", "pool", "fc"}, "split: module 2 (from 'pool') has no parameters");
  refused({"layer2"}, "input: the network cannot take [3, 28, 28]", {3, 28, 28});
  lt::chain_options o = options({});
  o.modules = 7;
  BOOST_CHECK_THROW(lt::sequential_chain(lt::resnet8(), o), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
