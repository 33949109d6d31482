#pragma once
// Every file heterograd-run writes goes through write_file(): the bytes go to a temporary file
// beside the target, which is checked, flushed to disk and renamed over the target. A kill
// leaves the old file or the new one, never half of one; a full disk, a quota or a missing
// directory is an output_error that names the file, and the old file is left as it was.
//
// Links: heterograd-run follows no symbolic link inside its own folders (the output folder,
// which carries the marker below, and the seed, method and tuning folders under it). A link
// planted there could send a write, a truncation or a deletion out of the folder, onto a file
// of the user's. So every file it writes is new: write_file()'s temporary and create_fresh()'s
// file are created with O_EXCL | O_NOFOLLOW (never opened through a link, never an existing
// file truncated), and a rename or an unlink replaces a link without touching what it points
// to; a folder inside its folders that is a link is refused by name (refuse_planted_link()).
// The output folder itself (--out) and its parents are the user's choice and may be links.

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

/// The marker file in every folder heterograd-run made (folders.hpp).
inline constexpr const char* folder_marker = ".heterograd-run";

/// Writes `bytes` to `file` atomically (temporary file, fsync, rename). Throws output_error.
/// The temporary is created new (O_EXCL | O_NOFOLLOW); a link at `file` is replaced, not
/// followed; a file whose folder is a link inside heterograd-run's folders is refused.
void write_file(const std::filesystem::path& file, std::string_view bytes);

/// Throws output_error naming `path` when it is a symbolic link inside a folder of
/// heterograd-run's (its parent folder carries the marker). Anything else passes: a missing
/// path, a folder or file, a link in a folder of the user's (such as --out itself).
void refuse_planted_link(const std::filesystem::path& path);

/// Creates `file` new and empty for writing (O_CREAT | O_EXCL | O_NOFOLLOW, mode 0644) and
/// returns its descriptor (close-on-exec; the caller closes it). What is under the name
/// already (an earlier run's file, a link, a hard link to someone's file) is unlinked first,
/// so it is never written through or truncated; a folder under the name is refused, and so is
/// a linked folder (refuse_planted_link). For logs that another process writes as it runs.
/// Throws output_error naming the file.
int create_fresh(const std::filesystem::path& file);

/// Where heterograd-run finds a file it ships: the environment variable `env` when it is set;
/// else `installed` (relative to the install prefix) beside an installed heterograd-run
/// (<prefix>/bin) when it exists there; else `in_source` (relative to the source tree).
std::filesystem::path shipped_path(const char* env, const std::filesystem::path& installed,
                                   const std::filesystem::path& in_source);

/// The whole content of a regular file. Throws std::runtime_error naming the file when it is
/// missing, unreadable or not a regular file (a FIFO or a device is refused, not read).
std::string read_file(const std::filesystem::path& file);

}  // namespace hgrun
