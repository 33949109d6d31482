#pragma once
// A rank's shard as a checkpoint holds it, and resharding: the shards of one consistent cut
// (every rank's, at the same step) redistributed onto another layout (other fractions, other
// buckets, another number of ranks).
//
// Each rank archives its own `shard` (core/archive.hpp: `archive_writer w; w(s);` then
// seal_checkpoint(w.bytes()) into a file of its own). To resume on layout L' with n' ranks,
// rank r' reads the old shards (all of them: the files of every old rank) and calls
// reshard(old, L', r'), which copies each element of its new shard (parameters and every
// optimizer slot) from the old shard that held it. Element-wise, nothing is recomputed: a
// resumed run continues bitwise as the uninterrupted one would have
// (tests/algorithms/sharded_test.cpp).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "heterograd/algorithms/sharded/layout.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/optim/state.hpp"

namespace heterograd::algorithms::sharded {

/// One rank's part of a sharded run: what it holds of the parameters and of the optimizer
/// state (the slots over its shard; kind, count and counters as on every rank), the layout
/// that says which elements those are, and the number of steps taken.
struct shard {
  layout shard_layout;
  int rank = 0;
  std::int64_t steps = 0;
  std::vector<float> params;
  optim::state<float> state;

  friend bool operator==(const shard&, const shard&) = default;
  template <class Archive>
  void serialize(Archive& ar) {
    ar(shard_layout, rank, steps, params, state);
  }
};

namespace detail {

inline std::string at(std::size_t i, const char* field) {
  return "reshard.shards[" + std::to_string(i) + "]." + field;
}

/// The old shards must be one consistent cut: every rank of one layout once, the same step
/// count and optimizer state shape, and sizes that match the layout.
inline void check_cut(std::span<const shard> old) {
  require(!old.empty(), "reshard.shards (size)", 0, "must hold the shards of every old rank");
  const layout& l = old[0].shard_layout;
  require(old.size() == static_cast<std::size_t>(l.ranks()), "reshard.shards (size)", old.size(),
          "must be the old layout's number of ranks (" + std::to_string(l.ranks()) + ")");
  std::vector<int> seen(old.size(), 0);
  for (std::size_t i = 0; i < old.size(); ++i) {
    const shard& s = old[i];
    require(s.shard_layout == l, at(i, "shard_layout"), std::string("another layout"),
            "must equal shards[0]'s layout (shards of one run)");
    require(s.rank >= 0 && s.rank < l.ranks() && !seen[static_cast<std::size_t>(s.rank)],
            at(i, "rank"), s.rank, "must be a rank of the old layout, each once");
    seen[static_cast<std::size_t>(s.rank)] = 1;
    require(s.steps == old[0].steps, at(i, "steps"), s.steps,
            "must equal shards[0].steps (" + std::to_string(old[0].steps) +
                "): the shards of one consistent cut");
    const std::size_t n = l.shard_size(s.rank);
    require_same_size(at(i, "params"), s.params.size(), "the old layout's shard of its rank", n);
    const auto& st = s.state;
    const auto& st0 = old[0].state;
    require(st.kind == st0.kind && st.count == st0.count && st.counters == st0.counters &&
                st.slots.size() == st0.slots.size(),
            at(i, "state"), st.kind,
            "must have shards[0]'s kind, count, counters and number of slots");
    require(st.children.empty(), at(i, "state.children (count)"), st.children.size(),
            "must be 0 (sharded optimizers have flat states)");
    for (const auto& slot : st.slots)
      require_same_size(at(i, "state.slots[] (size)"), slot.size(), at(i, "params"), n);
  }
}

/// Copies what `from`'s segments hold of `to`'s segments: dst[to.local + k] = src[from.local + k]
/// for every element both cover.
inline void copy_overlap(const std::vector<segment>& to, const std::vector<segment>& from,
                         const float* src, float* dst) {
  for (const auto& t : to) {
    for (const auto& f : from) {
      const std::size_t lo = std::max(t.global, f.global);
      const std::size_t hi = std::min(t.global + t.count, f.global + f.count);
      if (lo < hi) std::copy(src + f.local + (lo - f.global), src + f.local + (hi - f.global),
                             dst + t.local + (lo - t.global));
    }
  }
}

}  // namespace detail

/// Rank `rank`'s shard of layout `to`, assembled from `old`: the shards of every rank of one
/// consistent cut of a run (checked: std::invalid_argument naming the shard, field and rule).
/// `to` must cover as many elements as the old layout; its buckets, fractions and number of
/// ranks may differ.
inline shard reshard(std::span<const shard> old, const layout& to, int rank) {
  detail::check_cut(old);
  const layout& from = old[0].shard_layout;
  require_same_size("reshard.to (size)", to.size(), "the old layout's size", from.size());
  require(rank >= 0 && rank < to.ranks(), "reshard.rank", rank,
          "must be in [0, " + std::to_string(to.ranks()) + ")");
  const std::size_t n = to.shard_size(rank);
  shard s;
  s.shard_layout = to;
  s.rank = rank;
  s.steps = old[0].steps;
  s.params.assign(n, 0.0f);
  s.state.kind = old[0].state.kind;
  s.state.count = old[0].state.count;
  s.state.counters = old[0].state.counters;
  s.state.slots.assign(old[0].state.slots.size(), std::vector<float>(n, 0.0f));
  const auto mine = to.segments(rank);
  for (const shard& o : old) {
    const auto theirs = from.segments(o.rank);
    detail::copy_overlap(mine, theirs, o.params.data(), s.params.data());
    for (std::size_t k = 0; k < s.state.slots.size(); ++k)
      detail::copy_overlap(mine, theirs, o.state.slots[k].data(), s.state.slots[k].data());
  }
  return s;
}

}  // namespace heterograd::algorithms::sharded
