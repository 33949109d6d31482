// heterograd/torch: a LibTorch module over heterograd's flat buffers, and the model presets.
//
// - The buffers alias the module: a write through a span is seen by the module's tensors and
//   the other way round; backward writes the gradient span; rebind() moves the module onto the
//   caller's memory with no copy.
// - The native MLP (nn::mlp) and the same MLP in LibTorch, from the same initial parameters and
//   the same batches of Fashion-MNIST, give the same losses to 1e-5 relative over 50 SGD steps
//   (one heterograd SGD kernel updates both flat buffers).
// - Batch norm's buffers: averaged, kept local or reset (synchronise_buffers), and re-estimated
//   exactly as the mean of the batches' statistics (estimate_batch_norm).
// - Presets: parameter counts from the architectures' formulas, the transformer's causality,
//   inputs the models cannot take refused.
#include <torch/torch.h>

#include "heterograd/torch/models.hpp"
#include "heterograd/torch/module.hpp"

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "heterograd/core/execution.hpp"
#include "heterograd/data/idx.hpp"
#include "heterograd/nn/mlp.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "messages.hpp"

namespace hg = heterograd;
namespace lt = heterograd::libtorch;

namespace {

struct deterministic {
  deterministic() {
    torch::manual_seed(7);
    torch::set_num_threads(1);
  }
};

std::shared_ptr<torch::nn::Module> as_module(torch::nn::Sequential s) { return s.ptr(); }

}  // namespace

BOOST_AUTO_TEST_SUITE(flat_buffers)

BOOST_FIXTURE_TEST_CASE(parameters_and_gradients_alias_the_flat_buffers, deterministic) {
  auto net = torch::nn::Sequential(torch::nn::Linear(5, 4), torch::nn::ReLU(), torch::nn::Linear(4, 3));
  std::vector<torch::Tensor> before;
  for (const auto& p : net->parameters()) before.push_back(p.detach().clone());
  lt::flat_module m(as_module(net));
  BOOST_TEST(m.size() == std::size_t{5 * 4 + 4 + 4 * 3 + 3});
  BOOST_TEST(m.params_layout().size() == 4u);
  BOOST_TEST(m.params_layout()[0].name == "0.weight");
  BOOST_TEST(m.params_layout()[3].offset == std::size_t{5 * 4 + 4 + 4 * 3});
  // The values were carried over, in parameters() order.
  const auto params = net->parameters();
  for (std::size_t i = 0; i < params.size(); ++i) BOOST_TEST(torch::equal(params[i], before[i]));
  // A write through the span is the module's parameter.
  m.params()[0] = 42.0f;
  m.params()[m.size() - 1] = -3.5f;
  BOOST_TEST(params[0].flatten()[0].item<float>() == 42.0f);
  BOOST_TEST(params[3].flatten()[2].item<float>() == -3.5f);
  // A write through the module is the span's.
  {
    torch::NoGradGuard g;
    params[1].fill_(0.25f);
  }
  for (std::size_t k = 0; k < 4; ++k) BOOST_TEST(m.params()[20 + k] == 0.25f);
  // backward writes the gradient span (accumulating, as LibTorch does, until zero_grad).
  const auto x = torch::randn({6, 5});
  net->forward(x).sum().backward();
  m.check_binding();
  std::vector<float> g1(m.grads().begin(), m.grads().end());
  const auto last_bias_grad = params[3].grad().clone();
  for (std::size_t k = 0; k < 3; ++k) BOOST_TEST(g1[m.size() - 3 + k] == 6.0f);  // d(sum)/d(bias) = rows
  BOOST_TEST(torch::equal(last_bias_grad, torch::full({3}, 6.0f)));
  net->forward(x).sum().backward();
  for (std::size_t i = 0; i < g1.size(); ++i) BOOST_TEST(m.grads()[i] == 2 * g1[i]);
  m.zero_grad();
  for (const float v : m.grads()) BOOST_TEST(v == 0.0f);
  // A heterograd kernel on the spans moves the module: p <- p - 0.5 g.
  net->forward(x).sum().backward();
  std::vector<float> p0(m.params().begin(), m.params().end());
  const hg::optim::sgd sgd({.lr = 0.5});
  auto st = sgd.init(hg::exec::default_policy(), m.params());
  sgd.update(hg::exec::default_policy(), hg::span<const float>(m.grads()), st, m.params());
  const auto w = params[0].flatten();
  for (std::int64_t i = 0; i < 20; ++i)
    BOOST_TEST(w[i].item<float>() == p0[static_cast<std::size_t>(i)] - 0.5f * m.grads()[static_cast<std::size_t>(i)]);
}

