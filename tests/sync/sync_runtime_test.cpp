// The threads runtime and the per-worker helpers: with equal worker speeds the simulated
// policies and the same policy objects run on real threads over the inproc transport give
// bitwise-identical parameters and optimizer states; eager-SGD over the inproc partial
// allreduce keeps replicas identical and loses no gradient; helpers reject bad input.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <utility>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "hg_test.hpp"
#include "sync_support.hpp"
#include "heterograd/algorithms/sync.hpp"
#include "heterograd/core/archive.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/kernels/gemm.hpp"
#include "heterograd/optim/outer.hpp"
#include "heterograd/runtime/round_threads.hpp"
#include "heterograd/runtime/sim.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace hg = heterograd;
namespace hs = heterograd::algorithms::sync;
namespace hr = heterograd::runtime;
namespace sim = heterograd::sim;
namespace ho = heterograd::optim;
namespace hc = heterograd::comm;
using sync_test::bitwise_equal;
using sync_test::class_data;
using sync_test::heavy_ball;
using sync_test::mlp_oracle;
using sync_test::sgd;

namespace {

constexpr std::size_t n = 4;

// Per-worker models (the oracle's scratch), so the threads can compute at once.
struct oracle {
  const class_data* d;
  std::vector<hg::nn::mlp<float>>* models;
  std::uint64_t seed;
  double operator()(std::size_t w, std::uint64_t s, std::size_t b, hg::span<const float> p,
                    hg::span<float> g) const {
    return mlp_oracle{d, &(*models)[w], seed}(w, s, b, p, g);
  }
};

struct problem {
  std::uint64_t seed;
  class_data d;
  hg::nn::mlp<float> model;
  std::vector<float> x0;
  std::vector<hg::nn::mlp<float>> m_sim, m_thr;
  explicit problem(std::uint64_t s, std::size_t hidden = 12)
      : seed(s), d(256, s), model(hg::nn::mlp<float>({10, hidden, 4})), x0(model.num_params()),
        m_sim(n, model), m_thr(n, model) {
    hg::kernels::set_blas_threads(1);  // the same GEMM path on the main and the worker threads
    model.init(x0, s);
  }
  oracle sim_oracle() { return {&d, &m_sim, seed}; }
  oracle thr_oracle() { return {&d, &m_thr, seed}; }
};

hr::round_runtime<hs::round_stats, sim::fixed_times> equal_speeds() {
  return hr::round_runtime<hs::round_stats, sim::fixed_times>(n, sim::fixed_times({1, 1, 1, 1}));
}

template <class Policy>
void expect_identical(const Policy& a, const Policy& b, const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_TEST(a.rounds() == b.rounds());
    for (std::size_t w = 0; w < n; ++w) {
      BOOST_TEST(bitwise_equal(a.params(w), b.params(w)), "params of worker " << w);
      BOOST_TEST((a.optimizer_state(w) == b.optimizer_state(w)), "state of worker " << w);
    }
  }
}

// #16-style transform: worker w stores its parameters scaled by s_w.
struct scale_transform {
  std::vector<float> s{1.0f, 2.0f, 0.5f, 4.0f};
  void to_common(std::size_t w, hg::span<float> x) const {
    for (auto& v : x) v /= s[w];
  }
  void from_common(std::size_t w, hg::span<float> x) const {
    for (auto& v : x) v *= s[w];
  }
};

const std::vector<std::size_t> batches{8, 12, 16, 4};

}  // namespace

BOOST_AUTO_TEST_SUITE(sim_equals_threads)

BOOST_AUTO_TEST_CASE(bsp_gives_bitwise_identical_parameters_under_sim_and_threads_with_equal_speeds) {
  problem pr(hg_test::seed());
  const std::vector<hs::bsp_config> configs{
      {.mode = hs::aggregation::gradients},
      {.mode = hs::aggregation::parameters, .states = hs::state_policy::average},
      {.mode = hs::aggregation::parameters, .weighting = hs::averaging::uniform,
       .states = hs::state_policy::reset}};
  for (std::size_t k = 0; k < configs.size(); ++k) {
    using policy = hs::bsp<float, ho::momentum, oracle>;
    policy a(n, pr.x0, heavy_ball(), pr.sim_oracle(), batches, configs[k]);
    policy b(n, pr.x0, heavy_ball(), pr.thr_oracle(), batches, configs[k]);
    auto rt = equal_speeds();
    hs::run_rounds(rt, a, 15, hr::run_options{});
    hr::run_threads(b, 10);
    hr::run_threads(b, 5);  // a continued run picks up where it stopped
    expect_identical(a, b, "bsp config " + std::to_string(k));
  }
}

