#pragma once
// A word-level text corpus: the files of a source tree, split into training and validation,
// read as bytes, cut into words, mapped to a vocabulary and turned into next-word samples
// (a context of the k previous words -> the next word), for SLIDE- and Parallax-style
// workloads over a large output vocabulary (issue 49).
//
// Files (list_corpus). Every regular file whose name ends in ".py" under `dir`, found by a
// recursive walk that
//   - does not descend into folders named site-packages, dist-packages or __pycache__;
//   - does not follow symbolic links to folders (so a link loop is never walked), but lists a
//     symbolic link to a regular .py file under the link's own name; a dangling link, a FIFO,
//     a socket or a folder named x.py is not a regular file and is left out;
//   - skips sub-folders it may not open (permission denied), as a reader of a system tree must;
// sorted by their paths relative to `dir` ('/'-separated, compared bytewise). The i-th file
// of that order (from 0) is validation when i % 10 == 9 (the 10th, 20th, ...), training
// otherwise. This is heterograd-run's byte corpus rule (data.dataset "text"), so both
// corpora split the same files. More than corpus_limits::max_files files or max_bytes bytes
// (sizes at listing) is refused, as is a `dir` that is not a folder or cannot be walked.
//
// Reading (read_corpus). Only regular files are read: each is opened with O_NONBLOCK and
// refused unless fstat says S_ISREG, so a FIFO swapped in after the listing is never waited
// on. A file that cannot be opened or read (permission denied, removed since the listing) is
// refused; a file that grew since the listing still counts towards max_bytes. Every refusal
// is a data::corpus_error naming the path and the rule. Empty files are kept: they hold their
// place in the split and contribute no words.
//
// Words (word_tokens). The bytes are not decoded. A word is a maximal run matching the ASCII
// identifier pattern [A-Za-z_][A-Za-z0-9_]*; every other byte (digits that do not follow a
// word byte, punctuation, white space, any byte >= 0x80 whether it is valid UTF-8 or not) is
// a separator and yields nothing. So "x1 = 0x1F + café" gives x1, x1F, caf: numbers and
// punctuation are not words, and a non-ASCII letter ends a word. Lines play no role: a file of
// one huge line is cut like any other (its size is bounded by max_bytes). Words never span
// two files.
//
// Vocabulary (build_vocabulary, from the training files only). Id 0 is "<unk>"; ids 1 ..
// size-1 are the size-1 most frequent training words, by count descending, ties broken by the
// word's bytes ascending, so the result depends on the text alone. counts[0] is the number of
// training words that are not in the vocabulary. bos() = size() is one more id, used only to
// pad contexts at a file's start (an embedding needs size() + 1 rows; targets lie in
// [1, size())). size must be in [2, distinct training words + 1].
//
// Samples (make_word_samples). For every word position p of every file (training or
// validation, encoded with the training vocabulary), the context is the ids of the k words
// before p in the same file (bos where p - j < 0: contexts never cross files), the target the
// id of word p. Positions whose target is <unk> are skipped and counted.

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/file.hpp"

