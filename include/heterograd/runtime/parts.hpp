#pragma once
// Per-rank parts of a checkpoint over a transport (a round method under MPI: each rank's
// replica, optimizer and sample streams as archive bytes; rank 0 writes them into one file).
//
//   gather_parts(t, mine, o) -> rank 0: ranks 1..n-1's parts in rank order; others: {}
//   scatter_parts(t, parts, o) -> rank k: parts[k - 1] ("" when none: a fresh start)
//
// The sizes go first (a gather to rank 0, or rank 0's broadcast), then each part as bytes. A
// size is a peer's word: each receiver checks it against parts_options::limit before it
// allocates anything, and refuses a larger one naming the rank, the size and the bound (a
// hostile rank could make rank 0 allocate any addressable size); the part's bytes are then
// received with exactly that size.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "heterograd/comm/types.hpp"
#include "heterograd/core/clock.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::runtime {

struct parts_options {
  /// The largest part a rank may announce, in bytes (derive it from the parts' structure: a
  /// rank's own part's size with room to spare).
  std::size_t limit = 0;
  seconds timeout{300.0};
  int tag = 29000;

  void validate() const {
    require(limit > 0, "parts_options.limit", limit, "must be > 0");
    require(timeout.count() > 0, "parts_options.timeout", timeout.count(), "must be > 0");
    require(tag >= 0 && tag <= 32767, "parts_options.tag", tag, "must be in [0, 32767]");
  }
};

/// A size announced by another rank: at most o.limit, refused by name before anything is sized.
inline void check_part_size(const char* key, int rank, std::uint64_t bytes, const parts_options& o) {
  require(bytes <= o.limit, key, bytes,
          "must be at most parts_options.limit (" + std::to_string(o.limit) + " bytes; announced by rank " +
              std::to_string(rank) + ")");
}

template <class Transport>
std::vector<std::string> gather_parts(const Transport& t, const std::string& mine, const parts_options& o) {
  o.validate();
  const auto n = static_cast<std::size_t>(t.size());
  const std::uint64_t own = mine.size();
  std::vector<std::uint64_t> sizes(t.rank() == 0 ? n : 0);
  t.gather(span<const std::uint64_t>(&own, 1), span<std::uint64_t>(sizes), 0,
           comm::gather_options{.timeout = o.timeout})
      .wait();
  if (t.rank() != 0) {
    const auto* b = reinterpret_cast<const std::uint8_t*>(mine.data());
    t.send(span<const std::uint8_t>(b, mine.size()), 0, o.tag, comm::send_options{.timeout = o.timeout}).wait();
    return {};
  }
  for (std::size_t k = 1; k < n; ++k) check_part_size("gather_parts.size", static_cast<int>(k), sizes[k], o);
  std::vector<std::string> out(n - 1);
  for (std::size_t k = 1; k < n; ++k) {
    out[k - 1].resize(static_cast<std::size_t>(sizes[k]));
    auto* b = reinterpret_cast<std::uint8_t*>(out[k - 1].data());
    t.recv(span<std::uint8_t>(b, out[k - 1].size()), static_cast<int>(k), o.tag,
           comm::recv_options{.timeout = o.timeout})
        .wait();
  }
  return out;
}

template <class Transport>
std::string scatter_parts(const Transport& t, const std::vector<std::string>& parts, const parts_options& o) {
  o.validate();
  const auto n = static_cast<std::size_t>(t.size()), me = static_cast<std::size_t>(t.rank());
  std::vector<std::uint64_t> sizes(n, 0);
  if (me == 0)
    for (std::size_t k = 1; k < n && k - 1 < parts.size(); ++k) sizes[k] = parts[k - 1].size();
  t.broadcast(span<std::uint64_t>(sizes.data(), sizes.size()), 0, comm::broadcast_options{.timeout = o.timeout})
      .wait();
  if (me == 0) {
    for (std::size_t k = 1; k < n; ++k) {
      if (sizes[k] == 0) continue;
      const auto* b = reinterpret_cast<const std::uint8_t*>(parts[k - 1].data());
      t.send(span<const std::uint8_t>(b, sizes[k]), static_cast<int>(k), o.tag,
             comm::send_options{.timeout = o.timeout})
          .wait();
    }
    return {};
  }
  check_part_size("scatter_parts.size", 0, sizes[me], o);
  std::string mine(static_cast<std::size_t>(sizes[me]), '\0');
  if (!mine.empty())
    t.recv(span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(mine.data()), mine.size()), 0, o.tag,
           comm::recv_options{.timeout = o.timeout})
        .wait();
  return mine;
}

}  // namespace heterograd::runtime
