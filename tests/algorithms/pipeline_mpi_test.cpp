// Issue 47: the stage pipeline over MPI ranks (one stage per rank) equals simulate_pipeline
// bitwise, synchronous and asynchronous (plain, stashing, SpecTrain); the simulated reference
// runs on every rank (it is deterministic).
// Activations of 300 rows x 64 floats (75 KiB) are above Open MPI's eager limit, so the
// posted-then-waited sends must not deadlock under rendezvous.
#include <cstdint>
#include <cstring>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "decoupled_support.hpp"
#include "heterograd/algorithms/pipeline.hpp"
#include "hg_mpi.hpp"

namespace hg = heterograd;
namespace nn = heterograd::nn;
namespace pl = heterograd::algorithms::pipeline;

BOOST_AUTO_TEST_CASE(stage_pipeline_over_mpi_ranks_equals_the_simulated_pipeline_bitwise) {
  auto& world = mpi_test::world();
  const std::size_t S = static_cast<std::size_t>(world.size());
  const nn::mlp<float> net({24, 64, 64, 32, 4});
  std::vector<float> p0(net.num_params());
  net.init(p0, 17);
  auto make = [](std::size_t) { return hg_test::sgd_stepper{}; };
  const pl::batch_source src = [](std::size_t t) {
    const hg::counter_rng rng(42, t);
    pl::batch_data b;
    b.x.resize(1201 * 24);
    b.y.resize(1201);
    for (std::size_t i = 0; i < b.x.size(); ++i) b.x[i] = static_cast<float>(rng.normal(i));
    for (std::size_t r = 0; r < b.y.size(); ++r)
      b.y[r] = static_cast<std::int32_t>(rng.below(1u << 30 | r, 4));
    return b;
  };
  const auto async = pl::pipeline_update::asynchronous;
  const auto gpipe = pl::pipeline_schedule_kind::gpipe;
  const std::vector<pl::pipeline_config> configs{
      // micro-batches of 301, 300, 300, 300 rows
      {.schedule = gpipe, .micro_batches = 4},
      {.micro_batches = 4},
      {.micro_batches = 4, .update = async},
      {.micro_batches = 4, .update = async, .stash_weights = true},
      {.micro_batches = 4, .update = async, .spectrain = true},
      {.schedule = gpipe,
       .micro_batches = 4,
       .update = async,
       .stash_weights = true,
       .drain_every = 1}};
  for (std::size_t k = 0; k < configs.size(); ++k) {
    const auto& cfg = configs[k];
    pl::mlp_stages sim_model(net, {}, S, 4), model(net, {}, S, 4);
    std::vector<float> sim = p0, p = p0;
    const auto expect = pl::simulate_pipeline(sim_model, sim, make, cfg, src, 3);
    const auto r = pl::run_pipeline_over(world, model, p, make, cfg, src, 3, {.max_rows = 301});
    pl::gather_stages(world, model, p);
    if (world.rank() == 0)
      BOOST_TEST(std::memcmp(p.data(), sim.data(), sim.size() * sizeof(float)) == 0,
                 "config " << k);
    if (static_cast<std::size_t>(world.rank()) + 1 == S)
      BOOST_TEST(std::memcmp(r.losses.data(), expect.losses.data(), 3 * sizeof(float)) == 0,
                 "config " << k);
    const auto s = static_cast<std::size_t>(world.rank());
    BOOST_TEST(r.peak_in_flight[s] == expect.peak_in_flight[s], "config " << k);
    BOOST_TEST(r.peak_stashes[s] == expect.peak_stashes[s], "config " << k);
  }
}
