#pragma once
// Every file heterograd-run writes goes through write_file(): the bytes go to a temporary file
// beside the target, which is checked, flushed to disk and renamed over the target. A kill
// leaves the old file or the new one, never half of one; a full disk, a quota or a missing
// directory is an output_error that names the file, and the old file is left as it was.

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hgrun {

/// A file heterograd-run could not write or read: the message names the file and the cause.
class output_error : public std::runtime_error {
 public:
  output_error(const std::filesystem::path& file, const std::string& why)
      : std::runtime_error("cannot write " + file.string() + ": " + why), file_(file) {}
  const std::filesystem::path& file() const { return file_; }

 private:
  std::filesystem::path file_;
};

/// Writes `bytes` to `file` atomically (temporary file, fsync, rename). Throws output_error.
void write_file(const std::filesystem::path& file, std::string_view bytes);

/// Where heterograd-run finds a file it ships: the environment variable `env` when it is set;
/// else `installed` (relative to the install prefix) beside an installed heterograd-run
/// (<prefix>/bin) when it exists there; else `in_source` (relative to the source tree).
std::filesystem::path shipped_path(const char* env, const std::filesystem::path& installed,
                                   const std::filesystem::path& in_source);

/// The whole content of a regular file. Throws std::runtime_error naming the file when it is
/// missing, unreadable or not a regular file (a FIFO or a device is refused, not read).
std::string read_file(const std::filesystem::path& file);

}  // namespace hgrun
