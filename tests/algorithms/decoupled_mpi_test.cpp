// The module pipeline over MPI ranks (one module per rank) equals the sequential local-learning
// loop bitwise; the sequential reference is computed on every rank (it is deterministic).
#include <cstring>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "decoupled_support.hpp"
#include "heterograd/algorithms/decoupled/transport_pipeline.hpp"
#include "hg_mpi.hpp"

namespace hg = heterograd;
namespace nn = heterograd::nn;
namespace dc = heterograd::algorithms::decoupled;

using mpi_test::mpi_session;
BOOST_TEST_GLOBAL_FIXTURE(mpi_session);

BOOST_AUTO_TEST_CASE(pipeline_over_mpi_ranks_equals_the_sequential_loop_bitwise) {
  auto& world = mpi_test::world();
  const std::size_t K = static_cast<std::size_t>(world.size());
  std::vector<std::size_t> sizes{24};
  for (std::size_t k = 0; k < K; ++k) sizes.push_back(k + 1 == K ? 4 : 12 + k);
  const nn::mlp<float> net(sizes);
  std::vector<float> p0(net.num_params());
  net.init(p0, 17);
  const dc::local_learning_config cfg{.modules = K, .seed = 5};
  auto make = [](std::size_t) { return hg_test::sgd_stepper{}; };
  auto src = [](std::size_t t) {
    const hg::counter_rng rng(42, t);
    dc::activation_message m;
    m.iteration = t;
    m.x.resize(8 * 24);
    m.y.resize(8);
    for (std::size_t i = 0; i < m.x.size(); ++i) m.x[i] = static_cast<float>(rng.normal(i));
    for (std::size_t r = 0; r < 8; ++r) m.y[r] = static_cast<std::int32_t>(rng.below(1000 + r, 4));
    return m;
  };
  const std::size_t T = 25;
  dc::local_learning<hg_test::sgd_stepper> seq(net, p0, cfg, make), ll(net, p0, cfg, make);
  for (std::size_t t = 0; t < T; ++t) {
    const auto m = src(t);
    seq.step(nn::batch<float>{m.x, m.y}, t);
  }
  dc::run_pipeline_over(world, ll, src, T, {.queue_capacity = 3});
  dc::gather_modules(world, ll);
  if (world.rank() == 0) {
    BOOST_TEST(std::memcmp(ll.params().data(), seq.params().data(),
                           seq.params().size() * sizeof(float)) == 0);
  }
}
