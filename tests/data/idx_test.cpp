#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <zlib.h>
#include <boost/test/unit_test.hpp>

#include "heterograd/data/idx.hpp"
#include "hg_test.hpp"

namespace hd = heterograd::data;

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
  auto d = std::filesystem::temp_directory_path() / ("hg_idx_" + std::to_string(hg_test::seed()));
  std::filesystem::create_directories(d);
  return d;
}
void write_gz(const std::filesystem::path& p, const std::vector<std::uint8_t>& b) {
  gzFile f = gzopen(p.string().c_str(), "wb");
  gzwrite(f, b.data(), static_cast<unsigned>(b.size()));
  gzclose(f);
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
