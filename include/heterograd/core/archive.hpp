#pragma once
// Binary archives and sealed checkpoints, in namespace heterograd.
//
// A type is archived by a member `template <class Archive> void serialize(Archive& ar)` that
// calls `ar(members...)` in a fixed order (policies, runtimes, the simulator and its recorder
// have one). The same member writes (archive_writer, `Archive::saving` true) and reads
// (archive_reader, false), so the two directions cannot drift apart. `ar(...)` takes, besides
// such types: trivially copyable values (arithmetic, enums, plain structs: their bytes),
// std::string, std::vector<bool>, std::pair, std::optional, and sequence containers
// (std::vector, std::deque, std::array, ...) of archivable elements. `archivable<T>` says
// whether T is one of these; `archive<A>` is what a serialize member may rely on A to be.
//
// Byte format (the host's byte order; nothing is padded or aligned):
//   trivially copyable  its object representation (sizeof(T) bytes)
//   string, container   u64 element count, then the elements (a trivially copyable element
//                       type with contiguous storage: all bytes at once; std::array of such
//                       elements has no count, it is trivially copyable itself)
//   vector<bool>        u64 count, then one byte (0 or 1) per element
//   pair                first, then second
//   optional            one byte (0 empty, 1 engaged), then the value if engaged
// A reader checks every length against the bytes left before it allocates, so a truncated or
// foreign archive throws archive_error naming the offset and what was expected, never crashes.
//
// On disk an archive is sealed (seal_checkpoint / open_checkpoint, layout below): a header
// with the format version and the payload size, the payload, a CRC-32C per 64 KiB block and a
// CRC-32C of the whole file. A length check alone lets a flipped byte in the parameters
// through (a reader cannot tell a changed float from the original), so every byte is covered
// by a checksum, and the error names the damaged byte range of the file.

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace heterograd {

class archive_writer;
class archive_reader;

namespace detail {

// The kinds of value an archive knows, tested in this order by writer, reader and the
// archivable concept alike (a string is also a sequence; a serialize member wins over all).
template <class T>
concept serializes_itself = requires(T& x, archive_writer& w, archive_reader& r) {
  x.serialize(w);
  x.serialize(r);
};
template <class T>
concept archive_sequence = !std::is_trivially_copyable_v<T> && requires(T& x) {
  typename T::value_type;
  x.size();
  x.begin();
};
template <class T>
concept archive_pair = requires(T& x) {
  x.first;
  x.second;
};
template <class T>
concept archive_optional = requires(T& x) {
  typename T::value_type;
  x.has_value();
  *x;
  x.emplace();
  x.reset();
};

template <class T>
consteval bool is_archivable() {
  using U = std::remove_cv_t<T>;
  if constexpr (serializes_itself<U>) {
    return true;
  } else if constexpr (std::is_same_v<U, std::string> || std::is_same_v<U, std::vector<bool>>) {
    return true;
  } else if constexpr (archive_sequence<U>) {
    return is_archivable<typename U::value_type>();
  } else if constexpr (archive_pair<U>) {
    return is_archivable<decltype(U::first)>() && is_archivable<decltype(U::second)>();
  } else if constexpr (archive_optional<U>) {
    return is_archivable<typename U::value_type>();
  } else {
    return std::is_trivially_copyable_v<U>;
  }
}

}  // namespace detail

/// A type that archive_writer and archive_reader can write and read (the list at the top).
template <class T>
concept archivable = detail::is_archivable<std::remove_cvref_t<T>>();

/// What a `serialize(Archive& ar)` member may use: `Archive::saving` (a constant: true when
/// writing, when serialize() only reads the object) and `ar(x, y, ...)` over archivable
/// lvalues, which writes them or reads into them in that order.
template <class A>
concept archive = requires(A& ar, std::uint64_t& n, std::string& s, std::vector<double>& v,
                           std::optional<float>& o) {
  typename std::bool_constant<A::saving>;
  ar(n, s, v, o);
};

/// An archive that cannot be read: the message names the byte offset and what was expected.
class archive_error : public std::runtime_error {
 public:
  archive_error(std::size_t offset, const std::string& what)
      : std::runtime_error("archive: at byte " + std::to_string(offset) + ": " + what),
        offset_(offset) {}
  /// Where in the archive the read that failed began.
  std::size_t offset() const { return offset_; }

 private:
  std::size_t offset_;
};

/// Writes archivable values into a byte buffer (the format at the top).
class archive_writer {
 public:
  static constexpr bool saving = true;

  template <archivable... T>
  void operator()(const T&... xs) {
    (put(xs), ...);
  }
  const std::vector<std::byte>& bytes() const { return out_; }

 private:
  void raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  void size(std::size_t n) {
    const std::uint64_t v = n;
    raw(&v, sizeof v);
  }
  template <class T>
  void put(const T& x) {
    if constexpr (detail::serializes_itself<T>) {
      const_cast<T&>(x).serialize(*this);  // serialize() only reads the object when saving
    } else if constexpr (std::is_same_v<T, std::string>) {
      size(x.size());
      raw(x.data(), x.size());
    } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
      size(x.size());
      for (bool b : x) put(static_cast<std::uint8_t>(b));
    } else if constexpr (detail::archive_sequence<T>) {
      size(x.size());
      using V = typename T::value_type;
      if constexpr (std::is_trivially_copyable_v<V> && requires { x.data(); }) {
        raw(x.data(), x.size() * sizeof(V));
      } else {
        for (const auto& v : x) put(v);
      }
    } else if constexpr (detail::archive_pair<T>) {
      put(x.first);
      put(x.second);
    } else if constexpr (detail::archive_optional<T>) {
      put(static_cast<std::uint8_t>(x.has_value()));
      if (x) put(*x);
    } else {
      raw(&x, sizeof x);
    }
  }

  std::vector<std::byte> out_;
};

