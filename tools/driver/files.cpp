// Atomic writes and checked reads for heterograd-run's outputs.
#include "files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#ifndef HG_SOURCE_DIR  // (tools/CMakeLists.txt sets it; the fuzzers build without it)
#define HG_SOURCE_DIR "."
#endif

namespace hgrun {

namespace {

std::string errno_text(int e) { return std::strerror(e); }

// Closes the descriptor and removes the temporary file unless released (the rename happened).
struct temp_file {
  int fd = -1;
  std::string path;
  bool keep = false;
  ~temp_file() {
    if (fd >= 0) ::close(fd);
    if (!keep && !path.empty()) ::unlink(path.c_str());
  }
};

}  // namespace

void write_file(const std::filesystem::path& file, std::string_view bytes) {
  // The temporary lives in the target's directory (rename is atomic only within one file
  // system) and carries the pid, so parallel writers of one folder never share it.
  const auto dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  temp_file t;
  std::string name = ".";  // (appended piecewise: GCC 12's -Wrestrict misreads "." + string)
  name += file.filename().string();
  name += ".tmp-";
  name += std::to_string(::getpid());
  t.path = (dir / name).string();
  t.fd = ::open(t.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (t.fd < 0) {
    t.path.clear();  // nothing was created
    throw output_error(file, errno_text(errno));
  }
  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(t.fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw output_error(file, errno_text(errno));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(t.fd) != 0) throw output_error(file, errno_text(errno));
  const int fd = t.fd;
  t.fd = -1;
  if (::close(fd) != 0) throw output_error(file, errno_text(errno));
  if (::rename(t.path.c_str(), file.c_str()) != 0) throw output_error(file, errno_text(errno));
  t.keep = true;
}

std::string read_file(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw std::runtime_error("cannot read " + file.string() + ": " + errno_text(errno));
  temp_file guard;  // closes fd; no path to remove
  guard.fd = fd;
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw std::runtime_error("cannot read " + file.string() + ": " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) throw std::runtime_error("cannot read " + file.string() + ": not a regular file");
  std::string out;
  out.resize(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  for (;;) {
    if (got == out.size()) out.resize(out.size() + 4096);  // the file grew since fstat
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("cannot read " + file.string() + ": " + errno_text(errno));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

std::filesystem::path shipped_path(const char* env, const std::filesystem::path& installed,
                                   const std::filesystem::path& in_source) {
  if (const char* e = std::getenv(env)) return e;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto there = exe.parent_path().parent_path() / installed;
    if (std::filesystem::exists(there, ec)) return there;
  }
  return std::filesystem::path(HG_SOURCE_DIR) / in_source;
}

}  // namespace hgrun
