#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/data/text.hpp"
#include "hg_test.hpp"

namespace hd = heterograd::data;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

// A made-up corpus whose numbers are counted by hand below. Sorted .py files (bytewise; '.'
// < '/', so a.py < a/b.py):
//   0 a.py    "a b a"                      a a b
//   1 a/b.py  "b c 12 3d"                  b c d      (digit runs are separators)
//   2 b.py    ""                           (empty: keeps its place in the split)
//   3 c.py    ff fe 'a' c3 a9 'b'          a b        (non-UTF-8 and non-ASCII bytes separate)
//   4 d.py    "_x9 x_9"                    _x9 x_9
//   5 e.py    "c.c(c)"                     c c c
//   6 f.py    "e," x 2^19, no newline      e x 524288 (one huge line)
//   7 g.py    "caf\xc3\xa9 caf"            caf caf
//   8 h.py    "z Z"                        z Z
//   9 i.py    "a q b a"                    validation (i % 10 == 9)
//  10 j.py    "b"                          b
//  11 k.py    a link to a.py               a a b      (a link to a file is listed)
// Left out: __pycache__/p.py, lib/site-packages/s.py, dist-packages/t.py, notes.txt, an empty
// folder named dir.py, a dangling link broken.py, a FIFO fifo.py, a link to a folder
// (link_to_a -> a) and a folder link loop (loop -> .).
// Training counts: e 524288, a 5, b 5, c 4, caf 2, Z _x9 d x_9 z 1 each: 10 distinct words,
// 524309 words.
constexpr std::uint64_t huge_line_words = std::uint64_t{1} << 19;

fs::path make_corpus(const std::string& tag) {
  const fs::path d = fs::temp_directory_path() /
                     ("hg_text_" + tag + "_" + std::to_string(hg_test::seed()) + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  write(d / "a.py", "a b a");
  write(d / "a" / "b.py", "b c 12 3d");
  write(d / "b.py", "");
  write(d / "c.py", std::string("\xff\xfe" "a\xc3\xa9" "b"));
  write(d / "d.py", "_x9 x_9");
  write(d / "e.py", "c.c(c)");
  std::string huge;
  for (std::uint64_t i = 0; i < huge_line_words; ++i) huge += "e,";
  write(d / "f.py", huge);
  write(d / "g.py", "caf\xc3\xa9 caf");
  write(d / "h.py", "z Z");
  write(d / "i.py", "a q b a");
  write(d / "j.py", "b");
  fs::create_symlink("a.py", d / "k.py");
  write(d / "__pycache__" / "p.py", "pycache");
  write(d / "lib" / "site-packages" / "s.py", "site");
  write(d / "dist-packages" / "t.py", "dist");
  write(d / "notes.txt", "notes");
  fs::create_directories(d / "dir.py");
  fs::create_symlink("nowhere.py", d / "broken.py");
  BOOST_REQUIRE_EQUAL(::mkfifo((d / "fifo.py").c_str(), 0600), 0);
  fs::create_directory_symlink("a", d / "link_to_a");
  fs::create_directory_symlink(".", d / "loop");
  return d;
}

// Removes the corpus however the test case ends (a failed check included).
struct corpus_dir {
  fs::path path;
  ~corpus_dir() {
    std::error_code ec;
    fs::permissions(path / "j.py", fs::perms::owner_all, ec);
    fs::remove_all(path, ec);
  }
};

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const hd::corpus_error& e) {
    return e.what();
  }
  return "no corpus_error";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_SUITE(text)

BOOST_AUTO_TEST_CASE(list_corpus_splits_every_tenth_sorted_py_file_as_the_driver_does) {
  const corpus_dir dir_guard{make_corpus("list")};
  const fs::path& d = dir_guard.path;
  const auto c = hd::list_corpus(d);
  const std::vector<std::string> all{"a.py", "a/b.py", "b.py", "c.py", "d.py", "e.py",
                                     "f.py", "g.py",   "h.py", "i.py", "j.py", "k.py"};
  BOOST_TEST(c.files == all, boost::test_tools::per_element());
  BOOST_TEST(c.validation == std::vector<std::string>{"i.py"}, boost::test_tools::per_element());
  BOOST_TEST(c.train.size() == 11u);
  BOOST_TEST(c.bytes == 5u + 9 + 0 + 6 + 7 + 6 + 2 * huge_line_words + 9 + 3 + 7 + 1 + 5);
}