BOOST_FIXTURE_TEST_CASE(rebind_moves_the_module_onto_the_callers_memory_without_a_copy, deterministic) {
  auto net = torch::nn::Sequential(torch::nn::Linear(3, 2));
  lt::flat_module m(as_module(net));
  std::vector<float> p{1, 2, 3, 4, 5, 6, 0.5f, -0.5f}, g(8, 0.0f);
  m.rebind(p, g);
  BOOST_TEST(m.params().data() == p.data());
  BOOST_TEST(m.grads().data() == g.data());
  m.check_binding();
  const auto x = torch::tensor({1.0f, 1.0f, 1.0f}).view({1, 3});
  const auto y = net->forward(x);
  BOOST_TEST(y[0][0].item<float>() == 1 + 2 + 3 + 0.5f);
  BOOST_TEST(y[0][1].item<float>() == 4 + 5 + 6 - 0.5f);
  y.sum().backward();
  BOOST_TEST(g == (std::vector<float>{1, 1, 1, 1, 1, 1, 1, 1}), boost::test_tools::per_element());
  p[6] = 10;  // the caller's write is the module's
  BOOST_TEST(net->forward(x)[0][0].item<float>() == 16.0f);
  std::vector<float> short_buf(7);
  BOOST_CHECK_THROW(m.rebind(short_buf, g), std::invalid_argument);
}

BOOST_FIXTURE_TEST_CASE(a_replaced_gradient_or_a_module_it_cannot_lay_out_is_refused, deterministic) {
  auto net = torch::nn::Sequential(torch::nn::Linear(3, 2));
  lt::flat_module m(as_module(net));
  net->parameters()[0].mutable_grad() = torch::zeros({2, 3});
  BOOST_CHECK_THROW(m.check_binding(), std::logic_error);
  auto dbl = torch::nn::Sequential(torch::nn::Linear(3, 2));
  dbl->to(torch::kDouble);
  BOOST_CHECK_THROW(lt::flat_module{as_module(dbl)}, std::invalid_argument);
  // One Linear registered twice: its parameters would be laid twice.
  auto lin = torch::nn::Linear(2, 2);
  auto shared = torch::nn::Sequential(lin, lin);
  BOOST_CHECK_THROW(lt::flat_module{as_module(shared)}, std::invalid_argument);
}

// A module on a device heterograd cannot reach gets no span of either space, and a CPU module
// no device span: a host span over CUDA memory would be dereferenced by host code. LibTorch's
// meta device (tensors without memory) stands in for "not the CPU" here, where LibTorch has no
// CUDA.
struct meta_net : torch::nn::Module {
  meta_net() {
    const auto meta = torch::TensorOptions().device(torch::kMeta);
    register_parameter("weight", torch::zeros({2, 3}, meta));
    register_parameter("bias", torch::zeros({2}, meta));
  }
};