/// Reads archivable values back from bytes an archive_writer wrote, in the same order. Throws
/// archive_error when the bytes run out or a length cannot be right; the objects read into
/// are then partly overwritten.
class archive_reader {
 public:
  static constexpr bool saving = false;

  explicit archive_reader(std::span<const std::byte> in) : in_(in) {}
  template <archivable... T>
  void operator()(T&... xs) {
    (get(xs), ...);
  }
  /// True when every byte has been read (a caller checks this to refuse trailing bytes).
  bool done() const { return pos_ == in_.size(); }

 private:
  std::size_t left() const { return in_.size() - pos_; }
  void raw(void* p, std::size_t n) {
    if (n > left())
      throw archive_error(pos_, "reading " + std::to_string(n) + " bytes, but only " + std::to_string(left()) +
                                    " of the archive's " + std::to_string(in_.size()) + " are left: truncated");
    if (n > 0) std::memcpy(p, in_.data() + pos_, n);  // an empty vector's data() may be null
    pos_ += n;
  }
  // An element count followed by elements of at least `unit` bytes each: checked against what
  // is left before anything is allocated (a damaged count would otherwise ask for terabytes).
  std::size_t count(std::size_t unit) {
    const std::size_t at = pos_;
    std::uint64_t n = 0;
    raw(&n, sizeof n);
    if (n > left() / unit)
      throw archive_error(at, "a count of " + std::to_string(n) + " elements of " + std::to_string(unit) +
                                  " byte(s) each, but only " + std::to_string(left()) +
                                  " bytes follow: corrupt length");
    return static_cast<std::size_t>(n);
  }
  template <class T>
  void get(T& x) {
    if constexpr (detail::serializes_itself<T>) {
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
    } else if constexpr (detail::archive_sequence<T>) {
      using V = std::remove_const_t<typename T::value_type>;
      if constexpr (requires { x.resize(std::size_t{}); }) {
        x.resize(count(std::is_trivially_copyable_v<V> ? sizeof(V) : 1));
      } else {
        const std::size_t at = pos_;
        const std::size_t n = count(1);
        if (n != x.size())
          throw archive_error(at, "a container of fixed size " + std::to_string(x.size()) + ", found a count of " +
                                      std::to_string(n));
      }
      if constexpr (std::is_trivially_copyable_v<V> && requires { x.data(); }) {
        raw(x.data(), x.size() * sizeof(V));
      } else {
        for (auto& v : x) get(const_cast<V&>(v));
      }
    } else if constexpr (detail::archive_pair<T>) {
      get(const_cast<std::remove_const_t<decltype(x.first)>&>(x.first));
      get(x.second);
    } else if constexpr (detail::archive_optional<T>) {
      std::uint8_t has = 0;
      get(has);
      if (has) {
        x.emplace();
        get(*x);
      } else {
        x.reset();
      }
    } else {
      raw(&x, sizeof x);
    }
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

}  // namespace heterograd
