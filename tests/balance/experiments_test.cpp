// Experiment E4 of docs/references.md (OmniLearn's controller: fixed point and BSP speed-up under
// HL2/HL4/HL8) and the planners against brute force over many random instances.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "hg_test.hpp"
#include "heterograd/balance.hpp"
#include "heterograd/core/rng.hpp"

namespace hg = heterograd;
namespace bal = heterograd::balance;

namespace {

/// The balanced allocation x_i = clamp(μ·cores_i, lo, hi) with Σ x_i = B, by bisection on μ
/// (independent of the library's sweep).
std::vector<double> balanced(const std::vector<double>& cores, double big_b, double lo,
                             double hi) {
  auto at = [&](double mu) {
    std::vector<double> x(cores.size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::clamp(mu * cores[i], lo, hi);
    return x;
  };
  auto total = [&](double mu) {
    const auto x = at(mu);
    return std::accumulate(x.begin(), x.end(), 0.0);
  };
  double a = 0, b = 1;
  while (total(b) < big_b) b *= 2;
  for (int it = 0; it < 200; ++it) {
    const double m = (a + b) / 2;
    (total(m) < big_b ? a : b) = m;
  }
  return at(b);
}

/// Per-iteration BSP compute time: the slowest worker's c · b_i / cores_i.
double bsp_time(const std::vector<double>& b, const std::vector<double>& cores, double c) {
  double t = 0;
  for (std::size_t i = 0; i < b.size(); ++i) t = std::max(t, c * b[i] / cores[i]);
  return t;
}

/// One epoch under t_i = c · b_i / cores_i; returns the measured BSP time per iteration.
double epoch(bal::omnilearn_bsp& p, const std::vector<double>& cores, double c) {
  const std::size_t iters = 50;
  double slowest = 0;
  for (std::size_t i = 0; i < cores.size(); ++i) {
    const double t = c * static_cast<double>(p.batch_size(i)) / cores[i];
    p.observe(i, {p.batch_size(i) * iters, iters, hg::seconds{iters * t}, 0});
    slowest = std::max(slowest, t);
  }
  return slowest;
}

std::vector<double> as_double(std::span<const std::size_t> v) {
  return {v.begin(), v.end()};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(e4_omnilearn)

BOOST_AUTO_TEST_CASE(controller_reaches_the_balanced_batches_and_the_paper_speedups) {
  struct level {
    std::string name;
    std::vector<double> cores;
    double paper_ratio;        // per-iteration BSP time, static b = 32 over OmniLearn
    double paper_ideal_ratio;  // without the b_min clamp
  };
  const std::vector<level> levels{{"HL2", {12, 12, 8, 16}, 1.5, 1.5},
                                  {"HL4", {9, 8, 6, 25}, 2.0, 2.0},
                                  {"HL8", {6, 6, 4, 32}, 2.0, 3.0}};
  const double c = 1e-3, big_b = 128, b_min = 16, b_max = 96;
  for (const auto& hl : levels) {
    BOOST_TEST_CONTEXT(hl.name) {
      bal::omnilearn_bsp p(4, 128, {.min_batch = 16, .max_batch = 96, .deadband = 0.2});
      const std::vector<double> b_static(4, 32.0);
      const double t_static = bsp_time(b_static, hl.cores, c);
      const double sum_cores = std::accumulate(hl.cores.begin(), hl.cores.end(), 0.0);
      const auto x = balanced(hl.cores, big_b, b_min, b_max);
      // The formula reproduces the paper's numbers: B·cores/Σcores, clamps where they bind.
      std::vector<double> ideal(4);
      for (std::size_t i = 0; i < 4; ++i) ideal[i] = big_b * hl.cores[i] / sum_cores;
      BOOST_TEST(std::abs(t_static / bsp_time(ideal, hl.cores, c) - hl.paper_ideal_ratio) < 1e-9);
      const double ratio_formula = t_static / bsp_time(x, hl.cores, c);
      BOOST_TEST(std::abs(ratio_formula - hl.paper_ratio) < 1e-9);

      std::size_t converged = 0;
      double t_last = 0;
      for (std::size_t e = 1; e <= 3 && converged == 0; ++e) {
        epoch(p, hl.cores, c);
        p.rebalance();
        bool at_fixed_point = true;
        for (std::size_t i = 0; i < 4; ++i) {
          at_fixed_point = at_fixed_point && std::abs(p.batch_size(i) - x[i]) < 1.0;
        }
        if (at_fixed_point) converged = e;
      }
      BOOST_TEST(converged >= 1u);
      BOOST_TEST(converged <= 3u);
      for (std::size_t i = 0; i < 4; ++i) {
        BOOST_TEST(std::abs(p.targets()[i] - x[i]) < 1e-6);
        BOOST_TEST(p.batch_size(i) >= 16u);
        BOOST_TEST(p.batch_size(i) <= 96u);
        // Where no clamp binds, every worker sits at B·cores_i/Σcores (up to rounding).
        if (hl.paper_ratio == hl.paper_ideal_ratio) {
          BOOST_TEST(std::abs(p.batch_size(i) - ideal[i]) < 1.0);
        }
      }
      BOOST_TEST(std::accumulate(p.batch_sizes().begin(), p.batch_sizes().end(), std::size_t{0}) ==
                 128u);
      // The fixed point is stable: later epochs change nothing.
      for (int e = 0; e < 5; ++e) {
        t_last = epoch(p, hl.cores, c);
        BOOST_TEST(!p.rebalance());
      }
      const double ratio = t_static / t_last;
      BOOST_TEST(std::abs(ratio / ratio_formula - 1) < 0.05);
      BOOST_TEST(std::abs(ratio / hl.paper_ratio - 1) < 0.05);
      BOOST_TEST_MESSAGE("E4 " << hl.name << ": batches " << p.batch_size(0) << "/"
                               << p.batch_size(1) << "/" << p.batch_size(2) << "/"
                               << p.batch_size(3) << ", BSP time ratio " << ratio
                               << " (paper " << hl.paper_ratio << ")");
    }
  }
  // HL8: the 4-core worker wants B·4/48 = 10.7 and is held at b_min; so are the 6-core
  // workers (B·6/48 = 16 before the raise), and the 32-core worker takes the rest of B.
  bal::omnilearn_bsp p(4, 128);
  epoch(p, {6, 6, 4, 32}, c);
  p.rebalance();
  BOOST_TEST(p.batch_size(0) == 16u);
  BOOST_TEST(p.batch_size(1) == 16u);
  BOOST_TEST(p.batch_size(2) == 16u);
  BOOST_TEST(p.batch_size(3) == 128u - 3 * 16u);
}

BOOST_AUTO_TEST_CASE(the_paper_codes_per_worker_dead_band_stalls_short_of_balance_at_hl4) {
  // Why the default dead-band is cluster-wide (docs/balance.md): with the per-worker test the
  // 8-core worker's remaining error (23 vs 21.3) stays inside the band for good.
  const std::vector<double> cores{9, 8, 6, 25};
  bal::omnilearn_bsp p(4, 128, {.scope = bal::deadband_scope::per_worker});
  double t = 0;
  for (int e = 0; e < 6; ++e) {
    t = epoch(p, cores, 1.0);
    p.rebalance();
  }
  t = epoch(p, cores, 1.0);
  const double ratio = bsp_time(std::vector<double>(4, 32.0), cores, 1.0) / t;
  BOOST_TEST(ratio > 1.5);
  BOOST_TEST(ratio < 1.9);  // vs 2.0 at the balanced allocation
  BOOST_TEST_MESSAGE("E4 HL4 with the per-worker dead-band: BSP time ratio " << ratio);
}

BOOST_AUTO_TEST_CASE(controller_reaches_the_clamped_balance_for_other_clusters) {
  const hg::counter_rng rng(hg_test::seed(), 41);
  std::uint64_t k = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t w = 2 + rng.below(k++, 7);
    std::vector<double> cores(w);
    for (auto& x : cores) x = 1 + static_cast<double>(rng.below(k++, 32));
    const std::size_t lo = 1 + rng.below(k++, 24);
    const std::size_t hi = lo + rng.below(k++, 100);
    const std::size_t per = lo + rng.below(k++, hi - lo + 1);  // initial batch, in range
    const std::size_t big_b = per * w;
    const double deadband = 0.2;
    bal::omnilearn_bsp p(std::vector<std::size_t>(w, per),
                         {.min_batch = lo, .max_batch = hi, .deadband = deadband});
    const auto x = balanced(cores, static_cast<double>(big_b), static_cast<double>(lo),
                            static_cast<double>(hi));
    double worst = 0;
    for (std::size_t i = 0; i < w; ++i) worst = std::max(worst, std::abs(x[i] - per) / x[i]);
    if (std::abs(worst - deadband) < 1e-9) continue;  // on the dead-band's edge: either way
    for (int e = 0; e < 3; ++e) {
      epoch(p, cores, 1.0);
      p.rebalance();
    }
    BOOST_TEST_CONTEXT("trial " << trial << " W=" << w << " B=" << big_b << " [" << lo << ", "
                                << hi << "]") {
      BOOST_TEST(std::accumulate(p.batch_sizes().begin(), p.batch_sizes().end(),
                                 std::size_t{0}) == big_b);
      for (std::size_t i = 0; i < w; ++i) {
        BOOST_TEST(p.batch_size(i) >= lo);
        BOOST_TEST(p.batch_size(i) <= hi);
        if (worst >= deadband) {
          BOOST_TEST(std::abs(p.batch_size(i) - x[i]) < 1.0);  // at the clamped balance
        } else {
          BOOST_TEST(p.batch_size(i) == per);  // inside the dead-band: untouched
        }
      }
      // Whatever it did, it never made the BSP step slower than static batching.
      BOOST_TEST(bsp_time(as_double(p.batch_sizes()), cores, 1.0) <=
                 bsp_time(std::vector<double>(w, static_cast<double>(per)), cores, 1.0) *
                     (1 + 1e-12));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(planners_against_brute_force)

namespace {

struct brute {
  const std::vector<bal::device_profile>& d;
  const bal::training_memory_model& mm;
  std::size_t units;
  double best = std::numeric_limits<double>::infinity();
  std::array<std::size_t, 4> m{}, a{};

  // Shards: any u_0 + … + u_{D−1} = U with every device inside its memory.
  bool shards_fit(std::size_t dev, std::size_t left) const {
    if (dev >= m.size()) return false;
    if (dev + 1 == d.size()) {
      return bal::device_memory_bytes(d[dev], mm, m[dev], left, units) <= d[dev].memory_bytes;
    }
    for (std::size_t u = 0; u <= left; ++u) {
      if (bal::device_memory_bytes(d[dev], mm, m[dev], u, units) <= d[dev].memory_bytes &&
          shards_fit(dev + 1, left - u)) {
        return true;
      }
    }
    return false;
  }
  void search(std::size_t dev, std::size_t left, double t) {
    if (dev == d.size()) {
      if (left == 0 && t < best && shards_fit(0, units)) best = t;
      return;
    }
    if (dev >= m.size()) return;  // tells the compiler the recursion depth is bounded
    for (std::size_t mm_ = 1; mm_ <= left; ++mm_) {
      for (std::size_t aa = 1; mm_ * aa <= left; ++aa) {
        m[dev] = mm_;
        a[dev] = aa;
        search(dev + 1, left - mm_ * aa, std::max(t, bal::device_step_seconds(d[dev], mm_, aa)));
      }
    }
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(cephalo_plans_are_optimal_and_fit_on_random_instances) {
  const hg::counter_rng rng(hg_test::seed(), 43);
  std::uint64_t k = 0;
  int infeasible = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t nd = trial < 200 ? 2 : 3;
    const std::size_t big_b = nd + rng.below(k++, nd == 2 ? 18 : 8);
    const std::size_t units = 1 + rng.below(k++, nd == 2 ? 12 : 6);
    std::vector<bal::device_profile> d(nd);
    for (auto& x : d) {
      x.seconds_per_sample = rng.uniform(k++, 0.1, 3.0);
      x.seconds_per_micro_batch = rng.uniform(k++, 0.0, 1.0);
      x.memory_bytes = rng.uniform(k++, 20, 120);
      x.reserved_bytes = rng.uniform(k++, 0, 10);
    }
    const bal::training_memory_model mm{rng.uniform(k++, 1, 8), rng.uniform(k++, 10, 150)};
    const auto plan = bal::plan_cephalo(d, mm, {.global_batch = big_b, .shard_units = units});
    brute b{d, mm, units};
    b.search(0, big_b, 0.0);
    BOOST_TEST_CONTEXT("trial " << trial) {
      BOOST_TEST(plan.has_value() == std::isfinite(b.best));
      if (!plan) {
        ++infeasible;
        continue;
      }
      BOOST_TEST(plan->step_seconds == b.best);
      std::size_t samples = 0, shards = 0;
      for (std::size_t i = 0; i < nd; ++i) {
        const auto& x = plan->devices[i];
        samples += x.micro_batch * x.accumulation;
        shards += x.shard_units;
        BOOST_TEST(bal::device_memory_bytes(d[i], mm, x.micro_batch, x.shard_units, units) <=
                   d[i].memory_bytes);
      }
      BOOST_TEST(samples == big_b);
      BOOST_TEST(shards == units);
    }
  }
  BOOST_TEST(infeasible < 150);  // the instances mostly have plans
}

BOOST_AUTO_TEST_CASE(pipeline_partition_matches_brute_force) {
  const hg::counter_rng rng(hg_test::seed(), 47);
  std::uint64_t k = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t n = 1 + rng.below(k++, 10);
    const std::size_t stages = 1 + rng.below(k++, std::min<std::size_t>(n, 4));
    std::vector<double> layers(n), speeds(stages);
    for (auto& x : layers) x = rng.uniform(k++, 0.0, 5.0);
    for (auto& x : speeds) x = rng.uniform(k++, 0.25, 4.0);
    const auto b = bal::partition_stages(layers, speeds);
    BOOST_TEST(b.size() == stages + 1);
    const double got = bal::bottleneck_seconds(layers, speeds, b);
    // Every choice of stages − 1 cuts among the n − 1 gaps between layers (bit g: cut
    // after layer g).
    double best = std::numeric_limits<double>::infinity();
    for (std::uint32_t mask = 0; mask < (1u << (n - 1)); ++mask) {
      if (static_cast<std::size_t>(std::popcount(mask)) != stages - 1) continue;
      std::vector<std::size_t> cut{0};
      for (std::size_t g = 0; g + 1 < n; ++g) {
        if (mask & (1u << g)) cut.push_back(g + 1);
      }
      cut.push_back(n);
      best = std::min(best, bal::bottleneck_seconds(layers, speeds, cut));
    }
    BOOST_TEST(std::abs(got - best) <= 1e-12 * std::max(1.0, best));
  }
}

// DAPPLE's planner: the DP's plan has the exhaustive optimum's J on random small instances with
// workers of different speeds (and per-layer jitter, so no worker is a scaled copy of another),
// budgets that bind, links that cost, every worker order, both schedules, with and without
// replication. The instances must cover each outcome the DP has to get right.
BOOST_AUTO_TEST_CASE(pipeline_planner_matches_the_exhaustive_oracle) {
  const hg::counter_rng rng(hg_test::seed(), 59);
  std::uint64_t k = 0;
  int replicated = 0, pipelined = 0, budget_binds = 0, infeasible = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t L = 1 + rng.below(k++, 8), W = 1 + rng.below(k++, 4);
    std::vector<bal::layer_profile> layers(L);
    double model_bytes = 0;
    for (auto& l : layers) {
      l = {rng.uniform(k++, 0, 100), rng.uniform(k++, 0, 50), rng.uniform(k++, 0, 20)};
      model_bytes += 12 * l.parameters + 4 * l.activation_bytes_per_sample;
    }
    std::vector<bal::worker_profile> workers(W);
    // A third of the instances take small integer times: zeros and ties, where a cap is hit
    // by several stages at once.
    const bool coarse = rng.below(k++, 3) == 0;
    for (auto& w : workers) {
      const double slow = coarse ? 1 : rng.uniform(k++, 0.25, 4.0);
      for (std::size_t l = 0; l < L; ++l) {
        w.forward_s_per_sample.push_back(coarse ? double(rng.below(k++, 3))
                                                : slow * rng.uniform(k++, 0.0, 1.0));
        w.backward_s_per_sample.push_back(coarse ? double(rng.below(k++, 3))
                                                 : slow * rng.uniform(k++, 0.0, 2.0));
      }
      // From half the model's bytes with one 4-row micro-batch in flight (binds) to none.
      w.memory_bytes = rng.below(k++, 4) == 0 ? std::numeric_limits<double>::infinity()
                                              : model_bytes * rng.uniform(k++, 0.5, 2.0);
    }
    const bal::link_profile link{rng.uniform(k++, 0, 0.5), rng.uniform(k++, 20, 2000)};
    bal::pipeline_plan_config c{.global_batch = 8};
    const std::vector<std::vector<std::size_t>> ms{{}, {1, 2}, {4, 8}, {2, 8}};
    c.micro_batches = ms[rng.below(k++, ms.size())];
    c.order = static_cast<bal::worker_order>(rng.below(k++, 3));
    c.schedule = rng.below(k++, 2) ? bal::pipeline_schedule_kind::gpipe
                                   : bal::pipeline_schedule_kind::one_f_one_b;
    c.replication = rng.below(k++, 4) != 0;
    c.stash_weights = rng.below(k++, 4) == 0;
    const auto dp = bal::plan_pipeline(layers, workers, link, c);
    const auto oracle = bal::plan_pipeline_exhaustive(layers, workers, link, c);
    BOOST_TEST_REQUIRE(dp.has_value() == oracle.has_value(), "trial " << trial);
    if (!oracle) {
      ++infeasible;
      continue;
    }
    BOOST_TEST(std::abs(dp->predicted_step_s - oracle->predicted_step_s) <=
                   1e-9 * oracle->predicted_step_s,
               "trial " << trial << ": DP " << dp->predicted_step_s << ", oracle "
                        << oracle->predicted_step_s);
    BOOST_CHECK_NO_THROW(bal::check_plan(*dp, layers, workers, link, c));
    pipelined += oracle->stages.size() > 1;
    replicated += std::any_of(oracle->stages.begin(), oracle->stages.end(),
                              [](const auto& s) { return s.workers.size() > 1; });
    auto unbounded = workers;
    for (auto& w : unbounded) w.memory_bytes = std::numeric_limits<double>::infinity();
    budget_binds +=
        bal::plan_pipeline(layers, unbounded, link, c)->predicted_step_s < oracle->predicted_step_s;
  }
  BOOST_TEST_MESSAGE("pipelined " << pipelined << ", replicated " << replicated << ", budget binds "
                                  << budget_binds << ", infeasible " << infeasible);
  BOOST_TEST(pipelined >= 20);
  BOOST_TEST(replicated >= 20);
  BOOST_TEST(budget_binds >= 20);
  BOOST_TEST(infeasible >= 5);
}

BOOST_AUTO_TEST_CASE(cost_model_recovers_the_cost_function_and_picks_the_true_optimum) {
  // A known streaming cost: T(P, K) = c · (1, W/P, P, K, W/K).
  const double work = 1000;
  const std::array<double, 5> truth{0.5, 2.0, 3.0, 0.05, 0.8};
  const bal::streaming_features phi{work};
  auto cost = [&](const bal::stream_config& c) {
    const auto f = phi(c);
    double s = 0;
    for (std::size_t i = 0; i < 5; ++i) s += truth[i] * f[i];
    return s;
  };
  std::vector<bal::stream_config> space;
  for (std::size_t p = 1; p <= 32; ++p) {
    for (std::size_t t = 1; t <= 256; t *= 2) space.push_back({p, t});
  }
  const bal::stream_config optimum = *std::min_element(
      space.begin(), space.end(),
      [&](const auto& a, const auto& b) { return cost(a) < cost(b); });

  const hg::counter_rng rng(hg_test::seed(), 53);
  for (double noise : {0.0, 0.01}) {
    bal::cost_model<bal::stream_config, bal::streaming_features> m(phi);
    for (std::uint64_t i = 0; i < 24; ++i) {  // 24 profiled of 288 configurations
      const auto& c = space[rng.below(3 * i, space.size())];
      m.observe(c, cost(c) * (1 + noise * rng.uniform(3 * i + 1, -1.0, 1.0)));
    }
    m.fit();
    const auto chosen = m.best(space);
    if (noise == 0.0) {
      for (std::size_t i = 0; i < 5; ++i) {
        BOOST_TEST(std::abs(m.coefficients()[i] - truth[i]) <= 1e-8 * std::max(1.0, truth[i]));
      }
      BOOST_TEST((chosen == optimum));
    } else {
      // 1 % noise: the chosen configuration is within 3 % of the true optimum's cost.
      BOOST_TEST(cost(chosen) <= cost(optimum) * 1.03);
    }
    BOOST_TEST_MESSAGE("cost model (noise " << noise << "): picked P=" << chosen.partitions
                                            << " K=" << chosen.tasks << ", optimum P="
                                            << optimum.partitions << " K=" << optimum.tasks);
  }
}

BOOST_AUTO_TEST_SUITE_END()
