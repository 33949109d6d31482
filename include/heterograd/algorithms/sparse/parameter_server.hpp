#pragma once
// A parameter server for sparse (embedding-like) tables, sharded over the ranks of any
// transport (Parallax, Kim et al., EuroSys 2019, #12): the table's rows are split into
// contiguous blocks of ceil(rows / n) rows, rank s holding block s. Each rank
//   push: aggregates its own gradient first (coalesce: sort, merge duplicate rows; Parallax's
//         local aggregation before sending), sends every owner only the rows it owns, and, as
//         an owner, sums the rows it receives in rank order, averages them, and applies the
//         caller's row update to its shard;
//   pull: asks the owners for the rows it needs (duplicates asked once) and gets their
//         current values.
// Both are collective (every rank calls them, in the same order). Sums run in rank order, so
// the result is deterministic and equals, bit for bit, a rank-ordered dense reduction.
//
// Traffic per rank (bytes sent): a push sends n counts to each peer plus, for each of its
// nnz coalesced rows owned elsewhere, 8 + 4 width bytes; a pull sends 8 bytes per remote row
// asked and, as an owner, 4 width bytes per row served.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <thrust/system/cpp/execution_policy.h>

#include "heterograd/comm/concepts.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/sparse/kernels.hpp"
#include "heterograd/sparse/row_sparse.hpp"

namespace heterograd::algorithms::sparse {

/// Bytes a rank sent, by path, and what an all-dense allreduce would have sent.
struct traffic {
  double dense_bytes = 0;      ///< through allreduce (ring volume: 2(n-1)/n of the buffer)
  double sparse_bytes = 0;     ///< pushed and pulled rows, indices and counts
  double reference_bytes = 0;  ///< the same steps with every variable allreduced densely
  double total() const { return dense_bytes + sparse_bytes; }
  /// Bytes sent / bytes an all-dense allreduce sends (0 when nothing was reduced).
  double ratio() const { return reference_bytes > 0 ? total() / reference_bytes : 0.0; }
  traffic& operator+=(const traffic& o) {
    dense_bytes += o.dense_bytes;
    sparse_bytes += o.sparse_bytes;
    reference_bytes += o.reference_bytes;
    return *this;
  }
  friend bool operator==(const traffic&, const traffic&) = default;
};

/// Bytes one rank sends in a bandwidth-optimal (ring) allreduce of `bytes`: 2(n-1)/n bytes.
inline double allreduce_bytes_per_rank(int n, double bytes) {
  return n > 1 ? 2.0 * static_cast<double>(n - 1) / static_cast<double>(n) * bytes : 0.0;
}

struct sparse_ps_config {
  /// Tags [tag, tag + 3] carry the server's messages on the transport; keep them apart from
  /// the caller's own tagged traffic.
  int tag = 0x5e00;
  seconds timeout = comm::default_timeout;
  /// avg divides the summed rows by the number of ranks (data-parallel SGD), sum keeps sums.
  comm::reduce_op op = comm::reduce_op::avg;

  void validate() const {
    require_non_negative("sparse_ps_config.tag", tag);
    require(timeout.count() > 0, "sparse_ps_config.timeout", timeout.count(), "must be > 0");
    require(op == comm::reduce_op::avg || op == comm::reduce_op::sum, "sparse_ps_config.op",
            reduce_op_name(op), "must be sum or avg");
  }
};

/// The rows of a table a rank holds under the block partition.
struct shard_range {
  std::size_t begin = 0, end = 0;
  std::size_t size() const { return end - begin; }
};

/// Block partition of `rows` rows over `n` ranks: ceil(rows / n) rows per rank.
inline std::size_t shard_block(std::size_t rows, int n) {
  return (rows + static_cast<std::size_t>(n) - 1) / static_cast<std::size_t>(n);
}

template <class Transport>
  requires comm::transport<Transport>
class sparse_parameter_server {
 public:
  /// Collective. `initial` is the full table (rows x width) on every rank; each keeps its
  /// shard.
  sparse_parameter_server(Transport t, std::size_t rows, std::size_t width,
                          span<const float> initial, sparse_ps_config o = {})
      : t_(std::move(t)), rows_(rows), width_(width), o_(o) {
    o_.validate();
    require_positive("sparse_parameter_server.rows", rows_);
    require_positive("sparse_parameter_server.width", width_);
    require_same_size("sparse_parameter_server.initial", initial.size(), "rows * width",
                      rows_ * width_);
    n_ = t_.size();
    block_ = shard_block(rows_, n_);
    const shard_range r = range(t_.rank());
    shard_.assign(initial.begin() + static_cast<std::ptrdiff_t>(r.begin * width_),
                  initial.begin() + static_cast<std::ptrdiff_t>(r.end * width_));
  }

