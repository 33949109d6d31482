#pragma once
// Which folders heterograd-run may write into and delete. It writes only into folders it made
// (each carries a marker file, `.heterograd-run`) or that were empty when it came; it deletes
// only folders that carry the marker. A folder of the user's (`--out ~`, a method folder the
// user filled) is refused with an output_error naming it, before anything in it is touched.
//
// Which folders are heterograd-run's: the output folder once it carries the marker, and every
// folder under it (seed-N, tuning, the method folders and theirs). None of those may be a
// symbolic link (a link there would make heterograd-run write into, fill or delete a folder
// elsewhere): each is checked with lstat before it is used and refused by name
// (refuse_planted_link, files.hpp). The output folder itself and its parents are the user's
// choice: `--out` may name a link, which is followed.

#include <filesystem>
#include <string>
#include <system_error>

#include "files.hpp"

namespace hgrun {

/// Whether `dir` is a folder that carries heterograd-run's marker (a plain file, not a link).
inline bool is_our_folder(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::is_directory(dir, ec) &&
         std::filesystem::symlink_status(dir / folder_marker, ec).type() == std::filesystem::file_type::regular;
}

/// Whether `name` is the temporary that write_file() makes for the marker (".<marker>.tmp-<pid>"):
/// a run killed while it claimed a folder leaves it, and nothing else, in the folder.
inline bool is_marker_temporary(const std::string& name) {
  const std::string stem = "." + std::string(folder_marker) + ".tmp-";
  return name.size() > stem.size() && name.compare(0, stem.size(), stem) == 0 &&
         name.find_first_not_of("0123456789", stem.size()) == std::string::npos;
}

/// Throws output_error naming `dir` unless heterograd-run may write into it: it is missing, an
/// empty folder (or one holding only a marker's temporary) or a folder with the marker, and
/// not a link inside a folder of heterograd-run's. Makes nothing.
inline void check_folder(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  refuse_planted_link(dir);
  std::error_code ec;
  const auto st = fs::status(dir, ec);
  if (!fs::exists(st)) return;
  if (!fs::is_directory(st)) throw output_error(dir, "it exists and is not a folder");
  if (is_our_folder(dir)) return;
  auto it = fs::directory_iterator(dir, ec);
  if (ec) throw output_error(dir, ec.message());
  while (it != fs::directory_iterator() && it->symlink_status(ec).type() == fs::file_type::regular &&
         is_marker_temporary(it->path().filename().string()))
    it.increment(ec);
  if (ec) throw output_error(dir, ec.message());
  if (it != fs::directory_iterator())
    throw output_error(dir, "the folder is not empty and heterograd-run did not make it (it has no " +
                                std::string(folder_marker) +
                                " marker); heterograd-run writes only into empty folders or its own, so "
                                "nothing of yours is replaced or deleted: choose another output folder "
                                "(--out or \"output\") or move the files away");
}

/// Makes `dir` a folder of heterograd-run's: creates it (and missing parents, which stay the
/// user's) with the marker, adopts it when it is empty, and takes it as it is when it carries
/// the marker. Throws output_error naming `dir` where check_folder() does.
inline void claim_folder(const std::filesystem::path& dir) {
  check_folder(dir);
  if (is_our_folder(dir)) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw output_error(dir, ec.message());
  write_file(dir / folder_marker,
             "This folder was made by heterograd-run, which may replace or delete what is in it.\n");
  // Temporaries of claims that a kill interrupted (check_folder() let only those through).
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (is_marker_temporary(e.path().filename().string())) std::filesystem::remove(e.path(), ec);
}

/// Empties a folder of heterograd-run's for a fresh run: removes it with its content when it
/// carries the marker, then claims it again (a folder without the marker is claimed or
/// refused as claim_folder() does, and nothing in it is deleted).
inline void reset_folder(const std::filesystem::path& dir) {
  refuse_planted_link(dir);  // (remove_all would remove the link alone: refused all the same)
  if (is_our_folder(dir)) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (ec) throw output_error(dir, "cannot remove the previous run's folder: " + ec.message());
  }
  claim_folder(dir);
}

}  // namespace hgrun
