#pragma once
// Splitting a dataset over workers, deterministically from a seed:
//   iid            one global permutation cut into near-equal shards;
//   dirichlet      label skew: worker w draws class proportions p_w ~ Dir(alpha) and fills an
//                  equal-size shard (N / workers, the remainder trimmed) by drawing classes from
//                  p_w (renormalised over classes not yet exhausted) -- the equal-size variant
//                  used in the Ringleader experiments (#13);
//   k_labels       each worker owns k labels; each label's samples are split among its owners;
//   injection      SelSync's non-IID remedy (#9): a fraction alpha of workers replace a fraction
//                  beta of every batch with samples of labels they do not own.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::data {

/// partition[w] = the sample indices of worker w.
using partition = std::vector<std::vector<std::size_t>>;

/// IID: a permutation of 0..n-1 cut into `workers` shards whose sizes differ by at most one.
inline partition partition_iid(std::size_t n, std::size_t workers, std::uint64_t seed) {
  require_positive("partition_iid.workers", workers);
  require(n >= workers, "partition_iid.n", n, "must be >= workers (every worker needs data)");
  std::vector<std::size_t> perm(n);
  counter_rng(seed, 0x11d).permutation(perm.begin(), perm.end());
  partition p(workers);
  for (std::size_t w = 0, begin = 0; w < workers; ++w) {
    const std::size_t size = n / workers + (w < n % workers ? 1 : 0);
    p[w].assign(perm.begin() + static_cast<std::ptrdiff_t>(begin),
                perm.begin() + static_cast<std::ptrdiff_t>(begin + size));
    begin += size;
  }
  return p;
}

namespace detail {
/// Gamma(shape, 1) by Marsaglia and Tsang (2000); shape < 1 through Gamma(shape+1)*U^(1/shape).
/// Consumes draws from `rng` starting at `counter`, which it advances.
inline double gamma_draw(const counter_rng& rng, double shape, std::uint64_t& counter) {
  double boost = 1.0;
  if (shape < 1.0) {
    boost = std::pow(rng.uniform(counter++) + 0x1.0p-54, 1.0 / shape);
    shape += 1.0;
  }
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double z = rng.normal(counter++);
    const double v0 = 1.0 + c * z;
    if (v0 <= 0) continue;
    const double v = v0 * v0 * v0;
    const double u = rng.uniform(counter++);
    if (std::log(u + 0x1.0p-54) < 0.5 * z * z + d - d * v + d * std::log(v)) return d * v * boost;
  }
}
}  // namespace detail

/// Class proportions p ~ Dirichlet(alpha, ..., alpha) over `classes` (stream `stream`).
inline std::vector<double> dirichlet_draw(std::size_t classes, double alpha, std::uint64_t seed,
                                          std::uint64_t stream) {
  require_positive("dirichlet.alpha", alpha);
  const counter_rng rng(seed, stream);
  std::uint64_t counter = 0;
  std::vector<double> p(classes);
  double sum = 0;
  for (auto& x : p) sum += (x = detail::gamma_draw(rng, alpha, counter));
  if (!(sum > 0)) {  // every draw underflowed (tiny alpha): all mass on one class
    std::fill(p.begin(), p.end(), 0.0);
    p[rng.below(counter, classes)] = 1.0;
    return p;
  }
  for (auto& x : p) x /= sum;
  return p;
}

