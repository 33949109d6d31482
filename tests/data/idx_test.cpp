#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/data/idx.hpp"
#include "hg_test.hpp"

namespace hd = heterograd::data;

// GCC 12 pairs the replaced operator new's malloc with the free below as "mismatched" when it
// inlines both into a caller (a false positive: they are malloc and free).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

// The largest single allocation made through operator new while `watching` is set: the IDX
// reader's buffers must stay within what a file's header declares.
namespace {
std::atomic<bool> watching{false};
std::atomic<std::size_t> largest{0};
}  // namespace

void* operator new(std::size_t n) {
  if (watching.load(std::memory_order_relaxed)) {
    std::size_t l = largest.load(std::memory_order_relaxed);
    while (n > l && !largest.compare_exchange_weak(l, n)) {
    }
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {
std::vector<std::uint8_t> idx_bytes(std::vector<std::uint32_t> dims,
                                    const std::vector<std::uint8_t>& values) {
  std::vector<std::uint8_t> b{0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
  for (auto d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(d >> s));
  b.insert(b.end(), values.begin(), values.end());
  return b;
}
std::size_t error_offset(const std::vector<std::uint8_t>& b, int ndims = -1) {
  try {
    hd::parse_idx(b.data(), b.size(), "test.idx", ndims);
  } catch (const hd::format_error& e) {
    BOOST_TEST(std::string(e.what()).find("test.idx") != std::string::npos);
    return e.offset();
  }
  return static_cast<std::size_t>(-1);
}
std::filesystem::path temp_dir() {
  auto d = std::filesystem::temp_directory_path() /
           ("hg_idx_" + std::to_string(hg_test::seed()) + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d;
}
void write_gz(const std::filesystem::path& p, const std::vector<std::uint8_t>& b) {
  gzFile f = gzopen(p.string().c_str(), "wb");
  gzwrite(f, b.data(), static_cast<unsigned>(b.size()));
  gzclose(f);
}
/// `b` as one gzip member (RFC 1952), in memory.
std::vector<std::uint8_t> gzip_bytes(const std::vector<std::uint8_t>& b) {
  z_stream z{};
  BOOST_REQUIRE_EQUAL(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::vector<std::uint8_t> out(deflateBound(&z, b.size()) + 64);
  z.next_in = const_cast<Bytef*>(b.data());
  z.avail_in = static_cast<uInt>(b.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  BOOST_REQUIRE_EQUAL(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}
void write_bytes(const std::filesystem::path& p, const std::vector<std::uint8_t>& b) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
/// The message of read_idx's format_error on `p` ("" if it did not throw one); it must name
/// the file.
std::string read_error(const std::filesystem::path& p, int ndims = -1) {
  try {
    hd::read_idx(p, ndims);
  } catch (const hd::format_error& e) {
    BOOST_TEST(e.file() == p.string());
    BOOST_TEST(std::string(e.what()).find(p.string()) != std::string::npos);
    return e.what();
  }
  return "";
}
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(idx)

BOOST_AUTO_TEST_CASE(a_well_formed_idx_buffer_parses_to_its_dimensions_and_values) {
  const auto b = idx_bytes({2, 3}, {1, 2, 3, 4, 5, 6});
  const auto a = hd::parse_idx(b.data(), b.size(), "ok");
  BOOST_TEST(a.dims == (std::vector<std::uint32_t>{2, 3}));
  BOOST_TEST(a.values == (std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6}));
}

BOOST_AUTO_TEST_CASE(malformed_buffers_throw_with_the_byte_offset_of_the_problem) {
  BOOST_TEST(error_offset({0, 0, 8}) == 3u);                        // truncated magic
  BOOST_TEST(error_offset({1, 0, 8, 1, 0, 0, 0, 1, 7}) == 0u);      // wrong magic
  BOOST_TEST(error_offset({0, 0, 0x0d, 1, 0, 0, 0, 1, 7}) == 2u);   // float type unsupported
  BOOST_TEST(error_offset(idx_bytes({2, 2}, {1, 2, 3}), 2) == 15u);  // truncated data
  BOOST_TEST(error_offset(idx_bytes({2}, {1, 2, 3}), 1) == 10u);     // trailing byte
  BOOST_TEST(error_offset(idx_bytes({2}, {1, 2}), 3) == 3u);         // wrong rank
  BOOST_TEST(error_offset(idx_bytes({0}, {}), 1) == 4u);             // zero dimension
  BOOST_TEST(error_offset({0, 0, 8, 2, 0, 0}) == 6u);                // truncated header
}

BOOST_AUTO_TEST_CASE(an_image_and_label_pair_loads_scaled_and_checks_counts_and_ranges) {
  const auto dir = temp_dir();
  write_gz(dir / "img.gz", idx_bytes({2, 1, 2}, {0, 255, 51, 102}));
  write_gz(dir / "lab.gz", idx_bytes({2}, {3, 9}));
  const auto d = hd::load_idx_pair(dir / "img.gz", dir / "lab.gz");
  BOOST_TEST(d.size() == 2u);
  BOOST_TEST(d.dim == 2u);
  BOOST_TEST(d.features == (std::vector<float>{0.0f, 1.0f, 51 / 255.0f, 102 / 255.0f}));
  BOOST_TEST(d.labels == (std::vector<std::int32_t>{3, 9}));
  BOOST_CHECK_NO_THROW(d.validate());

  write_gz(dir / "lab3.gz", idx_bytes({3}, {1, 2, 3}));
  BOOST_CHECK_THROW(hd::load_idx_pair(dir / "img.gz", dir / "lab3.gz"), hd::format_error);
  write_gz(dir / "labbad.gz", idx_bytes({2}, {1, 10}));
  try {
    hd::load_idx_pair(dir / "img.gz", dir / "labbad.gz");
    BOOST_FAIL("label 10 accepted");
  } catch (const hd::format_error& e) {
    BOOST_TEST(e.offset() == 9u);  // header 8 bytes + index 1
  }
  // Plain (uncompressed) files read the same way.
  {
    const auto b = idx_bytes({2}, {4, 5});
    std::ofstream(dir / "plain", std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  BOOST_TEST(hd::read_idx(dir / "plain").values == (std::vector<std::uint8_t>{4, 5}));
  BOOST_CHECK_THROW(hd::read_idx(dir / "missing.gz"), std::runtime_error);
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_gzip_bomb_under_a_small_header_is_refused_without_inflating_it) {
  // 10 declared values followed by 64 MiB of zeros (about 64 KiB compressed).
  std::vector<std::uint8_t> raw = idx_bytes({10}, std::vector<std::uint8_t>(10, 1));
  raw.resize(raw.size() + (std::size_t{64} << 20), 0);
  const auto dir = temp_dir();
  write_bytes(dir / "bomb.gz", gzip_bytes(raw));
  raw = {};
  largest = 0;
  watching = true;
  const std::string e = read_error(dir / "bomb.gz");
  watching = false;
  BOOST_TEST(contains(e, "trailing bytes after the declared data"), e);
  BOOST_TEST(contains(e, "at byte 18:"), e);  // 8 header bytes + 10 values
  BOOST_TEST(largest.load() < std::size_t{64} << 10);  // nothing near the 64 MiB

  // A header that declares more than the file can inflate to is refused before inflating.
  write_bytes(dir / "huge.gz", gzip_bytes(idx_bytes({1u << 10, 1u << 10, 1u << 10}, {1, 2, 3})));
  const std::string h = read_error(dir / "huge.gz");
  BOOST_TEST(contains(h, "more than a gzip file of"), h);

  // A header that declares 40 MB over 1 MiB of incompressible data allocates at most twice
  // what the stream holds, then reports the truncation.
  std::vector<std::uint8_t> noise(std::size_t{1} << 20);
  std::uint64_t x = hg_test::seed() | 1;
  for (auto& v : noise) {  // xorshift64: deflate cannot shrink it
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = static_cast<std::uint8_t>(x >> 56);
  }
  write_bytes(dir / "short.gz", gzip_bytes(idx_bytes({40, 1000, 1000}, noise)));
  largest = 0;
  watching = true;
  const std::string t = read_error(dir / "short.gz");
  watching = false;
  BOOST_TEST(contains(t, "truncated: 40000000 data bytes declared, 1048576 present"), t);
  BOOST_TEST(largest.load() <= (std::size_t{2} << 20) + 4096);
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_fifo_dev_zero_and_a_directory_are_refused_at_once) {
  const auto dir = temp_dir();
  const auto fifo = dir / "fifo";
  BOOST_REQUIRE_EQUAL(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  // No writer: a blocking open would wait forever; a read would wait for data.
  BOOST_TEST(contains(read_error(fifo), "not a regular file"));
  BOOST_TEST(contains(read_error("/dev/zero"), "not a regular file"));  // endless zeros
  BOOST_TEST(contains(read_error(dir), "not a regular file"));
  BOOST_CHECK_THROW(hd::load_idx_pair(fifo, fifo), hd::format_error);
  BOOST_TEST(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 5.0);
  // A symbolic link to a regular file is a regular file.
  write_bytes(dir / "plain", idx_bytes({2}, {4, 5}));
  std::filesystem::create_symlink(dir / "plain", dir / "link");
  BOOST_TEST(hd::read_idx(dir / "link").values == (std::vector<std::uint8_t>{4, 5}));
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_damaged_gzip_trailer_or_stream_is_refused_naming_the_rule) {
  const auto dir = temp_dir();
  const auto good = gzip_bytes(idx_bytes({3, 2}, {1, 2, 3, 4, 5, 6}));
  write_bytes(dir / "good.gz", good);
  BOOST_TEST(hd::read_idx(dir / "good.gz").values == (std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6}));
  auto crc = good;
  crc[crc.size() - 8] ^= 0x01;  // the trailer: CRC-32 (4 bytes), then ISIZE (4 bytes)
  write_bytes(dir / "crc.gz", crc);
  const std::string c = read_error(dir / "crc.gz");
  BOOST_TEST(contains(c, "gzip trailer: the CRC-32 does not match"), c);
  auto isize = good;
  isize[isize.size() - 4] ^= 0x01;
  write_bytes(dir / "isize.gz", isize);
  const std::string s = read_error(dir / "isize.gz");
  BOOST_TEST(contains(s, "gzip trailer: ISIZE does not match"), s);
  // The file cut inside the trailer, and inside the deflate data.
  write_bytes(dir / "cut.gz", std::vector<std::uint8_t>(good.begin(), good.end() - 3));
  BOOST_TEST(contains(read_error(dir / "cut.gz"), "gzip: truncated stream"));
  write_bytes(dir / "cut2.gz", std::vector<std::uint8_t>(good.begin(), good.begin() + 14));
  BOOST_TEST(contains(read_error(dir / "cut2.gz"), "truncated"));
  // A corrupt deflate block.
  auto bad = good;
  bad[10] = 0xff;  // first byte after the 10-byte gzip header: block type 3 is invalid
  write_bytes(dir / "bad.gz", bad);
  BOOST_TEST(contains(read_error(dir / "bad.gz"), "gzip: corrupt stream"));
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(trailing_garbage_after_the_gzip_stream_or_the_idx_data_is_refused) {
  const auto dir = temp_dir();
  const auto raw = idx_bytes({3}, {1, 2, 3});
  auto gz = gzip_bytes(raw);
  const std::size_t end = gz.size();
  gz.push_back(0);  // one byte of padding
  write_bytes(dir / "pad.gz", gz);
  const std::string p = read_error(dir / "pad.gz");
  BOOST_TEST(contains(p, "gzip: trailing bytes after the gzip stream"), p);
  BOOST_TEST(contains(p, "at byte " + std::to_string(end) + ":"), p);
  // A second gzip member is refused too (gzread would have appended it silently).
  auto two = gzip_bytes(raw);
  const auto more = gzip_bytes({9, 9});
  two.insert(two.end(), more.begin(), more.end());
  write_bytes(dir / "two.gz", two);
  BOOST_TEST(contains(read_error(dir / "two.gz"), "trailing bytes after the gzip stream"));
  // Inside the gzip stream: more data than the header declares.
  auto longer = raw;
  longer.push_back(4);
  write_bytes(dir / "long.gz", gzip_bytes(longer));
  const std::string l = read_error(dir / "long.gz");
  BOOST_TEST(contains(l, "trailing bytes after the declared data"), l);
  BOOST_TEST(contains(l, "at byte 11:"), l);
  // A plain file with a byte after its data.
  write_bytes(dir / "long", longer);
  const std::string pl = read_error(dir / "long");
  BOOST_TEST(contains(pl, "trailing bytes after the declared data (1 bytes)"), pl);
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_header_that_declares_more_than_the_file_holds_is_refused) {
  const auto dir = temp_dir();
  const auto raw = idx_bytes({100, 100, 100}, std::vector<std::uint8_t>(10, 7));
  write_bytes(dir / "short", raw);  // plain: checked against the file size, nothing read
  largest = 0;
  watching = true;
  const std::string p = read_error(dir / "short", 3);
  watching = false;
  BOOST_TEST(contains(p, "truncated: 1000000 data bytes declared, 10 present"), p);
  BOOST_TEST(largest.load() < std::size_t{64} << 10);
  // gzip: 1 MB cannot come out of 32 bytes, refused before inflating; the truncation after
  // inflating is checked by a_gzip_bomb_under_a_small_header_is_refused_without_inflating_it.
  write_bytes(dir / "short.gz", gzip_bytes(raw));
  const std::string g = read_error(dir / "short.gz", 3);
  BOOST_TEST(contains(g, "the header declares 1000016 bytes, more than a gzip file of"), g);
  BOOST_TEST(contains(g, "at byte 4:"), g);
  // Within deflate's ratio, the stream ends before the declared data.
  write_bytes(dir / "short2.gz", gzip_bytes(idx_bytes({3, 2, 2}, std::vector<std::uint8_t>(10, 7))));
  const std::string g2 = read_error(dir / "short2.gz", 3);
  BOOST_TEST(contains(g2, "truncated: 12 data bytes declared, 10 present"), g2);
  BOOST_TEST(contains(g2, "at byte 26:"), g2);  // 16 header bytes + 10 values
  // The header itself cut short, plain and compressed.
  write_bytes(dir / "head", {0, 0, 8, 3, 0, 0, 0, 1});
  BOOST_TEST(contains(read_error(dir / "head"), "the dimension header needs 16 bytes"));
  write_bytes(dir / "head.gz", gzip_bytes({0, 0, 8}));
  BOOST_TEST(contains(read_error(dir / "head.gz"), "the 4-byte magic number is incomplete"));
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(train_and_test_images_of_different_sizes_or_the_wrong_input_size_are_refused) {
  const auto dir = temp_dir();
  write_gz(dir / "train-images-idx3-ubyte.gz", idx_bytes({2, 2, 2}, std::vector<std::uint8_t>(8, 9)));
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx_bytes({2}, {0, 1}));
  write_gz(dir / "t10k-images-idx3-ubyte.gz", idx_bytes({1, 1, 4}, {1, 2, 3, 4}));
  write_gz(dir / "t10k-labels-idx1-ubyte.gz", idx_bytes({1}, {1}));
  // 1 x 4 has the pixel count of 2 x 2, but not its shape.
  try {
    hd::load_mnist_format(dir, "tiny");
    BOOST_FAIL("test images of another shape accepted");
  } catch (const hd::format_error& e) {
    const std::string m = e.what();
    BOOST_TEST(e.file() == (dir / "t10k-images-idx3-ubyte.gz").string());
    BOOST_TEST(contains(m, "images are 1 x 4 but those of"), m);
    BOOST_TEST(contains(m, "train-images-idx3-ubyte.gz are 2 x 2"), m);
    BOOST_TEST(contains(m, "train and test images must have the same size"), m);
  }
  write_gz(dir / "t10k-images-idx3-ubyte.gz", idx_bytes({1, 2, 2}, {1, 2, 3, 4}));
  const auto tt = hd::load_mnist_format(dir, "tiny", 4);
  BOOST_TEST(tt.train.dim == 4u);
  BOOST_TEST(tt.test.dim == 4u);
  // The model's input size: rows x cols must equal it.
  try {
    hd::load_mnist_format(dir, "tiny", 784);
    BOOST_FAIL("2 x 2 images accepted for a 784-input model");
  } catch (const hd::format_error& e) {
    BOOST_TEST(contains(e.what(), "images of 2 x 2 = 4 pixels do not match the model's input size 784"),
               e.what());
  }
  BOOST_CHECK_THROW(hd::load_fashion_mnist(dir), hd::format_error);  // Fashion-MNIST is 28 x 28
  BOOST_CHECK_THROW(hd::load_idx_pair(dir / "train-images-idx3-ubyte.gz",
                                      dir / "train-labels-idx1-ubyte.gz", 10, "x", 5),
                    hd::format_error);
  BOOST_TEST(hd::load_idx_pair(dir / "train-images-idx3-ubyte.gz", dir / "train-labels-idx1-ubyte.gz",
                               10, "x", 4).size() == 2u);
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(decode_idx_reads_plain_and_gzip_buffers_alike) {
  const auto raw = idx_bytes({2, 2}, {1, 2, 3, 4});
  const auto gz = gzip_bytes(raw);
  BOOST_TEST(hd::decode_idx(raw.data(), raw.size(), "m").values == (std::vector<std::uint8_t>{1, 2, 3, 4}));
  BOOST_TEST(hd::decode_idx(gz.data(), gz.size(), "m").dims == (std::vector<std::uint32_t>{2, 2}));
  BOOST_CHECK_THROW(hd::decode_idx(gz.data(), gz.size(), "m", 3), hd::format_error);
}

BOOST_AUTO_TEST_CASE(fashion_mnist_from_the_debian_package_has_the_published_shape) {
  const auto dir = hd::fashion_mnist_dir();
  if (!std::filesystem::exists(dir / "train-images-idx3-ubyte.gz")) {
    BOOST_FAIL("Fashion-MNIST not found in " << dir << ": ./hg deps installs dataset-fashion-mnist");
  }
  const auto tt = hd::load_fashion_mnist();
  BOOST_TEST(tt.train.size() == 60000u);
  BOOST_TEST(tt.test.size() == 10000u);
  BOOST_TEST(tt.train.dim == 784u);
  // Fashion-MNIST is balanced: 6000 training and 1000 test images per class.
  std::vector<int> counts(10, 0);
  for (auto y : tt.test.labels) counts[static_cast<std::size_t>(y)]++;
  for (int c : counts) BOOST_TEST(c == 1000);
  float mx = 0;
  for (float v : tt.train.features) mx = std::max(mx, v);
  BOOST_TEST(mx == 1.0f);
}

BOOST_AUTO_TEST_SUITE_END()
