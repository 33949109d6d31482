#pragma once
// Locality-sensitive hash tables over the neurons of a layer (SLIDE, Chen et al., MLSys 2020,
// #11). L tables, each keyed by a K-part hash code of a vector; a neuron is stored under the
// code of its weight row, and an input retrieves the neurons stored under its own codes: the
// neurons whose weights point where the input points (large inner products), without
// computing them all.
//
//   SimHash (Charikar 2002): part k of table l is the sign bit of <a_lk, x> for a random
//     +-1 vector a_lk; code = K bits. P(collision) = 1 - angle(x, w) / pi per bit.
//   DWTA, densified winner-take-all (Chen & Shrivastava 2018; Yagnik et al. 2011 for WTA):
//     part k of table l looks at `bin_size` coordinates chosen by a random permutation and
//     takes the position of the largest; log2(bin_size) bits per part, K parts per table. A
//     bin whose coordinates are all zero (sparse inputs) borrows the next non-empty bin's
//     value (densification), so every part is defined.
//
// Buckets keep at most `bucket_capacity` neurons (0: unlimited), by reservoir sampling on a
// counter RNG (deterministic). Randomness is drawn from counter_rng(seed): the same tables on
// every run and every thread count.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::nn {

enum class lsh_family : std::uint8_t { simhash, dwta };

struct lsh_config {
  lsh_family family = lsh_family::simhash;
  std::size_t parts = 9;         ///< K: bits (SimHash) or winner codes (DWTA) per table
  std::size_t tables = 20;       ///< L
  std::size_t bin_size = 8;      ///< DWTA: coordinates per part (a power of two)
  std::size_t bucket_capacity = 0;  ///< neurons a bucket keeps (0: all)
  std::uint64_t seed = 0;

  std::size_t code_bits() const {
    if (family == lsh_family::simhash) return parts;
    std::size_t b = 0;
    while ((std::size_t{1} << b) < bin_size) ++b;
    return parts * b;
  }
  void validate() const {
    require_positive("lsh_config.tables", tables);
    require(bin_size >= 2 && (bin_size & (bin_size - 1)) == 0, "lsh_config.bin_size", bin_size,
            "must be a power of two >= 2");
    require(code_bits() <= 24, "lsh_config.parts", parts,
            "gives more than 24 code bits per table (2^24 buckets)");
  }
};

/// The hash functions and the L tables of neuron ids.
class lsh_tables {
 public:
  lsh_tables() = default;
  lsh_tables(std::size_t dim, lsh_config o) : dim_(dim), o_(o) {
    o_.validate();
    require_positive("lsh_tables.dim", dim_);
    const counter_rng rng(o_.seed, 0x15a);
    const std::size_t fns = o_.parts * o_.tables;
    if (o_.family == lsh_family::simhash) {
      planes_.resize(fns * dim_);
      for (std::size_t i = 0; i < planes_.size(); ++i) planes_[i] = (rng.bits32(i) & 1u) ? 1.0f : -1.0f;
    } else {
      // Bins: consecutive bin_size slices of permutations of the coordinates (as many
      // permutations as needed), so every coordinate is used before any repeats.
      bins_.resize(fns * o_.bin_size);
      std::vector<std::uint32_t> perm(dim_);
      for (std::size_t filled = 0, p = 0; filled < bins_.size(); ++p) {
        counter_rng(o_.seed, 0x15b + p).permutation(perm.begin(), perm.end());
        for (std::size_t j = 0; j < dim_ && filled < bins_.size(); ++j) bins_[filled++] = perm[j];
      }
    }
    buckets_.assign(o_.tables << o_.code_bits(), {});
    seen_.assign(o_.tables << o_.code_bits(), 0);
  }

  std::size_t dim() const { return dim_; }
  const lsh_config& config() const { return o_; }

  /// codes[l] = the code of x in table l (L codes).
  void hash(span<const float> x, std::uint32_t* codes) const {
    require_same_size("lsh_tables.hash.x", x.size(), "dim", dim_);
    if (o_.family == lsh_family::simhash) {
      // K L dot products of dim: 2 K L dim flops.
      for (std::size_t l = 0; l < o_.tables; ++l) {
        std::uint32_t c = 0;
        for (std::size_t k = 0; k < o_.parts; ++k) {
          const float* a = planes_.data() + (l * o_.parts + k) * dim_;
          float dot = 0;
          for (std::size_t i = 0; i < dim_; ++i) dot += a[i] * x[i];
          c |= static_cast<std::uint32_t>(dot >= 0.0f) << k;
        }
        codes[l] = c;
      }
    } else {
      const std::size_t fns = o_.parts * o_.tables, bits = o_.code_bits() / std::max<std::size_t>(o_.parts, 1);
      std::vector<int> win(fns, -1);
      for (std::size_t f = 0; f < fns; ++f) {
        const std::uint32_t* bin = bins_.data() + f * o_.bin_size;
        float best = 0;
        for (std::size_t j = 0; j < o_.bin_size; ++j) {
          const float v = x[bin[j]];
          if (v != 0.0f && (win[f] < 0 || v > best)) best = v, win[f] = static_cast<int>(j);
        }
      }
      for (std::size_t l = 0; l < o_.tables; ++l) {
        std::uint32_t c = 0;
        for (std::size_t k = 0; k < o_.parts; ++k) {
          const std::size_t f = l * o_.parts + k;
          int v = win[f];
          // Densification: borrow from the next non-empty function (all empty: 0).
          for (std::size_t a = 1; v < 0 && a < fns; ++a) v = win[(f + a) % fns];
          c |= static_cast<std::uint32_t>(std::max(v, 0)) << (k * bits);
        }
        codes[l] = c;
      }
    }
  }

  /// Empties the tables.
  void clear() {
    for (auto& b : buckets_) b.clear();
    std::fill(seen_.begin(), seen_.end(), 0);
  }
  /// Stores neuron `id` under its codes (reservoir-sampled when the bucket is full).
  void insert(std::uint32_t id, const std::uint32_t* codes) {
    const std::size_t nb = std::size_t{1} << o_.code_bits();
    const counter_rng rng(o_.seed, 0x15c);
    for (std::size_t l = 0; l < o_.tables; ++l) {
      const std::size_t b = l * nb + codes[l];
      auto& bucket = buckets_[b];
      const std::uint64_t count = ++seen_[b];
      if (o_.bucket_capacity == 0 || bucket.size() < o_.bucket_capacity) {
        bucket.push_back(id);
      } else {
        const std::uint64_t j = rng.below((static_cast<std::uint64_t>(id) << 8) ^ l, count);
        if (j < o_.bucket_capacity) bucket[j] = id;
      }
    }
  }
  /// Calls fn(id) for every neuron stored under the codes (a neuron met in several tables is
  /// reported each time).
  template <class Fn>
  void for_each_candidate(const std::uint32_t* codes, Fn&& fn) const {
    const std::size_t nb = std::size_t{1} << o_.code_bits();
    for (std::size_t l = 0; l < o_.tables; ++l)
      for (std::uint32_t id : buckets_[l * nb + codes[l]]) fn(id);
  }

 private:
  std::size_t dim_ = 0;
  lsh_config o_{};
  std::vector<float> planes_;       // SimHash: (L K) x dim of +-1
  std::vector<std::uint32_t> bins_;  // DWTA: (L K) x bin_size coordinates
  std::vector<std::vector<std::uint32_t>> buckets_;
  std::vector<std::uint64_t> seen_;
};

}  // namespace heterograd::nn
