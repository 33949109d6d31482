#pragma once
// Per-worker batch samplers. A sampler is a value (its whole state is a few integers), so a
// checkpoint or a simulator snapshot captures it; draws come from counter_rng coordinates
// (seed, worker, epoch), never from hidden generator state.
//
//   batch_sampler         walks a worker's shard in a fresh permutation each epoch; the batch
//                         size may change from call to call (load-balancing policies resize
//                         batches); optional SelSync data injection.
//   loss_score_table      biased local SGD (#1): the last observed loss of every sample
//                         (+inf until seen), merged across workers with an element-wise MIN.
//   select_high_loss      #1's biased draw: a uniform pool of ratio * count candidates without
//                         replacement, of which the `count` highest-loss ones are returned.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/data/partition.hpp"

namespace heterograd::data {

class batch_sampler {
 public:
  batch_sampler() = default;
  /// `shard`: the worker's sample indices; `worker` selects the RNG stream.
  batch_sampler(std::vector<std::size_t> shard, std::uint64_t seed, std::uint64_t worker)
      : shard_(std::move(shard)), rng_(seed, 0x5a3b1e00000000ull + worker) {
    require(!shard_.empty(), "batch_sampler.shard.size", shard_.size(), "must be > 0");
    reshuffle();
  }
  /// Enables SelSync injection: round(beta * b) of each batch come from `foreign`.
  void inject(std::vector<std::size_t> foreign, double beta) {
    require_in_range("batch_sampler.inject.beta", beta, 0.0, 1.0);
    require(beta == 0.0 || !foreign.empty(), "batch_sampler.inject.foreign.size", foreign.size(),
            "must be > 0 when beta > 0");
    foreign_ = std::move(foreign);
    beta_ = beta;
  }

  /// The next `b` sample indices (b > 0), crossing into the next epoch when the shard ends.
  std::vector<std::size_t> next(std::size_t b) {
    require_positive("batch_sampler.next.b", b);
    std::vector<std::size_t> out;
    out.reserve(b);
    const auto injected = static_cast<std::size_t>(std::llround(beta_ * static_cast<double>(b)));
    for (std::size_t k = 0; k < b - injected; ++k) {
      if (pos_ == order_.size()) {
        ++epoch_;
        reshuffle();
      }
      out.push_back(shard_[order_[pos_++]]);
    }
    for (std::size_t k = 0; k < injected; ++k)
      out.push_back(foreign_[rng_.below(0x1ull << 62 | draws_++, foreign_.size())]);
    return out;
  }

  std::size_t epoch() const { return epoch_; }
  std::size_t position() const { return pos_; }
  std::size_t shard_size() const { return shard_.size(); }

  friend bool operator==(const batch_sampler&, const batch_sampler&) = default;

 private:
  void reshuffle() {
    order_.resize(shard_.size());
    rng_.permutation(order_.begin(), order_.end(), epoch_ * shard_.size());
    pos_ = 0;
  }

  std::vector<std::size_t> shard_;
  std::vector<std::size_t> order_;
  std::vector<std::size_t> foreign_;
  counter_rng rng_;
  std::size_t epoch_ = 0;
  std::size_t pos_ = 0;
  std::uint64_t draws_ = 0;
  double beta_ = 0.0;
};

/// Per-sample loss scores for biased local SGD (#1): +inf until a sample's loss is observed.
struct loss_score_table {
  std::vector<float> score;

  explicit loss_score_table(std::size_t n = 0)
      : score(n, std::numeric_limits<float>::infinity()) {}
  void record(span<const std::size_t> indices, span<const float> losses) {
    require_same_size("loss_score_table.record.losses", losses.size(), "indices", indices.size());
    for (std::size_t k = 0; k < indices.size(); ++k) {
      require(indices[k] < score.size(), "loss_score_table.record.indices", indices[k],
              "must be < table size");
    }
    for (std::size_t k = 0; k < indices.size(); ++k) score[indices[k]] = losses[k];
  }
  /// Element-wise MIN with another worker's table (what the MIN-allreduce computes).
  void merge_min(const loss_score_table& other) {
    require_same_size("loss_score_table.merge_min.other", other.score.size(), "this table",
                      score.size());
    for (std::size_t i = 0; i < score.size(); ++i) score[i] = std::min(score[i], other.score[i]);
  }
  friend bool operator==(const loss_score_table&, const loss_score_table&) = default;
};

/// #1's biased draw: `count` indices, the highest-scoring among ratio*count candidates drawn
/// uniformly without replacement from `candidates` (all of them when fewer), in random order.
/// Ties keep candidate order, so the result is deterministic.
inline std::vector<std::size_t> select_high_loss(span<const std::size_t> candidates,
                                                 const loss_score_table& scores,
                                                 std::size_t count, std::size_t ratio,
                                                 const counter_rng& rng, std::uint64_t offset) {
  require_positive("select_high_loss.ratio", ratio);
  require(count <= candidates.size(), "select_high_loss.count", count,
          "must be <= number of candidates");
  std::vector<std::size_t> pool(candidates.begin(), candidates.end());
  rng.shuffle(pool.begin(), pool.end(), offset);
  pool.resize(std::min(pool.size(), ratio * count));
  std::stable_sort(pool.begin(), pool.end(), [&](std::size_t a, std::size_t b) {
    return scores.score.at(a) > scores.score.at(b);
  });
  pool.resize(count);
  rng.shuffle(pool.begin(), pool.end(), offset + candidates.size());
  return pool;
}

}  // namespace heterograd::data
