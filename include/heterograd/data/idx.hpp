#pragma once
// Reader for the IDX format of MNIST and Fashion-MNIST (LeCun et al.): a big-endian header
//   [0, 0, type, ndims] [dim_0 .. dim_{ndims-1} as uint32] [data]
// with type 0x08 (unsigned byte), plain or gzip-compressed (RFC 1952, one member). Every
// malformed input throws data::format_error naming the file, the byte offset and the rule.
//
// Hostile files are normal input, so the reader never trusts a size it has not checked:
//   - only regular files are read: the file is opened with O_NONBLOCK (opening a FIFO with no
//     writer would block) and refused at once unless fstat says S_ISREG, so a FIFO, /dev/zero
//     or a directory is an error, never an endless read;
//   - the IDX header is decoded first (the first 4 + 4 * ndims bytes of the stream) and the
//     data it declares is checked against what the file can hold before anything is inflated:
//     a plain file's size must be exactly header + data, and a gzip file cannot inflate to
//     more than 1032 times its size (deflate's maximum ratio, zlib's FAQ);
//   - the buffer grows with the data actually inflated (doubling, from 64 KiB) and never past
//     the declared size: a gzip bomb under a small header allocates at most what that header
//     declares plus a 64-byte probe, and a header that lies upwards allocates at most twice
//     what the stream really holds;
//   - the gzip trailer is checked (zlib compares the CRC-32 and ISIZE with the inflated data),
//     and bytes after the gzip member, or after the declared IDX data, are an error.
// Offsets: IDX-level errors give the offset in the (decompressed) IDX stream, gzip-level
// errors the offset in the compressed file; the message says which.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/data/dataset.hpp"

namespace heterograd::data {

/// A file whose content is not what it claims to be.
class format_error : public std::runtime_error {
 public:
  format_error(const std::string& file, std::size_t offset, const std::string& what)
      : std::runtime_error("heterograd: " + file + ": at byte " + std::to_string(offset) + ": " +
                           what),
        file_(file),
        offset_(offset) {}
  const std::string& file() const { return file_; }
  std::size_t offset() const { return offset_; }

