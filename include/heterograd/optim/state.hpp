#pragma once
// Optimizer state as a plain value. Async and local SGD snapshot it, ship it, average it and
// restore it, so it is copyable, comparable (bitwise) and serialisable to bytes with a version
// tag and a checksum.
//
// A state is a small tree: the optimizer it belongs to (`kind`), the number of steps applied
// (`count`), integer counters (skips, micro-steps), buffers the size of the parameters
// (`slots`: momentum, first and second moments, accumulators) and child states (for chain,
// wrappers and partitions). Slots live in the parameters' memory space: std::vector on the
// host, thrust::device_vector on a GPU (under nvcc), whose memory comes from the state
// resource installed when the state is made (kernels/state_resource.hpp: an algorithm's
// thrust_memory installs its allocator; Thrust's device allocator otherwise).
//
// Byte format (little-endian as the host writes it), version 1:
//   "HGOS" | u32 version | u32 sizeof(T) | node | u64 FNV-1a checksum of everything before
//   node = u32 len, kind bytes | i64 count | u32 n, n x i64 counters |
//          u32 n, n x (u64 size, size x T) slots | u32 n, n x node children

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/hash.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/state_resource.hpp"

#if defined(__CUDACC__)
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#endif

namespace heterograd::optim {

namespace detail {
template <class T, class Space>
struct buffer_of {
  using type = std::vector<T>;
};
#if defined(__CUDACC__)
template <class T>
struct buffer_of<T, device_space> {
  using type = thrust::device_vector<T, kernels::state_allocator<T>>;
};
#endif
}  // namespace detail

/// The container a state slot uses in memory space Space (device slots need nvcc).
template <class T, class Space>
using buffer = typename detail::buffer_of<T, Space>::type;

template <class T, class Space = host_space>
struct state {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "optimizer states hold float or double");
  using value_type = T;
  using memory_space = Space;

  std::string kind;                     ///< the optimizer this state belongs to
  std::int64_t count = 0;               ///< steps applied
  std::vector<std::int64_t> counters;   ///< integer counters (meaning set by the optimizer)
  std::vector<buffer<T, Space>> slots;  ///< per-parameter buffers
  std::vector<state> children;          ///< states of inner optimizers

  /// Bitwise equality of everything (NaN equals itself; +0 and -0 differ).
  friend bool operator==(const state& a, const state& b) {
    if (a.kind != b.kind || a.count != b.count || a.counters != b.counters ||
        a.slots.size() != b.slots.size() || a.children != b.children)
      return false;
    for (std::size_t i = 0; i < a.slots.size(); ++i) {
      if (a.slots[i].size() != b.slots[i].size()) return false;
      const auto ha = host_copy(a.slots[i]), hb = host_copy(b.slots[i]);
      if (!ha.empty() && std::memcmp(ha.data(), hb.data(), ha.size() * sizeof(T)) != 0)
        return false;
    }
    return true;
  }

  /// A host copy of a slot (the slot itself on the host).
  static std::vector<T> host_copy(const buffer<T, Space>& b) {
    if constexpr (std::is_same_v<Space, host_space>) {
      return b;
    } else {
#if defined(__CUDACC__)
      std::vector<T> h(b.size());
      thrust::copy(b.begin(), b.end(), h.begin());
      return h;
#else
      return {};
#endif
    }
  }

  /// A zero-filled slot of n elements.
  static buffer<T, Space> zeros(std::size_t n) {
    return buffer<T, Space>(n, T(0));
  }

  /// Checkpointing (core/archive.hpp): the state as its own versioned, checksummed bytes
  /// (serialize() below) behind a length, so a damaged state is refused by its own checksum.
  template <class Archive>
  void serialize(Archive& ar);
};

/// A mutable span over a slot.
template <class T, class Space>
span<T, Space> slot_span(buffer<T, Space>& b) {
  if constexpr (std::is_same_v<Space, host_space>) {
    return span<T, Space>(b.data(), b.size());
  } else {
    return span<T, Space>(thrust::raw_pointer_cast(b.data()), b.size());
  }
}

inline constexpr std::uint32_t state_format_version = 1;

