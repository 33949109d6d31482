#pragma once
// Biased local SGD's data plan (Lim et al., arXiv 2508.08540, #1).
//
// Slow and fast workers run different numbers of local steps per round (H_cpu vs H_gpu, with
// local_sgd_config::local_steps) and their models are averaged uniformly (averaging::uniform),
// which over-weights the slow workers on purpose (bias 2). Bias 1 is in the data: every
// worker records the loss of each sample it trains on; every `shuffle_rounds` rounds (by default
// the authors' N / (b * sum_i H_i), rounded down: one pass over the data between redraws) the
// per-worker score tables are merged by an element-wise MIN (a MIN-allreduce), a pool of
// ratio * S_slow samples (r = 4) is drawn uniformly without replacement, and its S_slow
// highest-loss samples (shuffled) go to the slow workers, S_slow being the number of samples
// the slow workers consume until the next redraw; fast workers take shards of a fresh random
// permutation. Unbiased mode: every worker takes a shard of one global permutation. Scores
// start at +inf, so unseen samples come first. [#1: follows the authors' code.]
//
// The plan is a value: the same inputs give the same assignment on every runtime. A worker's
// gradient oracle asks batch(w, k) for the sample indices of its k-th step since the redraw.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/data/sampler.hpp"

namespace heterograd::algorithms::sync {

struct biased_config {
  std::vector<char> slow{};                 ///< per worker: 1 for a slow (CPU) worker
  std::vector<std::size_t> local_steps{};   ///< per worker: H_i
  std::size_t batch = 64;                   ///< b, per worker and step
  std::size_t shuffle_rounds = 0;           ///< rounds between redraws (0: one pass, as theirs)
  std::size_t ratio = 4;                    ///< r: pool size / S_slow
  bool biased = true;                       ///< false: unbiased shards of one permutation
  std::uint64_t seed = 0;

  static constexpr auto description() {
    return describe(
        "biased", describe_field("local_steps", &biased_config::local_steps, "per-worker H_i", at_least(1)),
        describe_field("ratio", &biased_config::ratio, "r: candidate pool / slow samples", above(0)),
        describe_field("shuffle_rounds", &biased_config::shuffle_rounds,
                       "rounds between redraws (0: max(1, floor(N / (batch * sum of H_i))), one pass as in the "
                       "authors' code)",
                       at_least(0)),
        describe_field("biased", &biased_config::biased,
                       "loss-based top-k samples for the slow workers (false: unbiased shards)"));
  }

  /// The rounds between redraws over `samples` training samples: shuffle_rounds, or when it is
  /// 0 the authors' samples / (batch * sum_i H_i) rounded down (their feeder's shuffle_rounds),
  /// at least 1.
  std::size_t rounds_per_redraw(std::size_t samples) const {
    if (shuffle_rounds > 0) return shuffle_rounds;
    std::size_t per_round = 0;
    for (const auto h : local_steps) per_round += h * batch;
    return per_round == 0 ? 1 : std::max<std::size_t>(1, samples / per_round);
  }

  void validate(std::size_t samples) const {
    require(!slow.empty(), "biased.slow (count)", slow.size(), "must name at least one worker");
    require_same_size("biased.local_steps", local_steps.size(), "biased.slow", slow.size());
    require_positive("biased.batch", batch);
    validate_fields(*this);
    std::size_t slow_total = 0, per_worker_max = 0;
    for (std::size_t i = 0; i < slow.size(); ++i) {
      const std::size_t s = rounds_per_redraw(samples) * local_steps[i] * batch;
      per_worker_max = std::max(per_worker_max, s);
      if (slow[i]) slow_total += s;
    }
    require(slow_total <= samples, "biased (slow workers' samples per redraw)", slow_total,
            "must be <= the number of samples");
    require(per_worker_max <= samples, "biased (a worker's samples per redraw)", per_worker_max,
            "must be <= the number of samples");
  }
};

class biased_data_plan {
 public:
  biased_data_plan(std::size_t samples, biased_config cfg)
      : n_(samples), cfg_(resolved(samples, std::move(cfg))),
        tables_(cfg_.slow.size(), data::loss_score_table(samples)), merged_(samples),
        assigned_(cfg_.slow.size()) {
    redraw(0);
  }

  std::size_t workers() const { return cfg_.slow.size(); }
  /// The configuration, its shuffle_rounds resolved (never 0).
  const biased_config& config() const { return cfg_; }

  /// Worker w saw `losses` for samples `indices` (its own table; merged at the next redraw).
  void record(std::size_t w, span<const std::size_t> indices, span<const float> losses) {
    require(w < workers(), "worker", w, "must be < workers");
    tables_[w].record(indices, losses);
  }

