// Issue 47: the stage pipeline over MPI ranks (one stage per rank) equals simulate_pipeline
// bitwise, synchronous and asynchronous (plain, stashing, SpecTrain); the simulated reference
// runs on every rank (it is deterministic).
// Activations of 300 rows x 64 floats (75 KiB) are above Open MPI's eager limit, so the
// posted-then-waited sends must not deadlock under rendezvous.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "decoupled_support.hpp"
#include "heterograd/algorithms/pipeline.hpp"
#include "hg_mpi.hpp"
#include "pipeline_support.hpp"

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
    // Telemetry: every stage's counts on every rank, exactly the simulated run's; the times
    // only as invariants (real clock).
    BOOST_TEST(r.theoretical_bubble == expect.theoretical_bubble, "config " << k);
    for (std::size_t j = 0; j < S; ++j) {
      const auto& tj = r.stages.at(j);
      BOOST_TEST(tj.bytes_sent == expect.stages[j].bytes_sent, "config " << k << " stage " << j);
      BOOST_TEST(tj.micro_batches == expect.stages[j].micro_batches, "config " << k);
      BOOST_TEST(tj.busy_s + tj.idle_s + tj.send_wait_s <= tj.wall_s, "config " << k);
    }
  }
}

// Hostile peers over MPI (np 3; skipped at other sizes): a forged header from rank 0 or 2, in
// the synchronous mode and mid-stream in the asynchronous one. The receiving rank refuses it by
// name (key, value, rule) and aborts the group (run_or_abort); every other rank fails with that
// abort and the root cause well before its 20 s timeout. Each case runs on its own duplicate
// of the world (an aborted communicator stays failed), the world stays usable.
BOOST_AUTO_TEST_CASE(a_hostile_stage_header_over_mpi_is_refused_by_name_and_reaches_every_rank) {
  namespace hp = hg_pipeline_test;
  if (mpi_test::world().size() != 3) return;
  const auto async = pl::pipeline_update::asynchronous;
  struct mpi_case {
    hp::forged f;
    pl::pipeline_config cfg;
  };
  const std::vector<mpi_case> cases{
      {{0, 1, 7200, {0, 0, 5, 9},
        "'pipeline.header.rows' = 5: must be at most transfer_options.max_rows (4)"},
       {.micro_batches = 2}},
      {{0, 2, 7204, {1, 0, 4, 100},
        "'pipeline.label_header.batch_rows' = 100: must be >= the micro-batch's rows", 2},
       {.micro_batches = 2, .update = async, .stash_weights = true}},
      {{2, 1, 7202, {0, 0, 4, 7},
        "'pipeline.gradient_header.micro_batch' = 0: must be the micro-batch stage 1's schedule "
        "expects next (1)",
        1},
       {.micro_batches = 2, .update = async, .spectrain = true}},
  };
  const auto p0 = hp::initial(hp::five_layers);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& [f, cfg] = cases[i];
    hg::comm::mpi::communicator c(MPI_COMM_WORLD);
    const auto start = std::chrono::steady_clock::now();
    std::string what = "no error";
    try {
      if (c.rank() == f.from) {
        hp::forge(c, f);
        float never = 0;
        c.recv(hg::span<float>(&never, 1), (c.rank() + 1) % 3, 7299,
               {.timeout = std::chrono::seconds{20}})
            .wait();
      } else {
        hg::comm::mpi::run_or_abort(c, [&] {
          pl::mlp_stages model(hp::five_layers, {}, 3, 4);
          std::vector<float> p = p0;
          pl::run_pipeline_over(c, model, p, hp::make_sgd, cfg, hp::batches(12, 5, 8, 1), 2,
                                {.timeout = std::chrono::seconds{20}, .max_rows = 4});
        });
      }
    } catch (const std::exception& e) {
      what = e.what();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    BOOST_TEST(what.find(f.says) != std::string::npos, "case " << i << ": " << what);
    if (c.rank() != f.to)
      BOOST_TEST(what.find("aborted by rank " + std::to_string(f.to)) != std::string::npos,
                 "case " << i << ": " << what);
    BOOST_TEST(seconds < 10.0, "case " << i << " took " << seconds << " s");
    MPI_Barrier(MPI_COMM_WORLD);
  }
}
