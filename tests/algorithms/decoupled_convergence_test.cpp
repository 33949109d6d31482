// Decoupled local learning on Fashion-MNIST (#8): accuracy gap to end-to-end training after the
// same number of epochs, and PGL's periodic global step narrowing the K = 4 gap.
#include <cstdio>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "decoupled_support.hpp"
#include "heterograd/data/idx.hpp"
#include "heterograd/data/partition.hpp"
#include "heterograd/kernels/gemm.hpp"
#include "heterograd/nn/evaluate.hpp"
#include "hg_test.hpp"

namespace hg = heterograd;
namespace nn = heterograd::nn;
namespace hd = heterograd::data;
namespace dc = heterograd::algorithms::decoupled;

namespace {
const hd::train_test& fmnist() {
  static const hd::train_test tt = hd::load_fashion_mnist();
  return tt;
}

// Trains with `cfg` for `epochs` and returns the whole network's test loss and accuracy.
nn::eval_result train(const dc::local_learning_config& cfg, std::size_t epochs, std::uint64_t seed) {
  const auto& d = fmnist();
  hg::kernels::set_blas_threads(1);  // OpenBLAS threads and OpenMP threads fight over 2 cores
  // Narrow layers make greedy local learning lose information, so K = 4 has a real gap.
  const nn::mlp<float> net({784, 64, 32, 16, 10});
  std::vector<float> p(net.num_params());
  net.init(p, seed);
  dc::local_learning<hg_test::sgd_stepper> ll(net, p, cfg, [](std::size_t) {
    return hg_test::sgd_stepper{.lr = 0.02f, .momentum = 0.9f};
  });
  hd::batch_sampler sampler(hd::partition_iid(d.train.size(), 1, seed)[0], seed, 0);
  const std::size_t b = 64, per_epoch = d.train.size() / b;
  std::vector<float> x;
  std::vector<std::int32_t> y;
  for (std::size_t e = 0, t = 0; e < epochs; ++e)
    for (std::size_t i = 0; i < per_epoch; ++i, ++t) {
      const auto idx = sampler.next(b);
      hd::gather(d.train, idx, x, y);
      ll.step(nn::batch<float>{x, y}, t, e);
    }
  return nn::evaluate_dataset(ll.chain().network(), ll.params(), d.test);
}
}  // namespace

BOOST_AUTO_TEST_CASE(local_learning_stays_near_end_to_end_and_pgl_narrows_the_gap) {
  const std::size_t epochs = 2;
  // Means over two seeds: one run's accuracy moves by about half a point.
  struct mean {
    double acc = 0, loss = 0;
  };
  auto run = [&](const dc::local_learning_config& cfg) {
    mean m;
    for (std::uint64_t seed : {1, 2}) {
      const auto r = train(cfg, epochs, seed);
      m.acc += r.accuracy() / 2;
      m.loss += r.loss() / 2;
    }
    return m;
  };
  const mean e2e = run({.modules = 1});
  const mean k2 = run({.modules = 2});
  const mean k4 = run({.modules = 4});
  const mean k4_pgl = run({.modules = 4, .pgl = {.period = 2}});
  std::printf("fashion-mnist, 784-64-32-16-10 MLP, %zu epochs (mean of 2 seeds): test accuracy / loss"
              "\n  end-to-end %.4f / %.4f\n  K=2 %.4f / %.4f\n  K=4 %.4f / %.4f\n"
              "  K=4 + PGL (global step every 2) %.4f / %.4f\n",
              epochs, e2e.acc, e2e.loss, k2.acc, k2.loss, k4.acc, k4.loss, k4_pgl.acc, k4_pgl.loss);
  BOOST_TEST(e2e.acc > 0.83);
  BOOST_TEST(e2e.acc - k2.acc < 0.02);
  BOOST_TEST(e2e.acc - k4.acc < 0.04);
  BOOST_TEST(k4.loss > e2e.loss);  // the gap PGL is meant to close exists
  BOOST_TEST(k4_pgl.loss - e2e.loss < k4.loss - e2e.loss);
  BOOST_TEST(e2e.acc - k4_pgl.acc < e2e.acc - k4.acc);
}
