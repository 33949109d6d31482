#pragma once
// Counter-based random numbers: value = f(seed, stream, counter), with no hidden state, so a
// draw is reproducible from its coordinates alone on any backend, in any thread order.
//
// The bijection is Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as
// easy as 1, 2, 3", SC'11): 10 rounds of two 32x32->64 multiplies with a Weyl key schedule.
// Mapping: key = (seed low, seed high), counter = (index low, index high, stream low,
// stream high). Each index yields one block of four 32-bit words.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <utility>

#include "heterograd/core/config.hpp"

namespace heterograd {

struct philox_block {
  std::uint32_t v[4];
  HG_HOST_DEVICE constexpr std::uint32_t operator[](int i) const { return v[i]; }
  friend constexpr bool operator==(const philox_block&, const philox_block&) = default;
};

namespace detail {
HG_HOST_DEVICE constexpr void mulhilo32(std::uint32_t a, std::uint32_t b, std::uint32_t& hi,
                                        std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

/// High 64 bits of a 64x64 product, portable to device code.
HG_HOST_DEVICE constexpr std::uint64_t mulhi64(std::uint64_t a, std::uint64_t b) {
  const std::uint64_t a_lo = a & 0xffffffffu, a_hi = a >> 32;
  const std::uint64_t b_lo = b & 0xffffffffu, b_hi = b >> 32;
  const std::uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi;
  const std::uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xffffffffu) + lo_hi;
  return a_hi * b_hi + (hi_lo >> 32) + (cross >> 32);
}
}  // namespace detail

/// Philox4x32 with `Rounds` rounds (10 is the standard, Crush-resistant choice).
template <int Rounds = 10>
HG_HOST_DEVICE constexpr philox_block philox4x32(philox_block ctr, std::uint32_t k0,
                                                 std::uint32_t k1) {
  constexpr std::uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  constexpr std::uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;  // golden ratio, sqrt(3)-1
  for (int r = 0; r < Rounds; ++r) {
    if (r > 0) {
      k0 += w0;
      k1 += w1;
    }
    std::uint32_t hi0 = 0, lo0 = 0, hi1 = 0, lo1 = 0;
    detail::mulhilo32(m0, ctr.v[0], hi0, lo0);
    detail::mulhilo32(m1, ctr.v[2], hi1, lo1);
    ctr = philox_block{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
  }
  return ctr;
}

/// A stream of random numbers identified by (seed, stream). Draw `i` of any kind is a pure
/// function of (seed, stream, i); the object is two integers, trivially copyable to devices.
class counter_rng {
 public:
  constexpr counter_rng() = default;
  HG_HOST_DEVICE constexpr counter_rng(std::uint64_t seed, std::uint64_t stream = 0)
      : seed_(seed), stream_(stream) {}

  HG_HOST_DEVICE constexpr std::uint64_t seed() const { return seed_; }
  HG_HOST_DEVICE constexpr std::uint64_t stream() const { return stream_; }
  /// A derived, independent stream (e.g. one per worker).
  HG_HOST_DEVICE constexpr counter_rng substream(std::uint64_t s) const {
    return counter_rng(seed_, bits64(s, ~std::uint64_t{0}));
  }

  /// The raw block at `counter`.
  HG_HOST_DEVICE constexpr philox_block block(std::uint64_t counter) const {
    const philox_block c{{static_cast<std::uint32_t>(counter),
                          static_cast<std::uint32_t>(counter >> 32),
                          static_cast<std::uint32_t>(stream_),
                          static_cast<std::uint32_t>(stream_ >> 32)}};
    return philox4x32<10>(c, static_cast<std::uint32_t>(seed_),
                          static_cast<std::uint32_t>(seed_ >> 32));
  }

  HG_HOST_DEVICE constexpr std::uint32_t bits32(std::uint64_t i) const { return block(i)[0]; }
  HG_HOST_DEVICE constexpr std::uint64_t bits64(std::uint64_t i, std::uint64_t salt = 0) const {
    const philox_block b = block(i ^ salt);
    return (static_cast<std::uint64_t>(b[1]) << 32) | b[0];
  }

  /// Uniform double in [0, 1) with 53 random bits.
  HG_HOST_DEVICE constexpr double uniform(std::uint64_t i) const {
    return static_cast<double>(bits64(i) >> 11) * 0x1.0p-53;
  }
  /// Uniform double in [lo, hi).
  HG_HOST_DEVICE constexpr double uniform(std::uint64_t i, double lo, double hi) const {
    return lo + (hi - lo) * uniform(i);
  }
  /// Uniform float in [0, 1) with 24 random bits.
  HG_HOST_DEVICE constexpr float uniform_float(std::uint64_t i) const {
    return static_cast<float>(bits32(i) >> 8) * 0x1.0p-24f;
  }
  /// Integer uniform in [0, bound), bound > 0 (multiply-shift on 64 bits; bias < 2^-32 for
  /// bound < 2^32).
  HG_HOST_DEVICE constexpr std::uint64_t below(std::uint64_t i, std::uint64_t bound) const {
    return detail::mulhi64(bits64(i), bound);
  }

  /// Standard normal by Box-Muller on the block's words (0,1) and (2,3).
  HG_HOST_DEVICE double normal(std::uint64_t i) const {
    const philox_block b = block(i);
    // u1 in (0, 1] so log(u1) is finite.
    const double u1 =
        (static_cast<double>((static_cast<std::uint64_t>(b[1]) << 32 | b[0]) >> 11) + 1.0) *
        0x1.0p-53;
    const double u2 =
        static_cast<double>((static_cast<std::uint64_t>(b[3]) << 32 | b[2]) >> 11) * 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  HG_HOST_DEVICE double normal(std::uint64_t i, double mean, double stddev) const {
    return mean + stddev * normal(i);
  }
  /// |N(0, sigma^2)|: mean sigma*sqrt(2/pi) (Ringmaster/Ringleader's per-job noise model).
  HG_HOST_DEVICE double half_normal(std::uint64_t i, double sigma) const {
    return std::fabs(sigma * normal(i));
  }
  /// exp(N(mu, sigma^2)).
  HG_HOST_DEVICE double lognormal(std::uint64_t i, double mu, double sigma) const {
    return std::exp(mu + sigma * normal(i));
  }
  /// Exponential with rate lambda (mean 1/lambda).
  HG_HOST_DEVICE double exponential(std::uint64_t i, double lambda) const {
    return -std::log1p(-uniform(i)) / lambda;
  }

  /// Fisher-Yates shuffle of [first, last) using draws [offset, offset + n - 1).
  template <class RandomIt>
  HG_HOST_DEVICE void shuffle(RandomIt first, RandomIt last, std::uint64_t offset = 0) const {
    const auto n = static_cast<std::uint64_t>(last - first);
    for (std::uint64_t k = n; k > 1; --k) {
      const std::uint64_t j = below(offset + (n - k), k);
      auto tmp = std::move(first[k - 1]);
      first[k - 1] = std::move(first[j]);
      first[j] = std::move(tmp);
    }
  }

  /// Writes a uniformly random permutation of 0..n-1 into `out` (n = out's length).
  template <class RandomIt>
  HG_HOST_DEVICE void permutation(RandomIt first, RandomIt last, std::uint64_t offset = 0) const {
    using V = std::remove_cvref_t<decltype(*first)>;
    for (RandomIt it = first; it != last; ++it) *it = static_cast<V>(it - first);
    shuffle(first, last, offset);
  }

  friend constexpr bool operator==(const counter_rng&, const counter_rng&) = default;

 private:
  std::uint64_t seed_ = 0;
  std::uint64_t stream_ = 0;
};

}  // namespace heterograd