 private:
  std::string file_;
  std::size_t offset_;
};

/// A decoded IDX array of unsigned bytes.
struct idx_array {
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> values;
};

namespace detail {

inline std::uint32_t read_be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

/// The largest IDX payload accepted (16 GiB): far above (Fashion-)MNIST's 47 MB, far below
/// where a product of four uint32 dimensions could overflow size_t.
inline constexpr std::size_t max_idx_values = std::size_t{1} << 34;

/// deflate's maximum compression ratio (zlib FAQ: 1032:1), plus room for tiny streams.
inline constexpr std::uint64_t max_inflate_ratio = 1032;
inline constexpr std::uint64_t inflate_slack = 4096;

/// Checks the 4-byte magic number; returns ndims.
inline int check_magic(const std::uint8_t* b, const std::string& name, int expected_ndims) {
  if (b[0] != 0 || b[1] != 0)
    throw format_error(name, 0, "wrong magic number: the first two bytes must be zero");
  if (b[2] != 0x08)
    throw format_error(name, 2,
                       "unsupported element type " + std::to_string(b[2]) +
                           " (only 0x08, unsigned byte, is used by (Fashion-)MNIST)");
  const int ndims = b[3];
  if (ndims < 1 || ndims > 4)
    throw format_error(name, 3, "wrong magic number: " + std::to_string(ndims) +
                                    " dimensions (expected 1 to 4)");
  if (expected_ndims >= 0 && ndims != expected_ndims)
    throw format_error(name, 3, "wrong magic number: " + std::to_string(ndims) +
                                    " dimensions where " + std::to_string(expected_ndims) +
                                    " were expected");
  return ndims;
}

/// Decodes the dimensions after the magic number into `dims`; returns their product.
inline std::size_t parse_dims(const std::uint8_t* b, int ndims, const std::string& name,
                              std::vector<std::uint32_t>& dims) {
  std::size_t count = 1;
  for (int d = 0; d < ndims; ++d) {
    const std::size_t at = 4 + 4 * static_cast<std::size_t>(d);
    const std::uint32_t n = read_be32(b + at);
    if (n == 0) throw format_error(name, at, "zero dimension");
    // Guard the product against overflow and absurd sizes before anything is allocated.
    if (count > max_idx_values / n)
      throw format_error(name, at, "dimensions too large (more than 2^34 values)");
    count *= n;
    dims.push_back(n);
  }
  return count;
}

/// A regular file opened for reading (RAII over a POSIX descriptor).
class regular_file {
 public:
  explicit regular_file(const std::filesystem::path& path) : name_(path.string()) {
    // O_NONBLOCK: opening a FIFO that has no writer would otherwise block before fstat can
    // refuse it. It changes nothing for the regular files that pass the check below.
    fd_ = ::open(name_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) {
      const int e = errno;
      throw std::runtime_error("heterograd: cannot open '" + name_ + "': " + std::strerror(e) +
                               " (check the path; Fashion-MNIST comes with Debian's "
                               "dataset-fashion-mnist package)");
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      fd_ = -1;
      throw format_error(name_, 0,
                         "not a regular file (FIFOs, devices such as /dev/zero, sockets and "
                         "directories are refused: the IDX reader reads regular files only)");
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
  }
  regular_file(const regular_file&) = delete;
  regular_file& operator=(const regular_file&) = delete;
  ~regular_file() {
    if (fd_ >= 0) ::close(fd_);
  }
  std::uint64_t size() const { return size_; }
  /// Reads up to n bytes; 0 at the end of the file.
  std::size_t read(std::uint8_t* out, std::size_t n) {
    for (;;) {
      const ::ssize_t r = ::read(fd_, out, n);
      if (r >= 0) return static_cast<std::size_t>(r);
      if (errno == EINTR) continue;
      const int e = errno;
      throw std::runtime_error("heterograd: cannot read '" + name_ + "': " + std::strerror(e));
    }
  }

 private:
  std::string name_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

/// An in-memory input with the file's read interface (tests and the fuzzer).
class memory_source {
 public:
  memory_source(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint64_t size() const { return size_; }
  std::size_t read(std::uint8_t* out, std::size_t n) {
    const std::size_t k = std::min(n, size_ - pos_);
    if (k > 0) std::memcpy(out, data_ + pos_, k);
    pos_ += k;
    return k;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

/// The IDX byte stream of a source: its bytes as they are, or inflated from one gzip member.
/// pull() returns the next bytes of the stream (0 at its end); finish() checks that nothing
/// follows (no more IDX bytes, no bytes after the gzip member).
template <class Source>
class idx_stream {
 public:
  idx_stream(Source& src, const std::string& name) : src_(src), name_(name) {
    refill();
    gzip_ = avail_ >= 2 && in_[0] == 0x1f && in_[1] == 0x8b;
    if (gzip_) {
      z_ = z_stream{};
      // 15 + 16: a gzip wrapper only (no zlib, no raw deflate); zlib then checks the header
      // and, at the end, the trailer's CRC-32 and ISIZE against what it inflated.
      const int rc = inflateInit2(&z_, 15 + 16);
      if (rc == Z_MEM_ERROR) throw std::bad_alloc();
      if (rc != Z_OK) throw std::runtime_error("heterograd: zlib inflateInit2 failed");
      z_open_ = true;
    }
  }
  idx_stream(const idx_stream&) = delete;
  idx_stream& operator=(const idx_stream&) = delete;
  ~idx_stream() {
    if (z_open_) inflateEnd(&z_);
  }

  bool gzip() const { return gzip_; }

  /// Fills out[0, n) as far as the stream goes; returns the bytes written (< n: the end).
  std::size_t pull(std::uint8_t* out, std::size_t n) {
    std::size_t got = 0;
    while (got < n) {
      if (!gzip_) {
        if (avail_ == 0 && !refill()) break;
        const std::size_t k = std::min(n - got, avail_);
        std::memcpy(out + got, in_ + next_, k);
        next_ += k;
        avail_ -= k;
        got += k;
        continue;
      }
      if (ended_) break;
      if (avail_ == 0) refill();
      const std::size_t want = std::min<std::size_t>(n - got, std::size_t{1} << 30);
      z_.next_in = in_ + next_;
      z_.avail_in = static_cast<uInt>(avail_);
      z_.next_out = out + got;
      z_.avail_out = static_cast<uInt>(want);
      const int rc = inflate(&z_, Z_NO_FLUSH);
      const std::size_t used = avail_ - z_.avail_in, produced = want - z_.avail_out;
      next_ += used;
      avail_ -= used;
      consumed_ += used;
      got += produced;
      if (rc == Z_STREAM_END) {
        ended_ = true;
        continue;
      }
      if (rc == Z_MEM_ERROR) throw std::bad_alloc();
      if (rc != Z_OK && rc != Z_BUF_ERROR) fail(rc);
      if (used == 0 && produced == 0) {
        // No progress: zlib has flushed everything it holds and needs input there is not.
        if (avail_ == 0 && eof_)
          throw format_error(name_, consumed_,
                             "gzip: truncated stream (the file ends before the gzip trailer)");
        fail(rc);  // input left and no progress: not a state a sound stream reaches
      }
    }
    return got;
  }

  /// Checks that the stream has ended where the IDX data ended (`at`: bytes pulled so far).
  void finish(std::size_t at) {
    std::uint8_t probe[64];
    if (pull(probe, sizeof probe) != 0)
      throw format_error(name_, at,
                         "trailing bytes after the declared data (the stream is longer than the "
                         "IDX header declares)");
    if (gzip_ && (avail_ > 0 || refill()))
      throw format_error(name_, consumed_,
                         "gzip: trailing bytes after the gzip stream (one gzip member is read; "
                         "concatenated members and padding are refused)");
  }

 private:
  bool refill() {
    if (eof_) return false;
    next_ = 0;
    avail_ = src_.read(in_, sizeof in_);
    if (avail_ == 0) eof_ = true;
    return avail_ > 0;
  }

  [[noreturn]] void fail(int rc) {
    const std::string msg = z_.msg != nullptr ? z_.msg : "error " + std::to_string(rc);
    if (msg == "incorrect data check")
      throw format_error(name_, consumed_,
                         "gzip trailer: the CRC-32 does not match the inflated data (the file is "
                         "damaged)");
    if (msg == "incorrect length check")
      throw format_error(name_, consumed_,
                         "gzip trailer: ISIZE does not match the inflated length (the file is "
                         "damaged)");
    throw format_error(name_, consumed_, "gzip: corrupt stream (zlib: " + msg + ")");
  }

  Source& src_;
  const std::string& name_;
  std::uint8_t in_[1 << 16];
  std::size_t next_ = 0, avail_ = 0;
  std::uint64_t consumed_ = 0;  // compressed bytes inflate has used
  bool eof_ = false, gzip_ = false, ended_ = false, z_open_ = false;
  z_stream z_{};
};

/// Decodes an IDX array from a source, plain or gzip, with the checks listed at the top.
template <class Source>
idx_array decode_idx(Source& src, const std::string& name, int expected_ndims) {
  idx_stream<Source> s(src, name);
  std::uint8_t head[4 + 4 * 4];
  std::size_t got = s.pull(head, 4);
  if (got < 4) throw format_error(name, got, "truncated: the 4-byte magic number is incomplete");
  const int ndims = check_magic(head, name, expected_ndims);
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(ndims);
  got += s.pull(head + 4, header - 4);
  if (got < header)
    throw format_error(name, got, "truncated: the dimension header needs " +
                                      std::to_string(header) + " bytes");
  idx_array out;
  const std::size_t count = parse_dims(head, ndims, name, out.dims);
  const std::uint64_t total = header + static_cast<std::uint64_t>(count);
  // What the header declares is checked against the file before anything is inflated.
  if (!s.gzip()) {
    if (src.size() < total)
      throw format_error(name, static_cast<std::size_t>(src.size()),
                         "truncated: " + std::to_string(count) + " data bytes declared, " +
                             std::to_string(src.size() > header ? src.size() - header : 0) +
                             " present");
    if (src.size() > total)
      throw format_error(name, static_cast<std::size_t>(total),
                         "trailing bytes after the declared data (" +
                             std::to_string(src.size() - total) + " bytes)");
  } else if (total > max_inflate_ratio * src.size() + inflate_slack) {
    throw format_error(name, 4,
                       "the header declares " + std::to_string(total) +
                           " bytes, more than a gzip file of " + std::to_string(src.size()) +
                           " bytes can inflate to (deflate's ratio is at most 1032:1)");
  }
  // Grow with what really arrives, never past the declared count.
  std::size_t have = 0;
  std::size_t cap = std::min<std::size_t>(count, std::size_t{1} << 16);
  for (;;) {
    out.values.resize(cap);
    const std::size_t k = s.pull(out.values.data() + have, cap - have);
    have += k;
    if (have < cap) break;  // the stream ended
    if (cap == count) break;
    cap = count - cap > cap ? 2 * cap : count;
  }
  if (have < count)
    throw format_error(name, header + have,
                       "truncated: " + std::to_string(count) + " data bytes declared, " +
                           std::to_string(have) + " present");
  s.finish(header + count);
  return out;
}

}  // namespace detail

/// Parses an IDX byte buffer (already decompressed). `name` labels errors.
inline idx_array parse_idx(const std::uint8_t* bytes, std::size_t size, const std::string& name,
                           int expected_ndims = -1) {
  if (size < 4) throw format_error(name, size, "truncated: the 4-byte magic number is incomplete");
  const int ndims = detail::check_magic(bytes, name, expected_ndims);
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(ndims);
  if (size < header)
    throw format_error(name, size, "truncated: the dimension header needs " +
                                       std::to_string(header) + " bytes");
  idx_array out;
  const std::size_t count = detail::parse_dims(bytes, ndims, name, out.dims);
  if (size - header < count)
    throw format_error(name, size, "truncated: " + std::to_string(count) +
                                       " data bytes declared, " + std::to_string(size - header) +
                                       " present");
  if (size - header > count)
    throw format_error(name, header + count, "trailing bytes after the declared data");
  out.values.assign(bytes + header, bytes + header + count);
  return out;
}

/// Decodes an IDX file's bytes held in memory, plain or gzip-compressed, with every check
/// read_idx makes (the fuzzer's entry to the gzip layer).
inline idx_array decode_idx(const std::uint8_t* bytes, std::size_t size, const std::string& name,
                            int expected_ndims = -1) {
  detail::memory_source src(bytes, size);
  return detail::decode_idx(src, name, expected_ndims);
}

/// Reads an IDX file, plain or gzip-compressed (regular files only).
inline idx_array read_idx(const std::filesystem::path& path, int expected_ndims = -1) {
  detail::regular_file f(path);
  return detail::decode_idx(f, path.string(), expected_ndims);
}

namespace detail {

/// The pair of files behind a dataset, with the image shape it must have (0: any).
struct image_shape {
  std::uint32_t rows = 0, cols = 0;
};

inline dataset load_idx_pair(const std::filesystem::path& images,
                             const std::filesystem::path& labels, std::size_t classes,
                             const std::string& name, std::size_t input_size,
                             const std::filesystem::path* like_file, image_shape* shape) {
  const idx_array img = read_idx(images, 3);
  const std::uint32_t rows = img.dims[1], cols = img.dims[2];
  const std::size_t pixels = std::size_t{rows} * cols;
  const std::string dims = std::to_string(rows) + " x " + std::to_string(cols);
  if (like_file != nullptr && (rows != shape->rows || cols != shape->cols))
    throw format_error(images.string(), 8,
                       "images are " + dims + " but those of " + like_file->string() + " are " +
                           std::to_string(shape->rows) + " x " + std::to_string(shape->cols) +
                           " (train and test images must have the same size)");
  if (input_size != 0 && pixels != input_size)
    throw format_error(images.string(), 8,
                       "images of " + dims + " = " + std::to_string(pixels) +
                           " pixels do not match the model's input size " +
                           std::to_string(input_size));
  const idx_array lab = read_idx(labels, 1);
  if (img.dims[0] != lab.dims[0])
    throw format_error(labels.string(), 4,
                       "label count " + std::to_string(lab.dims[0]) + " does not match image count " +
                           std::to_string(img.dims[0]) + " in " + images.string());
  dataset d;
  d.name = name;
  d.classes = classes;
  d.dim = pixels;
  d.labels.resize(lab.dims[0]);
  for (std::size_t i = 0; i < d.labels.size(); ++i) {
    if (lab.values[i] >= classes)
      throw format_error(labels.string(), 8 + i,
                         "label " + std::to_string(lab.values[i]) + " out of range [0, " +
                             std::to_string(classes) + ")");
    d.labels[i] = lab.values[i];
  }
  d.features.resize(img.values.size());
  for (std::size_t i = 0; i < img.values.size(); ++i) d.features[i] = static_cast<float>(img.values[i]) / 255.0f;
  if (shape != nullptr) *shape = {rows, cols};
  return d;
}

}  // namespace detail

/// Builds a dataset from an images file (N x rows x cols) and a labels file (N), scaling
/// pixels to [0, 1]. Labels must lie in [0, classes). `input_size` (0: any) is the model's
/// input size, which rows x cols must equal.
inline dataset load_idx_pair(const std::filesystem::path& images, const std::filesystem::path& labels,
                             std::size_t classes = 10, const std::string& name = "idx",
                             std::size_t input_size = 0) {
  return detail::load_idx_pair(images, labels, classes, name, input_size, nullptr, nullptr);
}

/// Where Fashion-MNIST is: `dir` if given, else $HG_FASHION_MNIST_DIR, else the location of
/// Debian's dataset-fashion-mnist package.
inline std::filesystem::path fashion_mnist_dir(const std::filesystem::path& dir = {}) {
  if (!dir.empty()) return dir;
  if (const char* env = std::getenv("HG_FASHION_MNIST_DIR")) return env;
  return "/usr/share/datasets/fashion-mnist";
}

struct train_test {
  dataset train;
  dataset test;
};

/// Loads the (Fashion-)MNIST train and test splits from `dir` (same file names for both).
/// The test images must have the training images' rows x cols, and rows x cols must equal
/// `input_size` unless it is 0.
inline train_test load_mnist_format(const std::filesystem::path& dir, const std::string& name,
                                    std::size_t input_size = 0) {
  auto file = [&](const char* stem) {
    const auto gz = dir / (std::string(stem) + ".gz");
    return std::filesystem::exists(gz) ? gz : dir / stem;
  };
  const auto train_images = file("train-images-idx3-ubyte");
  detail::image_shape shape;
  train_test tt;
  tt.train = detail::load_idx_pair(train_images, file("train-labels-idx1-ubyte"), 10,
                                   name + "-train", input_size, nullptr, &shape);
  tt.test = detail::load_idx_pair(file("t10k-images-idx3-ubyte"), file("t10k-labels-idx1-ubyte"),
                                  10, name + "-test", input_size, &train_images, &shape);
  return tt;
}

/// Fashion-MNIST (Xiao et al. 2017): 28 x 28 images, so `input_size` defaults to 784.
inline train_test load_fashion_mnist(const std::filesystem::path& dir = {},
                                     std::size_t input_size = 784) {
  return load_mnist_format(fashion_mnist_dir(dir), "fashion-mnist", input_size);
}

}  // namespace heterograd::data