namespace detail {

using heterograd::fnv1a;  // core/hash.hpp

struct writer {
  std::vector<std::byte> out;
  void raw(const void* p, std::size_t n) {
    if (n == 0) return;  // (g++ 12 warns of a zero-byte insert as an overflow otherwise)
    const auto* b = static_cast<const std::byte*>(p);
    const std::size_t at = out.size();
    out.resize(at + n);
    std::memcpy(out.data() + at, b, n);
  }
  template <class V>
  void pod(const V& v) {
    raw(&v, sizeof(V));
  }
};

struct reader {
  std::span<const std::byte> in;
  std::size_t pos = 0;
  void raw(void* p, std::size_t n) {
    require(n <= in.size() - pos, "bytes (size)", in.size(), "truncated optimizer state");
    if (n) std::memcpy(p, in.data() + pos, n);
    pos += n;
  }
  template <class V>
  V pod() {
    V v{};
    raw(&v, sizeof(V));
    return v;
  }
};

template <class T, class Space>
void write_node(writer& w, const state<T, Space>& s) {
  w.pod(static_cast<std::uint32_t>(s.kind.size()));
  w.raw(s.kind.data(), s.kind.size());
  w.pod(s.count);
  w.pod(static_cast<std::uint32_t>(s.counters.size()));
  for (auto c : s.counters) w.pod(c);
  w.pod(static_cast<std::uint32_t>(s.slots.size()));
  for (const auto& b : s.slots) {
    const auto h = state<T, Space>::host_copy(b);
    w.pod(static_cast<std::uint64_t>(h.size()));
    w.raw(h.data(), h.size() * sizeof(T));
  }
  w.pod(static_cast<std::uint32_t>(s.children.size()));
  for (const auto& c : s.children) write_node(w, c);
}

template <class T, class Space>
state<T, Space> read_node(reader& r, int depth) {
  require(depth < 64, "bytes (nesting)", depth, "optimizer state nested too deeply");
  state<T, Space> s;
  const auto len = r.pod<std::uint32_t>();
  require(len <= r.in.size() - r.pos, "bytes (kind length)", len, "truncated optimizer state");
  s.kind.resize(len);
  r.raw(s.kind.data(), len);
  s.count = r.pod<std::int64_t>();
  const auto nc = r.pod<std::uint32_t>();
  require(nc <= (r.in.size() - r.pos) / 8, "bytes (counters)", nc, "truncated optimizer state");
  for (std::uint32_t i = 0; i < nc; ++i) s.counters.push_back(r.pod<std::int64_t>());
  const auto ns = r.pod<std::uint32_t>();
  require(ns <= (r.in.size() - r.pos) / 8, "bytes (slots)", ns, "truncated optimizer state");
  for (std::uint32_t i = 0; i < ns; ++i) {
    const auto n = r.pod<std::uint64_t>();
    require(n <= (r.in.size() - r.pos) / sizeof(T), "bytes (slot size)", n,
            "truncated optimizer state");
    std::vector<T> h(static_cast<std::size_t>(n));
    r.raw(h.data(), h.size() * sizeof(T));
    if constexpr (std::is_same_v<Space, host_space>) {
      s.slots.push_back(std::move(h));
    } else {
      s.slots.emplace_back(h.begin(), h.end());
    }
  }
  const auto nch = r.pod<std::uint32_t>();
  require(nch <= r.in.size() - r.pos, "bytes (children)", nch, "truncated optimizer state");
  for (std::uint32_t i = 0; i < nch; ++i) s.children.push_back(read_node<T, Space>(r, depth + 1));
  return s;
}

}  // namespace detail

/// The bytes of a state: magic, version, element size, content, checksum.
template <class T, class Space>
std::vector<std::byte> serialize(const state<T, Space>& s) {
  detail::writer w;
  w.raw("HGOS", 4);
  w.pod(state_format_version);
  w.pod(static_cast<std::uint32_t>(sizeof(T)));
  detail::write_node(w, s);
  const std::uint64_t sum =
      detail::fnv1a(reinterpret_cast<const unsigned char*>(w.out.data()), w.out.size());
  w.pod(sum);
  return std::move(w.out);
}

/// A state from bytes written by serialize(). Throws std::invalid_argument on a wrong magic,
/// version, element type or checksum, or truncated bytes.
template <class T, class Space = host_space>
state<T, Space> deserialize(std::span<const std::byte> bytes) {
  require(bytes.size() >= 4 + 4 + 4 + 8, "bytes (size)", bytes.size(),
          "too short for an optimizer state");
  require(std::memcmp(bytes.data(), "HGOS", 4) == 0, "bytes (magic)",
          std::string(reinterpret_cast<const char*>(bytes.data()), 4),
          "must start with HGOS (not an optimizer state)");
  const std::size_t body = bytes.size() - 8;
  std::uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + body, 8);
  const std::uint64_t sum =
      detail::fnv1a(reinterpret_cast<const unsigned char*>(bytes.data()), body);
  require(stored == sum, "bytes (checksum)", stored, "does not match the content (corrupted)");
  detail::reader r{bytes.first(body), 4};
  const auto version = r.pod<std::uint32_t>();
  require(version == state_format_version, "bytes (version)", version,
          "unsupported optimizer state format version (this build reads 1)");
  const auto elem = r.pod<std::uint32_t>();
  require(elem == sizeof(T), "bytes (element size)", elem,
          "must equal the element size of the requested state type");
  auto s = detail::read_node<T, Space>(r, 0);
  require(r.pos == body, "bytes (size)", bytes.size(), "trailing bytes after the state");
  return s;
}

template <class T, class Space>
template <class Archive>
void state<T, Space>::serialize(Archive& ar) {
  std::vector<std::byte> bytes;
  if constexpr (Archive::saving) bytes = optim::serialize(*this);
  ar(bytes);
  if constexpr (!Archive::saving) {
    // Device slots: the restored state's come from the resource of the state it replaces
    // (an algorithm's state, made through its memory), else from the one installed now.
    if constexpr (requires(const buffer<T, Space>& b) { b.get_allocator().resource(); }) {
      if (!slots.empty()) {
        const auto from = slots.front().get_allocator().resource();
        if (from) {
          const kernels::state_resource_scope scope(from);
          *this = optim::deserialize<T, Space>(bytes);
          return;
        }
      }
    }
    *this = optim::deserialize<T, Space>(bytes);
  }
}

}  // namespace heterograd::optim
