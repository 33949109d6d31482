// Decoupled local learning on Fashion-MNIST (#8): accuracy gap to end-to-end training after the
// same number of epochs, and PGL's periodic global step narrowing the K = 4 gap.
#include <cstdio>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "decoupled_support.hpp"
#include "heterograd/data/idx.hpp"
#include "heterograd/data/partition.hpp"
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

// Trains with `cfg` for `epochs` and returns the test accuracy of the whole network.
double train(const dc::local_learning_config& cfg, std::size_t epochs, std::uint64_t seed) {
  const auto& d = fmnist();
  const nn::mlp<float> net({784, 256, 128, 64, 10});
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
  const auto r = nn::evaluate_dataset(ll.network(), ll.params(), d.test);
  return r.accuracy();
}
}  // namespace

BOOST_AUTO_TEST_CASE(local_learning_stays_near_end_to_end_and_pgl_narrows_the_gap) {
  const std::size_t epochs = 2;
  const std::uint64_t seed = 26;
  const double e2e = train({.modules = 1}, epochs, seed);
  const double k2 = train({.modules = 2}, epochs, seed);
  const double k4 = train({.modules = 4}, epochs, seed);
  const double k4_pgl = train({.modules = 4, .pgl = {.period = 4}}, epochs, seed);
  std::printf("fashion-mnist test accuracy after %zu epochs: end-to-end %.4f, K=2 %.4f, K=4 %.4f, "
              "K=4 + PGL(P=4) %.4f\n", epochs, e2e, k2, k4, k4_pgl);
  BOOST_TEST(e2e > 0.84);
  BOOST_TEST(k2 > e2e - 0.02);
  BOOST_TEST(k4 > e2e - 0.04);
  BOOST_TEST(e2e - k4_pgl < e2e - k4);
}