BOOST_AUTO_TEST_CASE(local_sgd_gives_bitwise_identical_parameters_under_sim_and_threads_with_equal_speeds) {
  problem pr(hg_test::seed());
  const std::vector<hs::local_sgd_config> configs{
      {.period = 4},
      {.local_steps = {1, 4, 2, 4}, .weighting = hs::averaging::sample_weighted,
       .states = hs::state_policy::average},
      {.local_steps = {1, 4, 2, 4}, .weighting = hs::averaging::fednova},
      {.period = 3, .warmup_steps = 4, .states = hs::state_policy::reset},
      {.period = 2, .groups = {0, 0, 1, 1}, .global_period = 6,
       .weighting = hs::averaging::sample_weighted, .states = hs::state_policy::average},
      {.period = 2, .sampled = 2, .seed = 5, .states = hs::state_policy::average},
      {.period = 2, .gossip = hs::mixing_matrix::ring(n)},
  };
  for (std::size_t k = 0; k < configs.size(); ++k) {
    using policy = hs::local_sgd<float, ho::momentum, oracle>;
    policy a(n, pr.x0, heavy_ball(), pr.sim_oracle(), batches, configs[k]);
    policy b(n, pr.x0, heavy_ball(), pr.thr_oracle(), batches, configs[k]);
    hs::steps_time<sim::fixed_times> timing(sim::fixed_times({1, 1, 1, 1}), a.schedule());
    hr::round_runtime<hs::round_stats, decltype(timing)> rt(n, timing);
    hs::run_rounds(rt, a, 12, hr::run_options{});
    hr::run_threads(b, 7);
    hr::run_threads(b, 5);
    expect_identical(a, b, "local_sgd config " + std::to_string(k));
    BOOST_TEST(a.anchor() == b.anchor());
    for (std::size_t w = 0; w < n; ++w) BOOST_TEST(a.steps(w) == b.steps(w));
  }
}

BOOST_AUTO_TEST_CASE(round_methods_resume_under_threads_from_bytes_saved_at_a_round_boundary) {
  // A real run is checkpointed between rounds (every replica is in the policy then), restored
  // into a fresh policy and continued: the same bits as the run that never stopped, and as
  // the simulator's.
  problem pr(hg_test::seed());
  auto check = [&](auto make, std::uint64_t r1, std::uint64_t r2, const std::string& what) {
    auto a = make(pr.sim_oracle());
    auto b = make(pr.thr_oracle());
    auto c = make(pr.thr_oracle());
    auto rt = equal_speeds();
    hs::run_rounds(rt, a, r1 + r2, hr::run_options{});
    hr::run_threads(b, r1);
    hg::archive_writer w;
    w(b);
    hg::archive_reader r(w.bytes());
    r(c);
    BOOST_TEST(r.done());
    hr::run_threads(b, r2);
    hr::run_threads(c, r2);
    BOOST_TEST_CONTEXT(what) {
      for (std::size_t w = 0; w < n; ++w) {
        BOOST_TEST(bitwise_equal(b.params(w), c.params(w)), "resumed params of worker " << w);
        BOOST_TEST((b.optimizer_state(w) == c.optimizer_state(w)), "resumed state of worker " << w);
        BOOST_TEST(bitwise_equal(a.params(w), c.params(w)), "sim vs resumed, worker " << w);
      }
      if constexpr (requires { c.decisions(); }) BOOST_TEST((a.decisions() == c.decisions()));
      if constexpr (requires { c.rounds(); }) BOOST_TEST(a.rounds() == c.rounds());
    }
  };
  check([&](oracle o) {
    return hs::bsp<float, ho::momentum, oracle>(n, pr.x0, heavy_ball(), o, batches,
                                                {.mode = hs::aggregation::parameters,
                                                 .states = hs::state_policy::average});
  }, 6, 5, "bsp");
  check([&](oracle o) {
    return hs::selsync<float, ho::momentum, oracle>(n, pr.x0, heavy_ball(), o, batches,
                                                    {.threshold = 0.3, .window = 3});
  }, 13, 9, "selsync");
}

