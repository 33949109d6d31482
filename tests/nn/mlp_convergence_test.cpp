// Fashion-MNIST accuracy targets with heterograd's own Adam (fused optim::adam): a 784-256-128-10
// MLP reaches >= 88% test accuracy in 3 epochs, softmax regression >= 83%.
// Recipe: batch 32, Adam with a cosine decay of lr 2e-3 to 0 over the 3 epochs. With a constant
// lr 1e-3 (batch 32 or 64) the MLP ends near 87.2-87.6%; with the cosine decay, seeds 1, 2, 3
// and 26 end at 88.0-88.4% on this machine. OpenBLAS runs single-threaded: its spinning
// threads and OpenMP's fight over 2 cores (an epoch takes 1 s instead of 20 s).
#include <chrono>
#include <cstdio>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/core/execution.hpp"
#include "heterograd/data/idx.hpp"
#include "heterograd/data/partition.hpp"
#include "heterograd/data/sampler.hpp"
#include "heterograd/kernels/gemm.hpp"
#include "heterograd/nn/evaluate.hpp"
#include "heterograd/nn/mlp.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/optim/schedule.hpp"
#include "hg_test.hpp"

namespace hg = heterograd;
namespace nn = heterograd::nn;
namespace hd = heterograd::data;

namespace {
const hd::train_test& fmnist() {
  static const hd::train_test tt = hd::load_fashion_mnist();
  return tt;
}

double train_with_adam(nn::mlp<float> net, std::size_t epochs, std::size_t batch, double lr) {
  const auto& d = fmnist();
  hg::kernels::set_blas_threads(1);
  std::vector<float> p(net.num_params()), g(net.num_params());
  net.init(p, 26);
  const auto steps = static_cast<std::int64_t>(epochs * (d.train.size() / batch));
  const hg::optim::adam adam({.lr = hg::optim::cosine_decay(lr, steps)});
  auto st = adam.init(hg::exec::default_policy(), hg::span<float>(p));
  hd::batch_sampler sampler(hd::partition_iid(d.train.size(), 1, 26)[0], 26, 0);
  std::vector<float> x;
  std::vector<std::int32_t> y;
  for (std::size_t e = 0; e < epochs; ++e) {
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < d.train.size() / batch; ++i) {
      hd::gather(d.train, sampler.next(batch), x, y);
      net.loss_and_gradient(p, nn::batch<float>{x, y}, g);
      adam.update(hg::exec::default_policy(), hg::span<const float>(g), st, hg::span<float>(p));
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto r = nn::evaluate_dataset(net, p, d.test);
    std::printf("  epoch %zu: %.2f s, test accuracy %.4f, loss %.4f\n", e + 1, secs,
                r.accuracy(), r.loss());
  }
  return nn::evaluate_dataset(net, p, d.test).accuracy();
}
}  // namespace

BOOST_AUTO_TEST_CASE(mlp_784_256_128_10_with_adam_reaches_88_percent_in_3_epochs) {
  std::printf("MLP 784-256-128-10, Adam, cosine lr 2e-3 -> 0, batch 32:\n");
  BOOST_TEST(train_with_adam(nn::mlp<float>({784, 256, 128, 10}), 3, 32, 2e-3) >= 0.88);
}

BOOST_AUTO_TEST_CASE(softmax_regression_with_adam_reaches_83_percent_in_3_epochs) {
  std::printf("softmax regression, Adam, cosine lr 2e-3 -> 0, batch 32:\n");
  BOOST_TEST(train_with_adam(nn::softmax_regression<float>(784, 10), 3, 32, 2e-3) >= 0.83);
}
