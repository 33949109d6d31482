#pragma once
// Binary archives for checkpoints. A type is archived by a member `serialize(Archive&)` that
// calls `ar(members...)` in a fixed order (the sim engine, recorder and runtimes have one), or
// is trivially copyable (its bytes), or is one of the standard containers below. The same
// serialize() writes (writer) and reads (reader); a reader checks every length against what is
// left, so a truncated or foreign file is an error, never a crash.
//
// On disk an archive is sealed (seal_checkpoint / open_checkpoint): a header with the format
// version and the payload size, the payload, a CRC-32C per 64 KiB block, and a CRC-32C of the
// whole file before it. A length check alone lets a flipped byte in the parameters through
// (the reader cannot tell a changed float from the original), so every byte is covered by a
// checksum, and the error names the damaged region of the file.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/optim/state.hpp"

namespace hgrun {

class writer {
 public:
  static constexpr bool saving = true;
  template <class... T>
  void operator()(const T&... xs) {
    (put(xs), ...);
  }
  const std::vector<std::byte>& bytes() const { return out_; }

  void raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  template <class T>
  void put(const T& x) {
    if constexpr (requires(T& y, writer& w) { y.serialize(w); }) {
      const_cast<T&>(x).serialize(*this);  // serialize() only reads when saving
    } else if constexpr (std::is_same_v<T, std::string>) {
      size(x.size());
      raw(x.data(), x.size());
    } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
      size(x.size());
      for (bool b : x) put(static_cast<std::uint8_t>(b));
    } else if constexpr (requires { typename T::value_type; x.size(); x.begin(); } &&
                         !std::is_trivially_copyable_v<T>) {
      size(x.size());
      using V = typename T::value_type;
      if constexpr (std::is_trivially_copyable_v<V> && requires { x.data(); }) {
        raw(x.data(), x.size() * sizeof(V));
      } else {
        for (const auto& v : x) put(v);
      }
    } else if constexpr (requires { x.first; x.second; }) {
      put(x.first);
      put(x.second);
    } else if constexpr (requires { x.has_value(); *x; }) {
      put(static_cast<std::uint8_t>(x.has_value()));
      if (x) put(*x);
    } else {
      static_assert(std::is_trivially_copyable_v<T>, "no way to archive this type");
      raw(&x, sizeof x);
    }
  }
  template <class T, class S>
  void put(const heterograd::optim::state<T, S>& st) {
    const auto b = heterograd::optim::serialize(st);
    size(b.size());
    raw(b.data(), b.size());
  }

 private:
  void size(std::size_t n) {
    const std::uint64_t v = n;
    raw(&v, sizeof v);
  }
  std::vector<std::byte> out_;
};

class reader {
 public:
  static constexpr bool saving = false;
  explicit reader(std::span<const std::byte> in) : in_(in) {}
  template <class... T>
  void operator()(T&... xs) {
    (get(xs), ...);
  }
  bool done() const { return pos_ == in_.size(); }

