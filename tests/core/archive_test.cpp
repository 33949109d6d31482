#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/core/archive.hpp"

namespace hg = heterograd;

namespace {

enum class colour : std::uint8_t { red = 1, green = 7 };
enum plain_enum { first_value, second_value = 1000 };
struct point {  // trivially copyable: archived as its bytes
  float x, y;
  std::int32_t tag;
  friend bool operator==(const point&, const point&) = default;
};

struct inner {
  std::string name;
  std::vector<double> values;
  template <class Archive>
  void serialize(Archive& ar) {
    ar(name, values);
  }
  friend bool operator==(const inner&, const inner&) = default;
};

// One member of every kind the archive knows, visited by one serialize for both directions.
struct everything {
  bool flag = false;
  std::int8_t small = 0;
  std::uint64_t big = 0;
  double real = 0, nan = 0, negative_zero = 0;
  colour c = colour::red;
  plain_enum e = first_value;
  point p{};
  std::array<float, 3> fixed{};
  std::array<std::string, 2> fixed_strings;
  std::string text, empty_text;
  std::vector<float> floats, no_floats;
  std::vector<bool> mask;
  std::deque<std::uint64_t> queue;
  std::vector<std::vector<float>> table;
  std::pair<std::uint64_t, double> last{};
  std::optional<double> engaged, empty;
  std::optional<std::string> maybe_text;
  inner one;
  std::vector<inner> many;
  std::optional<inner> maybe_inner;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(flag, small, big, real, nan, negative_zero, c, e, p, fixed, fixed_strings);
    ar(text, empty_text, floats, no_floats, mask, queue, table, last, engaged, empty, maybe_text);
    ar(one, many, maybe_inner);
  }
};

everything filled() {
  everything v;
  v.flag = true;
  v.small = -5;
  v.big = ~std::uint64_t{0} - 3;
  v.real = 1.0 / 3.0;
  v.nan = std::numeric_limits<double>::quiet_NaN();
  v.negative_zero = -0.0;
  v.c = colour::green;
  v.e = second_value;
  v.p = {1.5f, -2.25f, 42};
  v.fixed = {0.5f, 1e-30f, -7.0f};
  v.fixed_strings = {"left", ""};
  v.text = std::string("with\0nul", 8);
  v.floats = {1, 2, 3, std::numeric_limits<float>::infinity()};
  v.mask = {true, false, true, true, false};
  v.queue = {4, 5, 6};
  v.table = {{1}, {}, {2, 3}};
  v.last = {9, 0.5};
  v.engaged = 3.25;
  v.maybe_text = "yes";
  v.one = {"inner", {1e300, -1e-300}};
  v.many = {{"a", {}}, {"b", {2}}};
  v.maybe_inner = inner{"opt", {3}};
  return v;
}

std::vector<std::byte> bytes_of(std::initializer_list<int> xs) {
  std::vector<std::byte> out;
  for (int x : xs) out.push_back(static_cast<std::byte>(x));
  return out;
}

struct no_serialize {  // not trivially copyable and without a serialize member
  std::string name;
};

