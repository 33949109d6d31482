#pragma once
// Hybrid data-parallel aggregation by measured sparsity (Parallax, Kim et al., EuroSys 2019,
// #12): dense variables go through the transport's allreduce; tables (embedding-like
// variables with row-sparse gradients) live in a sparse_parameter_server sharded over the
// ranks, and each step every table's gradient takes the cheaper path:
//   sparse: push the coalesced rows to their owners (bytes ~ nnz (8 + 4 width) per rank);
//   dense:  allreduce the densified gradient (bytes 2(n-1)/n rows width 4 per rank), after
//           which each owner applies the averaged rows of its shard.
// The choice is made from the measured number of rows touched, agreed by every rank with
// one small allreduce (so all ranks take the same path): sparse when the estimated sparse
// bytes are below the dense bytes (Parallax routes by gradient type and tunes partitions by
// a cost search; here the cost is the byte count, `max_sparse_density` fixes a threshold
// instead). Both paths give the same averaged rows up to summation order; with the sparse
// path, rows nobody touched are not updated (lazy updates, as TensorFlow's sparse apply).
//
// Workers read the rows they need with pull() before computing.

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <thrust/system/cpp/execution_policy.h>

#include "heterograd/comm/concepts.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/algorithms/sparse/parameter_server.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/sparse/row_sparse.hpp"

namespace heterograd::algorithms::sparse {

/// The path a table's gradient took in a step.
enum class route : std::uint8_t { dense, sparse };

struct hybrid_config {
  /// < 0: automatic (the cheaper path by estimated bytes). In [0, 1]: the sparse path when
  /// the touched rows, summed over ranks and divided by n rows, are at most this fraction.
  double max_sparse_density = -1.0;
  /// Options of the dense allreduces (op is forced to avg).
  comm::allreduce_options dense{};
  sparse_ps_config sparse{};

  void validate() const {
    require(max_sparse_density < 0 || max_sparse_density <= 1.0, "hybrid_config.max_sparse_density",
            max_sparse_density, "must be < 0 (automatic) or in [0, 1]");
    sparse.validate();
    comm::detail::validate(dense);
  }
};

template <class Transport>
  requires comm::transport<Transport>
class hybrid_aggregator {
 public:
  explicit hybrid_aggregator(Transport t, hybrid_config o = {}) : t_(std::move(t)), o_(o) {
    o_.validate();
    o_.dense.op = comm::reduce_op::avg;
    o_.dense.weight.reset();
  }

  /// Collective. Adds a table (rows x width, the full initial value on every rank) held by a
  /// sharded parameter server; returns its number.
  std::size_t add_table(std::size_t rows, std::size_t width, span<const float> initial) {
    sparse_ps_config so = o_.sparse;
    so.tag = o_.sparse.tag + 4 * static_cast<int>(tables_.size());
    tables_.emplace_back(t_, rows, width, initial, so);
    return tables_.size() - 1;
  }
  std::size_t tables() const { return tables_.size(); }
  sparse_parameter_server<Transport>& table(std::size_t i) { return tables_.at(i); }
  const sparse_parameter_server<Transport>& table(std::size_t i) const { return tables_.at(i); }

  /// Collective. out[k, :] = row idx[k] of table `i`.
  void pull(std::size_t i, span<const heterograd::sparse::index_t> idx, span<float> out) {
    require(i < tables_.size(), "hybrid_aggregator.pull.table", i, "must be a table number");
    tables_[i].pull(idx, out);
    sync_traffic();
  }