  void raw(void* p, std::size_t n) {
    if (n > in_.size() - pos_) throw std::runtime_error("checkpoint: truncated data");
    if (n > 0) std::memcpy(p, in_.data() + pos_, n);  // an empty vector's data() may be null
    pos_ += n;
  }
  template <class T>
  void get(T& x) {
    if constexpr (requires(T& y, reader& r) { y.serialize(r); }) {
      x.serialize(*this);
    } else if constexpr (std::is_same_v<T, std::string>) {
      x.resize(count(1));
      raw(x.data(), x.size());
    } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
      x.assign(count(1), false);
      for (std::size_t i = 0; i < x.size(); ++i) {
        std::uint8_t b = 0;
        get(b);
        x[i] = b != 0;
      }
    } else if constexpr (requires { typename T::value_type; x.size(); x.begin(); } &&
                         !std::is_trivially_copyable_v<T>) {
      using V = std::remove_const_t<typename T::value_type>;
      if constexpr (requires { x.resize(std::size_t{}); }) {
        const std::size_t n = count(std::is_trivially_copyable_v<V> ? sizeof(V) : 1);
        x.resize(n);
      } else {
        if (count(1) != x.size()) throw std::runtime_error("checkpoint: wrong fixed size");
      }
      if constexpr (std::is_trivially_copyable_v<V> && requires { x.data(); }) {
        raw(x.data(), x.size() * sizeof(V));
      } else {
        for (auto& v : x) get(const_cast<V&>(v));
      }
    } else if constexpr (requires { x.first; x.second; }) {
      get(const_cast<std::remove_const_t<decltype(x.first)>&>(x.first));
      get(x.second);
    } else if constexpr (requires { x.has_value(); x.emplace(); }) {
      std::uint8_t has = 0;
      get(has);
      if (has) {
        x.emplace();
        get(*x);
      } else {
        x.reset();
      }
    } else {
      static_assert(std::is_trivially_copyable_v<T>, "no way to archive this type");
      raw(&x, sizeof x);
    }
  }
  template <class T, class S>
  void get(heterograd::optim::state<T, S>& st) {
    std::vector<std::byte> b(count(1));
    raw(b.data(), b.size());
    st = heterograd::optim::deserialize<T, S>(b);
  }

 private:
  std::size_t count(std::size_t unit) {
    std::uint64_t n = 0;
    raw(&n, sizeof n);
    if (n > (in_.size() - pos_) / unit) throw std::runtime_error("checkpoint: corrupt length");
    return static_cast<std::size_t>(n);
  }
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The checkpoint file: format version 2 (version 1, an unsealed archive, came before checksums).
//
//   bytes 0-31      header: magic "HGCKPT\r\n", u32 version, u32 block size, u64 payload size,
//                   u32 zero, u32 CRC-32C of header bytes 0-27
//   32 ..           the payload (the writer's bytes)
//   then            u32 CRC-32C of each block of `block size` payload bytes (the last may be short)
//   then            u32 CRC-32C of that table
//   last 4 bytes    u32 CRC-32C of every byte before them
// Integers are little-endian. CRC-32C detects every error burst of up to 32 bits, so one
// damaged byte anywhere is always found, and the per-block sums say where.

/// A checkpoint file that cannot be used: the message names the file and what is wrong.
class checkpoint_error : public std::runtime_error {
 public:
  checkpoint_error(const std::filesystem::path& file, const std::string& why)
      : std::runtime_error("checkpoint " + file.string() + ": " + why +
                           "; delete it to run this method again from the start"),
        file_(file) {}
  const std::filesystem::path& file() const { return file_; }

 private:
  std::filesystem::path file_;
};

inline constexpr std::uint32_t checkpoint_format_version = 2;
inline constexpr std::size_t checkpoint_block_size = 65536;
inline constexpr std::size_t checkpoint_header_size = 32;

namespace detail {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), table-driven one byte at a time:
// checkpoints are a few MB at most and written once per checkpoint_every evaluations.
inline constexpr std::array<std::uint32_t, 256> crc32c_table = [] {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}();

inline void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xffu));
}
inline std::uint64_t get_le(std::string_view in, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t{static_cast<unsigned char>(in[at + i])} << (8 * i);
  return v;
}
inline std::string byte_range(std::size_t first, std::size_t end) {
  return "bytes " + std::to_string(first) + "-" + std::to_string(end - 1);
}
inline constexpr std::string_view checkpoint_magic{"HGCKPT\r\n", 8};

}  // namespace detail

/// CRC-32C of `n` bytes, continuing from `crc` (0 to start).
inline std::uint32_t crc32c(const void* p, std::size_t n, std::uint32_t crc = 0) {
  const auto* b = static_cast<const unsigned char*>(p);
  crc = ~crc;
  for (std::size_t i = 0; i < n; ++i) crc = detail::crc32c_table[(crc ^ b[i]) & 0xffu] ^ (crc >> 8);
  return ~crc;
}

