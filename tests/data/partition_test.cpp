#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/data/partition.hpp"
#include "heterograd/data/sampler.hpp"
#include "hg_test.hpp"

namespace hg = heterograd;
namespace hd = heterograd::data;

namespace {
std::vector<std::int32_t> balanced_labels(std::size_t n, std::size_t classes) {
  std::vector<std::int32_t> y(n);
  for (std::size_t i = 0; i < n; ++i) y[i] = static_cast<std::int32_t>(i % classes);
  return y;
}
// Every index appears at most once across shards.
bool disjoint(const hd::partition& p) {
  std::set<std::size_t> seen;
  for (const auto& s : p)
    for (auto i : s)
      if (!seen.insert(i).second) return false;
  return true;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(partition)

BOOST_AUTO_TEST_CASE(iid_partition_covers_every_sample_once_in_near_equal_shards) {
  const auto p = hd::partition_iid(1003, 10, hg_test::seed());
  std::size_t total = 0;
  for (const auto& s : p) {
    BOOST_TEST((s.size() == 100u || s.size() == 101u));
    total += s.size();
  }
  BOOST_TEST(total == 1003u);
  BOOST_TEST(disjoint(p));
  BOOST_TEST((p == hd::partition_iid(1003, 10, hg_test::seed())));
  BOOST_TEST((p != hd::partition_iid(1003, 10, hg_test::seed() + 1)));
  BOOST_CHECK_THROW(hd::partition_iid(5, 10, 1), std::invalid_argument);
  BOOST_CHECK_THROW(hd::partition_iid(5, 0, 1), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(dirichlet_draws_have_the_theoretical_mean_and_concentration) {
  // E[p_k] = 1/K; Var[p_k] = (K-1) / (K^2 (K alpha + 1)).
  const std::size_t K = 10, draws = 4000;
  for (double alpha : {0.1, 1.0, 10.0}) {
    double m = 0, m2 = 0;
    for (std::size_t s = 0; s < draws; ++s) {
      const auto p = hd::dirichlet_draw(K, alpha, hg_test::seed(), s);
      BOOST_REQUIRE(std::abs(std::accumulate(p.begin(), p.end(), 0.0) - 1.0) < 1e-12);
      m += p[0];
      m2 += p[0] * p[0];
    }
    m /= draws;
    const double var = m2 / draws - m * m;
    const double var_th = (K - 1.0) / (K * K * (K * alpha + 1.0));
    BOOST_TEST(std::abs(m - 1.0 / K) < 5 * std::sqrt(var_th / draws), "alpha " << alpha);
    BOOST_TEST(std::abs(var - var_th) < 0.15 * var_th, "alpha " << alpha);
  }
}

BOOST_AUTO_TEST_CASE(dirichlet_partition_has_equal_shards_and_skews_labels_more_for_small_alpha) {
  const std::size_t K = 10, n = 6000, workers = 20;
  const auto y = balanced_labels(n + 7, K);
  auto skew = [&](double alpha) {
    const auto p = hd::partition_dirichlet(y, K, workers, alpha, hg_test::seed());
    BOOST_TEST(disjoint(p));
    double mean_max_share = 0;
    for (const auto& s : p) {
      BOOST_TEST(s.size() == (n + 7) / workers);  // equal sizes, remainder trimmed
      std::vector<int> c(K, 0);
      for (auto i : s) c[static_cast<std::size_t>(y[i])]++;
      mean_max_share += *std::max_element(c.begin(), c.end()) / double(s.size());
    }
    return mean_max_share / workers;
  };
  const double s01 = skew(0.1), s100 = skew(100.0);
  // Near-IID shards have a dominant-label share near 1/K; alpha = 0.1 concentrates on few labels.
  BOOST_TEST(s100 < 0.2);
  BOOST_TEST(s01 > 0.5);
  BOOST_CHECK_THROW(hd::partition_dirichlet(y, K, workers, 0.0, 1), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(k_labels_partition_gives_each_worker_exactly_k_labels) {
  const std::size_t K = 10;
  const auto y = balanced_labels(5000, K);
  for (std::size_t k : {1u, 2u, 3u}) {
    const auto p = hd::partition_k_labels(y, K, 10, k, hg_test::seed());
    BOOST_TEST(disjoint(p));
    std::size_t total = 0;
    for (const auto& s : p) {
      std::set<std::int32_t> labels;
      for (auto i : s) labels.insert(y[i]);
      BOOST_TEST(labels.size() == k);
      total += s.size();
    }
    BOOST_TEST(total == y.size());  // 10 workers * k >= 10 classes: every sample is owned
  }
  BOOST_CHECK_THROW(hd::partition_k_labels(y, K, 10, 11, 1), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(injection_replaces_a_beta_fraction_of_batches_of_an_alpha_fraction_of_workers) {
  const std::size_t K = 10;
  const auto y = balanced_labels(2000, K);
  const auto p = hd::partition_k_labels(y, K, 8, 2, hg_test::seed());
  const auto plan = hd::plan_injection(p, y, K, 0.25, 0.25, hg_test::seed());
  BOOST_TEST(std::count(plan.injects.begin(), plan.injects.end(), true) == 2);
  for (std::size_t w = 0; w < p.size(); ++w) {
    if (!plan.injects[w]) continue;
    std::set<std::int32_t> own;
    for (auto i : p[w]) own.insert(y[i]);
    hd::batch_sampler s(p[w], hg_test::seed(), w);
    s.inject(plan.foreign[w], plan.beta);
    const auto b = s.next(32);
    int foreign = 0;
    for (auto i : b) foreign += own.count(y[i]) == 0;
    BOOST_TEST(foreign == 8);  // round(0.25 * 32)
  }
  BOOST_CHECK_THROW(hd::plan_injection(p, y, K, 1.5, 0.25, 1), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(batch_sampler_visits_every_shard_sample_once_per_epoch_with_any_batch_sizes) {
  std::vector<std::size_t> shard(97);
  std::iota(shard.begin(), shard.end(), 1000);
  hd::batch_sampler s(shard, hg_test::seed(), 3);
  std::vector<std::size_t> seen;
  const std::size_t sizes[] = {5, 17, 1, 32, 42};
  std::size_t k = 0;
  while (seen.size() < 97) {
    const std::size_t b = std::min(sizes[k++ % 5], 97 - seen.size());
    const auto batch = s.next(b);
    seen.insert(seen.end(), batch.begin(), batch.end());
  }
  std::sort(seen.begin(), seen.end());
  BOOST_TEST(seen == shard);
  BOOST_TEST(s.epoch() == 0u);
  const auto copy = s;  // a value: the copy continues identically
  auto s2 = copy;
  BOOST_TEST(s.next(10) == s2.next(10));
  BOOST_TEST(s.epoch() == 1u);
  BOOST_CHECK_THROW(s.next(0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(high_loss_selection_returns_the_top_scores_of_its_pool) {
  const std::size_t n = 1000;
  hd::loss_score_table t(n), other(n);
  std::vector<std::size_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::vector<float> loss(n);
  for (std::size_t i = 0; i < n; ++i) loss[i] = static_cast<float>(i);
  t.record(idx, loss);
  std::vector<float> lower(n);
  for (std::size_t i = 0; i < n; ++i) lower[i] = i % 2 ? static_cast<float>(i) - 0.5f : 1e9f;
  other.record(idx, lower);
  t.merge_min(other);
  BOOST_TEST(t.score[3] == 2.5f);
  BOOST_TEST(t.score[4] == 4.0f);
  const hg::counter_rng rng(hg_test::seed());
  const auto sel = hd::select_high_loss(idx, t, 25, 4, rng, 0);
  BOOST_TEST(sel.size() == 25u);
  // The pool is the first 100 of the same shuffle; the selection is its 25 highest scores.
  std::vector<std::size_t> pool = idx;
  rng.shuffle(pool.begin(), pool.end(), 0);
  pool.resize(100);
  std::vector<float> pool_scores;
  for (auto i : pool) pool_scores.push_back(t.score[i]);
  std::sort(pool_scores.rbegin(), pool_scores.rend());
  float min_sel = 1e30f;
  for (auto i : sel) min_sel = std::min(min_sel, t.score[i]);
  BOOST_TEST(min_sel == pool_scores[24]);
  // Unseen samples (+inf) are preferred: the first draws of a run explore.
  hd::loss_score_table fresh(n);
  BOOST_TEST(std::isinf(fresh.score[0]));
}

BOOST_AUTO_TEST_SUITE_END()
