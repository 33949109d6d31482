#pragma once
// Which folders heterograd-run may write into and delete. It writes only into folders it made
// (each carries a marker file, `.heterograd-run`) or that were empty when it came; it deletes
// only folders that carry the marker. A folder of the user's (`--out ~`, a method folder the
// user filled) is refused with an output_error naming it, before anything in it is touched.

#include <filesystem>
#include <string>
#include <system_error>

#include "files.hpp"

namespace hgrun {

/// The marker file in every folder heterograd-run made.
inline constexpr const char* folder_marker = ".heterograd-run";

/// Whether `dir` is a folder that carries heterograd-run's marker.
inline bool is_our_folder(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::is_directory(dir, ec) && std::filesystem::is_regular_file(dir / folder_marker, ec);
}

/// Whether `name` is the temporary that write_file() makes for the marker (".<marker>.tmp-<pid>"):
/// a run killed while it claimed a folder leaves it, and nothing else, in the folder.
inline bool is_marker_temporary(const std::string& name) {
  const std::string stem = "." + std::string(folder_marker) + ".tmp-";
  return name.size() > stem.size() && name.compare(0, stem.size(), stem) == 0 &&
         name.find_first_not_of("0123456789", stem.size()) == std::string::npos;
}

/// Throws output_error naming `dir` unless heterograd-run may write into it: it is missing, an
/// empty folder (or one holding only a marker's temporary) or a folder with the marker.
/// Makes nothing.
inline void check_folder(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(dir, ec);
  if (!fs::exists(st)) return;
  if (!fs::is_directory(st)) throw output_error(dir, "it exists and is not a folder");
  if (is_our_folder(dir)) return;
  auto it = fs::directory_iterator(dir, ec);
  if (ec) throw output_error(dir, ec.message());
  while (it != fs::directory_iterator() && it->is_regular_file(ec) &&
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
  if (is_our_folder(dir)) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (ec) throw output_error(dir, "cannot remove the previous run's folder: " + ec.message());
  }
  claim_folder(dir);
}

}  // namespace hgrun
