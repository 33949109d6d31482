// Atomic writes and checked reads for heterograd-run's outputs.
#include "files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "heterograd/core/file.hpp"

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

// Why `p` may not be used: it is a link inside a folder of heterograd-run's (its parent
// carries the marker, as a plain file). "" when it may.
std::string planted_link(const std::filesystem::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return "";
  const auto parent = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  struct stat m {};
  if (::lstat((parent / folder_marker).c_str(), &m) != 0 || !S_ISREG(m.st_mode)) return "";
  std::error_code ec;
  const auto to = std::filesystem::read_symlink(p, ec);
  return "it is a symbolic link (to " + (ec ? std::string("?") : to.string()) + ") inside heterograd-run's folder " +
         parent.string() +
         "; heterograd-run follows no link inside its own folders, so that nothing outside them is written, "
         "truncated or deleted: remove the link, or choose another output folder (--out)";
}

// Opens `p` as a new file (O_EXCL | O_NOFOLLOW): what is under the name is unlinked first (a
// link or a hard link loses its name, what it points to stays as it was). -1 and `why` when
// it cannot.
int open_new(const std::filesystem::path& p, std::string& why) {
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    const int e = errno;
    struct stat st {};
    if (e != EEXIST || attempt > 0 || ::lstat(p.c_str(), &st) != 0) {
      why = errno_text(e);
      return -1;
    }
    if (S_ISDIR(st.st_mode)) {
      why = "a folder is in the way of the file";
      return -1;
    }
    if (::unlink(p.c_str()) != 0 && errno != ENOENT) {
      why = "cannot remove what is under its name: " + errno_text(errno);
      return -1;
    }
  }
}

}  // namespace

void refuse_planted_link(const std::filesystem::path& path) {
  if (const std::string why = planted_link(path); !why.empty()) throw output_error(path, why);
}

int create_fresh(const std::filesystem::path& file) {
  refuse_planted_link(file.has_parent_path() ? file.parent_path() : std::filesystem::path("."));
  std::string why;
  const int fd = open_new(file, why);
  if (fd < 0) throw output_error(file, why);
  return fd;
}

void write_file(const std::filesystem::path& file, std::string_view bytes) {
  // The temporary lives in the target's directory (rename is atomic only within one file
  // system) and carries the pid, so parallel writers of one folder never share it. A
  // temporary of the same name (a killed run's, whose pid this one reuses) is replaced.
  const auto dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  refuse_planted_link(dir);
  temp_file t;
  std::string name = ".";  // (appended piecewise: GCC 12's -Wrestrict misreads "." + string)
  name += file.filename().string();
  name += ".tmp-";
  name += std::to_string(::getpid());
  std::string why;
  t.fd = open_new(dir / name, why);
  if (t.fd < 0) throw output_error(file, why);  // (nothing of ours to remove)
  t.path = (dir / name).string();
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
  // rename() replaces a link at `file` itself; it never writes where the link points.
  if (::rename(t.path.c_str(), file.c_str()) != 0) throw output_error(file, errno_text(errno));
  t.keep = true;
}

std::string read_file(const std::filesystem::path& file) {
  try {
    return heterograd::read_regular_file(file);
  } catch (const heterograd::file_error& e) {
    throw std::runtime_error("cannot read " + file.string() + ": " + e.rule());
  }
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