namespace heterograd::data {

/// A corpus that cannot be listed or read: names the path and the rule it broke.
class corpus_error : public std::runtime_error {
 public:
  corpus_error(const std::filesystem::path& path, const std::string& rule)
      : std::runtime_error("heterograd: corpus \"" + path.string() + "\": " + rule), path_(path) {}
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

/// Caps on what a corpus may hold (heterograd-run's byte corpus uses the same two).
struct corpus_limits {
  std::uintmax_t max_bytes = std::uintmax_t{512} << 20;  // all files together
  std::size_t max_files = 200000;
};

/// The listed files, relative to `dir`, sorted; `files[i]` is validation iff i % 10 == 9.
struct corpus_files {
  std::filesystem::path dir;
  std::vector<std::string> files;
  std::vector<std::string> train, validation;  // `files` split, each in sorted order
  std::uintmax_t bytes = 0;                    // sizes at listing
};

/// The split rule: the i-th sorted file (from 0) is validation iff this holds.
constexpr bool is_validation_file(std::size_t i) noexcept { return i % 10 == 9; }

namespace detail {
inline bool is_skipped_folder(const std::string& name) {
  return name == "site-packages" || name == "dist-packages" || name == "__pycache__";
}
}  // namespace detail

/// Lists the corpus under `dir` by the rule in this header's comment.
inline corpus_files list_corpus(const std::filesystem::path& dir, const corpus_limits& limits = {}) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw corpus_error(dir, "expected a folder whose .py files are the corpus");
  corpus_files out;
  out.dir = dir;
  const auto walk_error = [&] { return corpus_error(dir, "cannot list the folder: " + ec.message()); };
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  if (ec) throw walk_error();
  for (; it != end; it.increment(ec)) {
    if (ec) throw walk_error();
    const fs::path& p = it->path();
    // is_directory follows a link: a link named __pycache__ to a folder is skipped too (it
    // would not be descended into anyway).
    if (it->is_directory(ec) && detail::is_skipped_folder(p.filename().string())) {
      it.disable_recursion_pending();
      continue;
    }
    if (p.extension() != ".py" || !it->is_regular_file(ec)) continue;
    const auto size = it->file_size(ec);
    if (ec) continue;  // gone between the two calls: as if it had never been listed
    out.bytes += size;
    if (out.bytes > limits.max_bytes || out.files.size() >= limits.max_files)
      throw corpus_error(dir, "expected at most " + std::to_string(limits.max_bytes) + " bytes in at most " +
                                  std::to_string(limits.max_files) + " .py files (corpus_limits)");
    out.files.push_back(p.lexically_relative(dir).generic_string());
  }
  std::sort(out.files.begin(), out.files.end());
  for (std::size_t i = 0; i < out.files.size(); ++i)
    (is_validation_file(i) ? out.validation : out.train).push_back(out.files[i]);
  return out;
}

/// The default corpus folder: /usr/lib/python3.N holding os.py, the largest N (Debian's python3
/// installs it); empty when there is none.
inline std::filesystem::path python_stdlib_dir(const std::filesystem::path& lib = "/usr/lib") {
  std::filesystem::path best;
  int best_minor = -1;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(lib, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("python3.", 0) != 0) continue;
    const std::string minor = name.substr(8);
    if (minor.empty() || minor.size() > 3 ||
        !std::all_of(minor.begin(), minor.end(), [](unsigned char c) { return c >= '0' && c <= '9'; }))
      continue;
    if (!std::filesystem::exists(entry.path() / "os.py", ec)) continue;
    if (std::stoi(minor) > best_minor) {
      best_minor = std::stoi(minor);
      best = entry.path();
    }
  }
  return best;
}

/// Reads one regular file whole; refuses anything else (corpus_error naming `file`).
inline std::string read_text_file(const std::filesystem::path& file) {
  try {
    return read_regular_file(file);
  } catch (const file_error& e) {
    throw corpus_error(file, e.rule());
  }
}

/// Each listed file's bytes, in the order of `files.train` / `files.validation`.
struct corpus_text {
  std::vector<std::string> train, validation;
};

/// Reads every listed file; the bytes read (not the listed sizes) must stay within max_bytes.
inline corpus_text read_corpus(const corpus_files& files, const corpus_limits& limits = {}) {
  corpus_text out;
  std::uintmax_t read = 0;
  const auto read_side = [&](const std::vector<std::string>& names, std::vector<std::string>& side) {
    side.reserve(names.size());
    for (const auto& name : names) {
      side.push_back(read_text_file(files.dir / name));
      read += side.back().size();
      if (read > limits.max_bytes)
        throw corpus_error(files.dir / name, "the corpus grew past " + std::to_string(limits.max_bytes) +
                                                 " bytes while it was read (corpus_limits.max_bytes)");
    }
  };
  read_side(files.train, out.train);
  read_side(files.validation, out.validation);
  return out;
}

namespace detail {
constexpr bool is_word_start(unsigned char c) noexcept {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}
constexpr bool is_word_byte(unsigned char c) noexcept { return is_word_start(c) || (c >= '0' && c <= '9'); }
}  // namespace detail

/// Calls f(word) for each word of `bytes` in order (the rule in this header's comment).
template <class F>
void for_each_word(std::string_view bytes, F&& f) {
  std::size_t i = 0;
  const std::size_t n = bytes.size();
  while (i < n) {
    if (!detail::is_word_start(static_cast<unsigned char>(bytes[i]))) {
      // A byte that cannot start a word is a separator on its own, digits included: "0x1F"
      // gives x1F, as the pattern [A-Za-z_][A-Za-z0-9_]* found left to right does.
      ++i;
      continue;
    }
    std::size_t j = i + 1;
    while (j < n && detail::is_word_byte(static_cast<unsigned char>(bytes[j]))) ++j;
    f(bytes.substr(i, j - i));
    i = j;
  }
}