/// The checkpoint file for `payload` (the layout above).
inline std::string seal_checkpoint(std::span<const std::byte> payload) {
  using detail::put_le;
  const std::size_t blocks = (payload.size() + checkpoint_block_size - 1) / checkpoint_block_size;
  std::string f;
  f.reserve(checkpoint_header_size + payload.size() + 4 * blocks + 8);
  f.append(detail::checkpoint_magic);
  put_le(f, checkpoint_format_version, 4);
  put_le(f, checkpoint_block_size, 4);
  put_le(f, payload.size(), 8);
  put_le(f, 0, 4);
  put_le(f, crc32c(f.data(), f.size()), 4);
  if (!payload.empty()) f.append(reinterpret_cast<const char*>(payload.data()), payload.size());
  std::string table;
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t at = b * checkpoint_block_size;
    put_le(table, crc32c(payload.data() + at, std::min(checkpoint_block_size, payload.size() - at)), 4);
  }
  f += table;
  put_le(f, crc32c(table.data(), table.size()), 4);
  put_le(f, crc32c(f.data(), f.size()), 4);
  return f;
}

/// The payload of checkpoint file `file` whose content is `f`, after every checksum matched.
/// Throws checkpoint_error naming `file` and the damaged byte range (header, a block of the
/// payload, the block table or the final checksum), a truncation, or another format version.
inline std::vector<std::byte> open_checkpoint(const std::filesystem::path& file, std::string_view f) {
  using detail::byte_range;
  using detail::get_le;
  const std::size_t h = checkpoint_header_size;
  // An unsealed version-1 archive starts with the length (27) of its magic string.
  if (f.size() >= 8 + 27 && get_le(f, 0, 8) == 27 && f.substr(8, 27) == "heterograd-run checkpoint 1")
    throw checkpoint_error(file, "format version 1 (no checksums, from an older heterograd-run); this one reads "
                                 "version " + std::to_string(checkpoint_format_version));
  if (f.size() < h)
    throw checkpoint_error(file, "truncated: " + std::to_string(f.size()) + " bytes, shorter than the " +
                                     std::to_string(h) + "-byte header");
  if (f.substr(0, 8) != detail::checkpoint_magic || crc32c(f.data(), 28) != get_le(f, 28, 4))
    throw checkpoint_error(file, byte_range(0, h) + " (the header) damaged, or not a heterograd-run checkpoint");
  const auto version = get_le(f, 8, 4);
  if (version != checkpoint_format_version)
    throw checkpoint_error(file, "format version " + std::to_string(version) + "; this heterograd-run reads version " +
                                     std::to_string(checkpoint_format_version));
  const std::uint64_t block = get_le(f, 12, 4), size = get_le(f, 16, 8);
  if (block == 0 || size > f.size())
    throw checkpoint_error(file, "truncated: " + std::to_string(f.size()) + " bytes, the header says the payload "
                                 "alone has " + std::to_string(size));
  const std::uint64_t blocks = (size + block - 1) / block;
  const std::uint64_t table_at = h + size, total = table_at + 4 * blocks + 8;
  if (f.size() != total)
    throw checkpoint_error(file, (f.size() < total ? "truncated: " : "trailing bytes: ") + std::to_string(f.size()) +
                                     " bytes, the header says " + std::to_string(total));
  if (crc32c(f.data() + table_at, 4 * blocks) != get_le(f, table_at + 4 * blocks, 4))
    throw checkpoint_error(file, byte_range(table_at, table_at + 4 * blocks + 4) + " (the block checksums) damaged");
  std::string damaged;
  std::size_t bad = 0;
  for (std::uint64_t b = 0; b < blocks; ++b) {
    const std::uint64_t at = h + b * block, n = std::min(block, size - b * block);
    if (crc32c(f.data() + at, n) == get_le(f, table_at + 4 * b, 4)) continue;
    if (++bad <= 4) damaged += (damaged.empty() ? "" : ", ") + byte_range(at, at + n);
  }
  if (bad > 4) damaged += " and " + std::to_string(bad - 4) + " more blocks";
  if (bad) throw checkpoint_error(file, damaged + " damaged (checksum mismatch)");
  if (crc32c(f.data(), total - 4) != get_le(f, total - 4, 4))
    throw checkpoint_error(file, byte_range(total - 4, total) + " (the file checksum) damaged");
  std::vector<std::byte> out(size);
  if (size > 0) std::memcpy(out.data(), f.data() + h, size);
  return out;
}

}  // namespace hgrun