BOOST_FIXTURE_TEST_CASE(spans_in_another_space_than_the_modules_device_are_refused, deterministic) {
  lt::flat_module meta(std::make_shared<meta_net>());
  BOOST_TEST(meta.size() == 8u);
  BOOST_TEST(meta.device().is_meta());
  const auto host_refusal = hg_test::invalid_argument_message([&] { (void)meta.params(); });
  BOOST_TEST(host_refusal.find("flat_module::params: a host span of a module on meta") != std::string::npos,
             host_refusal);
  BOOST_TEST(hg_test::invalid_argument_message([&] { (void)meta.grads(); }).find("grads: a host span") !=
             std::string::npos);
  BOOST_TEST(hg_test::invalid_argument_message([&] { (void)meta.buffers(); }).find("buffers: a host span") !=
             std::string::npos);
  const auto device_refusal =
      hg_test::invalid_argument_message([&] { (void)meta.params<hg::device_space>(); });
  BOOST_TEST(device_refusal.find("a device span of a module on meta; heterograd reaches CPU and CUDA tensors only") !=
                 std::string::npos,
             device_refusal);

  auto net = torch::nn::Sequential(torch::nn::Linear(3, 2));
  lt::flat_module cpu(as_module(net));
  const auto cpu_refusal = hg_test::invalid_argument_message([&] { (void)cpu.grads<hg::device_space>(); });
  BOOST_TEST(cpu_refusal.find("grads: a device span of a module on cpu; ask for params() (host memory)") !=
                 std::string::npos,
             cpu_refusal);
  std::vector<float> p(8), g(8);
  const hg::span<float, hg::device_space> dp(p.data(), p.size()), dg(g.data(), g.size());
  BOOST_TEST(hg_test::invalid_argument_message([&] { cpu.rebind(dp, dg); }).find("rebind: a device span") !=
             std::string::npos);
  BOOST_TEST(cpu.params().data() != p.data());  // the refused rebind changed nothing
  cpu.check_binding();
  BOOST_TEST(cpu.params<hg::host_space>().data() == cpu.params().data());
}

BOOST_FIXTURE_TEST_CASE(the_native_mlp_and_the_torch_mlp_give_the_same_losses_over_50_sgd_steps, deterministic) {
  const auto data = hg::data::load_fashion_mnist();
  const std::size_t batch = 32, steps = 50, hidden = 64;
  hg::nn::mlp<float> native({784, hidden, 10});
  std::vector<float> xn(native.num_params()), gn(native.num_params());
  native.init(xn, 11);
  auto net = torch::nn::Sequential(torch::nn::Linear(784, hidden), torch::nn::ReLU(), torch::nn::Linear(hidden, 10));
  lt::flat_module m(as_module(net));
  BOOST_REQUIRE(m.size() == native.num_params());
  std::copy(xn.begin(), xn.end(), m.params().begin());  // the same layout: W (out x in), b per layer
  const auto& pol = hg::exec::default_policy();
  const hg::optim::sgd sgd({.lr = 0.05});
  auto sn = sgd.init(pol, hg::span<float>(xn));
  auto st = sgd.init(pol, m.params());
  std::vector<float> xb;
  std::vector<std::int32_t> yb;
  double worst = 0;
  for (std::size_t s = 0; s < steps; ++s) {
    std::vector<std::size_t> idx(batch);
    for (std::size_t k = 0; k < batch; ++k) idx[k] = (s * batch + k * 7919) % data.train.size();
    hg::data::gather(data.train, hg::span<const std::size_t>(idx.data(), idx.size()), xb, yb);
    const double ln = native.loss_and_gradient(hg::span<const float>(xn), hg::nn::batch<float>{xb, yb}, gn);
    m.zero_grad();
    const auto x = torch::from_blob(xb.data(), {static_cast<std::int64_t>(batch), 784});
    const auto y = torch::from_blob(yb.data(), {static_cast<std::int64_t>(batch)}, torch::kInt).to(torch::kLong);
    const auto loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    const double lt_loss = loss.item<double>();
    worst = std::max(worst, std::abs(ln - lt_loss) / std::abs(ln));
    BOOST_TEST(std::abs(ln - lt_loss) <= 1e-5 * std::abs(ln), "step " << s << ": native " << ln << ", torch " << lt_loss);
    sgd.update(pol, hg::span<const float>(gn), sn, hg::span<float>(xn));
    sgd.update(pol, hg::span<const float>(m.grads()), st, m.params());
  }
  BOOST_TEST_MESSAGE("largest relative loss difference over " << steps << " steps: " << worst);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(batch_norm_buffers)

BOOST_FIXTURE_TEST_CASE(buffers_are_averaged_kept_local_or_reset_as_asked, deterministic) {
  auto make = [] { return torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 2, 3)), torch::nn::BatchNorm2d(2)); };
  auto a = make(), b = make();
  lt::flat_module ma(as_module(a)), mb(as_module(b));
  BOOST_TEST(ma.buffers().size() == 4u);  // running_mean and running_var of 2 channels
  a->forward(torch::randn({4, 1, 6, 6}));
  b->forward(torch::randn({4, 1, 6, 6}) * 3 + 1);
  const std::vector<float> ba(ma.buffers().begin(), ma.buffers().end()), bb(mb.buffers().begin(), mb.buffers().end());
  BOOST_TEST(ba != bb);
  lt::synchronise_buffers(lt::buffer_rule::local, {&ma, &mb});
  BOOST_TEST(std::vector<float>(ma.buffers().begin(), ma.buffers().end()) == ba);
  lt::synchronise_buffers(lt::buffer_rule::average, {&ma, &mb});
  for (std::size_t i = 0; i < 4; ++i) {
    const float mean = static_cast<float>((double(ba[i]) + double(bb[i])) / 2);
    BOOST_TEST(ma.buffers()[i] == mean);
    BOOST_TEST(mb.buffers()[i] == mean);
  }
  // The module reads the averaged values (the buffer is its running statistics).
  auto* bn = dynamic_cast<torch::nn::BatchNorm2dImpl*>(a->ptr(1).get());
  BOOST_REQUIRE(bn);
  BOOST_TEST(bn->running_mean[0].item<float>() == ma.buffers()[0]);
  lt::synchronise_buffers(lt::buffer_rule::reset, {&ma, &mb});
  BOOST_TEST(ma.buffers()[0] == 0.0f);
  BOOST_TEST(ma.buffers()[1] == 0.0f);
  BOOST_TEST(ma.buffers()[2] == 1.0f);
  BOOST_TEST(mb.buffers()[3] == 1.0f);
  ma.check_binding();
}

