// PD-ASGD layer-wise asynchronous updates (#14) and block-partitioned Hogwild with momentum
// (#15) on shared memory: both converge on Fashion-MNIST with real threads.
#include <cstdio>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/algorithms/decoupled/shared_memory.hpp"
#include "heterograd/data/idx.hpp"
#include "heterograd/data/partition.hpp"
#include "heterograd/data/sampler.hpp"
#include "heterograd/kernels/gemm.hpp"
#include "heterograd/nn/evaluate.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "hg_test.hpp"

namespace nn = heterograd::nn;
namespace hd = heterograd::data;
namespace dc = heterograd::algorithms::decoupled;

namespace {
struct fixture_data {
  hd::dataset train, test;
  fixture_data() {
    heterograd::kernels::set_blas_threads(1);  // several trainer threads share 2 cores
    auto tt = hd::load_fashion_mnist();
    train = tt.train.head(12000);
    test = tt.test.head(2000);
  }
};
const fixture_data& data() {
  static const fixture_data d;
  return d;
}
// Thread-safe source: batch (thread, k) is a pure function of its coordinates.
dc::batch_source source(std::size_t rows, std::uint64_t seed) {
  return [rows, seed](std::size_t thread, std::size_t k) {
    const heterograd::counter_rng rng(seed, thread);
    std::vector<std::size_t> idx(rows);
    for (std::size_t r = 0; r < rows; ++r) idx[r] = rng.below(k * rows + r, data().train.size());
    dc::shared_batch b;
    hd::gather(data().train, idx, b.x, b.y);
    return b;
  };
}
// The same number of batches, one thread, no staleness: what the asynchronous runs are held to.
double sequential_sgd(const nn::mlp<float>& net, std::uint64_t init_seed, std::size_t batches,
                      float lr, float momentum) {
  nn::mlp<float> m = net;
  std::vector<float> p(net.num_params()), g(net.num_params());
  net.init(p, init_seed);
  const auto src = source(32, 99);
  dc::optim_stepper<heterograd::optim::momentum> opt(
      heterograd::optim::momentum({.lr = lr, .momentum = momentum}));
  for (std::size_t k = 0; k < batches; ++k) {
    const auto b = src(0, k);
    m.loss_and_gradient(p, nn::batch<float>{b.x, b.y}, g);
    opt.step(p, g);
  }
  return nn::evaluate_dataset(m, p, data().test).accuracy();
}
}  // namespace

BOOST_AUTO_TEST_CASE(pd_asgd_layerwise_updates_converge_with_two_forward_threads_and_one_backward) {
  const nn::mlp<float> net({784, 64, 32, 10});
  std::vector<float> p(net.num_params());
  net.init(p, 3);
  nn::mlp<float> eval = net;
  const auto before = nn::evaluate_dataset(eval, p, data().test);
  const auto r = dc::layerwise_async(net, p, source(32, 11),
                                     {.forward_threads = 2, .backward_threads = 1,
                                      .iterations = 2400, .lr = 0.03f});
  const auto after = nn::evaluate_dataset(eval, p, data().test);
  std::printf("PD-ASGD: accuracy %.4f -> %.4f (loss %.4f) after %zu batches; mean staleness "
              "per layer:", before.accuracy(), after.accuracy(), after.loss(), r.batches);
  for (double s : r.mean_staleness) std::printf(" %.2f", s);
  std::printf("\n");
  BOOST_TEST(r.batches == 2400u);
  BOOST_TEST(r.layer_updates == 2400u * 3);
  // With one backward thread walking layers top-down, every update a layer misses is also
  // missed by the layer below it: staleness never decreases towards the input (#14's point:
  // upper layers are fresher).
  for (std::size_t l = 0; l + 1 < r.mean_staleness.size(); ++l)
    BOOST_TEST(r.mean_staleness[l] >= r.mean_staleness[l + 1]);
  // It trains: from chance (10%) to well above 70%. Thread timing moves the final point: the
  // staleness is about 5-6 updates, and at lr 0.05 the last iterate ranged 0.69-0.84 over 16
  // runs (one CI failure at 0.685). At lr 0.03 it ranged 0.77-0.84 over 24 runs, half of them
  // beside a busy core; the sequential run with the same batches (0.84) is printed for context.
  const double seq = sequential_sgd(net, 3, 2400, 0.03f, 0.0f);
  std::printf("  sequential SGD with the same batches: %.4f\n", seq);
  BOOST_TEST(after.accuracy() > 0.7);
}

BOOST_AUTO_TEST_CASE(block_partitioned_hogwild_with_momentum_converges_on_two_threads) {
  const nn::mlp<float> net({784, 64, 32, 10});
  std::vector<float> p(net.num_params());
  net.init(p, 4);
  nn::mlp<float> eval = net;
  dc::block_hogwild(net, p, source(32, 12),
                    {.threads = 2, .iterations_per_thread = 1200, .alpha = 0.02f, .momentum = 0.9f});
  const auto after = nn::evaluate_dataset(eval, p, data().test);
  const double seq = sequential_sgd(net, 4, 1200, 0.02f, 0.9f);
  std::printf("block Hogwild (2 threads): accuracy %.4f; sequential momentum SGD, 1200 batches: "
              "%.4f\n", after.accuracy(), seq);
  // Each block saw 1200 updates, as in the sequential run; inconsistent reads cost little.
  BOOST_TEST(after.accuracy() > seq - 0.05);
  BOOST_TEST(after.accuracy() > 0.7);
  BOOST_CHECK_THROW(dc::block_hogwild(net, p, source(4, 1), {.threads = 4}), std::invalid_argument);
}
