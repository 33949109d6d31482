#pragma once
// Where each rank's shard of a flat parameter vector lies: uneven fractions over buckets.
//
// The vector is cut into buckets (layers, or FSDP's flat-parameter units) of given sizes, in
// order. Each bucket is split across the ranks in rank order, rank r taking a contiguous piece
// of about f_r of it: the cut before rank r is floor(F_r · S / g) · g with F_r = (f_0 + ... +
// f_{r-1}) / Σf, S the bucket's size and g the granularity; a rank of fraction 0 (and every
// rank after the last positive one's cut at S) gets nothing. Rank r's shard is its pieces of
// every bucket, concatenated in bucket order. Every rank computes the same cuts from the same
// config (the arithmetic is fixed), and a layout travels in checkpoints to say which elements
// a shard holds.
//
// Cephalo (Guo et al., ICS'25) chooses the fractions from each device's free memory
// (balance/cephalo.hpp: from_plan below); FSDP (Zhao et al., VLDB'23) and ZeRO (Rajbhandari et
// al., SC'20) split every unit evenly, the case of equal fractions.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "heterograd/balance/cephalo.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::algorithms::sharded {

/// What a user sets: the shard fractions and the buckets.
struct layout_config {
  std::vector<double> fractions;          ///< per rank: finite, >= 0, summing to 1 (within 1e-9)
  std::vector<std::size_t> bucket_sizes;  ///< elements per bucket, in order; each > 0
  std::size_t granularity = 1;            ///< cuts inside a bucket at multiples of this (> 0)
  friend bool operator==(const layout_config&, const layout_config&) = default;
  template <class Archive>
  void serialize(Archive& ar) {
    ar(fractions, bucket_sizes, granularity);
  }
};

/// One contiguous run of a rank's shard: `count` elements at `global` in the flat vector and
/// at `local` in the shard.
struct segment {
  std::size_t global = 0, local = 0, count = 0;
};

/// The cuts of every bucket (see the header). A value: copyable, comparable, archivable.
class layout {
 public:
  layout() = default;
  /// Validates `c` (std::invalid_argument naming the field, value and rule) and cuts.
  explicit layout(layout_config c) : c_(std::move(c)) {
    validate();
    cut();
  }

  /// The layout of a Cephalo plan: fraction u_d / U for device d (rank d).
  static layout from_plan(const balance::cephalo_plan& plan, std::vector<std::size_t> bucket_sizes,
                          std::size_t granularity = 1) {
    std::size_t total = 0;
    for (const auto& d : plan.devices) total += d.shard_units;
    require(total > 0, "from_plan.plan.devices[].shard_units (sum)", total, "must be > 0");
    layout_config c{{}, std::move(bucket_sizes), granularity};
    for (const auto& d : plan.devices)
      c.fractions.push_back(static_cast<double>(d.shard_units) / static_cast<double>(total));
    return layout(std::move(c));
  }

  const layout_config& config() const { return c_; }
  int ranks() const { return static_cast<int>(c_.fractions.size()); }
  std::size_t buckets() const { return c_.bucket_sizes.size(); }
  /// Elements in all buckets.
  std::size_t size() const { return bucket_off_.empty() ? 0 : bucket_off_.back(); }
  std::size_t bucket_size(std::size_t b) const { return c_.bucket_sizes.at(b); }
  std::size_t bucket_offset(std::size_t b) const { return bucket_off_.at(b); }
  std::size_t largest_bucket() const {
    return c_.bucket_sizes.empty() ? 0 : *std::max_element(c_.bucket_sizes.begin(), c_.bucket_sizes.end());
  }
  /// Rank r's piece of bucket b: its offset in the bucket and its element count.
  std::size_t piece_offset(std::size_t b, int r) const { return cuts_.at(b).at(index(r)); }
  std::size_t piece_count(std::size_t b, int r) const {
    return cuts_.at(b).at(index(r) + 1) - cuts_[b][index(r)];
  }
  /// Where rank r's piece of bucket b starts in its shard.
  std::size_t shard_offset(std::size_t b, int r) const { return local_.at(b).at(index(r)); }
  /// Elements rank r holds.
  std::size_t shard_size(int r) const { return shard_size_.at(index(r)); }
  std::size_t largest_piece() const {
    std::size_t m = 0;
    for (std::size_t b = 0; b < buckets(); ++b)
      for (int r = 0; r < ranks(); ++r) m = std::max(m, piece_count(b, r));
    return m;
  }
  /// The piece counts of bucket b, rank by rank (what allgather_v / reduce_scatter_v take).
  std::vector<std::size_t> counts(std::size_t b) const {
    std::vector<std::size_t> v(static_cast<std::size_t>(ranks()));
    for (int r = 0; r < ranks(); ++r) v[index(r)] = piece_count(b, r);
    return v;
  }
  /// Rank r's non-empty pieces, in bucket order.
  std::vector<segment> segments(int r) const {
    std::vector<segment> s;
    for (std::size_t b = 0; b < buckets(); ++b)
      if (piece_count(b, r) > 0)
        s.push_back({bucket_off_[b] + piece_offset(b, r), shard_offset(b, r), piece_count(b, r)});
    return s;
  }

