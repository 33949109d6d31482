#pragma once
// FNV-1a 64 of a buffer's bytes: the identity of a model (a checkpoint's cut, a joiner's
// parameters checked against the server's; runtime/options.hpp, runtime/server.hpp).

#include <cstddef>
#include <cstdint>

namespace heterograd {

/// FNV-1a 64 (offset basis 0xcbf29ce484222325, prime 0x100000001b3) of n bytes at p,
/// continuing from h.
inline std::uint64_t fnv1a(const void* p, std::size_t n, std::uint64_t h = 0xcbf29ce484222325ull) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace heterograd
