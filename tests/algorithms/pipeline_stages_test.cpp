// Issue 47: the stage runtime (algorithms/pipeline/): mlp_stages, the sequential and simulated
// references, and the synchronous pipeline over inproc threads. Part of decoupled_test.
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/algorithms/pipeline.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/testing/algorithms_pipeline_archetypes.hpp"
#include "hg_test.hpp"
#include "pipeline_support.hpp"

namespace hg = heterograd;
namespace nn = heterograd::nn;
namespace pl = heterograd::algorithms::pipeline;

using hg_pipeline_test::batches;
using hg_pipeline_test::five_layers;
using hg_pipeline_test::initial;
using hg_pipeline_test::make_sgd;
using hg_pipeline_test::same_bits;

namespace {
std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

BOOST_AUTO_TEST_SUITE(pipeline_stages)

BOOST_AUTO_TEST_CASE(mlp_stages_split_the_layers_their_slices_and_widths_at_the_bounds) {
  // 5 layers 12-10-9-8-7-5 in 2 stages: even_split gives layers [0, 3) and [3, 5). Stage 1's
  // slice starts at layer 3's weights: 10*12+10 + 9*10+9 + 8*9+8 = 309 floats in. A slot keeps
  // the input copy and every layer output: (12 + 10 + 9 + 8) floats per row on stage 0,
  // (8 + 7 + 5) on stage 1.
  const pl::mlp_stages m(five_layers, {}, 2, 1);
  BOOST_TEST(m.bounds() == (std::vector<std::size_t>{0, 3, 5}));
  BOOST_TEST(m.stage_offset(0) == 0u);
  BOOST_TEST(m.stage_offset(1) == 309u);
  BOOST_TEST(m.stage_offset(2) == five_layers.num_params());
  BOOST_TEST(m.input_width(0) == 12u);
  BOOST_TEST(m.input_width(1) == 8u);
  BOOST_TEST(m.input_width(2) == 5u);
  BOOST_TEST(m.activation_bytes(0, 7) == 7.0 * 39 * 4);
  BOOST_TEST(m.activation_bytes(1, 7) == 7.0 * 20 * 4);
}

BOOST_AUTO_TEST_CASE(simulated_synchronous_pipeline_equals_the_sequential_step_bitwise) {
  // Design §0.3: GPipe and 1F1B with synchronous update equal sequential_step bitwise, for
  // S = 2, 3, 4 and M = 1, 3, 4 over a 7-row batch (micro-batches of 7; 3,2,2; 2,2,2,1 rows),
  // over three momentum steps. The peak in-flight micro-batches are the schedules' bounds:
  // min(S - s, M) for 1F1B (DAPPLE's), M for GPipe.
  const auto p0 = initial(five_layers);
  const auto source = batches(12, 5, 7, hg_test::seed());
  for (std::size_t S : {2, 3, 4}) {
    for (std::size_t M : {1, 3, 4}) {
      pl::mlp_stages seq_model(five_layers, {}, S, 1);
      std::vector<float> seq = p0;
      std::vector<hg_test::sgd_stepper> opts(S);
      std::vector<float> seq_losses;
      for (std::size_t t = 0; t < 3; ++t)
        seq_losses.push_back(pl::sequential_step(seq_model, hg::span<float>(seq), opts,
                                                 pl::split_micro_batches(source(t), 12, M)));
      BOOST_TEST(!same_bits(seq, p0));
      for (auto kind :
           {pl::pipeline_schedule_kind::gpipe, pl::pipeline_schedule_kind::one_f_one_b}) {
        pl::mlp_stages model(five_layers, {}, S, M);
        std::vector<float> p = p0;
        const auto r = pl::simulate_pipeline(model, p, make_sgd,
                                             {.schedule = kind, .micro_batches = M}, source, 3);
        const bool gpipe = kind == pl::pipeline_schedule_kind::gpipe;
        BOOST_TEST(same_bits(p, seq), "S=" << S << " M=" << M << " gpipe=" << gpipe);
        BOOST_TEST(same_bits(r.losses, seq_losses), "S=" << S << " M=" << M << " gpipe=" << gpipe);
        for (std::size_t s = 0; s < S; ++s)
          BOOST_TEST(r.peak_in_flight[s] == (gpipe ? M : std::min(S - s, M)),
                     "S=" << S << " M=" << M << " s=" << s);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(
    with_one_micro_batch_the_split_network_takes_the_unsplit_full_batch_sgd_step_bitwise) {
  // M = 1: each stage runs nn::mlp's own range forward/backward on the same inputs, the last
  // stage weighs each row by 1/B = 1/rows as mlp::loss_and_gradient does, and the gradient
  // sum starts from zero (0 + g = g exactly): the parameters are the unsplit step's, bitwise.
  // The loss is not: mlp returns (sum of row losses) / rows, the pipeline
  // (sum of row losses) * (1 / rows), one rounding apart (relative 2^-23 per step).
  const auto p0 = initial(five_layers);
  const auto source = batches(12, 5, 6, hg_test::seed() + 1);
  nn::mlp<float> net = five_layers;
  std::vector<float> ref = p0, g(net.num_params());
  hg_test::sgd_stepper opt;
  std::vector<float> ref_losses;
  for (std::size_t t = 0; t < 3; ++t) {
    const auto b = source(t);
    ref_losses.push_back(net.loss_and_gradient(ref, nn::batch<float>{b.x, b.y}, g));
    opt.step(ref, g);
  }
  for (std::size_t S : {1, 2, 3, 4}) {
    pl::mlp_stages model(five_layers, {}, S, 1);
    std::vector<float> p = p0;
    const auto r = pl::simulate_pipeline(model, p, make_sgd, {.micro_batches = 1}, source, 3);
    BOOST_TEST(same_bits(p, ref), "S=" << S);
    for (std::size_t t = 0; t < 3; ++t)
      BOOST_TEST(std::abs(r.losses[t] - ref_losses[t]) <= 2.5e-7f * ref_losses[t],
                 "S=" << S << " step " << t);
  }
}

BOOST_AUTO_TEST_CASE(pipeline_over_inproc_threads_equals_the_simulated_pipeline_bitwise,
                     *boost::unit_test::timeout(60)) {
  // One stage per thread, activations, gradients and labels over the inproc transport: every
  // rank's slice, gathered on rank 0, and the last rank's losses are simulate_pipeline's,
  // bitwise, for both schedules, over four steps (S = 1: one rank, its labels kept local).
  const auto p0 = initial(five_layers);
  const auto source = batches(12, 5, 7, hg_test::seed() + 2);
  for (std::size_t S : {1, 2, 3, 4}) {
    for (auto kind : {pl::pipeline_schedule_kind::gpipe, pl::pipeline_schedule_kind::one_f_one_b}) {
      const pl::pipeline_config cfg{.schedule = kind, .micro_batches = 3};
      pl::mlp_stages sim_model(five_layers, {}, S, 3);
      std::vector<float> sim = p0;
      const auto expect = pl::simulate_pipeline(sim_model, sim, make_sgd, cfg, source, 4);
      std::vector<float> gathered;
      std::vector<float> losses;
      std::vector<std::size_t> peak(S);
      hg::comm::inproc::spawn(static_cast<int>(S), [&](const hg::comm::inproc::communicator& c) {
        pl::mlp_stages model(five_layers, {}, S, 3);
        std::vector<float> p = p0;
        const auto r = pl::run_pipeline_over(c, model, p, make_sgd, cfg, source, 4,
                                             {.timeout = std::chrono::seconds{30}});
        pl::gather_stages(c, model, p);
        const auto s = static_cast<std::size_t>(c.rank());
        peak[s] = r.peak_in_flight[s];
        if (s == 0) gathered = p;
        if (s + 1 == S) losses = r.losses;
      });
      const bool gpipe = kind == pl::pipeline_schedule_kind::gpipe;
      BOOST_TEST(same_bits(gathered, sim), "S=" << S << " gpipe=" << gpipe);
      BOOST_TEST(same_bits(losses, expect.losses), "S=" << S << " gpipe=" << gpipe);
      BOOST_TEST(peak == expect.peak_in_flight, "S=" << S << " gpipe=" << gpipe);
    }
  }
}

namespace {
struct rank_outcome {
  std::string what = "no error";
  double seconds = 0;
};
/// Runs 3 ranks of the pipeline `cfg` for two steps; rank f.from runs forge(f) instead (then
/// waits on a message that never comes); every rank records its error and how long it took
/// to see it.
std::vector<rank_outcome> run_with_hostile(const hg_pipeline_test::forged& f,
                                           const pl::pipeline_config& cfg) {
  const std::size_t S = 3;
  std::vector<rank_outcome> out(S);
  const pl::transfer_options to{.timeout = std::chrono::seconds{20}, .max_rows = 4};
  const auto p0 = initial(five_layers);
  try {
    hg::comm::inproc::spawn(static_cast<int>(S), [&](const hg::comm::inproc::communicator& c) {
      const auto start = std::chrono::steady_clock::now();
      auto& me = out[static_cast<std::size_t>(c.rank())];
      try {
        if (c.rank() == f.from) {
          hg_pipeline_test::forge(c, f);
          float never = 0;
          c.recv(hg::span<float>(&never, 1), (c.rank() + 1) % static_cast<int>(S), 7299,
                 {.timeout = std::chrono::seconds{20}})
              .wait();
        } else {
          pl::mlp_stages model(five_layers, {}, S, 4);  // 1F1B streams: min(S, N) = 3 slots
          std::vector<float> p = p0;
          pl::run_pipeline_over(c, model, p, make_sgd, cfg, batches(12, 5, 8, 1), 2, to);
        }
      } catch (const std::exception& e) {
        me.what = e.what();
        me.seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        throw;  // spawn aborts the world: the others' waits fail now, not at their timeout
      }
    });
  } catch (const std::exception&) {
  }
  return out;
}
/// The receiving rank refuses f naming the field, value and rule; the others fail with its
/// abort and the root cause well before their 20 s timeout.
void check_refused(const hg_pipeline_test::forged& f, const pl::pipeline_config& cfg,
                   const std::string& mode) {
  const auto out = run_with_hostile(f, cfg);
  const auto refuser = static_cast<std::size_t>(f.to);
  BOOST_TEST(out[refuser].what.find(f.says) != std::string::npos,
             mode << ": " << out[refuser].what);
  const std::string abort = "aborted by rank " + std::to_string(f.to);
  for (std::size_t r = 0; r < out.size(); ++r) {
    if (r != refuser)
      BOOST_TEST((out[r].what.find(abort) != std::string::npos &&
                  out[r].what.find(f.says) != std::string::npos),
                 mode << " rank " << r << ": " << out[r].what);
    BOOST_TEST(out[r].seconds < 10.0, mode << " rank " << r << " took " << out[r].seconds << " s");
  }
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_hostile_stage_header_is_refused_by_name_and_the_fault_reaches_every_rank,
                     *boost::unit_test::timeout(100)) {
  // Synchronous, M = 2. A forged header from rank 0 (activations to rank 1), from rank 2
  // (gradients to rank 1, after rank 1's forwards) or from rank 0 to rank 2 (labels, after a
  // valid first activation through rank 1): refused before anything is sized by it.
  const std::vector<hg_pipeline_test::forged> cases{
      {0, 1, 7200, {0, 0, 5, 9},
       "'pipeline.header.rows' = 5: must be at most transfer_options.max_rows (4)"},
      {0, 1, 7200, {0, 0, std::int64_t{1} << 62, 9},
       "'pipeline.header.rows' = 4611686018427387904: must be > 0"},
      {0, 1, 7200, {0, 0, -2, 9}, "'pipeline.header.rows' = -2: must be > 0"},
      {0, 1, 7200, {0, 0, 4, 8},
       "'pipeline.header.width' = 8: must equal stage 1's input width (9), which stage 0's output "
       "must match"},
      {0, 1, 7200, {1, 0, 4, 9}, "'pipeline.header.step' = 1: must be this step (0)"},
      {0, 1, 7200, {0, 1, 4, 9},
       "'pipeline.header.micro_batch' = 1: must be the micro-batch stage 1's schedule expects next "
       "(0)"},
      {2, 1, 7202, {0, 0, 3, 7},
       "'pipeline.gradient_header.rows' = 3: must equal the rows of micro-batch 0's forward (4)"},
      {2, 1, 7202, {0, 0, 4, 6},
       "'pipeline.gradient_header.width' = 6: must equal stage 1's output width (7)"},
      {0, 2, 7204, {0, 0, 3, 8},
       "'pipeline.label_header.rows' = 3: must equal the rows of micro-batch 0's activations (4)"},
      {0, 2, 7204, {0, 0, 4, 2},
       "'pipeline.label_header.batch_rows' = 2: must be >= the micro-batch's rows"},
      {0, 2, 7204, {0, 0, 4, 100},
       "'pipeline.label_header.batch_rows' = 100: must be >= the micro-batch's rows, the same for "
       "every micro-batch of the step, and split into 2 micro-batches give micro-batch 0 its 4 "
       "rows"},
  };
  for (const auto& f : cases) check_refused(f, {.micro_batches = 2}, "synchronous");
}

BOOST_AUTO_TEST_CASE(a_hostile_header_in_the_asynchronous_stream_is_refused_by_name,
                     *boost::unit_test::timeout(200)) {
  // Asynchronous, one 1F1B stream of N = 4 micro-batches over both steps (drain_every = 0),
  // with stashing and with SpecTrain: stream position k is step k / 2, micro-batch k % 2. The
  // hostile rank sends valid micro-batches first, so the forgery lands mid-stream: a header of
  // step 1 that is too large, too wide, replays step 0 or skips a micro-batch; a gradient that
  // replays micro-batch 0 or claims the next step; labels of the wrong step or a step size B
  // that does not split into the rows that arrived.
  const auto async = pl::pipeline_update::asynchronous;
  const std::vector<hg_pipeline_test::forged> cases{
      {0, 1, 7200, {1, 0, 5, 9},
       "'pipeline.header.rows' = 5: must be at most transfer_options.max_rows (4)", 2},
      {0, 1, 7200, {1, 0, 4, 8},
       "'pipeline.header.width' = 8: must equal stage 1's input width (9)", 2},
      {0, 1, 7200, {0, 0, 4, 9}, "'pipeline.header.step' = 0: must be this step (1)", 2},
      {0, 1, 7200, {1, 1, 4, 9},
       "'pipeline.header.micro_batch' = 1: must be the micro-batch stage 1's schedule expects next "
       "(0)",
       2},
      {2, 1, 7202, {1, 1, 4, 7}, "'pipeline.gradient_header.step' = 1: must be this step (0)", 1},
      {2, 1, 7202, {0, 0, 4, 7},
       "'pipeline.gradient_header.micro_batch' = 0: must be the micro-batch stage 1's schedule "
       "expects next (1)",
       1},
      {2, 1, 7202, {0, 1, 3, 7},
       "'pipeline.gradient_header.rows' = 3: must equal the rows of micro-batch 1's forward (4)",
       1},
      {2, 1, 7202, {0, 1, 4, 6},
       "'pipeline.gradient_header.width' = 6: must equal stage 1's output width (7)", 1},
      {0, 2, 7204, {0, 0, 4, 8}, "'pipeline.label_header.step' = 0: must be this step (1)", 2},
      {0, 2, 7204, {1, 1, 4, 8},
       "'pipeline.label_header.micro_batch' = 1: must be the micro-batch whose activations "
       "arrived (0)",
       2},
      {0, 2, 7204, {1, 0, 3, 8},
       "'pipeline.label_header.rows' = 3: must equal the rows of micro-batch 0's activations (4)",
       2},
      {0, 2, 7204, {1, 0, 4, 100},
       "'pipeline.label_header.batch_rows' = 100: must be >= the micro-batch's rows, the same for "
       "every micro-batch of the step, and split into 2 micro-batches give micro-batch 0 its 4 "
       "rows",
       2},
  };
  for (const bool spectrain : {false, true})
    for (const auto& f : cases)
      check_refused(f,
                    {.micro_batches = 2, .update = async, .stash_weights = !spectrain,
                     .spectrain = spectrain, .drain_every = 0},
                    spectrain ? "spectrain" : "stash");
}

BOOST_AUTO_TEST_CASE(bad_pipeline_configuration_and_input_are_refused_by_name) {
  const auto p0 = initial(five_layers);
  const auto source = batches(12, 5, 3, 1);
  auto sim = [&](pl::pipeline_config cfg, std::size_t slots) {
    return what_of([&] {
      pl::mlp_stages model(five_layers, {}, 2, slots);
      std::vector<float> p = p0;
      pl::simulate_pipeline(model, p, make_sgd, cfg, source, 1);
    });
  };
  BOOST_TEST(sim({.micro_batches = 0}, 4).find("'pipeline.micro_batches' = 0: must be >= 1") !=
             std::string::npos);
  // Stashing and SpecTrain need asynchronous updates and exclude each other; gamma in [0, 1).
  const auto async = pl::pipeline_update::asynchronous;
  const std::vector<std::pair<pl::pipeline_config, std::string>> refused{
      {{.stash_weights = true},
       "'pipeline.stash_weights' = true: needs pipeline.update = asynchronous"},
      {{.spectrain = true}, "'pipeline.spectrain' = true: needs pipeline.update = asynchronous"},
      {{.measure_staleness = true},
       "'pipeline.measure_staleness' = true: needs pipeline.update = asynchronous"},
      {{.update = async, .stash_weights = true, .spectrain = true},
       "'pipeline.spectrain' = true: excludes pipeline.stash_weights"},
      {{.update = async, .spectrain = true, .spectrain_gamma = 1.0f},
       "'pipeline.spectrain_gamma' = 1: must be in [0, 1)"},
      {{.update = static_cast<pl::pipeline_update>(2)},
       "'pipeline.update' = 2: must be one of synchronous, asynchronous"}};
  for (const auto& [cfg, says] : refused) {
    const std::string what = sim(cfg, 4);
    BOOST_TEST(what.find(says) != std::string::npos, what);
  }
  BOOST_TEST(sim({.micro_batches = 3, .update = async, .stash_weights = true}, 4) == "no error");
  BOOST_TEST(sim({.schedule = static_cast<pl::pipeline_schedule_kind>(7)}, 4)
                 .find("'pipeline.schedule' = 7: must be one of gpipe, 1f1b") != std::string::npos);
  BOOST_TEST(sim({.micro_batches = 4}, 4)
                 .find("'pipeline.batch.rows' = 3: must be >= pipeline.micro_batches (4)") !=
             std::string::npos);
  // GPipe holds all 3 micro-batches on a stage: a model with 2 slots refuses the third forward.
  BOOST_TEST(sim({.schedule = pl::pipeline_schedule_kind::gpipe, .micro_batches = 3}, 2)
                 .find("'mlp_stages.forward.slot' = 2: must be < slots (2)") != std::string::npos);
  BOOST_TEST(sim({.micro_batches = 3}, 2) == "no error");  // 1F1B: min(S - s, M) = 2 slots suffice
  BOOST_TEST(what_of([] {
               pl::mlp_stages(five_layers, {}, 6, 1);
             }).find("'decoupled.modules' = 6") != std::string::npos);
  const std::string wrong_size = what_of([&] {
    hg::comm::inproc::spawn(3, [&](const hg::comm::inproc::communicator& c) {
      pl::mlp_stages model(five_layers, {}, 2, 2);
      std::vector<float> p = p0;
      pl::run_pipeline_over(c, model, p, make_sgd, {}, source, 1);
    });
  });
  BOOST_TEST(
      wrong_size.find("'pipeline.transport.size' = 3: must equal the number of stages (2)") !=
          std::string::npos,
      wrong_size);
}

namespace {
/// The bytes stage s of S sends per step of `rows` rows in M micro-batches, from the wire
/// protocol: per micro-batch a 32-byte header and its payload, activations (rows x the next
/// stage's width floats) to s + 1, gradients (rows x its own width floats) to s - 1, and on
/// stage 0 the labels (rows int32) to S - 1.
std::uint64_t bytes_per_step(const pl::mlp_stages& m, std::size_t s, std::size_t rows,
                             std::size_t M) {
  const std::size_t S = m.stages();
  std::uint64_t b = 0;
  if (s + 1 < S) b += M * 32 + rows * m.input_width(s + 1) * 4;
  if (s > 0) b += M * 32 + rows * m.input_width(s) * 4;
  if (s == 0 && S > 1) b += M * 32 + rows * 4;
  return b;
}
}  // namespace

BOOST_AUTO_TEST_CASE(simulated_telemetry_has_the_schedule_bytes_micro_batches_and_bubble) {
  // Batches of 7 rows in M = 3 micro-batches, 4 steps, S = 1..4, both schedules, synchronous,
  // one asynchronous stream (drain_every = 0) and drains every 2 steps. Bytes and micro-batches
  // against the closed form above; the theoretical bubble against (S - 1) / (N + S - 1) per
  // segment of N micro-batches; the simulated schedule's idle fraction (forward 1, backward 2,
  // equal stages) against it: GPipe and 1F1B have the same bubble.
  const std::size_t M = 3, steps = 4;
  const auto source = batches(12, 5, 7, hg_test::seed() + 5);
  const auto async = pl::pipeline_update::asynchronous;
  for (std::size_t S : {1, 2, 3, 4}) {
    for (auto kind : {pl::pipeline_schedule_kind::gpipe, pl::pipeline_schedule_kind::one_f_one_b}) {
      for (std::size_t drain : {0, 1, 2}) {  // 0: synchronous here; 1: async stream; 2: drains
        pl::pipeline_config cfg{.schedule = kind, .micro_batches = M};
        if (drain > 0) cfg.update = async;
        if (drain == 2) cfg.drain_every = 2;
        const std::size_t N = drain == 0 ? M : drain == 1 ? steps * M : 2 * M;
        pl::mlp_stages model(five_layers, {}, S, steps * M);
        std::vector<float> p = initial(five_layers);
        const auto r = pl::simulate_pipeline(model, p, make_sgd, cfg, source, steps);
        const bool gpipe = kind == pl::pipeline_schedule_kind::gpipe;
        const std::string at = "S=" + std::to_string(S) + " drain=" + std::to_string(drain) +
                               " gpipe=" + std::to_string(gpipe);
        BOOST_TEST_REQUIRE(r.stages.size() == S, at);
        for (std::size_t s = 0; s < S; ++s) {
          BOOST_TEST(r.stages[s].bytes_sent == steps * bytes_per_step(model, s, 7, M), at);
          BOOST_TEST(r.stages[s].micro_batches == steps * M, at);
          BOOST_TEST(r.stages[s].busy_s + r.stages[s].idle_s + r.stages[s].wall_s == 0.0, at);
        }
        const double bubble = static_cast<double>(S - 1) / static_cast<double>(N + S - 1);
        BOOST_TEST(r.theoretical_bubble == bubble, at);
        BOOST_TEST(std::abs(r.measured_bubble - bubble) <= 1e-12, at << " " << r.measured_bubble);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(pipeline_telemetry_over_threads_counts_exactly_and_its_times_add_up,
                     *boost::unit_test::timeout(60)) {
  // Real-clock times are not asserted, only invariants: per stage busy + idle + send wait <=
  // wall, busy > 0; bytes, micro-batches and the theoretical bubble equal simulate_pipeline's
  // exactly, on every rank; one stage receives nothing, so idle = 0 and the bubble is 0.
  const auto source = batches(12, 5, 7, hg_test::seed() + 6);
  const auto async = pl::pipeline_update::asynchronous;
  for (std::size_t S : {1, 3}) {
    for (const pl::pipeline_config cfg :
         {pl::pipeline_config{.micro_batches = 3},
          pl::pipeline_config{.micro_batches = 3, .update = async, .stash_weights = true}}) {
      pl::mlp_stages sim_model(five_layers, {}, S, 12);
      std::vector<float> sim = initial(five_layers);
      const auto expect = pl::simulate_pipeline(sim_model, sim, make_sgd, cfg, source, 4);
      std::vector<pl::pipeline_report> got(S);
      hg::comm::inproc::spawn(static_cast<int>(S), [&](const hg::comm::inproc::communicator& c) {
        pl::mlp_stages model(five_layers, {}, S, 12);
        std::vector<float> p = initial(five_layers);
        got[static_cast<std::size_t>(c.rank())] = pl::run_pipeline_over(
            c, model, p, make_sgd, cfg, source, 4, {.timeout = std::chrono::seconds{30}});
      });
      const std::string at =
          "S=" + std::to_string(S) + " async=" + std::to_string(cfg.stash_weights);
      for (const auto& r : got) {
        BOOST_TEST_REQUIRE(r.stages.size() == S, at);
        BOOST_TEST(r.theoretical_bubble == expect.theoretical_bubble, at);
        BOOST_TEST(r.measured_bubble >= 0.0);
        BOOST_TEST(r.measured_bubble < 1.0);
        for (std::size_t s = 0; s < S; ++s) {
          const auto& t = r.stages[s];
          BOOST_TEST(t.bytes_sent == expect.stages[s].bytes_sent, at << " s=" << s);
          BOOST_TEST(t.micro_batches == expect.stages[s].micro_batches, at << " s=" << s);
          BOOST_TEST(t.busy_s > 0.0, at << " s=" << s);
          BOOST_TEST(t.busy_s + t.idle_s + t.send_wait_s <= t.wall_s, at << " s=" << s);
          // the same on every rank
          BOOST_TEST(t.busy_s == got[s].stages[s].busy_s, at << " s=" << s);
        }
      }
      BOOST_TEST_MESSAGE(at << ": bubble measured " << got[0].measured_bubble << ", theoretical "
                            << got[0].theoretical_bubble);
      if (S == 1) {
        BOOST_TEST(got[0].stages[0].idle_s == 0.0);
        BOOST_TEST(got[0].stages[0].send_wait_s == 0.0);
        BOOST_TEST(got[0].stages[0].bytes_sent == 0u);
        BOOST_TEST(got[0].measured_bubble == 0.0);
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