/// Dirichlet(alpha) label skew with equal-size shards of floor(N / workers) samples.
inline partition partition_dirichlet(span<const std::int32_t> labels, std::size_t classes,
                                     std::size_t workers, double alpha, std::uint64_t seed) {
  require_positive("partition_dirichlet.workers", workers);
  require_positive("partition_dirichlet.classes", classes);
  require_positive("partition_dirichlet.alpha", alpha);
  require(labels.size() >= workers, "partition_dirichlet.labels.size", labels.size(),
          "must be >= workers");
  // Per-class pools, each shuffled.
  std::vector<std::vector<std::size_t>> pool(classes);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    require(labels[i] >= 0 && static_cast<std::size_t>(labels[i]) < classes,
            "partition_dirichlet.labels[i]", labels[i], "must be in [0, classes)");
    pool[static_cast<std::size_t>(labels[i])].push_back(i);
  }
  for (std::size_t c = 0; c < classes; ++c)
    counter_rng(seed, 0xd1c0 + c).shuffle(pool[c].begin(), pool[c].end());
  std::vector<std::size_t> next(classes, 0);
  const std::size_t shard = labels.size() / workers;
  const counter_rng pick(seed, 0xd1c1);
  partition p(workers);
  std::uint64_t counter = 0;
  for (std::size_t w = 0; w < workers; ++w) {
    std::vector<double> prop = dirichlet_draw(classes, alpha, seed, 0xd100000 + w);
    p[w].reserve(shard);
    while (p[w].size() < shard) {
      double mass = 0;
      for (std::size_t c = 0; c < classes; ++c)
        if (next[c] < pool[c].size()) mass += prop[c];
      std::size_t c = 0;
      if (mass > 0) {
        double u = pick.uniform(counter++) * mass;
        for (c = 0; c < classes; ++c) {
          if (next[c] >= pool[c].size()) continue;
          if (u < prop[c]) break;
          u -= prop[c];
        }
        if (c == classes) {  // rounding at the top end: the last non-empty class
          for (c = classes; c-- > 0;)
            if (next[c] < pool[c].size()) break;
        }
      } else {
        // Every class this worker wants is exhausted: take from the fullest remaining class.
        std::size_t best = 0;
        for (std::size_t k = 0; k < classes; ++k)
          if (pool[k].size() - next[k] > pool[best].size() - next[best]) best = k;
        c = best;
      }
      p[w].push_back(pool[c][next[c]++]);
    }
  }
  return p;
}

/// Each worker owns k labels (a shuffled round-robin so that every label has an owner when
/// workers * k >= classes); each label's samples are split evenly among its owners.
inline partition partition_k_labels(span<const std::int32_t> labels, std::size_t classes,
                                    std::size_t workers, std::size_t k, std::uint64_t seed) {
  require_positive("partition_k_labels.workers", workers);
  require(k >= 1 && k <= classes, "partition_k_labels.k", k, "must be in [1, classes]");
  std::vector<std::size_t> order(classes);
  counter_rng(seed, 0x4ab).permutation(order.begin(), order.end());
  std::vector<std::vector<std::size_t>> owners(classes);
  for (std::size_t w = 0, slot = 0; w < workers; ++w)
    for (std::size_t j = 0; j < k; ++j, ++slot) owners[order[slot % classes]].push_back(w);
  std::vector<std::vector<std::size_t>> pool(classes);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    require(labels[i] >= 0 && static_cast<std::size_t>(labels[i]) < classes,
            "partition_k_labels.labels[i]", labels[i], "must be in [0, classes)");
    pool[static_cast<std::size_t>(labels[i])].push_back(i);
  }
  partition p(workers);
  for (std::size_t c = 0; c < classes; ++c) {
    if (owners[c].empty()) continue;
    counter_rng(seed, 0x4ac + c).shuffle(pool[c].begin(), pool[c].end());
    for (std::size_t j = 0; j < pool[c].size(); ++j)
      p[owners[c][j % owners[c].size()]].push_back(pool[c][j]);
  }
  return p;
}

/// SelSync-style data injection (#9): which workers inject, and for each of them the pool of
/// samples whose labels it does not own. A sampler replaces round(beta * b) of each batch of an
/// injecting worker with draws from its pool.
struct injection_plan {
  std::vector<bool> injects;                     // per worker
  std::vector<std::vector<std::size_t>> foreign;  // per worker: samples of labels it lacks
  double beta = 0.0;
};

inline injection_plan plan_injection(const partition& p, span<const std::int32_t> labels,
                                     std::size_t classes, double alpha, double beta,
                                     std::uint64_t seed) {
  require_in_range("injection.alpha", alpha, 0.0, 1.0);
  require_in_range("injection.beta", beta, 0.0, 1.0);
  const std::size_t workers = p.size();
  injection_plan plan;
  plan.beta = beta;
  plan.injects.assign(workers, false);
  plan.foreign.resize(workers);
  std::vector<std::size_t> order(workers);
  counter_rng(seed, 0x1a7).permutation(order.begin(), order.end());
  const auto chosen = static_cast<std::size_t>(std::llround(alpha * static_cast<double>(workers)));
  for (std::size_t j = 0; j < chosen; ++j) plan.injects[order[j]] = true;
  for (std::size_t w = 0; w < workers; ++w) {
    if (!plan.injects[w]) continue;
    std::vector<bool> owns(classes, false);
    for (std::size_t i : p[w]) owns[static_cast<std::size_t>(labels[i])] = true;
    for (std::size_t i = 0; i < labels.size(); ++i)
      if (!owns[static_cast<std::size_t>(labels[i])]) plan.foreign[w].push_back(i);
  }
  return plan;
}

}  // namespace heterograd::data
