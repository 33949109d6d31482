// The MPI runtime under mpirun -np 3: the same policies run one rank per process over
// comm::mpi match the threads runtime (inproc, run in every process for reference) within
// 1e-6 on a small problem; eager-SGD over the MPI partial allreduce keeps the replicas
// identical across processes and applies every computed gradient.
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "hg_test.hpp"
#include "sync_support.hpp"
#include "heterograd/algorithms/sync.hpp"
#include "heterograd/comm/mpi.hpp"
#include "heterograd/kernels/gemm.hpp"
#include "heterograd/runtime/round_mpi.hpp"
#include "heterograd/runtime/round_threads.hpp"

namespace hg = heterograd;
namespace hs = heterograd::algorithms::sync;
namespace hr = heterograd::runtime;
namespace ho = heterograd::optim;
namespace hm = heterograd::comm::mpi;
using sync_test::class_data;
using sync_test::heavy_ball;
using sync_test::mlp_oracle;
using sync_test::sgd;

namespace {

struct mpi_session {
  mpi_session() {
    int provided = 0;
    MPI_Init_thread(&boost::unit_test::framework::master_test_suite().argc,
                    &boost::unit_test::framework::master_test_suite().argv, MPI_THREAD_MULTIPLE,
                    &provided);
  }
  ~mpi_session() { MPI_Finalize(); }
};

hm::communicator& world() {
  static hm::communicator c(MPI_COMM_WORLD);
  return c;
}

std::uint64_t shared_seed() {
  std::uint64_t s = hg_test::seed();
  world().broadcast(hg::span<std::uint64_t>(&s, 1), 0).wait();
  return s;
}

struct oracle {
  const class_data* d;
  std::vector<hg::nn::mlp<float>>* models;
  std::uint64_t seed;
  double operator()(std::size_t w, std::uint64_t s, std::size_t b, hg::span<const float> p,
                    hg::span<float> g) const {
    return mlp_oracle{d, &(*models)[w], seed}(w, s, b, p, g);
  }
};

double max_diff(hg::span<const float> a, hg::span<const float> b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return m;
}

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(mpi_session);

BOOST_AUTO_TEST_CASE(bsp_and_local_sgd_under_mpi_match_the_threads_runtime_within_1e_6) {
  auto& c = world();
  const auto n = static_cast<std::size_t>(c.size());
  const std::size_t me = static_cast<std::size_t>(c.rank());
  const std::uint64_t seed = shared_seed();
  hg::kernels::set_blas_threads(1);
  const class_data d(256, seed);
  const auto model = hg::nn::softmax_regression<float>(d.dim, d.classes);
  std::vector<float> x0(model.num_params());
  model.init(x0, seed);
  std::vector<std::size_t> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = 4 + 4 * i;  // unequal batches: b_i / B matters
  std::vector<hg::nn::mlp<float>> m1(n, model), m2(n, model);
  const oracle o1{&d, &m1, seed}, o2{&d, &m2, seed};
  for (auto mode : {hs::aggregation::gradients, hs::aggregation::parameters}) {
    using policy = hs::bsp<float, ho::momentum, oracle>;
    policy a(n, x0, heavy_ball(), o1, b, {.mode = mode, .states = hs::state_policy::keep_local});
    policy t(n, x0, heavy_ball(), o2, b, {.mode = mode, .states = hs::state_policy::keep_local});
    hr::run_mpi(a, c, 10);
    hr::run_threads(t, 10);
    const double e = max_diff(a.params(me), t.params(me));
    BOOST_TEST_MESSAGE("rank " << me << " bsp: max |mpi - threads| = " << e);
    BOOST_TEST(e <= 1e-6);
    BOOST_TEST(a.rounds() == 10u);
  }
  const std::vector<hs::local_sgd_config> configs{
      {.period = 3, .weighting = hs::averaging::sample_weighted, .states = hs::state_policy::average},
      {.local_steps = std::vector<std::size_t>(n, 2), .weighting = hs::averaging::fednova},
      {.period = 2, .gossip = hs::mixing_matrix::ring(n)}};
  for (const auto& cfg : configs) {
    using policy = hs::local_sgd<float, ho::momentum, oracle>;
    policy a(n, x0, heavy_ball(), o1, b, cfg);
    policy t(n, x0, heavy_ball(), o2, b, cfg);
    hr::run_mpi(a, c, 6);
    hr::run_threads(t, 6);
    const double e = max_diff(a.params(me), t.params(me));
    BOOST_TEST_MESSAGE("rank " << me << " local SGD: max |mpi - threads| = " << e);
    BOOST_TEST(e <= 1e-6);
  }
}

// Integer-valued gradients: sums are exact, so totals compare with ==.
struct integer_oracle {
  double operator()(std::size_t w, std::uint64_t s, std::size_t, hg::span<const float>,
                    hg::span<float> g) const {
    for (std::size_t i = 0; i < g.size(); ++i)
      g[i] = static_cast<float>(static_cast<int>((w * 7 + s * 3 + i * 5) % 9) - 4);
    return 0.0;
  }
};

BOOST_AUTO_TEST_CASE(eager_sgd_over_the_mpi_partial_allreduce_keeps_replicas_identical_and_applies_every_gradient) {
  auto& c = world();
  const auto n = static_cast<std::size_t>(c.size());
  const std::size_t me = static_cast<std::size_t>(c.rank());
  const std::uint64_t seed = shared_seed();
  for (auto mode : {hs::partial_mode::solo, hs::partial_mode::majority}) {
    const std::vector<float> x0(5, 0.5f);
    hs::eager_sgd<float, ho::sgd, integer_oracle> e(
        n, x0, sgd(0.125), integer_oracle{}, std::vector<std::size_t>(n, 1),
        {.mode = mode, .seed = seed, .average = false, .rounds = 30});
    hr::run_mpi(e, c);
    // Rank 0's replica, broadcast: every process must hold the same bits.
    std::vector<float> mine(e.params(me).begin(), e.params(me).end()), root = mine;
    c.broadcast(hg::span<float>(root), 0).wait();
    BOOST_TEST(sync_test::bitwise_equal(hg::span<const float>(mine), hg::span<const float>(root)));
    BOOST_TEST(e.rounds_applied(me) == 30u);
    // Each process computed its own gradients: their sum over processes is what was applied.
    auto computed = e.computed_sum();
    c.allreduce(hg::span<double>(computed)).wait();
    for (std::size_t i = 0; i < x0.size(); ++i) BOOST_TEST(e.applied_sum()[i] == computed[i]);
  }
}