BOOST_AUTO_TEST_CASE(the_default_corpus_is_the_newest_python3_minor_that_holds_os_py) {
  const corpus_dir lib{fs::temp_directory_path() / ("hg_text_lib_" + std::to_string(::getpid()))};
  fs::remove_all(lib.path);
  for (const char* d : {"python3.9", "python3.11", "python3.12", "python3.x", "python3.1234", "python2.99"})
    fs::create_directories(lib.path / d);
  for (const char* d : {"python3.9", "python3.11", "python3.x", "python3.1234", "python2.99"})
    std::ofstream(lib.path / d / "os.py") << "import sys\n";
  // 3.12 has no os.py, 3.x and 3.1234 are not versions, 2.99 is not python3: 3.11 (not 3.9:
  // minors compare as numbers).
  BOOST_TEST(hd::python_stdlib_dir(lib.path) == lib.path / "python3.11");
  fs::remove_all(lib.path / "python3.11");
  BOOST_TEST(hd::python_stdlib_dir(lib.path) == lib.path / "python3.9");
  fs::remove_all(lib.path / "python3.9");
  BOOST_TEST(hd::python_stdlib_dir(lib.path).empty());
  BOOST_TEST(hd::python_stdlib_dir(lib.path / "missing").empty());
}

BOOST_AUTO_TEST_CASE(words_are_ascii_identifiers_and_everything_else_separates) {
  const std::string s = "x1 = 0x1F + caf\xc3\xa9\xff_y\n9z";
  const auto w = hd::word_tokens(s);
  const std::vector<std::string_view> expected{"x1", "x1F", "caf", "_y", "z"};
  BOOST_TEST(w == expected, boost::test_tools::per_element());
  BOOST_TEST(hd::word_tokens("").empty());
  BOOST_TEST(hd::word_tokens("123 + \x80\xff").empty());
}

