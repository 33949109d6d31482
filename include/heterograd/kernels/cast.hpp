#pragma once
// 16-bit storage types and casts. bf16 (bfloat16: 1 sign, 8 exponent, 7 mantissa bits) and
// fp16 (IEEE binary16: 1, 5, 10) are storage only: arithmetic is done in float. Conversions
// from float round to nearest, ties to even; NaN stays NaN (quiet), overflow gives infinity,
// float values below fp16's normal range become fp16 subnormals. Written with integer bit
// manipulation so host and device give the same bits.
//
// Bytes per element: float <-> 16-bit cast reads 4 and writes 2 (or the reverse): 6 B.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "heterograd/core/config.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/launch.hpp"

namespace heterograd::kernels {

/// bfloat16 storage.
struct bf16 {
  std::uint16_t bits = 0;
  friend constexpr bool operator==(bf16, bf16) = default;
};
/// IEEE binary16 storage.
struct fp16 {
  std::uint16_t bits = 0;
  friend constexpr bool operator==(fp16, fp16) = default;
};

HG_HOST_DEVICE constexpr bf16 to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)  // NaN: keep sign and top payload, force quiet
    return bf16{static_cast<std::uint16_t>((x >> 16) | 0x0040u)};
  // Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even; a carry into the
  // exponent is the correct rounding up (to infinity at the top).
  const std::uint32_t r = x + 0x7fffu + ((x >> 16) & 1u);
  return bf16{static_cast<std::uint16_t>(r >> 16)};
}

HG_HOST_DEVICE constexpr float to_float(bf16 h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h.bits) << 16);
}

HG_HOST_DEVICE constexpr fp16 to_fp16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t x = u & 0x7fffffffu;
  if (x >= 0x7f800000u) {  // inf or NaN
    if (x == 0x7f800000u) return fp16{static_cast<std::uint16_t>(sign | 0x7c00u)};
    return fp16{static_cast<std::uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu))};
  }
  // 65520 = halfway between 65504 (largest fp16) and 65536; the tie goes to the even
  // neighbour, which is 65536 = infinity.
  if (x >= 0x477ff000u) return fp16{static_cast<std::uint16_t>(sign | 0x7c00u)};
  if (x < 0x38800000u) {  // below 2^-14: fp16 subnormal (units of 2^-24) or zero
    if (x <= 0x33000000u) return fp16{static_cast<std::uint16_t>(sign)};  // <= 2^-25: ties to 0
    const std::uint32_t e = x >> 23;                                      // 102..112
    const std::uint32_t m = (x & 0x7fffffu) | 0x800000u;                  // 24-bit significand
    const std::uint32_t shift = 126u - e;  // value = m >> shift units
    std::uint32_t r = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;  // may become 0x400: the least normal
    return fp16{static_cast<std::uint16_t>(sign | r)};
  }
  // Normal: rebias the exponent (127 - 15 = 112) and round away 13 mantissa bits.
  std::uint32_t r = x - 0x38000000u;
  r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  return fp16{static_cast<std::uint16_t>(sign | r)};
}

HG_HOST_DEVICE constexpr float to_float(fp16 h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  const std::uint32_t e = (h.bits >> 10) & 0x1fu;
  const std::uint32_t m = h.bits & 0x3ffu;
  if (e == 0) {
    // Subnormal or zero: m * 2^-24, exact in float.
    const float mag = static_cast<float>(m) * 5.9604644775390625e-8f;
    return sign ? -mag : mag;
  }
  if (e == 31) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

namespace detail {

template <class From, class To>
HG_HOST_DEVICE constexpr To convert_value(From v) {
  if constexpr (std::is_same_v<To, bf16>)
    return to_bf16(static_cast<float>(v));
  else if constexpr (std::is_same_v<To, fp16>)
    return to_fp16(static_cast<float>(v));
  else
    return static_cast<To>(to_float(v));
}

template <class From, class To>
struct cast_body {
  const From* in;
  To* out;
  HG_HOST_DEVICE void operator()(std::size_t i) const { out[i] = convert_value<From, To>(in[i]); }
};

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, bf16> || std::is_same_v<T, fp16>;

}  // namespace detail

/// out[i] = in[i] converted: float -> bf16/fp16 (round to nearest even) or bf16/fp16 -> float
/// (exact). 6 bytes per element.
template <class Policy, class From, class To, class Space>
void cast(const Policy& policy, span<From, Space> in, span<To, Space> out) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  using F = std::remove_const_t<From>;
  static_assert((std::is_same_v<F, float> && detail::is_half_v<To>) ||
                    (detail::is_half_v<F> && std::is_same_v<To, float>),
                "cast converts between float and bf16/fp16");
  require_same_size("cast.out", out.size(), "cast.in", in.size());
  kernels::launch(policy, in.size(), detail::cast_body<F, To>{in.data(), out.data()}, out.data());
}

}  // namespace heterograd::kernels