BOOST_FIXTURE_TEST_CASE(estimate_batch_norm_gives_the_mean_of_the_batches_statistics, deterministic) {
  auto net = torch::nn::Sequential(torch::nn::BatchNorm1d(3));
  lt::flat_module m(as_module(net));
  std::vector<torch::Tensor> batches{torch::randn({8, 3}), torch::randn({8, 3}) * 2 + 5, torch::randn({8, 3}) - 1};
  net->forward(torch::randn({8, 3}) * 10);  // stale statistics, to be replaced
  net->eval();
  lt::estimate_batch_norm(*net, [&](torch::nn::Module&) {
    for (const auto& x : batches) net->forward(x);
  });
  BOOST_TEST(!net->is_training());
  auto* bn = dynamic_cast<torch::nn::BatchNorm1dImpl*>(net->ptr(0).get());
  BOOST_REQUIRE(bn);
  BOOST_TEST(bn->options.momentum().has_value());  // restored
  for (std::int64_t c = 0; c < 3; ++c) {
    double mean = 0, var = 0;
    for (const auto& x : batches) {
      mean += x.select(1, c).mean().item<double>() / 3;
      var += x.select(1, c).var(/*unbiased=*/true).item<double>() / 3;  // LibTorch records unbiased
    }
    BOOST_TEST(m.buffers()[static_cast<std::size_t>(c)] == mean, boost::test_tools::tolerance(1e-5));
    BOOST_TEST(m.buffers()[3 + static_cast<std::size_t>(c)] == var, boost::test_tools::tolerance(1e-5));
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(presets)

BOOST_FIXTURE_TEST_CASE(parameter_counts_follow_the_architectures, deterministic) {
  auto lenet = lt::lenet5();
  // conv 1->6 5x5, conv 6->16 5x5, dense 16*5*5->120->84->10: the classic 61,706.
  BOOST_TEST(lt::parameter_count(*lenet) == std::size_t{(25 + 1) * 6 + (6 * 25 + 1) * 16 + 401 * 120 + 121 * 84 + 85 * 10});
  BOOST_TEST(lt::parameter_count(*lenet) == 61706u);
  auto res = lt::resnet8();
  const std::size_t bn16 = 2 * 16, bn32 = 2 * 32, bn64 = 2 * 64;
  const std::size_t expect = 9 * 16 + bn16                                  // stem
                             + 2 * 9 * 16 * 16 + 2 * bn16                   // layer1
                             + 9 * 16 * 32 + 9 * 32 * 32 + 16 * 32 + 3 * bn32  // layer2 (+1x1 shortcut)
                             + 9 * 32 * 64 + 9 * 64 * 64 + 32 * 64 + 3 * bn64  // layer3
                             + 64 * 10 + 10;                                // fc
  BOOST_TEST(lt::parameter_count(*res) == expect);
  std::vector<std::string> names;
  for (const auto& c : res->named_children()) names.push_back(c.key());
  BOOST_TEST(names == (std::vector<std::string>{"stem", "layer1", "layer2", "layer3", "pool", "fc"}),
             boost::test_tools::per_element());
  BOOST_TEST(res->forward(torch::randn({2, 1, 28, 28})).sizes() == (std::vector<std::int64_t>{2, 10}),
             boost::test_tools::per_element());
  BOOST_TEST(lenet->forward(torch::randn({3, 1, 28, 28})).sizes() == (std::vector<std::int64_t>{3, 10}),
             boost::test_tools::per_element());
  // 32x32 RGB inputs (CIFAR's shape) change the first layers and the flatten width only.
  BOOST_TEST(lt::lenet5({3, 32, 32})->forward(torch::randn({1, 3, 32, 32})).sizes()[1] == 10);
}

BOOST_FIXTURE_TEST_CASE(inputs_a_model_cannot_take_are_refused_when_it_is_made, deterministic) {
  BOOST_CHECK_THROW(lt::lenet5({1, 8, 8}), std::invalid_argument);
  BOOST_CHECK_THROW(lt::resnet({1, 2, 2}, 10, 3), std::invalid_argument);
  BOOST_CHECK_THROW(lt::resnet({1, 28, 28}, 10, 0), std::invalid_argument);
  BOOST_CHECK_THROW(lt::byte_transformer({.width = 130, .heads = 4}), std::invalid_argument);
  auto tf = lt::byte_transformer({.context = 16, .layers = 1, .width = 32, .heads = 2, .hidden = 64});
  BOOST_CHECK_THROW(tf->forward(torch::zeros({1, 17}, torch::kLong)), std::invalid_argument);
}

BOOST_FIXTURE_TEST_CASE(the_transformer_is_causal, deterministic) {
  auto tf = lt::byte_transformer({.context = 16, .layers = 2, .width = 32, .heads = 4, .hidden = 64});
  auto a = torch::randint(0, 256, {2, 16}, torch::kLong);
  auto b = a.clone();
  b.index_put_({torch::indexing::Slice(), 10}, (a.index({torch::indexing::Slice(), 10}) + 1) % 256);
  const auto la = tf->forward(a), lb = tf->forward(b);
  BOOST_TEST(la.sizes() == (std::vector<std::int64_t>{2, 16, 256}), boost::test_tools::per_element());
  // Positions before the changed byte see the same logits; position 10 and after do not.
  BOOST_TEST(torch::equal(la.narrow(1, 0, 10), lb.narrow(1, 0, 10)));
  BOOST_TEST(!torch::allclose(la.narrow(1, 10, 1), lb.narrow(1, 10, 1)));
  lt::flat_module m(tf.ptr());
  BOOST_TEST(m.buffers().size() == 0u);  // layer norm has no running statistics
}

BOOST_AUTO_TEST_SUITE_END()
