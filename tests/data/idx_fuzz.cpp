// libFuzzer entry for the IDX reader: any byte string must either decode into a consistent
// IDX array (or dataset) or throw data::format_error -- never crash, hang, read out of bounds,
// allocate past what a header declares, or trip a sanitizer.
//
// Input layout: [mode] [split: 2 bytes, little endian] [A: split bytes] [B: the rest].
//   mode bit 0 / bit 1: A / B are gzip-wrapped (a valid gzip member around fuzzed bytes),
//   mode bit 2: A and B are also written to files and read by load_idx_pair (images, labels),
//   mode bits 3-4: the model input size given to load_idx_pair (0, 1, 4 or 784).
// The whole input also goes through parse_idx and decode_idx as it is (a gzip layer of
// fuzzed bytes when it starts with 1f 8b), and the plain and gzip-wrapped decodings of A
// must agree with parse_idx (a differential check of the streaming decoder).
//
// With HG_IDX_FUZZ_SEEDS=<dir> set, LLVMFuzzerInitialize writes the seed corpus into <dir>
// (plain and gzipped images and labels, and pairs in the layout above) before libFuzzer reads it.
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "heterograd/data/idx.hpp"

namespace hd = heterograd::data;

namespace {

using bytes = std::vector<std::uint8_t>;

bytes gzip(const std::uint8_t* p, std::size_t n) {
  z_stream z{};
  if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
  bytes out(deflateBound(&z, n) + 64);
  z.next_in = const_cast<Bytef*>(p);
  z.avail_in = static_cast<uInt>(n);
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void check(const hd::idx_array& a) {
  std::size_t count = 1;
  for (auto d : a.dims) count *= d;
  if (a.dims.empty() || a.dims.size() > 4 || count != a.values.size()) std::abort();
}

/// parse_idx's result, or nullopt-like empty dims when it throws.
hd::idx_array parse_or_empty(const std::uint8_t* p, std::size_t n) {
  try {
    auto a = hd::parse_idx(p, n, "fuzz");
    check(a);
    return a;
  } catch (const hd::format_error& e) {
    if (e.offset() > n) std::abort();  // the offset points into (or just past) the input
  }
  return {};
}

hd::idx_array decode_or_empty(const bytes& b) {
  try {
    auto a = hd::decode_idx(b.data(), b.size(), "fuzz");
    check(a);
    return a;
  } catch (const hd::format_error&) {
  }
  return {};
}

const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    std::string t = (std::filesystem::temp_directory_path() / "hg_idx_fuzz_XXXXXX").string();
    if (::mkdtemp(t.data()) == nullptr) std::abort();
    std::atexit([] { std::filesystem::remove_all(scratch()); });
    return std::filesystem::path(t);
  }();
  return dir;
}

void write_file(const std::filesystem::path& p, const bytes& b) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  std::size_t done = 0;
  while (done < b.size()) {
    const ::ssize_t w = ::write(fd, b.data() + done, b.size() - done);
    if (w <= 0) std::abort();
    done += static_cast<std::size_t>(w);
  }
  ::close(fd);
}

bytes idx(std::vector<std::uint32_t> dims, const bytes& values) {
  bytes b{0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
  for (auto d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(d >> s));
  b.insert(b.end(), values.begin(), values.end());
  return b;
}

bytes pair_input(std::uint8_t mode, const bytes& a, const bytes& b) {
  bytes in{mode, static_cast<std::uint8_t>(a.size() & 0xff), static_cast<std::uint8_t>(a.size() >> 8)};
  in.insert(in.end(), a.begin(), a.end());
  in.insert(in.end(), b.begin(), b.end());
  return in;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("HG_IDX_FUZZ_SEEDS");
  if (dir == nullptr) return 0;
  const std::filesystem::path d(dir);
  const bytes images = idx({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  const bytes labels = idx({2}, {1, 9});
  const bytes gz_images = gzip(images.data(), images.size());
  const bytes gz_labels = gzip(labels.data(), labels.size());
  write_file(d / "images", pair_input(0, images, labels));
  write_file(d / "images_gz", pair_input(0, gz_images, gz_labels));  // fuzzed gzip bytes
  write_file(d / "pair", pair_input(4, images, labels));
  write_file(d / "pair_wrapped", pair_input(7, images, labels));
  write_file(d / "pair_gz", pair_input(4 | 8, gz_images, gz_labels));
  write_file(d / "pair_gz_784", pair_input(4 | 24, gz_images, gz_labels));
  write_file(d / "raw_gz", gz_images);  // a whole gzip file as the input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The whole input as one IDX file: parse_idx (decompressed bytes) and decode_idx (plain
  // or gzip) must agree on plain input.
  const hd::idx_array whole = parse_or_empty(data, size);
  const hd::idx_array whole_d = decode_or_empty(bytes(data, data + size));
  if (size < 2 || data[0] != 0x1f || data[1] != 0x8b)
    if (whole.dims != whole_d.dims || whole.values != whole_d.values) std::abort();
  if (size < 3) return 0;

  const std::uint8_t mode = data[0];
  const std::size_t rest = size - 3;
  const std::size_t split = std::min<std::size_t>(data[1] | (std::size_t{data[2]} << 8), rest);
  const bytes a_raw(data + 3, data + 3 + split), b_raw(data + 3 + split, data + size);
  const bytes a = (mode & 1) ? gzip(a_raw.data(), a_raw.size()) : a_raw;
  const bytes b = (mode & 2) ? gzip(b_raw.data(), b_raw.size()) : b_raw;

  // A wrapped in a valid gzip member decodes exactly like A itself.
  if (mode & 1) {
    const hd::idx_array plain = parse_or_empty(a_raw.data(), a_raw.size());
    const hd::idx_array inflated = decode_or_empty(a);
    if (plain.dims != inflated.dims || plain.values != inflated.values) std::abort();
  } else {
    (void)decode_or_empty(a);
  }

  if (mode & 4) {
    static const std::size_t input_sizes[4] = {0, 1, 4, 784};
    const auto images = scratch() / "images", labels = scratch() / "labels";
    write_file(images, a);
    write_file(labels, b);
    try {
      const hd::dataset d = hd::load_idx_pair(images, labels, 10, "fuzz", input_sizes[(mode >> 3) & 3]);
      d.validate();
      if (d.features.size() != d.size() * d.dim) std::abort();
      for (float v : d.features)
        if (!(v >= 0.0f && v <= 1.0f)) std::abort();
    } catch (const hd::format_error& e) {
      if (e.file() != images.string() && e.file() != labels.string()) std::abort();
    }
  }
  return 0;
}
