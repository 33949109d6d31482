#pragma once
// row_sparse<T>: a sparse gradient of a table of `rows` rows of `width` elements, held as the
// indices of the rows it touches and their values (nnz x width, row-major). Width 1 is plain
// index/value sparsity; an embedding gradient has width = the embedding dimension. It is a
// value (copyable, comparable), in host memory; the kernels of sparse/kernels.hpp do the work
// and run on any host policy (cpp, omp).
//
// "Coalesced" means sorted by index with no duplicate: what a worker sends after its local
// aggregation (Parallax, #12, aggregates inside a machine before it sends).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/sparse/kernels.hpp"

namespace heterograd::sparse {

template <class T = float>
struct row_sparse {
  std::size_t rows = 0;
  std::size_t width = 1;
  std::vector<index_t> indices;
  std::vector<T> values;  // indices.size() x width

  row_sparse() = default;
  row_sparse(std::size_t table_rows, std::size_t row_width) : rows(table_rows), width(row_width) {
    require_positive("row_sparse.width", width);
  }

  std::size_t nnz() const { return indices.size(); }
  /// Fraction of the table's rows this gradient lists (duplicates counted).
  double density() const {
    return rows ? static_cast<double>(nnz()) / static_cast<double>(rows) : 0.0;
  }
  /// Bytes of indices and values: what sending it costs.
  std::size_t bytes() const { return indices.size() * sizeof(index_t) + values.size() * sizeof(T); }
  /// Bytes of the dense table it stands for.
  std::size_t dense_bytes() const { return rows * width * sizeof(T); }

  /// Appends row `r` with `v` (width elements).
  void push_row(index_t r, span<const T> v) {
    require(r >= 0 && static_cast<std::size_t>(r) < rows, "row_sparse.push_row.r", r,
            "must be in [0, rows)");
    require_same_size("row_sparse.push_row.v", v.size(), "width", width);
    indices.push_back(r);
    values.insert(values.end(), v.begin(), v.end());
  }

  /// True when sorted ascending with no duplicate.
  bool is_coalesced() const {
    for (std::size_t k = 1; k < indices.size(); ++k)
      if (!(indices[k - 1] < indices[k])) return false;
    return true;
  }

  void validate() const {
    require_positive("row_sparse.width", width);
    require_same_size("row_sparse.values", values.size(), "nnz * width", indices.size() * width);
    for (std::size_t k = 0; k < indices.size(); ++k)
      require(indices[k] >= 0 && static_cast<std::size_t>(indices[k]) < rows,
              "row_sparse.indices[" + std::to_string(k) + "]", indices[k], "must be in [0, rows)");
  }

  friend bool operator==(const row_sparse&, const row_sparse&) = default;
};

/// The coalesced form of `g`: indices ascending, duplicates summed in list order.
template <class Policy, class T>
row_sparse<T> coalesced(const Policy& policy, const row_sparse<T>& g) {
  g.validate();
  row_sparse<T> out(g.rows, g.width);
  out.indices.resize(g.nnz());
  out.values.resize(g.values.size());
  const std::size_t u =
      coalesce(policy, span<const index_t>(g.indices), span<const T>(g.values), g.width,
               span<index_t>(out.indices), span<T>(out.values));
  out.indices.resize(u);
  out.values.resize(u * g.width);
  return out;
}

/// The non-zero rows of a dense table (rows x width), coalesced.
template <class Policy, class T>
row_sparse<T> from_dense(const Policy& policy, span<const T> dense, std::size_t width) {
  require_positive("from_dense.width", width);
  require(dense.size() % width == 0, "from_dense.dense.size", dense.size(),
          "must be a multiple of width");
  row_sparse<T> out(dense.size() / width, width);
  out.indices.resize(out.rows);
  out.values.resize(dense.size());
  const std::size_t nnz =
      dense_to_sparse(policy, dense, width, span<index_t>(out.indices), span<T>(out.values));
  out.indices.resize(nnz);
  out.values.resize(nnz * width);
  return out;
}

/// dense (rows x width) = g.
template <class Policy, class T>
void to_dense(const Policy& policy, const row_sparse<T>& g, span<T> dense) {
  g.validate();
  require_same_size("to_dense.dense", dense.size(), "rows * width", g.rows * g.width);
  sparse_to_dense(policy, span<const index_t>(g.indices), span<const T>(g.values), g.width, dense,
                  g.is_coalesced());
}

/// table += alpha * g (rows of g added in list order).
template <class Policy, class T>
void scatter_add(const Policy& policy, const row_sparse<T>& g, span<T> table, T alpha = T(1)) {
  g.validate();
  require_same_size("scatter_add.table", table.size(), "rows * width", g.rows * g.width);
  scatter_add_rows(policy, span<const index_t>(g.indices), span<const T>(g.values), g.width, table,
                   alpha, g.is_coalesced());
}

/// The rows `idx` of a dense table, as a row_sparse (values gathered).
template <class Policy, class T>
row_sparse<T> gather(const Policy& policy, span<const T> table, std::size_t width,
                     span<const index_t> idx) {
  require_positive("gather.width", width);
  require(table.size() % width == 0, "gather.table.size", table.size(),
          "must be a multiple of width");
  row_sparse<T> out(table.size() / width, width);
  out.indices.assign(idx.begin(), idx.end());
  out.values.resize(idx.size() * width);
  gather_rows(policy, table, width, idx, span<T>(out.values));
  return out;
}

}  // namespace heterograd::sparse