  friend bool operator==(const layout& a, const layout& b) { return a.c_ == b.c_; }

  /// Checkpointing (core/archive.hpp): the config; reading validates it and cuts again.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(c_);
    if constexpr (!Archive::saving) *this = layout(c_);
  }

 private:
  std::size_t index(int r) const {
    require(r >= 0 && r < ranks(), "layout.rank", r,
            "must be in [0, " + std::to_string(ranks()) + ")");
    return static_cast<std::size_t>(r);
  }

  void validate() const {
    require(!c_.fractions.empty(), "layout.fractions (size)", 0, "must name at least one rank");
    double sum = 0.0;
    for (std::size_t r = 0; r < c_.fractions.size(); ++r) {
      const double f = c_.fractions[r];
      require(std::isfinite(f) && f >= 0.0, "layout.fractions[" + std::to_string(r) + "]", f,
              "must be finite and >= 0");
      sum += f;
    }
    require(std::abs(sum - 1.0) <= 1e-9, "layout.fractions (sum)", sum,
            "must be 1 (within 1e-9)");
    require(!c_.bucket_sizes.empty(), "layout.bucket_sizes (size)", 0,
            "must name at least one bucket");
    for (std::size_t b = 0; b < c_.bucket_sizes.size(); ++b)
      require(c_.bucket_sizes[b] > 0, "layout.bucket_sizes[" + std::to_string(b) + "]", 0,
              "must be > 0");
    std::size_t total = 0;
    for (auto s : c_.bucket_sizes) {
      require(s <= (std::size_t{1} << 52) - total, "layout.bucket_sizes (sum)", total,
              "must be at most 2^52 elements (cuts are computed in double)");
      total += s;
    }
    require(c_.granularity > 0, "layout.granularity", c_.granularity, "must be > 0");
  }

  void cut() {
    const std::size_t n = c_.fractions.size();
    std::vector<double> prefix(n + 1, 0.0);
    for (std::size_t r = 0; r < n; ++r) prefix[r + 1] = prefix[r] + c_.fractions[r];
    std::size_t last = 0;  // the last rank with a positive fraction
    for (std::size_t r = 0; r < n; ++r)
      if (c_.fractions[r] > 0.0) last = r;
    bucket_off_.assign(1, 0);
    cuts_.clear();
    for (const std::size_t s : c_.bucket_sizes) {
      std::vector<std::size_t> c(n + 1, 0);
      for (std::size_t r = 1; r <= n; ++r) {
        const double at = std::floor(prefix[r] / prefix[n] * static_cast<double>(s));
        std::size_t x = static_cast<std::size_t>(std::max(0.0, at));
        x = x / c_.granularity * c_.granularity;
        if (r > last) x = s;                      // trailing ranks of fraction 0 get nothing
        if (c_.fractions[r - 1] == 0.0) x = c[r - 1];  // a rank of fraction 0 gets nothing
        c[r] = std::clamp(x, c[r - 1], s);
      }
      cuts_.push_back(std::move(c));
      bucket_off_.push_back(bucket_off_.back() + s);
    }
    local_.assign(cuts_.size(), std::vector<std::size_t>(n, 0));
    shard_size_.assign(n, 0);
    for (std::size_t b = 0; b < cuts_.size(); ++b) {
      for (std::size_t r = 0; r < n; ++r) {
        local_[b][r] = shard_size_[r];
        shard_size_[r] += cuts_[b][r + 1] - cuts_[b][r];
      }
    }
  }

  layout_config c_{};
  std::vector<std::vector<std::size_t>> cuts_;   // per bucket: n + 1 cuts
  std::vector<std::vector<std::size_t>> local_;  // per bucket: each rank's shard offset
  std::vector<std::size_t> bucket_off_;          // buckets + 1 offsets
  std::vector<std::size_t> shard_size_;
};

}  // namespace heterograd::algorithms::sharded