  std::size_t rows() const { return rows_; }
  std::size_t width() const { return width_; }
  const Transport& transport_handle() const { return t_; }
  /// The rank that holds `row`.
  int owner(heterograd::sparse::index_t row) const { return static_cast<int>(static_cast<std::size_t>(row) / block_); }
  shard_range range(int rank) const {
    const std::size_t b = std::min(rows_, static_cast<std::size_t>(rank) * block_);
    return {b, std::min(rows_, b + block_)};
  }
  /// This rank's rows (range(rank()).size() x width).
  span<float> shard() { return span<float>(shard_); }
  span<const float> shard() const { return span<const float>(shard_); }
  const sparse::traffic& traffic() const { return traffic_; }
  void reset_traffic() { traffic_ = {}; }

  /// Collective. Pushes this rank's gradient rows (any order, duplicates allowed); each owner
  /// sums every rank's rows in rank order, averages (options.op), and calls
  /// update(row, params_row, grad_row) once per row anybody touched, rows ascending.
  template <class Update>
  void push(const heterograd::sparse::row_sparse<float>& g, Update&& update) {
    require(g.rows == rows_ && g.width == width_, "sparse_parameter_server.push.g.rows", g.rows,
            "must match the table's rows and width");
    g.validate();
    const auto local = heterograd::sparse::coalesced(thrust::cpp::par, g);  // local aggregation
    const std::vector<std::size_t> cut = cuts(local.indices);
    const std::vector<std::uint64_t> counts = exchange_counts(cut);

    const int me = t_.rank();
    std::vector<std::size_t> from(static_cast<std::size_t>(n_) + 1, 0);
    for (int s = 0; s < n_; ++s) from[s + 1] = from[s] + counts[static_cast<std::size_t>(s * n_ + me)];
    heterograd::sparse::row_sparse<float> in(rows_, width_);
    in.indices.resize(from.back());
    in.values.resize(from.back() * width_);
    std::vector<comm::request> reqs;
    for (int d = 0; d < n_; ++d) {
      const std::size_t c = cut[d + 1] - cut[d];
      if (d == me || c == 0) continue;
      reqs.push_back(t_.send(span<const heterograd::sparse::index_t>(local.indices.data() + cut[d], c), d,
                             o_.tag, comm::send_options{o_.timeout}));
      reqs.push_back(t_.send(span<const float>(local.values.data() + cut[d] * width_, c * width_),
                             d, o_.tag + 1, comm::send_options{o_.timeout}));
      traffic_.sparse_bytes += static_cast<double>(c * (sizeof(heterograd::sparse::index_t) + width_ * sizeof(float)));
    }
    for (int s = 0; s < n_; ++s) {
      const std::size_t c = from[s + 1] - from[s];
      if (c == 0) continue;
      if (s == me) {
        std::copy_n(local.indices.begin() + static_cast<std::ptrdiff_t>(cut[me]), c,
                    in.indices.begin() + static_cast<std::ptrdiff_t>(from[s]));
        std::copy_n(local.values.begin() + static_cast<std::ptrdiff_t>(cut[me] * width_),
                    c * width_, in.values.begin() + static_cast<std::ptrdiff_t>(from[s] * width_));
        continue;
      }
      reqs.push_back(t_.recv(span<heterograd::sparse::index_t>(in.indices.data() + from[s], c), s, o_.tag,
                             comm::recv_options{o_.timeout}));
      reqs.push_back(t_.recv(span<float>(in.values.data() + from[s] * width_, c * width_), s,
                             o_.tag + 1, comm::recv_options{o_.timeout}));
    }
    wait_all(reqs);
    // Concatenated in rank order; coalescing sums each row's contributions in that order.
    const auto agg = heterograd::sparse::coalesced(thrust::cpp::par, in);
    const std::size_t base = range(me).begin;
    const float div = static_cast<float>(n_);
    std::vector<float> row(width_);
    for (std::size_t k = 0; k < agg.nnz(); ++k) {
      const float* v = agg.values.data() + k * width_;
      for (std::size_t j = 0; j < width_; ++j) row[j] = o_.op == comm::reduce_op::avg ? v[j] / div : v[j];
      const std::size_t r = static_cast<std::size_t>(agg.indices[k]);
      update(agg.indices[k], span<float>(shard_.data() + (r - base) * width_, width_),
             span<const float>(row));
    }
  }