  /// MIN-merges the workers' tables and assigns the samples of redraw `period` (call it every
  /// config().shuffle_rounds rounds with period = round / shuffle_rounds).
  void redraw(std::uint64_t period) {
    for (const auto& t : tables_) merged_.merge_min(t);
    for (auto& t : tables_) t = merged_;  // every worker holds the allreduced table
    const counter_rng rng(cfg_.seed, 0xb1a5ull + period);
    std::vector<std::size_t> perm(n_);
    rng.permutation(perm.begin(), perm.end());
    std::size_t pos = 0;
    std::size_t slow_total = 0;
    for (std::size_t w = 0; w < workers(); ++w)
      if (cfg_.slow[w]) slow_total += per_redraw(w);
    std::vector<std::size_t> hot;
    if (cfg_.biased && slow_total > 0) {
      std::vector<std::size_t> all(n_);
      for (std::size_t i = 0; i < n_; ++i) all[i] = i;
      hot = data::select_high_loss(span<const std::size_t>(all), merged_, slow_total, cfg_.ratio,
                                   rng.substream(1), 0);
    }
    std::size_t hot_pos = 0;
    for (std::size_t w = 0; w < workers(); ++w) {
      const std::size_t s = per_redraw(w);
      auto& a = assigned_[w];
      a.clear();
      if (cfg_.biased && cfg_.slow[w]) {
        a.assign(hot.begin() + static_cast<std::ptrdiff_t>(hot_pos),
                 hot.begin() + static_cast<std::ptrdiff_t>(hot_pos + s));
        hot_pos += s;
      } else {
        for (std::size_t k = 0; k < s; ++k) a.push_back(perm[(pos + k) % n_]);
        pos = (pos + s) % n_;
      }
    }
  }

  /// The sample indices of worker w's k-th step since the last redraw.
  span<const std::size_t> batch(std::size_t w, std::size_t k) const {
    const auto& a = assigned_.at(w);
    const std::size_t first = (k * cfg_.batch) % a.size();
    return span<const std::size_t>(a.data() + first, cfg_.batch);
  }
  /// Everything assigned to worker w for this redraw.
  const std::vector<std::size_t>& assigned(std::size_t w) const { return assigned_.at(w); }
  const data::loss_score_table& scores() const { return merged_; }

  /// How biased the current assignment is: the mean merged score of the slow workers' samples
  /// over the mean over every seen sample (first; 0 when either has no finite score), and the
  /// share of the slow workers' samples never seen (+inf; second). About 1 and small when the
  /// draw is unbiased; the top-k of an r-fold pool is above 1.
  std::pair<double, double> slow_score_ratio() const {
    double all = 0, slow = 0;
    std::size_t seen = 0, slow_seen = 0, slow_total = 0;
    for (const float v : merged_.score)
      if (std::isfinite(v)) all += v, ++seen;
    for (std::size_t w = 0; w < workers(); ++w) {
      if (!cfg_.slow[w]) continue;
      for (const std::size_t i : assigned_[w]) {
        ++slow_total;
        if (std::isfinite(merged_.score[i])) slow += merged_.score[i], ++slow_seen;
      }
    }
    const double unseen =
        slow_total == 0 ? 0.0 : 1.0 - static_cast<double>(slow_seen) / static_cast<double>(slow_total);
    if (seen == 0 || slow_seen == 0 || all == 0) return {0.0, unseen};
    return {(slow / static_cast<double>(slow_seen)) / (all / static_cast<double>(seen)), unseen};
  }

  friend bool operator==(const biased_data_plan& a, const biased_data_plan& b) {
    return a.tables_ == b.tables_ && a.merged_ == b.merged_ && a.assigned_ == b.assigned_;
  }

  /// Checkpointing (core/archive.hpp): every worker's score table, the merged one and the
  /// current assignment, in a fixed order; `ar(...)` writes or reads them. The redraws are
  /// pure functions of (seed, period), so nothing else is random state. The configuration
  /// is rebuilt by the caller (which also keeps the current period).
  template <class Archive>
  void serialize(Archive& ar) {
    for (auto& t : tables_) ar(t.score);
    ar(merged_.score, assigned_);
  }

 private:
  static biased_config resolved(std::size_t samples, biased_config cfg) {
    cfg.validate(samples);
    cfg.shuffle_rounds = cfg.rounds_per_redraw(samples);
    return cfg;
  }
  std::size_t per_redraw(std::size_t w) const {
    return cfg_.shuffle_rounds * cfg_.local_steps[w] * cfg_.batch;
  }

  std::size_t n_;
  biased_config cfg_;
  std::vector<data::loss_score_table> tables_;
  data::loss_score_table merged_;
  std::vector<std::vector<std::size_t>> assigned_;
};

}  // namespace heterograd::algorithms::sync
