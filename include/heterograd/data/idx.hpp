#pragma once
// Reader for the IDX format of MNIST and Fashion-MNIST (LeCun et al.): a big-endian header
//   [0, 0, type, ndims] [dim_0 .. dim_{ndims-1} as uint32] [data]
// with type 0x08 (unsigned byte). Files are usually gzip-compressed; zlib's gz* functions read
// compressed and plain files alike. Every malformed input throws data::format_error naming the
// file and the byte offset where the problem was found.

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
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
}  // namespace detail

/// Parses an IDX byte buffer (already decompressed). `name` labels errors.
inline idx_array parse_idx(const std::uint8_t* bytes, std::size_t size, const std::string& name,
                           int expected_ndims = -1) {
  if (size < 4) throw format_error(name, size, "truncated: the 4-byte magic number is incomplete");
  if (bytes[0] != 0 || bytes[1] != 0)
    throw format_error(name, 0, "wrong magic number: the first two bytes must be zero");
  if (bytes[2] != 0x08)
    throw format_error(name, 2,
                       "unsupported element type " + std::to_string(bytes[2]) +
                           " (only 0x08, unsigned byte, is used by (Fashion-)MNIST)");
  const int ndims = bytes[3];
  if (ndims < 1 || ndims > 4)
    throw format_error(name, 3, "wrong magic number: " + std::to_string(ndims) +
                                    " dimensions (expected 1 to 4)");
  if (expected_ndims >= 0 && ndims != expected_ndims)
    throw format_error(name, 3, "wrong magic number: " + std::to_string(ndims) +
                                    " dimensions where " + std::to_string(expected_ndims) +
                                    " were expected");
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(ndims);
  if (size < header)
    throw format_error(name, size, "truncated: the dimension header needs " +
                                       std::to_string(header) + " bytes");
  idx_array out;
  std::size_t count = 1;
  for (int d = 0; d < ndims; ++d) {
    const std::uint32_t n = detail::read_be32(bytes + 4 + 4 * d);
    if (n == 0) throw format_error(name, 4 + 4 * static_cast<std::size_t>(d), "zero dimension");
    // Guard the product against overflow and absurd sizes before allocating.
    if (count > (std::size_t{1} << 34) / n)
      throw format_error(name, 4 + 4 * static_cast<std::size_t>(d), "dimensions too large");
    count *= n;
    out.dims.push_back(n);
  }
  if (size - header < count)
    throw format_error(name, size, "truncated: " + std::to_string(count) +
                                       " data bytes declared, " + std::to_string(size - header) +
                                       " present");
  if (size - header > count)
    throw format_error(name, header + count, "trailing bytes after the declared data");
  out.values.assign(bytes + header, bytes + header + count);
  return out;
}

/// Reads a whole file through zlib (gzip or plain).
inline std::vector<std::uint8_t> read_gz_file(const std::filesystem::path& path) {
  gzFile f = gzopen(path.string().c_str(), "rb");
  if (f == nullptr) {
    throw std::runtime_error("heterograd: cannot open '" + path.string() +
                             "' (check the path; Fashion-MNIST comes with Debian's "
                             "dataset-fashion-mnist package)");
  }
  std::vector<std::uint8_t> buf;
  std::uint8_t chunk[1 << 16];
  for (;;) {
    const int n = gzread(f, chunk, sizeof chunk);
    if (n < 0) {
      int err = 0;
      const std::string msg = gzerror(f, &err);
      gzclose(f);
      throw format_error(path.string(), buf.size(), "decompression failed: " + msg);
    }
    if (n == 0) break;
    buf.insert(buf.end(), chunk, chunk + n);
  }
  gzclose(f);
  return buf;
}

inline idx_array read_idx(const std::filesystem::path& path, int expected_ndims = -1) {
  const auto bytes = read_gz_file(path);
  return parse_idx(bytes.data(), bytes.size(), path.string(), expected_ndims);
}

/// Builds a dataset from an images file (N x rows x cols) and a labels file (N), scaling
/// pixels to [0, 1]. Labels must lie in [0, classes).
inline dataset load_idx_pair(const std::filesystem::path& images, const std::filesystem::path& labels,
                             std::size_t classes = 10, const std::string& name = "idx") {
  const idx_array img = read_idx(images, 3);
  const idx_array lab = read_idx(labels, 1);
  if (img.dims[0] != lab.dims[0])
    throw format_error(labels.string(), 4,
                       "label count " + std::to_string(lab.dims[0]) + " does not match image count " +
                           std::to_string(img.dims[0]) + " in " + images.string());
  dataset d;
  d.name = name;
  d.classes = classes;
  d.dim = std::size_t{img.dims[1]} * img.dims[2];
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
  return d;
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
inline train_test load_mnist_format(const std::filesystem::path& dir, const std::string& name) {
  auto file = [&](const char* stem) {
    const auto gz = dir / (std::string(stem) + ".gz");
    return std::filesystem::exists(gz) ? gz : dir / stem;
  };
  return {load_idx_pair(file("train-images-idx3-ubyte"), file("train-labels-idx1-ubyte"), 10,
                        name + "-train"),
          load_idx_pair(file("t10k-images-idx3-ubyte"), file("t10k-labels-idx1-ubyte"), 10,
                        name + "-test")};
}

inline train_test load_fashion_mnist(const std::filesystem::path& dir = {}) {
  return load_mnist_format(fashion_mnist_dir(dir), "fashion-mnist");
}

}  // namespace heterograd::data