BOOST_AUTO_TEST_CASE(outer_optimizers_and_transforms_give_bitwise_identical_parameters_under_sim_and_threads) {
  problem pr(hg_test::seed());
  const hs::local_sgd_config cfg{.period = 3, .states = hs::state_policy::average};
  auto check = [&](auto outer, const std::string& name) {
    using policy = hs::local_sgd<float, ho::momentum, oracle, decltype(outer)>;
    policy a(n, pr.x0, heavy_ball(), pr.sim_oracle(), batches, cfg, outer);
    policy b(n, pr.x0, heavy_ball(), pr.thr_oracle(), batches, cfg, outer);
    auto rt = equal_speeds();
    hs::steps_time<sim::fixed_times> timing(sim::fixed_times({1, 1, 1, 1}), a.schedule());
    hr::round_runtime<hs::round_stats, decltype(timing)> rt2(n, timing);
    hs::run_rounds(rt2, a, 8, hr::run_options{});
    hr::run_threads(b, 8);
    expect_identical(a, b, name);
    BOOST_TEST((a.outer_optimizer_state() == b.outer_optimizer_state()));
  };
  check(ho::diloco_nesterov(), "diloco");
  check(ho::fedavgm(), "fedavgm");
  check(ho::fedadam(), "fedadam");
  // Transforms: every average in the common parameterisation.
  using policy = hs::local_sgd<float, ho::sgd, oracle, hs::no_outer, scale_transform>;
  const std::vector<float> x0 = pr.x0;
  policy a(n, x0, sgd(0.1), pr.sim_oracle(), batches, {.period = 2}, {}, scale_transform{});
  policy b(n, x0, sgd(0.1), pr.thr_oracle(), batches, {.period = 2}, {}, scale_transform{});
  for (int r = 0; r < 6; ++r) a.round();
  hr::run_threads(b, 6);
  expect_identical(a, b, "scale transform");
}

BOOST_AUTO_TEST_CASE(large_models_take_the_owner_computes_allreduce_and_stay_bitwise_identical) {
  // 7684 floats (30 KiB) per buffer: above inproc's 16 KiB staging limit, so the weighted
  // allreduce runs the owner-computes path (each rank reduces its chunk of all buffers).
  problem pr(hg_test::seed(), 512);
  BOOST_TEST(pr.x0.size() * sizeof(float) > 16u * 1024u);
  using bsp_policy = hs::bsp<float, ho::momentum, oracle>;
  const hs::bsp_config bc{.mode = hs::aggregation::parameters, .states = hs::state_policy::average};
  bsp_policy a(n, pr.x0, heavy_ball(), pr.sim_oracle(), batches, bc);
  bsp_policy b(n, pr.x0, heavy_ball(), pr.thr_oracle(), batches, bc);
  auto rt = equal_speeds();
  hs::run_rounds(rt, a, 6, hr::run_options{});
  hr::run_threads(b, 6);
  expect_identical(a, b, "bsp, owner-computes");
  using local_policy = hs::local_sgd<float, ho::momentum, oracle>;
  const hs::local_sgd_config lc{.local_steps = {1, 3, 2, 3}, .weighting = hs::averaging::fednova};
  local_policy c(n, pr.x0, heavy_ball(), pr.sim_oracle(), batches, lc);
  local_policy d(n, pr.x0, heavy_ball(), pr.thr_oracle(), batches, lc);
  for (int r = 0; r < 4; ++r) c.round();
  hr::run_threads(d, 4);
  expect_identical(c, d, "local SGD (FedNova), owner-computes");
}

