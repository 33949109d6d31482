#pragma once
// LAMB on a sharded state (state.hpp): its tensors are the layout's buckets, each split across
// the ranks at multiples of kernels::lamb_chunk elements, so each rank's chunks of a tensor
// are chunks of kernels::lamb's fixed-tree reduction over the whole tensor. A step: pass 1 on
// every piece (moments, per-chunk norms), one allgather_v of all ranks' chunk norms (16 bytes
// per chunk), the fixed tree per tensor on every rank, pass 2 on every piece.

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "heterograd/algorithms/sharded/layout.hpp"
#include "heterograd/comm/uneven.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/updates.hpp"
#include "heterograd/optim/optimizers.hpp"

namespace heterograd::algorithms::sharded::detail {

inline std::size_t lamb_chunks(std::size_t n) {
  return (n + kernels::lamb_chunk - 1) / kernels::lamb_chunk;
}

/// LAMB's tensors must be the buckets, and every cut inside a bucket a multiple of lamb_chunk.
inline void check_lamb_layout(const optim::lamb& opt, const layout& l) {
  const auto& sizes = opt.params().tensor_sizes;
  const bool one = sizes.empty() && l.buckets() == 1;
  require(one || sizes == l.config().bucket_sizes, "sharded_state.lamb.tensor_sizes (count)",
          sizes.size(),
          "must equal layout.bucket_sizes (" + std::to_string(l.buckets()) +
              " buckets; empty only with one bucket): each tensor's trust ratio needs its norms");
  for (std::size_t b = 0; b < l.buckets(); ++b) {
    for (int r = 1; r < l.ranks(); ++r) {
      const std::size_t cut = l.piece_offset(b, r);
      require(cut == l.bucket_size(b) || cut % kernels::lamb_chunk == 0,
              "sharded_state.layout (cut of bucket " + std::to_string(b) + " before rank " +
                  std::to_string(r) + ")",
              cut,
              "must be a multiple of kernels::lamb_chunk (" + std::to_string(kernels::lamb_chunk) +
                  ") for LAMB, whose norms then equal the replicated ones bitwise: build the "
                  "layout with granularity " + std::to_string(kernels::lamb_chunk));
    }
  }
}

/// One LAMB step on rank `rank`'s shard. Pass 1 writes copies of m and v: a failed exchange
/// leaves the state (and the parameters) as they were.
template <class Policy, class Transport>
void lamb_step(const Policy& policy, const Transport& t, const optim::lamb& opt, const layout& l,
               int rank, const std::vector<float>& grads, optim::state<float>& st,
               std::vector<float>& params, const comm::uneven_options& uo) {
  const kernels::lamb_options lo{.step = st.count + 1};
  const auto& cfg = opt.params();
  std::vector<float> m = st.slots[0], v = st.slots[1];
  std::vector<kernels::lamb_norms> mine;
  for (std::size_t b = 0; b < l.buckets(); ++b) {
    const std::size_t off = l.shard_offset(b, rank), n = l.piece_count(b, rank);
    kernels::lamb_moments(policy, span<float>(params.data() + off, n),
                          span<const float>(grads.data() + off, n), span<float>(m.data() + off, n),
                          span<float>(v.data() + off, n), cfg, lo, mine);
  }
  // Every rank's chunk norms, rank after rank (each rank's in bucket order): 2 doubles a chunk.
  const auto ranks = static_cast<std::size_t>(l.ranks());
  std::vector<std::size_t> counts(ranks, 0), base(ranks + 1, 0);
  for (std::size_t q = 0; q < ranks; ++q) {
    for (std::size_t b = 0; b < l.buckets(); ++b)
      counts[q] += 2 * lamb_chunks(l.piece_count(b, static_cast<int>(q)));
    base[q + 1] = base[q] + counts[q];
  }
  std::vector<double> out(2 * mine.size()), all(base[ranks]);
  if (!mine.empty()) std::memcpy(out.data(), mine.data(), out.size() * sizeof(double));
  static_assert(sizeof(kernels::lamb_norms) == 2 * sizeof(double));
  comm::allgather_v(t, span<const double>(out.data(), out.size()), span<double>(all.data(), all.size()),
                    counts, uo)
      .wait();
  std::vector<std::size_t> at(base.begin(), base.end() - 1);  // each rank's next chunk
  std::vector<kernels::lamb_norms> chunks;
  for (std::size_t b = 0; b < l.buckets(); ++b) {
    chunks.clear();
    for (std::size_t q = 0; q < ranks; ++q) {
      const std::size_t k = lamb_chunks(l.piece_count(b, static_cast<int>(q)));
      for (std::size_t c = 0; c < k; ++c, at[q] += 2) chunks.push_back({all[at[q]], all[at[q] + 1]});
    }
    const double ratio = kernels::lamb_trust_ratio(kernels::lamb_tree(chunks));
    const std::size_t off = l.shard_offset(b, rank), n = l.piece_count(b, rank);
    kernels::lamb_apply(policy, span<float>(params.data() + off, n),
                        span<const float>(m.data() + off, n), span<const float>(v.data() + off, n),
                        cfg, lo, ratio);
  }
  st.slots[0] = std::move(m);
  st.slots[1] = std::move(v);
  ++st.count;
}

}  // namespace heterograd::algorithms::sharded::detail