  /// Collective. One step: every dense gradient is averaged in place over the ranks; every
  /// table gradient is averaged and applied by its owner through update(table, row,
  /// params_row, grad_row). Returns the path each table took.
  template <class Update>
  std::vector<route> step(std::span<const span<float>> dense_grads,
                          std::span<const heterograd::sparse::row_sparse<float>> table_grads, Update&& update) {
    require_same_size("hybrid_aggregator.step.table_grads", table_grads.size(), "tables()",
                      tables_.size());
    for (std::size_t i = 0; i < tables_.size(); ++i)
      require(table_grads[i].rows == tables_[i].rows() && table_grads[i].width == tables_[i].width(),
              "hybrid_aggregator.step.table_grads.rows", table_grads[i].rows,
              "must match the table's rows and width");
    const int n = t_.size();
    // Measured sparsity: rows touched after local aggregation, summed over ranks.
    std::vector<heterograd::sparse::row_sparse<float>> local;
    local.reserve(tables_.size());
    std::vector<double> touched(tables_.size());
    for (std::size_t i = 0; i < tables_.size(); ++i) {
      local.push_back(heterograd::sparse::coalesced(thrust::cpp::par, table_grads[i]));
      touched[i] = static_cast<double>(local.back().nnz());
    }
    if (!touched.empty()) {
      t_.allreduce(span<double>(touched), comm::allreduce_options{.op = comm::reduce_op::sum, .timeout = o_.dense.timeout})
          .wait();
      traffic_.sparse_bytes += allreduce_bytes_per_rank(n, static_cast<double>(touched.size() * sizeof(double)));
    }
    std::vector<route> routes(tables_.size());
    for (std::size_t i = 0; i < tables_.size(); ++i) {
      const double rows = static_cast<double>(tables_[i].rows());
      const double w = static_cast<double>(tables_[i].width());
      const double dense_bytes = allreduce_bytes_per_rank(n, rows * w * sizeof(float));
      if (o_.max_sparse_density >= 0) {
        routes[i] = touched[i] / (static_cast<double>(n) * rows) <= o_.max_sparse_density
                        ? route::sparse : route::dense;
      } else {
        // A rank sends the (n-1)/n of its rows that others own.
        const double sparse_bytes = touched[i] / n * (n - 1) / n * (sizeof(heterograd::sparse::index_t) + w * sizeof(float)) +
                                    static_cast<double>(n * (n - 1)) * sizeof(std::uint64_t);
        routes[i] = sparse_bytes < dense_bytes ? route::sparse : route::dense;
      }
    }
    for (auto g : dense_grads) {
      t_.allreduce(g, o_.dense).wait();
      const double b = allreduce_bytes_per_rank(n, static_cast<double>(g.size_bytes()));
      traffic_.dense_bytes += b;
      traffic_.reference_bytes += b;
    }
    for (std::size_t i = 0; i < tables_.size(); ++i) {
      auto& ps = tables_[i];
      const double dense_b =
          allreduce_bytes_per_rank(n, static_cast<double>(ps.rows() * ps.width() * sizeof(float)));
      traffic_.reference_bytes += dense_b;
      auto apply = [&](heterograd::sparse::index_t row, span<float> p, span<const float> g) { update(i, row, p, g); };
      if (routes[i] == route::sparse) {
        ps.push(local[i], apply);
      } else {
        std::vector<float> dense(ps.rows() * ps.width());
        heterograd::sparse::to_dense(thrust::cpp::par, local[i], span<float>(dense));
        t_.allreduce(span<float>(dense), o_.dense).wait();
        traffic_.dense_bytes += dense_b;
        ps.apply_dense(span<const float>(dense), apply);
      }
    }
    sync_traffic();
    return routes;
  }

  /// Bytes this rank sent so far (dense and sparse paths) against an all-dense allreduce.
  const sparse::traffic& traffic() const { return total_; }

 private:
  void sync_traffic() {
    total_ = traffic_;
    for (const auto& ps : tables_) total_.sparse_bytes += ps.traffic().sparse_bytes;
  }

  Transport t_;
  hybrid_config o_;
  std::vector<sparse_parameter_server<Transport>> tables_;
  sparse::traffic traffic_{};
  sparse::traffic total_{};
};

}  // namespace heterograd::algorithms::sparse