BOOST_AUTO_TEST_CASE(selsync_gives_bitwise_identical_parameters_and_decisions_under_sim_and_threads) {
  problem pr(hg_test::seed());
  for (auto mode : {hs::aggregation::parameters, hs::aggregation::gradients}) {
    using policy = hs::selsync<float, ho::sgd, oracle>;
    const hs::selsync_config cfg{.threshold = 0.05, .window = 5, .alpha = 0.1, .mode = mode};
    policy a(n, pr.x0, sgd(0.2), pr.sim_oracle(), batches, cfg);
    policy b(n, pr.x0, sgd(0.2), pr.thr_oracle(), batches, cfg);
    auto rt = equal_speeds();
    hs::run_rounds(rt, a, 40, hr::run_options{});
    hr::run_threads(b, 25);
    hr::run_threads(b, 15);
    BOOST_TEST(a.decisions() == b.decisions(), boost::test_tools::per_element());
    for (std::size_t w = 0; w < n; ++w) {
      BOOST_TEST(bitwise_equal(a.params(w), b.params(w)));
      BOOST_TEST((a.trigger(w) == b.trigger(w)));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(eager_threads)

// Integer-valued gradients: every sum is exact in float, so totals are compared with ==.
struct integer_oracle {
  std::uint64_t seed;
  double operator()(std::size_t w, std::uint64_t s, std::size_t, hg::span<const float>,
                    hg::span<float> g) const {
    // Half the ranks, drawn per step, are slow (a real delay: some rounds fire without them).
    if (hg::counter_rng(seed, 3).below(s * 8 + w, 2) == 0)
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    for (std::size_t i = 0; i < g.size(); ++i)
      g[i] = static_cast<float>(static_cast<int>((w * 7 + s * 3 + i * 5) % 9) - 4);
    return 0.0;
  }
};

BOOST_AUTO_TEST_CASE(eager_sgd_over_the_inproc_partial_allreduce_keeps_replicas_identical_and_applies_every_gradient) {
  const std::uint64_t seed = hg_test::seed();
  for (auto mode : {hs::partial_mode::solo, hs::partial_mode::majority}) {
    const std::vector<float> x0(5, 0.5f);
    hs::eager_sgd<float, ho::sgd, integer_oracle> e(
        8, x0, sgd(0.125), integer_oracle{seed}, std::vector<std::size_t>(8, 1),
        {.mode = mode, .seed = seed, .average = false, .rounds = 60});
    hr::run_threads(e);
    BOOST_TEST(e.rounds_fired() == 60u);
    for (std::size_t w = 0; w < 8; ++w) {
      BOOST_TEST(e.rounds_applied(w) == 60u);
      BOOST_TEST(bitwise_equal(e.params(0), e.params(w)));
    }
    // The last round is a flush: every computed gradient was applied, none twice.
    const auto computed = e.computed_sum();
    for (std::size_t i = 0; i < x0.size(); ++i) BOOST_TEST(e.applied_sum()[i] == computed[i]);
    BOOST_TEST(e.fresh_counts().back() == 8u);
    BOOST_TEST_MESSAGE("eager threads (" << (mode == hs::partial_mode::solo ? "solo" : "majority")
                                         << "): " << e.late_contributions()
                                         << " late contributions of " << 8 * 60);
  }
}

BOOST_AUTO_TEST_CASE(eager_sgd_ranks_that_vote_to_stop_all_end_at_the_same_flush_round_with_every_gradient_applied) {
  // Unbounded rounds, ended by one rank's vote: rank 5 (slow half of the time, so its vote is
  // often late) votes from its 25th round on. The round after the first fired round holding
  // the vote is a flush and the last: every rank ends there, at 27 rounds or more.
  const std::uint64_t seed = hg_test::seed();
  for (auto mode : {hs::partial_mode::solo, hs::partial_mode::majority}) {
    const std::vector<float> x0(5, 0.5f);
    hs::eager_sgd<float, ho::sgd, integer_oracle> e(
        8, x0, sgd(0.125), integer_oracle{seed}, std::vector<std::size_t>(8, 1),
        {.mode = mode, .seed = seed, .average = mode == hs::partial_mode::solo});
    std::vector<std::uint64_t> asked(8, 0);  // each rank's slot, touched by its thread only
    hs::worker_options o;
    o.stop = [&asked](std::size_t w) { return ++asked[w] > 25 && w == 5; };
    hr::run_threads(e, o);
    const std::uint64_t rounds = e.rounds_applied(0);
    BOOST_TEST(rounds >= 27u);
    BOOST_TEST(e.rounds_fired() == rounds);
    for (std::size_t w = 0; w < 8; ++w) {
      BOOST_TEST(e.rounds_applied(w) == rounds);
      BOOST_TEST(asked[w] == rounds);
      BOOST_TEST(bitwise_equal(e.params(0), e.params(w)));
    }
    // The flush folded in every late gradient: applied == computed. Solo averages (result x 8
    // is exact for these integers), majority sums.
    const auto computed = e.computed_sum();
    for (std::size_t i = 0; i < x0.size(); ++i) BOOST_TEST(e.applied_sum()[i] == computed[i]);
    BOOST_TEST(e.fresh_counts().back() == 8u);
    BOOST_TEST_MESSAGE("eager vote (" << (mode == hs::partial_mode::solo ? "solo" : "majority")
                                      << "): ended after " << rounds << " rounds");
  }
  // Neither a round count nor a vote: the run would never end.
  hs::eager_sgd<float, ho::sgd, integer_oracle> e(2, std::vector<float>(3, 0.f), sgd(0.1),
                                                  integer_oracle{seed}, {1, 1}, {});
  BOOST_CHECK_EXCEPTION(hr::run_threads(e), std::invalid_argument, [](const std::invalid_argument& x) {
    return std::string(x.what()).find("eager.rounds") != std::string::npos;
  });
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(helpers)

BOOST_AUTO_TEST_CASE(a_framework_loop_with_bsp_worker_gets_the_global_batch_gradient) {
  // Two ranks with batch sizes (8, 24) call bsp_worker::step from their own loop: the
  // gradient they apply is the 32-sample batch's, within 1e-6.
  const class_data d(64, 31);
  const auto model = hg::nn::softmax_regression<float>(d.dim, d.classes);
  std::vector<float> x0(model.num_params());
  model.init(x0, 31);
  std::vector<float> ref(model.num_params());
  auto ref_model = model;
  ref_model.loss_and_gradient(x0, d.rows(0, 32), ref);
  std::vector<std::vector<float>> applied(2);
  hc::inproc::spawn(2, [&](hc::inproc::communicator c) {
    const auto r = static_cast<std::size_t>(c.rank());
    auto m = model;
    std::vector<float> p = x0, g(p.size());
    hs::bsp_worker<float, ho::sgd, hc::inproc::communicator> w(c, sgd(1.0), p, {8, 24});
    m.loss_and_gradient(p, d.rows(r == 0 ? 0 : 8, r == 0 ? 8 : 24), g);
    w.step(p, g);
    applied[r].resize(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) applied[r][i] = x0[i] - p[i];  // lr 1
  });
  for (std::size_t i = 0; i < ref.size(); ++i) {
    BOOST_TEST(std::abs(applied[0][i] - ref[i]) <= 1e-6f);
    BOOST_TEST(applied[0][i] == applied[1][i]);
  }
}

BOOST_AUTO_TEST_CASE(helpers_reject_bad_input_before_any_communication) {
  // Boost.Test is not thread-safe: the ranks record what threw, the main thread checks.
  auto throws = [](auto&& fn) {
    try {
      fn();
    } catch (const std::invalid_argument&) {
      return true;
    }
    return false;
  };
  std::vector<std::vector<bool>> threw(2);
  std::vector<std::uint64_t> rounds(2);
  hc::inproc::spawn(2, [&](hc::inproc::communicator c) {
    auto& t = threw[static_cast<std::size_t>(c.rank())];
    std::vector<float> p(4, 0.0f), g3(3, 0.0f), g4(4, 0.0f);
    using bw = hs::bsp_worker<float, ho::sgd, hc::inproc::communicator>;
    using lw = hs::local_sgd_worker<float, ho::sgd, hc::inproc::communicator>;
    t.push_back(throws([&] { bw(c, sgd(0.1), p, {1, 1, 1}); }));  // 3 batches, 2 ranks
    t.push_back(throws([&] { bw(c, sgd(0.1), p, {0, 0}); }));
    t.push_back(throws([&] { lw(c, sgd(0.1), p, {1, 1}, {.period = 0}); }));
    t.push_back(throws([&] { lw(c, sgd(0.1), p, {1, 1}, {.gossip = hs::mixing_matrix::ring(3)}); }));
    t.push_back(throws([&] { bw(c, sgd(0.1), p, {1, 1}, {}, {}, {.timeout = hg::seconds{0}}); }));
    bw ok(c, sgd(0.1), p, {1, 3});
    t.push_back(throws([&] { ok.step(p, g3); }));  // size mismatch: nothing posted
    lw sampled(c, sgd(0.1), p, {1, 1}, {.period = 1, .sampled = 1, .seed = 2});
    if (sampled.steps_this_round() == 0) {
      t.push_back(throws([&] { sampled.step(p, g4); }));
      sampled.skip_round(p);
    } else {
      t.push_back(throws([&] { sampled.skip_round(p); }));
      sampled.step(p, g4);
    }
    rounds[static_cast<std::size_t>(c.rank())] = sampled.round();
  });
  for (std::size_t r = 0; r < 2; ++r) {
    BOOST_TEST(threw[r].size() == 7u);
    for (std::size_t k = 0; k < threw[r].size(); ++k) BOOST_TEST(threw[r][k], "rank " << r << " check " << k);
    BOOST_TEST(rounds[r] == 1u);
  }
}

// A framework's own loop hands the per-rank helpers its gradients: the config's non-finite
// policy applies there too. Rank 1's gradient of step 1 has a NaN in element 1 (poison), or
// element 1 zeroed, or every element zeroed (the references of zero and skip).
BOOST_AUTO_TEST_CASE(per_rank_helpers_apply_the_nonfinite_policy_to_a_framework_gradient,
                     *boost::unit_test::timeout(30)) {
  using nf = hs::nonfinite_policy;
  enum mode_t { clean, poison, zeroed, dropped };
  const std::size_t d = 5;
  auto gradient = [&](std::size_t r, std::uint64_t s, mode_t m, std::vector<float>& g) {
    for (std::size_t i = 0; i < d; ++i)
      g[i] = static_cast<float>(static_cast<int>((r * 7 + s * 3 + i * 5) % 9) - 4);
    if (r == 1 && s == 1) {
      if (m == poison) g[1] = std::numeric_limits<float>::quiet_NaN();
      if (m == zeroed) g[1] = 0.0f;
      if (m == dropped) std::fill(g.begin(), g.end(), 0.0f);
    }
  };
  // kind 0: bsp_worker (gradients), 1: bsp_worker (parameters), 2: local_sgd_worker (H = 2),
  // 3: selsync_worker. Returns every rank's parameters and rank 1's skip count.
  auto run = [&](int kind, nf policy, mode_t m) {
    std::vector<std::vector<float>> out(2);
    std::uint64_t skipped = 0;
    hc::inproc::spawn(2, [&](hc::inproc::communicator c) {
      const auto r = static_cast<std::size_t>(c.rank());
      std::vector<float> p(d, 0.5f), g(d);
      auto loop = [&](auto& w) {
        for (std::uint64_t s = 0; s < 4; ++s) {
          gradient(r, s, m, g);
          w.step(hg::span<float>(p), hg::span<float>(g));
        }
        if (r == 1) skipped = w.nonfinite_skipped();
      };
      if (kind <= 1) {
        hs::bsp_worker<float, ho::momentum, hc::inproc::communicator> w(
            c, heavy_ball(), p, {1, 2},
            {.mode = kind == 0 ? hs::aggregation::gradients : hs::aggregation::parameters, .nonfinite = policy});
        loop(w);
      } else if (kind == 2) {
        hs::local_sgd_worker<float, ho::momentum, hc::inproc::communicator> w(
            c, heavy_ball(), p, {1, 2}, {.period = 2, .nonfinite = policy});
        loop(w);
      } else {
        hs::selsync_worker<float, ho::momentum, hc::inproc::communicator> w(
            c, heavy_ball(), p, {1, 2}, {.threshold = 0.3, .window = 1, .nonfinite = policy});
        loop(w);
      }
      out[r] = p;
    });
    return std::make_pair(out, skipped);
  };
  for (int kind = 0; kind < 4; ++kind) {
    BOOST_TEST_CONTEXT("helper " << kind) {
      try {
        run(kind, nf::fail, poison);
        BOOST_ERROR("no error");
      } catch (const hs::nonfinite_gradient_error& e) {
        BOOST_TEST(e.worker() == 1u);
        BOOST_TEST(e.step() == 1u);
      }
      const auto [z, zs] = run(kind, nf::zero, poison);
      const auto [zr, zrs] = run(kind, nf::fail, zeroed);
      const auto [k, ks] = run(kind, nf::skip, poison);
      const auto [kr, krs] = run(kind, nf::fail, dropped);
      BOOST_TEST(ks == 1u);
      BOOST_TEST(zs == 0u);
      for (std::size_t r = 0; r < 2; ++r) {
        BOOST_TEST(bitwise_equal(hg::span<const float>(z[r]), hg::span<const float>(zr[r])));
        BOOST_TEST(bitwise_equal(hg::span<const float>(k[r]), hg::span<const float>(kr[r])));
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
