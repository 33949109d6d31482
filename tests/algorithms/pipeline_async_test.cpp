// Issue 47: asynchronous updates on the stage runtime (PipeDream's per-backward updates, weight
// stashing, SpecTrain's prediction): the rules against hand computations and the sequential
// pieces, threads against the simulated order, and pipelined_backprop where the rules coincide.
// Part of decoupled_test.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/algorithms/decoupled/pipelined_backprop.hpp"
#include "heterograd/comm/inproc.hpp"
#include "pipeline_support.hpp"

namespace hg = heterograd;
namespace nn = heterograd::nn;
namespace pl = heterograd::algorithms::pipeline;
namespace dc = heterograd::algorithms::decoupled;
using hg_pipeline_test::batches;
using hg_pipeline_test::five_layers;
using hg_pipeline_test::initial;
using hg_pipeline_test::make_sgd;
using hg_pipeline_test::same_bits;

namespace {
constexpr auto async = pl::pipeline_update::asynchronous;
/// The three asynchronous modes: plain (PipeDream without stashing), stashing, SpecTrain.
const std::vector<pl::pipeline_config> async_modes(std::size_t M) {
  return {{.micro_batches = M, .update = async},
          {.micro_batches = M, .update = async, .stash_weights = true},
          {.micro_batches = M, .update = async, .spectrain = true}};
}
std::string name_of(const pl::pipeline_config& c) {
  return c.stash_weights ? "stash" : c.spectrain ? "spectrain" : "plain";
}
/// p -= lr g: the optimizer whose step SpecTrain's formula assumes.
struct plain_sgd {
  float lr = 0.5f;
  void step(hg::span<float> p, hg::span<const float> g) {
    for (std::size_t j = 0; j < p.size(); ++j) p[j] -= lr * g[j];
  }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(pipeline_async)

BOOST_AUTO_TEST_CASE(one_f_one_b_versions_between_forward_and_backward_are_min_m_and_s_minus_s_1) {
  // Stage s of 1F1B runs K = min(S - s, M) warm-up forwards, then B, F alternately: F(m) for
  // m >= K follows B(m - K), so B(m) meets K - 1 newer versions; warm-up m meets m. Hence
  // v_s(m) = min(m, K - 1): S - s - 1 in the steady state (PipeDream's staleness).
  for (std::size_t S : {1, 2, 3, 4}) {
    for (std::size_t M : {1, 2, 3, 6}) {
      const auto sch = dc::schedule_1f1b(S, M);
      for (std::size_t s = 0; s < S; ++s) {
        const auto v = pl::detail::versions_until_backward(sch[s], M);
        const std::size_t K = std::min(S - s, M);
        for (std::size_t m = 0; m < M; ++m)
          BOOST_TEST(v[m] == std::min(m, K - 1), "S=" << S << " M=" << M << " s=" << s);
      }
    }
  }
  // GPipe: all M forwards first, so B(m) meets m newer versions.
  const auto g = pl::detail::versions_until_backward(dc::schedule_gpipe(2, 3)[0], 3);
  BOOST_TEST(g == (std::vector<std::size_t>{0, 1, 2}));
}

BOOST_AUTO_TEST_CASE(spectrain_predicts_w_minus_s_lr_v_on_a_hand_computed_case) {
  // Slice [1, 3) of a 3-float buffer, plain SGD lr 1/2, gamma 1/2 (every number exact).
  // Update 1, g = (1, -2): W = (1, 2) -> (0.5, 3); v = 0.5 g = (0.5, -1).
  // Update 2, g = (2, 2):  W -> (-0.5, 2);  v = 0.5 v + 0.5 g = (1.25, 0.5).
  // Prediction 2 versions ahead: W - 2 lr v = (-0.5 - 1.25, 2 - 0.5) = (-1.75, 1.5); the
  // smoothed weight change d = -lr v gives the same W + 2 d.
  const pl::pipeline_config cfg{.update = async, .spectrain = true, .spectrain_gamma = 0.5f};
  pl::detail::stage_updater<plain_sgd> u(plain_sgd{}, cfg, 1, 3, 3, 2);
  std::vector<float> p{9, 1, 2}, g{7, 1, -2};
  auto w = u.forward_weights(p, 0, 3);  // d = 0: the live weights
  BOOST_TEST((std::vector<float>(w.begin() + 1, w.end()) == std::vector<float>{1, 2}));
  u.after_backward(p, g);
  BOOST_TEST((p == std::vector<float>{9, 0.5f, 3}));
  BOOST_TEST((g == std::vector<float>{7, 0, 0}));  // the slice's gradient is consumed
  w = u.forward_weights(p, 1, 3);                  // (0.5, 3) + 3 (-0.25, 0.5)
  BOOST_TEST((std::vector<float>(w.begin() + 1, w.end()) == std::vector<float>{-0.25f, 4.5f}));
  g = {0, 2, 2};
  u.after_backward(p, g);
  w = u.forward_weights(p, 0, 2);
  BOOST_TEST((std::vector<float>(w.begin() + 1, w.end()) == std::vector<float>{-1.75f, 1.5f}));
  BOOST_TEST((p == std::vector<float>{9, -0.5f, 2}));  // the prediction never writes the weights
  BOOST_TEST(u.backward_weights(p, 0).data() == p.data());  // B uses the live weights
}

BOOST_AUTO_TEST_CASE(with_one_stage_every_async_mode_is_momentum_sgd_per_micro_batch_bitwise) {
  // S = 1 under 1F1B: F(m), B(m) adjacent, so v = 0: no staleness, the stash is the live
  // slice and SpecTrain's prediction W + 0 d is W. Each micro-batch's mean gradient takes one
  // heavy-ball step: nn::mlp's loss_and_gradient on each micro-batch then the same optimizer,
  // bitwise. Batches of 7 rows in micro-batches of 3, 2, 2; step loss = sum rows_m loss_m / B.
  const auto p0 = initial(five_layers);
  const auto source = batches(12, 5, 7, hg_test::seed() + 3);
  nn::mlp<float> net = five_layers;
  std::vector<float> ref = p0, g(net.num_params());
  hg_test::sgd_stepper opt;
  std::vector<float> ref_losses;
  for (std::size_t t = 0; t < 3; ++t) {
    float loss = 0;
    for (const auto& mb : pl::split_micro_batches(source(t), 12, 3)) {
      loss += net.loss_and_gradient(ref, nn::batch<float>{mb.x, mb.y}, g) *
              static_cast<float>(mb.rows()) / 7.0f;
      opt.step(ref, g);
    }
    ref_losses.push_back(loss);
  }
  BOOST_TEST(!same_bits(ref, p0));
  for (const auto& cfg : async_modes(3)) {
    pl::mlp_stages model(five_layers, {}, 1, 3);
    std::vector<float> p = p0;
    const auto r = pl::simulate_pipeline(model, p, make_sgd, cfg, source, 3);
    BOOST_TEST(same_bits(p, ref), name_of(cfg));
    for (std::size_t t = 0; t < 3; ++t)
      BOOST_TEST(std::abs(r.losses[t] - ref_losses[t]) <= 1e-6f * ref_losses[t], name_of(cfg));
  }
}

BOOST_AUTO_TEST_CASE(stashing_makes_the_backward_use_the_forward_weights) {
  // S = 2, M = 2, 1F1B: stage 0 runs F0 F1 B0 B1, stage 1 F0 B0 F1 B1 (five layers split 3 + 2).
  // Built from mlp_stages' pieces: stage 1 steps after B0, so F1 on stage 1 sees the new
  // weights; stage 0 steps after its B0, so its B1 meets weights one version newer than its
  // F1 used, unless it uses the stash (the weights at F1 = the initial ones). Stage 0 has 3
  // layers, so its backward reads its own weights (dx through layers 2 and 1): the two differ.
  const auto p0 = initial(five_layers);
  const auto mbs = pl::split_micro_batches(batches(12, 5, 5, hg_test::seed() + 4)(0), 12, 2);
  auto reference = [&](bool stash) {
    pl::mlp_stages m(five_layers, {}, 2, 2);
    std::vector<float> p = p0, g(p.size());
    hg_test::sgd_stepper opt0, opt1;
    auto step = [&](std::size_t s, hg_test::sgd_stepper& o) {
      const auto slice = [&](std::vector<float>& v) {
        return hg::span<float>(v.data() + m.stage_offset(s),
                               m.stage_offset(s + 1) - m.stage_offset(s));
      };
      const auto gs = slice(g);
      o.step(slice(p), hg::span<const float>(gs.data(), gs.size()));
      std::fill(g.begin(), g.end(), 0.0f);
    };
    const std::vector<float> at_forward = p;  // stage 0's weights at F0 and F1
    std::vector<std::vector<float>> a(2), dx(2);
    for (std::size_t k = 0; k < 2; ++k) {
      const auto out = m.forward(0, k, at_forward, mbs[k].x.data(), mbs[k].rows());
      a[k].assign(out.begin(), out.end());
    }
    for (std::size_t k = 0; k < 2; ++k) {
      m.forward(1, 0, p, a[k].data(), mbs[k].rows());
      dx[k].resize(mbs[k].rows() * m.input_width(1));
      m.loss_backward(0, p, mbs[k].y, 1.0f / static_cast<float>(mbs[k].rows()), g, dx[k]);
      step(1, opt1);
    }
    for (std::size_t k = 0; k < 2; ++k) {
      m.backward(0, k, stash ? at_forward : p, dx[k], g, {});
      step(0, opt0);
    }
    return p;
  };
  const auto with = reference(true), without = reference(false);
  BOOST_TEST(!same_bits(with, without));
  const pl::batch_source one = [&](std::size_t) {
    return batches(12, 5, 5, hg_test::seed() + 4)(0);
  };
  for (bool stash : {true, false}) {
    pl::mlp_stages model(five_layers, {}, 2, 2);
    std::vector<float> p = p0;
    const auto r = pl::simulate_pipeline(
        model, p, make_sgd, {.micro_batches = 2, .update = async, .stash_weights = stash}, one, 1);
    BOOST_TEST(same_bits(p, stash ? with : without), "stash=" << stash);
    BOOST_TEST(r.peak_stashes ==
               (stash ? std::vector<std::size_t>{2, 1} : std::vector<std::size_t>{0, 0}));
  }
}

BOOST_AUTO_TEST_CASE(async_modes_over_inproc_threads_equal_the_simulated_order_bitwise,
                     *boost::unit_test::timeout(60)) {
  // Each stage runs a fixed op list on inputs arriving in that order and touches only its
  // slice, so asynchronous updates are deterministic: the threads' parameters, losses, peak
  // in-flight micro-batches and peak stashes equal simulate_pipeline's bitwise, for every mode,
  // S = 2, 3, 4, 1F1B with M = 3 over four steps as one stream of N = 12 micro-batches and as
  // two streams of 6 (drain_every = 2), and GPipe with stashing drained every step (N = 3).
  // Stashing holds min(S - s, N) slice copies at its peak on stage s (N under GPipe); the
  // messages kept for unfinished sends stay bounded by the same K (below).
  const auto p0 = initial(five_layers);
  const auto source = batches(12, 5, 7, hg_test::seed() + 5);
  for (std::size_t S : {2, 3, 4}) {
    auto modes = async_modes(3);       // one stream of 12 micro-batches
    for (auto cfg : async_modes(3)) {  // two streams of 6: drained after steps 1 and 3
      cfg.drain_every = 2;
      cfg.measure_staleness = true;
      modes.push_back(cfg);
    }
    modes.push_back({.schedule = pl::pipeline_schedule_kind::gpipe,
                     .micro_batches = 3,
                     .update = async,
                     .stash_weights = true,
                     .drain_every = 1});
    for (const auto& cfg : modes) {
      const std::string what = "S=" + std::to_string(S) + " " + name_of(cfg) +
                               (cfg.schedule == pl::pipeline_schedule_kind::gpipe ? " gpipe" : "") +
                               " drain_every=" + std::to_string(cfg.drain_every);
      pl::mlp_stages sim_model(five_layers, {}, S, 4);
      std::vector<float> sim = p0, sync = p0;
      const auto expect = pl::simulate_pipeline(sim_model, sim, make_sgd, cfg, source, 4);
      pl::simulate_pipeline(sim_model, sync, make_sgd, {.micro_batches = 3}, source, 4);
      BOOST_TEST(!same_bits(sim, sync), what);  // asynchronous updates change the result
      std::vector<float> gathered, losses;
      std::vector<std::size_t> peak(S), stashes(S), pending(S);
      std::vector<hg::algorithms::decoupled::staleness_report> staleness(S);
      hg::comm::inproc::spawn(static_cast<int>(S), [&](const hg::comm::inproc::communicator& c) {
        pl::mlp_stages model(five_layers, {}, S, 4);
        std::vector<float> p = p0;
        const auto r = pl::run_pipeline_over(c, model, p, make_sgd, cfg, source, 4,
                                             {.timeout = std::chrono::seconds{30}});
        pl::gather_stages(c, model, p);
        const auto s = static_cast<std::size_t>(c.rank());
        peak[s] = r.peak_in_flight[s];
        stashes[s] = r.peak_stashes[s];
        pending[s] = r.peak_pending_sends[s];
        staleness[s] = r.staleness[s];
        if (s == 0) gathered = p;
        if (s + 1 == S) losses = r.losses;
      });
      BOOST_TEST(same_bits(gathered, sim), what);
      BOOST_TEST(same_bits(losses, expect.losses), what);
      BOOST_TEST(peak == expect.peak_in_flight, what);
      BOOST_TEST(stashes == expect.peak_stashes, what);
      for (std::size_t s = 0; s < S; ++s) {
        BOOST_TEST(staleness[s].stale_error == expect.staleness[s].stale_error, what);
        BOOST_TEST(staleness[s].predicted_error == expect.staleness[s].predicted_error, what);
        BOOST_TEST(staleness[s].samples == (cfg.measure_staleness ? 12u : 0u), what);
        const bool gpipe = cfg.schedule == pl::pipeline_schedule_kind::gpipe;
        const std::size_t N = 3 * (cfg.drain_every == 0 ? 4 : cfg.drain_every);
        const std::size_t bound = gpipe ? N : std::min(S - s, N);
        BOOST_TEST(stashes[s] == (cfg.stash_weights ? bound : 0), what << " s=" << s);
        // Sends are freed once the receiver provably has them (reap): measured under 1F1B,
        // stage 0 keeps 2K messages (its K = min(S, N) activations and labels in flight),
        // stage s > 0 K + 1; without freeing, a stream would keep them all (2N on stage 0).
        if (!gpipe) BOOST_TEST(pending[s] == (s == 0 ? 2 * bound : bound + 1), what << " s=" << s);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(async_and_spectrain_equal_pipelined_backprop_bitwise) {
  // decoupled::pipelined_backprop runs the same rules in one thread over one schedule per call:
  // a micro-batch's mean gradient (1 / rows) steps the stage after each backward, SpecTrain's
  // W + s d with the same smoothing, s = execute_schedule's updates_between, which is
  // versions_until_backward. One call per step drains the pipeline as our steps do, so the
  // parameters are equal bitwise (S = 3, M = 4, 9-row batches: micro-batches of 3, 2, 2, 2).
  // Not compared: its synchronous mode (it averages the M micro-batch means, we weigh rows by
  // 1 / B: equal only in exact arithmetic and equal rows), and stashing, which it lacks.
  const auto p0 = initial(five_layers);
  const auto source = batches(12, 5, 9, hg_test::seed() + 6);
  for (bool spectrain : {false, true}) {
    dc::pipelined_backprop<hg_test::sgd_stepper> pb(
        five_layers, p0, {.stages = 3, .update = async, .spectrain = spectrain}, make_sgd);
    for (std::size_t t = 0; t < 3; ++t) {
      std::vector<std::vector<float>> xs;
      std::vector<std::vector<std::int32_t>> ys;
      for (const auto& mb : pl::split_micro_batches(source(t), 12, 4)) {
        xs.push_back(mb.x);
        ys.push_back(mb.y);
      }
      pb.run(dc::schedule_1f1b(3, 4), xs, ys);
    }
    pl::mlp_stages model(five_layers, {}, 3, 4);
    std::vector<float> p = p0;
    const auto r = pl::simulate_pipeline(model, p, make_sgd,
                                         {.micro_batches = 4,
                                          .update = async,
                                          .spectrain = spectrain,
                                          .drain_every = 1,
                                          .measure_staleness = true},
                                         source, 3);
    BOOST_TEST(same_bits(p, pb.params()), "spectrain=" << spectrain);
    // The staleness measure is the same sum, taken per stage here and in execution order
    // there: equal up to the order of double additions.
    double stale = 0, predicted = 0;
    std::size_t samples = 0;
    for (const auto& st : r.staleness) {
      stale += st.stale_error;
      predicted += st.predicted_error;
      samples += st.samples;
    }
    BOOST_TEST(samples == pb.staleness().samples);
    BOOST_TEST(samples == 3u * 4 * 3);
    BOOST_TEST(stale > 0.0);
    BOOST_TEST(std::abs(stale - pb.staleness().stale_error) <= 1e-12 * stale);
    BOOST_TEST(std::abs(predicted - pb.staleness().predicted_error) <= 1e-12 * (stale + predicted));
    BOOST_TEST((predicted > 0.0) == spectrain);
    BOOST_TEST(!same_bits(p, p0));
  }
}

BOOST_AUTO_TEST_CASE(spectrain_prediction_is_closer_to_the_backward_weights_on_the_runtime) {
  // SpecTrain's claim (#19): the predicted weights are closer to those the backward meets than
  // the stale ones. S = 4, one stream of 48 micro-batches of 8 rows, heavy ball lr 0.05
  // momentum 0.9, gamma 0.9: sum over backwards of ||W_hat - W_B||^2 against ||W_F - W_B||^2 in
  // the same run. Measured ratio 0.61 (stages 0.62, 0.62, 0.51; 0.58-0.61 over six inits),
  // asserted < 0.75 as pipelined_backprop's test does; the last stage is never stale (v = 0).
  const nn::mlp<float> net({20, 16, 12, 8, 5});
  std::vector<float> p0(net.num_params());
  net.init(p0, 3);
  auto make = [](std::size_t) { return hg_test::sgd_stepper{.lr = 0.05f, .momentum = 0.9f}; };
  std::vector<hg::algorithms::decoupled::staleness_report> by_mode[2];
  for (bool spectrain : {false, true}) {
    pl::mlp_stages model(net, {}, 4, 4);
    std::vector<float> p = p0;
    const auto r = pl::simulate_pipeline(
        model, p, make,
        {.micro_batches = 8, .update = async, .spectrain = spectrain, .measure_staleness = true},
        batches(20, 5, 64, 21), 6);
    by_mode[spectrain] = r.staleness;
  }
  double stale = 0, predicted = 0;
  for (std::size_t s = 0; s < 4; ++s) {
    BOOST_TEST_MESSAGE("stage " << s << ": stale " << by_mode[1][s].stale_error << " (plain run "
                                << by_mode[0][s].stale_error << "), predicted "
                                << by_mode[1][s].predicted_error);
    stale += by_mode[1][s].stale_error;
    predicted += by_mode[1][s].predicted_error;
  }
  BOOST_TEST_MESSAGE("ratio " << predicted / stale);
  BOOST_TEST(by_mode[1][3].stale_error == 0.0);  // the last stage is never stale
  BOOST_TEST(by_mode[1][3].predicted_error == 0.0);
  BOOST_TEST(predicted < 0.75 * stale);
}

BOOST_AUTO_TEST_CASE(async_modes_train_at_least_as_well_as_the_synchronous_pipeline) {
  // S = 3, M = 4, batches of 16 rows, heavy ball lr 0.0125 momentum 0.9, 100 steps; fixed init
  // and data seeds (the bounds come from runs). Measured: the loss of the final weights on 1024
  // held-out rows, averaged over data seeds 77, 78, 79. The asynchronous modes (one stream of
  // 400 micro-batches) take M steps per batch with staleness S - s - 1, the synchronous
  // pipeline one. Over five init seeds the three-seed mean of every async mode ended below the
  // synchronous one (by 0.017 to 0.10; single runs, measured with a drain every step, scattered
  // from 0.19 below to 0.09 above). Asserted, init seed 1: each mode's mean is at most the
  // synchronous mean + 0.03 and below 0.85 x the initial loss (1.900 -> synchronous 1.470,
  // async 1.388 plain, 1.428 stash, 1.392 SpecTrain).
  std::vector<float> p0(five_layers.num_params());
  five_layers.init(p0, 1);
  const auto held_out = batches(12, 5, 1024, 999)(0);
  nn::mlp<float> net = five_layers;
  std::vector<float> g(net.num_params());
  auto loss_of = [&](const std::vector<float>& p) {
    return net.loss_and_gradient(p, nn::batch<float>{held_out.x, held_out.y}, g);
  };
  const float initial_loss = loss_of(p0);
  auto make = [](std::size_t) { return hg_test::sgd_stepper{.lr = 0.0125f, .momentum = 0.9f}; };
  auto mean_loss = [&](const pl::pipeline_config& cfg) {
    float sum = 0;
    for (std::uint64_t seed : {77, 78, 79}) {
      pl::mlp_stages model(five_layers, {}, 3, 4);
      std::vector<float> p = p0;
      pl::simulate_pipeline(model, p, make, cfg, batches(12, 5, 16, seed), 100);
      sum += loss_of(p);
    }
    return sum / 3;
  };
  const float sync = mean_loss({.micro_batches = 4});
  BOOST_TEST_MESSAGE("initial " << initial_loss << ", synchronous " << sync);
  for (const auto& cfg : async_modes(4)) {
    const float loss = mean_loss(cfg);
    BOOST_TEST_MESSAGE("  " << name_of(cfg) << " " << loss);
    BOOST_TEST(loss < 0.85f * initial_loss, name_of(cfg));
    BOOST_TEST(loss <= sync + 0.03f, name_of(cfg) << ": " << loss << " vs " << sync);
  }
}

BOOST_AUTO_TEST_CASE(pd_asgd_with_one_thread_each_and_one_in_flight_is_per_batch_sgd_bitwise,
                     *boost::unit_test::timeout(60)) {
  // F = B = max_in_flight = 1: batch t + 1's forward waits for the token batch t's backward
  // returns after its last update, so it reads every earlier update: plain per-batch SGD with
  // each stage's optimizer, i.e. the synchronous pipeline with M = 1 (equal to the unsplit
  // network's step, tested above), bitwise, S = 1..4, five heavy-ball steps of 7 rows. It is not
  // the asynchronous 1F1B stream, whose stages run S - s - 1 versions stale (checked to differ).
  const auto p0 = initial(five_layers);
  const auto source = batches(12, 5, 7, hg_test::seed() + 7);
  for (std::size_t S : {1, 2, 3, 4}) {
    pl::mlp_stages sim_model(five_layers, {}, S, 1);
    std::vector<float> sync = p0, stream = p0, p = p0;
    pl::simulate_pipeline(sim_model, sync, make_sgd, {.micro_batches = 1}, source, 5);
    const auto r = pl::pd_asgd(pl::mlp_stages(five_layers, {}, S, 1), p, make_sgd, source, 5,
                               {.forward_threads = 1, .backward_threads = 1, .max_in_flight = 1});
    BOOST_TEST(same_bits(p, sync), "S=" << S);
    BOOST_TEST(r.batches == 5u);
    BOOST_TEST(r.peak_in_flight == 1u);
    pl::mlp_stages stream_model(five_layers, {}, S, 4);
    pl::simulate_pipeline(stream_model, stream, make_sgd, {.micro_batches = 1, .update = async},
                          source, 5);
    BOOST_TEST(same_bits(p, stream) == (S == 1), "S=" << S);
  }
}

BOOST_AUTO_TEST_CASE(pd_asgd_with_racing_threads_trains_within_its_in_flight_bound,
                     *boost::unit_test::timeout(60)) {
  // Two forward threads, one backward thread, at most 3 batches in flight, S = 3 (five
  // layers, stage-wise updates): timing decides the result, so only what cannot depend on it is
  // asserted: every batch is processed once, never more than 3 in flight, and the held-out loss
  // falls below 0.85 x its initial value (1.900 -> 1.19-1.33 over 13 runs here, three of them
  // side by side on 2 cores; 400 batches of 16 rows, heavy ball lr 0.0125).
  std::vector<float> p(five_layers.num_params());
  five_layers.init(p, 1);
  const auto held_out = batches(12, 5, 1024, 999)(0);
  nn::mlp<float> net = five_layers;
  std::vector<float> g(net.num_params());
  auto loss_of = [&](const std::vector<float>& w) {
    return net.loss_and_gradient(w, nn::batch<float>{held_out.x, held_out.y}, g);
  };
  const float initial_loss = loss_of(p);
  auto make = [](std::size_t) { return hg_test::sgd_stepper{.lr = 0.0125f, .momentum = 0.9f}; };
  const auto r =
      pl::pd_asgd(pl::mlp_stages(five_layers, {}, 3, 1), p, make, batches(12, 5, 16, 77), 400,
                  {.forward_threads = 2, .backward_threads = 1, .max_in_flight = 3});
  const float loss = loss_of(p);
  BOOST_TEST_MESSAGE("PD-ASGD: held-out loss " << initial_loss << " -> " << loss
                                               << ", peak in flight " << r.peak_in_flight);
  BOOST_TEST(r.batches == 400u);
  BOOST_TEST(r.peak_in_flight <= 3u);
  BOOST_TEST(r.peak_in_flight >= 1u);
  BOOST_TEST(loss < 0.85f * initial_loss);
}

BOOST_AUTO_TEST_SUITE_END()
