#pragma once
// The single source of heterograd's version; CMakeLists.txt parses these three lines.
#define HG_VERSION_MAJOR 0
#define HG_VERSION_MINOR 1
#define HG_VERSION_PATCH 0

namespace heterograd {
inline constexpr int version_major = HG_VERSION_MAJOR;
inline constexpr int version_minor = HG_VERSION_MINOR;
inline constexpr int version_patch = HG_VERSION_PATCH;
}  // namespace heterograd