/// The words of `bytes`, as views into it.
inline std::vector<std::string_view> word_tokens(std::string_view bytes) {
  std::vector<std::string_view> out;
  for_each_word(bytes, [&](std::string_view w) { out.push_back(w); });
  return out;
}

namespace detail {
struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
}  // namespace detail

/// Words <-> ids. words[0] = "<unk>"; counts[id] = training occurrences (counts[0]: the
/// training words left out). bos() = size() pads contexts.
struct vocabulary {
  static constexpr std::uint32_t unk = 0;
  std::vector<std::string> words;
  std::vector<std::uint64_t> counts;
  std::size_t distinct_training_words = 0;
  std::unordered_map<std::string, std::uint32_t, detail::string_hash, std::equal_to<>> index;

  std::size_t size() const noexcept { return words.size(); }
  std::uint32_t bos() const noexcept { return static_cast<std::uint32_t>(words.size()); }
  std::uint32_t id(std::string_view word) const {
    const auto it = index.find(word);
    return it == index.end() ? unk : it->second;
  }
};

/// Counts every word of `files` (views into them).
inline std::unordered_map<std::string_view, std::uint64_t> count_words(const std::vector<std::string>& files) {
  std::unordered_map<std::string_view, std::uint64_t> counts;
  for (const auto& f : files) for_each_word(f, [&](std::string_view w) { ++counts[w]; });
  return counts;
}

/// The vocabulary of `train_files`: <unk> and the size-1 most frequent words (ties by bytes).
inline vocabulary build_vocabulary(const std::vector<std::string>& train_files, std::size_t size) {
  const auto counts = count_words(train_files);
  require(size >= 2 && size <= counts.size() + 1, "build_vocabulary.size", size,
          "must be in [2, distinct training words + 1] = [2, " + std::to_string(counts.size() + 1) + "]");
  std::vector<std::pair<std::string_view, std::uint64_t>> ranked(counts.begin(), counts.end());
  const auto before = [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  };
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(size - 1), ranked.end(), before);
  vocabulary v;
  v.distinct_training_words = counts.size();
  v.words.reserve(size);
  v.counts.reserve(size);
  v.words.emplace_back("<unk>");  // not an identifier, so no word can take its place
  v.counts.push_back(0);
  for (std::size_t r = 0; r < ranked.size(); ++r) {
    if (r + 1 < size) {
      v.index.emplace(std::string(ranked[r].first), static_cast<std::uint32_t>(v.words.size()));
      v.words.emplace_back(ranked[r].first);
      v.counts.push_back(ranked[r].second);
    } else {
      v.counts[0] += ranked[r].second;
    }
  }
  return v;
}

/// Files as one id sequence; file f's words are ids[starts[f] .. starts[f+1]).
struct encoded_words {
  std::vector<std::uint32_t> ids;
  std::vector<std::size_t> starts{0};
  std::uint64_t unknown = 0;  // words mapped to <unk>
  std::size_t files() const noexcept { return starts.size() - 1; }
};

inline encoded_words encode_words(const std::vector<std::string>& files, const vocabulary& v) {
  encoded_words out;
  out.starts.reserve(files.size() + 1);
  for (const auto& f : files) {
    for_each_word(f, [&](std::string_view w) {
      out.ids.push_back(v.id(w));
      out.unknown += out.ids.back() == vocabulary::unk;
    });
    out.starts.push_back(out.ids.size());
  }
  return out;
}

/// Next-word samples: sample s has context ids contexts[s*k .. s*k+k) (oldest first) and
/// target targets[s].
struct word_samples {
  std::size_t context = 0;
  std::vector<std::uint32_t> contexts;
  std::vector<std::uint32_t> targets;
  std::uint64_t skipped_unknown = 0;  // positions whose target is <unk>
  std::size_t size() const noexcept { return targets.size(); }
};

inline word_samples make_word_samples(const encoded_words& e, const vocabulary& v, std::size_t context) {
  require_positive("make_word_samples.context", context);
  word_samples out;
  out.context = context;
  const std::uint32_t bos = v.bos();
  for (std::size_t f = 0; f < e.files(); ++f) {
    const std::size_t begin = e.starts[f], end = e.starts[f + 1];
    for (std::size_t p = begin; p < end; ++p) {
      if (e.ids[p] == vocabulary::unk) {
        ++out.skipped_unknown;
        continue;
      }
      for (std::size_t j = context; j > 0; --j) out.contexts.push_back(p - begin >= j ? e.ids[p - j] : bos);
      out.targets.push_back(e.ids[p]);
    }
  }
  return out;
}

}  // namespace heterograd::data