// The smallest archive a user could write: it only counts the values it is given.
struct counting_archive {
  static constexpr bool saving = true;
  std::size_t values = 0;
  template <hg::archivable... T>
  void operator()(const T&...) {
    values += sizeof...(T);
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(archive)

BOOST_AUTO_TEST_CASE(every_supported_kind_reads_back_bit_for_bit_and_writes_the_same_bytes_again) {
  const everything v = filled();
  hg::archive_writer w;
  w(v);
  everything r;
  hg::archive_reader in(w.bytes());
  in(r);
  BOOST_TEST(in.done());
  BOOST_TEST(r.flag);
  BOOST_TEST(r.small == -5);
  BOOST_TEST(r.big == v.big);
  BOOST_TEST(std::memcmp(&r.real, &v.real, sizeof(double)) == 0);
  BOOST_TEST(std::isnan(r.nan));
  BOOST_TEST((std::signbit(r.negative_zero) && r.negative_zero == 0.0));
  BOOST_TEST((r.c == colour::green));
  BOOST_TEST(r.e == second_value);
  BOOST_TEST((r.p == v.p));
  BOOST_TEST((r.fixed == v.fixed));
  BOOST_TEST((r.fixed_strings == v.fixed_strings));
  BOOST_TEST((r.text == v.text && r.text.size() == 8u));
  BOOST_TEST(r.empty_text.empty());
  BOOST_TEST((r.floats == v.floats));
  BOOST_TEST(r.no_floats.empty());
  BOOST_TEST((r.mask == v.mask));
  BOOST_TEST((r.queue == v.queue));
  BOOST_TEST((r.table == v.table));
  BOOST_TEST((r.last == v.last));
  BOOST_TEST((r.engaged == v.engaged));
  BOOST_TEST(!r.empty.has_value());
  BOOST_TEST((r.maybe_text == v.maybe_text));
  BOOST_TEST((r.one == v.one));
  BOOST_TEST((r.many == v.many));
  BOOST_TEST((r.maybe_inner == v.maybe_inner));
  // Reading into an object that holds values already replaces them (an engaged optional is
  // reset, a longer vector shrinks).
  everything stale = filled();
  stale.engaged.reset();
  stale.empty = 1.0;
  stale.floats.assign(100, 9.0f);
  hg::archive_reader again(w.bytes());
  again(stale);
  BOOST_TEST(!stale.empty.has_value());
  BOOST_TEST((stale.floats == v.floats));
  hg::archive_writer w2;
  w2(r);
  BOOST_TEST((w2.bytes() == w.bytes()));
}

BOOST_AUTO_TEST_CASE(the_byte_layout_is_the_one_existing_checkpoints_were_written_in) {
  // u32 as its bytes; a string as u64 count + chars; an optional as a flag byte + value; a
  // vector<bool> as u64 count + a byte per element; a pair as first then second; a vector of
  // floats as u64 count + the floats' bytes (little-endian hosts).
  hg::archive_writer w;
  w(std::uint32_t{7}, std::string("ab"), std::optional<std::uint8_t>{5}, std::optional<std::uint8_t>{},
    std::vector<bool>{true, false}, std::pair<std::uint8_t, std::uint16_t>{1, 0x0302}, std::vector<float>{1.0f});
  const auto expected = bytes_of({7, 0, 0, 0,                       // u32
                                  2, 0, 0, 0, 0, 0, 0, 0, 'a', 'b',  // string
                                  1, 5, 0,                          // optionals
                                  2, 0, 0, 0, 0, 0, 0, 0, 1, 0,     // vector<bool>
                                  1, 2, 3,                          // pair
                                  1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x3f});  // vector<float>
  BOOST_TEST((w.bytes() == expected));
}

BOOST_AUTO_TEST_CASE(a_reader_that_runs_past_the_end_names_the_offset_and_the_bytes_it_needed) {
  hg::archive_writer w;
  w(std::uint32_t{1}, std::uint64_t{2});
  const std::span<const std::byte> cut = std::span(w.bytes()).first(4 + 3);
  hg::archive_reader r(cut);
  std::uint32_t a = 0;
  std::uint64_t b = 0;
  try {
    r(a, b);
    BOOST_FAIL("a truncated archive was read");
  } catch (const hg::archive_error& e) {
    BOOST_TEST(a == 1u);
    BOOST_TEST(e.offset() == 4u);
    BOOST_TEST(std::string(e.what()) == "archive: at byte 4: reading 8 bytes, but only 3 of the archive's 7 are left: truncated");
  }
  // An empty archive cannot give even a flag.
  hg::archive_reader none(std::span<const std::byte>{});
  std::optional<int> o;
  BOOST_CHECK_THROW(none(o), hg::archive_error);
}

BOOST_AUTO_TEST_CASE(a_corrupt_length_is_refused_before_anything_is_allocated) {
  // A count of 2^62 floats followed by 8 bytes: the reader must not try to allocate 16 EiB.
  hg::archive_writer w;
  w(std::uint64_t{1} << 62, std::uint64_t{0});
  std::vector<float> v;
  hg::archive_reader r(w.bytes());
  try {
    r(v);
    BOOST_FAIL("a corrupt length was accepted");
  } catch (const hg::archive_error& e) {
    BOOST_TEST(e.offset() == 0u);
    BOOST_TEST(std::string(e.what()).find("a count of 4611686018427387904 elements of 4 byte(s) each, but only 8 "
                                          "bytes follow") != std::string::npos,
               e.what());
  }
  // A fixed-size container names the size it has and the count it found.
  hg::archive_writer three;
  three(std::vector<std::string>{"a", "b", "c"});
  std::array<std::string, 2> two;
  hg::archive_reader r2(three.bytes());
  try {
    r2(two);
    BOOST_FAIL("a count that differs from a fixed size was accepted");
  } catch (const hg::archive_error& e) {
    BOOST_TEST(std::string(e.what()) == "archive: at byte 0: a container of fixed size 2, found a count of 3");
  }
}

BOOST_AUTO_TEST_CASE(a_sealed_archive_opens_to_itself_and_a_damaged_block_is_named) {
  const everything v = filled();
  hg::archive_writer w;
  for (int i = 0; i < 2000; ++i) w(v);  // several 64 KiB blocks
  BOOST_REQUIRE(w.bytes().size() > 2 * hg::checkpoint_block_size);
  const std::string f = hg::seal_checkpoint(w.bytes());
  BOOST_TEST(f.size() == hg::checkpoint_header_size + w.bytes().size() +
                             4 * ((w.bytes().size() + hg::checkpoint_block_size - 1) / hg::checkpoint_block_size) + 8);
  BOOST_TEST((hg::open_checkpoint("c.bin", f) == w.bytes()));
  std::string g = f;
  const std::size_t h = hg::checkpoint_header_size, b = hg::checkpoint_block_size;
  g[h + b + 17] ^= 0x04;  // block 1 of the payload
  try {
    (void)hg::open_checkpoint("c.bin", g);
    BOOST_FAIL("a damaged block was accepted");
  } catch (const hg::checkpoint_error& e) {
    BOOST_TEST(e.file() == "c.bin");
    BOOST_TEST(std::string(e.what()).find("checkpoint c.bin: bytes " + std::to_string(h + b) + "-" +
                                          std::to_string(h + 2 * b - 1) + " damaged (checksum mismatch)") == 0u,
               e.what());
  }
  BOOST_CHECK_THROW((void)hg::open_checkpoint("c.bin", f.substr(0, f.size() - 1)), hg::checkpoint_error);
}

BOOST_AUTO_TEST_CASE(crc32c_gives_the_rfc_3720_test_vectors) {
  // RFC 3720, appendix B.4 (the iSCSI CRC, Castagnoli's polynomial).
  std::array<unsigned char, 32> buf{};
  BOOST_TEST(hg::crc32c(buf.data(), buf.size()) == 0x8A9136AAu);
  buf.fill(0xFF);
  BOOST_TEST(hg::crc32c(buf.data(), buf.size()) == 0x62A8AB43u);
  for (std::size_t i = 0; i < 32; ++i) buf[i] = static_cast<unsigned char>(i);
  BOOST_TEST(hg::crc32c(buf.data(), buf.size()) == 0x46DD794Eu);
  for (std::size_t i = 0; i < 32; ++i) buf[i] = static_cast<unsigned char>(31 - i);
  BOOST_TEST(hg::crc32c(buf.data(), buf.size()) == 0x113FDB5Cu);
  BOOST_TEST(hg::crc32c("123456789", 9) == 0xE3069283u);
  // Continuing from a previous value is the CRC of the concatenation.
  BOOST_TEST(hg::crc32c("56789", 5, hg::crc32c("1234", 4)) == 0xE3069283u);
  BOOST_TEST(hg::crc32c(nullptr, 0) == 0u);
}

// Compile-time: what a serialize member may rely on, and what cannot be archived.
static_assert(hg::archive<hg::archive_writer>);
static_assert(hg::archive<hg::archive_reader>);
static_assert(hg::archive<counting_archive>);
static_assert(!hg::archive<int>);
static_assert(!hg::archive<no_serialize>);
static_assert(hg::archive_writer::saving && !hg::archive_reader::saving);

static_assert(hg::archivable<int> && hg::archivable<colour> && hg::archivable<point>);
static_assert(hg::archivable<everything> && hg::archivable<std::vector<inner>>);
static_assert(hg::archivable<std::optional<std::string>> && hg::archivable<std::pair<const int, inner>>);
static_assert(!hg::archivable<no_serialize>);
static_assert(!hg::archivable<std::vector<no_serialize>>);
static_assert(!hg::archivable<std::optional<no_serialize>>);
static_assert(!hg::archivable<std::pair<int, no_serialize>>);
template <class A, class T>
concept takes = requires(A& a, T& x) { a(x); };
static_assert(takes<hg::archive_writer, inner> && takes<hg::archive_reader, inner>);
static_assert(!takes<hg::archive_writer, no_serialize> && !takes<hg::archive_reader, no_serialize>);

BOOST_AUTO_TEST_CASE(a_user_archive_that_models_the_concept_visits_every_value) {
  counting_archive a;
  everything v = filled();
  v.serialize(a);
  BOOST_TEST(a.values == 25u);
}

BOOST_AUTO_TEST_SUITE_END()
