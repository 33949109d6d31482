#pragma once
// Gradient compression codecs: the vocabulary. A codec turns one worker's float vector into a
// message of 32-bit words and back. Its state (a PowerSGD warm-start matrix, a random-k round
// counter) is a separate value, so a checkpoint captures it and a restart resumes the same
// stream of messages.
//
//   c.init(n) -> state                          the state for vectors of n elements
//   c.message_words(n) -> size_t                words of one message
//   c.encode(x, state&, msg)                    may advance the state (rounds, warm starts)
//   c.decode(msg, const state&, out)            out = the codec's reconstruction of x
//   c.plan(n) -> wire_plan                      the collectives the exchange runs
//
// How messages of several ranks are combined (see compress/exchange.hpp) is the codec's
// exchange kind:
//   gather   messages are allgathered and every rank decodes and sums them in rank order
//            (fp16, bf16, top-k, sign: their messages do not add in compressed form);
//   custom   the codec runs its own collectives (random-k with a shared seed allreduces the k
//            values; PowerSGD allreduces its two factors).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "heterograd/core/span.hpp"

namespace heterograd::compress {

/// The collective one phase of an exchange runs.
enum class collective : std::uint8_t { allgather, allreduce };

/// One phase: `bytes` is one rank's contribution (its message for an allgather, the buffer
/// for an allreduce).
struct wire_phase {
  collective kind = collective::allgather;
  double bytes = 0;
  friend bool operator==(const wire_phase&, const wire_phase&) = default;
};

/// What one compressed exchange sends, phase by phase.
struct wire_plan {
  std::vector<wire_phase> phases;
  /// Bytes one rank sends over a ring: (n-1) m for an allgather of m-byte messages,
  /// 2(n-1)/n m for an allreduce of m bytes.
  double bytes_per_rank(int ranks) const {
    const double n = static_cast<double>(ranks);
    double b = 0;
    for (const auto& p : phases)
      b += p.kind == collective::allgather ? (n - 1) * p.bytes : 2 * (n - 1) / n * p.bytes;
    return b;
  }
};

enum class exchange_kind : std::uint8_t { gather, custom };

/// A compression codec over float vectors (see the file comment).
template <class C>
concept codec = std::copyable<C> && std::equality_comparable<typename C::state> &&
                std::copyable<typename C::state> &&
                requires(const C& c, typename C::state& s, const typename C::state& cs, std::size_t n,
                         span<const float> x, span<float> out, span<std::uint32_t> msg,
                         span<const std::uint32_t> cmsg) {
                  { C::kind } -> std::convertible_to<exchange_kind>;
                  { c.init(n) } -> std::same_as<typename C::state>;
                  { c.message_words(n) } -> std::convertible_to<std::size_t>;
                  c.encode(x, s, msg);
                  c.decode(cmsg, cs, out);
                  { c.plan(n) } -> std::same_as<wire_plan>;
                  { c.name() } -> std::convertible_to<std::string_view>;
                };

}  // namespace heterograd::compress
