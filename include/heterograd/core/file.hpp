#pragma once
// Reading a whole file that someone else may change: only a regular file is read (a FIFO or a
// device named like the file is refused, never waited on: the open is non-blocking), and a file
// that grows after it was measured is read to its end. The corpus (data/text.hpp) and
// heterograd-run's configurations, summaries and checkpoints read through it.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace heterograd {

/// A file could not be read: its path and the rule or the system's reason.
class file_error : public std::runtime_error {
 public:
  file_error(const std::filesystem::path& path, const std::string& rule)
      : std::runtime_error("heterograd: file \"" + path.string() + "\": " + rule), path_(path), rule_(rule) {}
  const std::filesystem::path& path() const noexcept { return path_; }
  /// What went wrong, without the path ("cannot open: No such file or directory").
  const std::string& rule() const noexcept { return rule_; }

 private:
  std::filesystem::path path_;
  std::string rule_;
};

/// The whole content of the regular file `file`; file_error otherwise.
inline std::string read_regular_file(const std::filesystem::path& file) {
  const auto reason = [](int e) { return std::error_code(e, std::generic_category()).message(); };
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw file_error(file, "cannot open: " + reason(errno));
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw file_error(file, "cannot stat: " + reason(errno));
  if (!S_ISREG(st.st_mode)) throw file_error(file, "not a regular file (only regular files are read)");
  std::string out(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  for (;;) {
    if (got == out.size()) out.resize(out.size() + 4096);  // the file grew since fstat
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw file_error(file, "cannot read: " + reason(errno));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

}  // namespace heterograd