  /// Applies an already reduced dense gradient (rows x width, the same on every rank, e.g.
  /// from an allreduce): update() on this rank's rows whose gradient row is not all zero.
  /// Local: sends nothing.
  template <class Update>
  void apply_dense(span<const float> reduced, Update&& update) {
    require_same_size("sparse_parameter_server.apply_dense.reduced", reduced.size(),
                      "rows * width", rows_ * width_);
    const shard_range r = range(t_.rank());
    for (std::size_t i = r.begin; i < r.end; ++i) {
      const float* g = reduced.data() + i * width_;
      if (std::all_of(g, g + width_, [](float v) { return v == 0.0f; })) continue;
      update(static_cast<heterograd::sparse::index_t>(i),
             span<float>(shard_.data() + (i - r.begin) * width_, width_),
             span<const float>(g, width_));
    }
  }

  /// Collective. out[k, :] = the current row idx[k] (any order, duplicates allowed).
  void pull(span<const heterograd::sparse::index_t> idx, span<float> out) {
    require_same_size("sparse_parameter_server.pull.out", out.size(), "idx.size() * width",
                      idx.size() * width_);
    for (std::size_t k = 0; k < idx.size(); ++k)
      require(idx[k] >= 0 && static_cast<std::size_t>(idx[k]) < rows_,
              "sparse_parameter_server.pull.idx", idx[k], "must be in [0, rows)");
    std::vector<heterograd::sparse::index_t> want(idx.begin(), idx.end());
    std::sort(want.begin(), want.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
    const std::vector<std::size_t> cut = cuts(want);
    const std::vector<std::uint64_t> counts = exchange_counts(cut);
    const int me = t_.rank();
    // Requests to owners, then serve the requests this rank owns, then take the replies.
    std::vector<std::vector<heterograd::sparse::index_t>> asked(static_cast<std::size_t>(n_));
    std::vector<comm::request> reqs;
    for (int d = 0; d < n_; ++d) {
      const std::size_t c = cut[d + 1] - cut[d];
      if (d == me || c == 0) continue;
      reqs.push_back(t_.send(span<const heterograd::sparse::index_t>(want.data() + cut[d], c), d, o_.tag + 2,
                             comm::send_options{o_.timeout}));
      traffic_.sparse_bytes += static_cast<double>(c * sizeof(heterograd::sparse::index_t));
    }
    for (int s = 0; s < n_; ++s) {
      const std::size_t c = counts[static_cast<std::size_t>(s * n_ + me)];
      if (s == me || c == 0) continue;
      asked[s].resize(c);
      reqs.push_back(t_.recv(span<heterograd::sparse::index_t>(asked[s]), s, o_.tag + 2, comm::recv_options{o_.timeout}));
    }
    wait_all(reqs);
    reqs.clear();
    const std::size_t base = range(me).begin;
    std::vector<std::vector<float>> served(static_cast<std::size_t>(n_));
    for (int s = 0; s < n_; ++s) {
      if (asked[s].empty()) continue;
      served[s].resize(asked[s].size() * width_);
      for (std::size_t k = 0; k < asked[s].size(); ++k) {
        const auto r = static_cast<std::size_t>(asked[s][k]);
        require(owner(asked[s][k]) == me, "sparse_parameter_server.pull.request", asked[s][k],
                "must be a row of this shard");
        std::copy_n(shard_.data() + (r - base) * width_, width_, served[s].data() + k * width_);
      }
      reqs.push_back(t_.send(span<const float>(served[s]), s, o_.tag + 3, comm::send_options{o_.timeout}));
      traffic_.sparse_bytes += static_cast<double>(served[s].size() * sizeof(float));
    }
    std::vector<float> got(want.size() * width_);
    for (int d = 0; d < n_; ++d) {
      const std::size_t c = cut[d + 1] - cut[d];
      if (c == 0) continue;
      if (d == me) {
        for (std::size_t k = cut[d]; k < cut[d + 1]; ++k)
          std::copy_n(shard_.data() + (static_cast<std::size_t>(want[k]) - base) * width_, width_,
                      got.data() + k * width_);
        continue;
      }
      reqs.push_back(t_.recv(span<float>(got.data() + cut[d] * width_, c * width_), d, o_.tag + 3,
                             comm::recv_options{o_.timeout}));
    }
    wait_all(reqs);
    for (std::size_t k = 0; k < idx.size(); ++k) {
      const auto pos = static_cast<std::size_t>(
          std::lower_bound(want.begin(), want.end(), idx[k]) - want.begin());
      std::copy_n(got.data() + pos * width_, width_, out.data() + k * width_);
    }
  }

  /// Collective. The whole table on every rank (checkpoints, tests): an allgather of the
  /// shards padded to the block size.
  void gather_table(span<float> out) const {
    require_same_size("sparse_parameter_server.gather_table.out", out.size(), "rows * width",
                      rows_ * width_);
    std::vector<float> padded(block_ * width_, 0.0f), all(padded.size() * static_cast<std::size_t>(n_));
    std::copy(shard_.begin(), shard_.end(), padded.begin());
    t_.allgather(span<const float>(padded), span<float>(all), comm::allgather_options{o_.timeout}).wait();
    std::copy_n(all.begin(), out.size(), out.begin());
  }

 private:
  // Positions in a sorted index list where each owner's rows start (n + 1 entries).
  std::vector<std::size_t> cuts(const std::vector<heterograd::sparse::index_t>& sorted) const {
    std::vector<std::size_t> c(static_cast<std::size_t>(n_) + 1, sorted.size());
    c[0] = 0;
    for (int d = 1; d < n_; ++d) {
      const auto first = static_cast<heterograd::sparse::index_t>(static_cast<std::size_t>(d) * block_);
      c[d] = static_cast<std::size_t>(std::lower_bound(sorted.begin(), sorted.end(), first) -
                                      sorted.begin());
    }
    return c;
  }

  /// Collective. counts[src * n + dst]: the rows rank src has for rank dst, from every rank's
  /// `cut` (its rows split by owner).
  std::vector<std::uint64_t> exchange_counts(const std::vector<std::size_t>& cut) {
    std::vector<std::uint64_t> mine(static_cast<std::size_t>(n_)),
        counts(mine.size() * mine.size());
    for (int d = 0; d < n_; ++d) mine[d] = cut[d + 1] - cut[d];
    t_.allgather(span<const std::uint64_t>(mine), span<std::uint64_t>(counts),
                 comm::allgather_options{o_.timeout})
        .wait();
    traffic_.sparse_bytes += static_cast<double>((n_ - 1) * n_) * sizeof(std::uint64_t);
    return counts;
  }

  Transport t_;
  std::size_t rows_, width_;
  sparse_ps_config o_;
  int n_ = 1;
  std::size_t block_ = 1;
  std::vector<float> shard_;
  sparse::traffic traffic_{};
};

}  // namespace heterograd::algorithms::sparse