BOOST_AUTO_TEST_CASE(vocabulary_counts_and_cut_match_the_hand_count) {
  const corpus_dir dir_guard{make_corpus("vocab")};
  const fs::path& d = dir_guard.path;
  const auto text = hd::read_corpus(hd::list_corpus(d));
  BOOST_TEST_REQUIRE(text.train.size() == 11u);
  const auto v = hd::build_vocabulary(text.train, 7);
  const std::vector<std::string> words{"<unk>", "e", "a", "b", "c", "caf", "Z"};
  const std::vector<std::uint64_t> counts{4, huge_line_words, 5, 5, 4, 2, 1};
  BOOST_TEST(v.words == words, boost::test_tools::per_element());
  BOOST_TEST(v.counts == counts, boost::test_tools::per_element());
  BOOST_TEST(v.distinct_training_words == 10u);
  BOOST_TEST(v.bos() == 7u);
  BOOST_TEST(v.id("_x9") == 0u);
  BOOST_TEST(v.id("caf") == 5u);
  // The whole vocabulary: the ties at one occurrence in byte order (Z < _ < lowercase).
  const auto full = hd::build_vocabulary(text.train, 11);
  const std::vector<std::string> all{"<unk>", "e", "a", "b", "c", "caf", "Z", "_x9", "d", "x_9", "z"};
  BOOST_TEST(full.words == all, boost::test_tools::per_element());
  BOOST_TEST(full.counts[0] == 0u);
  std::uint64_t total = 0;
  for (auto n : full.counts) total += n;
  BOOST_TEST(total == huge_line_words + 21);
  BOOST_CHECK_THROW(hd::build_vocabulary(text.train, 12), std::invalid_argument);
  BOOST_CHECK_THROW(hd::build_vocabulary(text.train, 1), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(vocabulary_and_samples_do_not_depend_on_the_order_files_are_counted) {
  const corpus_dir dir_guard{make_corpus("det")};
  const fs::path& d = dir_guard.path;
  const auto text = hd::read_corpus(hd::list_corpus(d));
  auto reversed = text.train;
  std::reverse(reversed.begin(), reversed.end());
  const auto a = hd::build_vocabulary(text.train, 9), b = hd::build_vocabulary(reversed, 9);
  BOOST_TEST(a.words == b.words, boost::test_tools::per_element());
  BOOST_TEST(a.counts == b.counts, boost::test_tools::per_element());
  const auto s1 = hd::make_word_samples(hd::encode_words(text.train, a), a, 3);
  const auto s2 = hd::make_word_samples(hd::encode_words(text.train, b), b, 3);
  BOOST_TEST(s1.contexts == s2.contexts);
  BOOST_TEST(s1.targets == s2.targets);
}

BOOST_AUTO_TEST_CASE(samples_pad_file_starts_with_bos_and_skip_unknown_targets) {
  const corpus_dir dir_guard{make_corpus("samples")};
  const fs::path& d = dir_guard.path;
  const auto text = hd::read_corpus(hd::list_corpus(d));
  const auto v = hd::build_vocabulary(text.train, 7);  // <unk> e a b c caf Z; bos 7
  const auto val = hd::encode_words(text.validation, v);
  BOOST_TEST(val.ids == (std::vector<std::uint32_t>{2, 0, 3, 2}), boost::test_tools::per_element());  // a q b a
  BOOST_TEST(val.unknown == 1u);
  const auto s = hd::make_word_samples(val, v, 2);
  BOOST_TEST(s.targets == (std::vector<std::uint32_t>{2, 3, 2}), boost::test_tools::per_element());
  BOOST_TEST(s.contexts == (std::vector<std::uint32_t>{7, 7, 2, 0, 0, 3}), boost::test_tools::per_element());
  BOOST_TEST(s.skipped_unknown == 1u);
  // Training: a.py (a b a) gives 3 samples; a/b.py (b c d) starts afresh with bos, bos.
  const auto train = hd::encode_words(text.train, v);
  BOOST_TEST(train.ids.size() == huge_line_words + 21);
  BOOST_TEST(train.unknown == 4u);
  const auto t = hd::make_word_samples(train, v, 2);
  BOOST_TEST(t.size() == huge_line_words + 21 - 4);
  BOOST_TEST(t.targets[3] == 3u);
  BOOST_TEST(t.contexts[6] == 7u);
  BOOST_TEST(t.contexts[7] == 7u);
  BOOST_TEST(t.contexts[9] == 3u);  // sample 4: context (bos, b) -> c
  BOOST_CHECK_THROW(hd::make_word_samples(train, v, 0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(hostile_corpora_are_refused_naming_the_path_and_the_rule) {
  const corpus_dir dir_guard{make_corpus("hostile")};
  const fs::path& d = dir_guard.path;
  BOOST_TEST(contains(error_of([&] { hd::list_corpus(d / "a.py"); }), "expected a folder"));
  BOOST_TEST(contains(error_of([&] { hd::list_corpus(d / "missing"); }), (d / "missing").string()));
  BOOST_TEST(contains(error_of([&] { hd::list_corpus(d, {.max_bytes = 100}); }), "corpus_limits"));
  BOOST_TEST(contains(error_of([&] { hd::list_corpus(d, {.max_files = 11}); }), "at most 11 .py files"));
  BOOST_TEST(hd::list_corpus(d, {.max_files = 12}).files.size() == 12u);
  const auto listed = hd::list_corpus(d);
  // The bytes read count too: a corpus that grows past the cap while it is read is refused.
  const auto less = hd::corpus_limits{.max_bytes = listed.bytes - 1};
  BOOST_TEST(contains(error_of([&] { hd::read_corpus(listed, less); }), "corpus_limits.max_bytes"));
  // A file that disappears after the listing; then a FIFO in its place (not waited on).
  fs::remove(d / "c.py");
  auto msg = error_of([&] { hd::read_corpus(listed); });
  BOOST_TEST(contains(msg, (d / "c.py").string()));
  BOOST_TEST(contains(msg, "cannot open"));
  BOOST_REQUIRE_EQUAL(::mkfifo((d / "c.py").c_str(), 0600), 0);
  msg = error_of([&] { hd::read_corpus(listed); });
  BOOST_TEST(contains(msg, "not a regular file"));
  fs::remove(d / "c.py");
  write(d / "c.py", "a");
  // An unreadable file (root reads anything: then the case is reported, not run).
  fs::permissions(d / "j.py", fs::perms::none);
  if (::geteuid() != 0) {
    msg = error_of([&] { hd::read_corpus(listed); });
    BOOST_TEST(contains(msg, (d / "j.py").string()));
  } else {
    BOOST_TEST_MESSAGE("running as root: the unreadable-file case is not checked");
  }
  fs::permissions(d / "j.py", fs::perms::owner_all);
}

// Measures (does not assert) the driver's default corpus, the Python standard library.
BOOST_AUTO_TEST_CASE(python_stdlib_corpus_is_measured_when_present) {
  const fs::path dir = hd::python_stdlib_dir();
  if (dir.empty()) {
    BOOST_TEST_MESSAGE("no /usr/lib/python3.N with os.py: nothing measured");
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto files = hd::list_corpus(dir);
  const auto text = hd::read_corpus(files);
  const auto v = hd::build_vocabulary(text.train, 20000);
  const auto train = hd::encode_words(text.train, v);
  const auto val = hd::encode_words(text.validation, v);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST_MESSAGE(dir.string() << ": " << files.files.size() << " files (" << files.train.size() << " train, "
                                  << files.validation.size() << " validation), " << train.ids.size()
                                  << " training words, " << val.ids.size() << " validation words, "
                                  << v.distinct_training_words << " distinct training words; V = 20000 leaves "
                                  << val.unknown << " validation words <unk>; most frequent \"" << v.words[1]
                                  << "\" " << v.counts[1] << "; " << secs << " s");
}

BOOST_AUTO_TEST_SUITE_END()
