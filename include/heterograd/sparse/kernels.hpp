#pragma once
// Row-sparse kernels: gather, scatter-add, coalesce (sort and merge duplicate indices) and
// dense <-> sparse conversion, over any Thrust execution policy. A row-sparse tensor is a
// list of row indices into a table of `rows` rows of `width` elements, and the values of
// those rows (nnz x width, row-major); width 1 is plain index/value sparsity.
//
// Determinism (DESIGN.md): every kernel gives the same bits on every backend and thread
// count. Duplicate indices are summed in the order they appear (coalesce sorts stably, then
// each output row sums its duplicates sequentially; scatter_add_rows walks the list in order
// for each column), so no result depends on thread timing.
//
// Embedding gradients (Parallax, #12: TensorFlow's IndexedSlices) are the motivating case:
// a step touches a few rows of a large table, so moving nnz rows instead of the table is
// where the sparse parameter server gets its traffic reduction.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <thrust/copy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include "heterograd/core/config.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/launch.hpp"
#include "heterograd/kernels/scratch.hpp"

namespace heterograd::sparse {

/// Row index type: 64-bit so tables beyond 2^31 rows work, and a transport element type.
using index_t = std::int64_t;

namespace detail {

template <class T>
struct gather_body {
  const T* table;
  const index_t* idx;
  T* out;
  std::size_t width;
  HG_HOST_DEVICE void operator()(std::size_t e) const {
    const std::size_t k = e / width, j = e % width;
    out[e] = table[static_cast<std::size_t>(idx[k]) * width + j];
  }
};

// One column at a time, rows in list order: duplicates add in the order they appear.
template <class T>
struct scatter_add_column_body {
  const index_t* idx;
  const T* values;
  T* table;
  std::size_t nnz, width;
  T alpha;
  HG_HOST_DEVICE void operator()(std::size_t j) const {
    for (std::size_t k = 0; k < nnz; ++k)
      table[static_cast<std::size_t>(idx[k]) * width + j] += alpha * values[k * width + j];
  }
};

// Indices known distinct: every element is independent.
template <class T>
struct scatter_add_unique_body {
  const index_t* idx;
  const T* values;
  T* table;
  std::size_t width;
  T alpha;
  HG_HOST_DEVICE void operator()(std::size_t e) const {
    const std::size_t k = e / width, j = e % width;
    table[static_cast<std::size_t>(idx[k]) * width + j] += alpha * values[e];
  }
};

template <class T>
struct fill_body {
  T* out;
  T value;
  HG_HOST_DEVICE void operator()(std::size_t i) const { out[i] = value; }
};

// GCC 12+ turns the host loop over this body into a memcpy of n * sizeof(T) bytes and, in
// coalesce() (its buffer from Thrust's temporary allocation), cannot bound that product: it
// warns of a (size_t)-8-byte write that overlaps itself. A false positive: n is the buffer's
// own element count, checked non-zero before the launch.
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
template <class T>
struct copy_body {
  const T* in;
  T* out;
  HG_HOST_DEVICE void operator()(std::size_t i) const { out[i] = in[i]; }
};
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC diagnostic pop
#endif

struct segment_head {
  const index_t* keys;
  HG_HOST_DEVICE bool operator()(std::size_t p) const { return p == 0 || keys[p] != keys[p - 1]; }
};

template <class T>
struct row_nonzero {
  const T* dense;
  std::size_t width;
  HG_HOST_DEVICE bool operator()(std::size_t r) const {
    for (std::size_t j = 0; j < width; ++j)
      if (dense[r * width + j] != T(0)) return true;
    return false;
  }
};

struct coalesce_index_body {
  const index_t* keys;
  const std::size_t* starts;
  index_t* idx_out;
  HG_HOST_DEVICE void operator()(std::size_t u) const { idx_out[u] = keys[starts[u]]; }
};

// Output row u sums input rows perm[starts[u]], ..., perm[starts[u+1]-1] in that (original)
// order: reads (segment length) x width values, writes width.
template <class T>
struct coalesce_value_body {
  const T* values;
  const std::size_t* perm;
  const std::size_t* starts;
  T* out;
  std::size_t width;
  HG_HOST_DEVICE void operator()(std::size_t e) const {
    const std::size_t u = e / width, j = e % width;
    T acc = values[perm[starts[u]] * width + j];
    for (std::size_t p = starts[u] + 1; p < starts[u + 1]; ++p) acc += values[perm[p] * width + j];
    out[e] = acc;
  }
};

template <class Space>
void check_indices(span<const index_t, Space> idx, std::size_t rows, const char* name) {
  if constexpr (std::is_same_v<Space, host_space>) {
    for (std::size_t k = 0; k < idx.size(); ++k)
      require(idx[k] >= 0 && static_cast<std::size_t>(idx[k]) < rows, name, idx[k],
              "must be a row of the table (in [0, rows))");
  }
}

inline void check_width(std::size_t width) { require_positive("width", width); }

}  // namespace detail

/// out[k, :] = table[idx[k], :]. Reads and writes nnz x width elements (plus the indices).
template <class Policy, class T, class Space>
void gather_rows(const Policy& policy, span<const T, Space> table, std::size_t width,
                 span<const index_t, Space> idx, span<T, Space> out) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  detail::check_width(width);
  require(table.size() % width == 0, "gather_rows.table.size", table.size(),
          "must be a multiple of width");
  require_same_size("gather_rows.out", out.size(), "idx.size() * width", idx.size() * width);
  detail::check_indices(idx, table.size() / width, "gather_rows.idx");
  kernels::launch(policy, out.size(),
                  detail::gather_body<T>{table.data(), idx.data(), out.data(), width}, out.data());
}

/// table[idx[k], :] += alpha * values[k, :] for every k, duplicates added in list order.
/// With `unique_indices` (the list has no duplicate, e.g. after coalesce) every element runs
/// in parallel; otherwise the columns run in parallel and each walks the list in order.
/// Reads 2 nnz x width elements, writes nnz x width.
template <class Policy, class T, class Space>
void scatter_add_rows(const Policy& policy, span<const index_t, Space> idx,
                      span<const T, Space> values, std::size_t width, span<T, Space> table,
                      T alpha = T(1), bool unique_indices = false) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  detail::check_width(width);
  require(table.size() % width == 0, "scatter_add_rows.table.size", table.size(),
          "must be a multiple of width");
  require_same_size("scatter_add_rows.values", values.size(), "idx.size() * width",
                    idx.size() * width);
  detail::check_indices(idx, table.size() / width, "scatter_add_rows.idx");
  if (idx.empty()) return;
  if (unique_indices) {
    kernels::launch(
        policy, values.size(),
        detail::scatter_add_unique_body<T>{idx.data(), values.data(), table.data(), width, alpha});
  } else {
    kernels::launch_plain(policy, width,
                          detail::scatter_add_column_body<T>{
                              idx.data(), values.data(), table.data(), idx.size(), width, alpha});
  }
}

/// Sorts the rows by index and merges duplicates (their values summed in list order).
/// Writes the distinct indices, ascending, into idx_out and their rows into values_out, and
/// returns how many there are (idx_out needs room for idx.size(), values_out for
/// idx.size() x width). Temporary storage: 3 nnz + 1 size_t from the policy's system.
template <class Policy, class T, class Space>
std::size_t coalesce(const Policy& policy, span<const index_t, Space> idx,
                     span<const T, Space> values, std::size_t width, span<index_t, Space> idx_out,
                     span<T, Space> values_out) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  detail::check_width(width);
  const std::size_t nnz = idx.size();
  require_same_size("coalesce.values", values.size(), "idx.size() * width", nnz * width);
  require(idx_out.size() >= nnz, "coalesce.idx_out.size", idx_out.size(),
          "must be >= idx.size()");
  require(values_out.size() >= nnz * width, "coalesce.values_out.size", values_out.size(),
          "must be >= idx.size() * width");
  if (nnz == 0) return 0;
  kernels::scratch<index_t, Policy> keys(policy, nnz);
  kernels::scratch<std::size_t, Policy> perm(policy, nnz);
  kernels::scratch<std::size_t, Policy> starts(policy, nnz + 1);
  kernels::launch(policy, nnz, detail::copy_body<index_t>{idx.data(), keys.data()}, keys.data());
  thrust::sequence(policy, perm.data(), perm.data() + nnz);
  // Stable: duplicates keep their list order, which fixes the order they are summed in.
  thrust::stable_sort_by_key(policy, keys.data(), keys.data() + nnz, perm.data());
  std::size_t* end = thrust::copy_if(policy, thrust::counting_iterator<std::size_t>(0),
                                     thrust::counting_iterator<std::size_t>(nnz), starts.data(),
                                     detail::segment_head{keys.data()});
  const std::size_t unique = static_cast<std::size_t>(end - starts.data());
  kernels::copy_from_host(policy, &nnz, 1, starts.data() + unique);
  kernels::launch_plain(policy, unique,
                        detail::coalesce_index_body{keys.data(), starts.data(), idx_out.data()});
  kernels::launch_plain(policy, unique * width,
                        detail::coalesce_value_body<T>{values.data(), perm.data(), starts.data(),
                                                       values_out.data(), width});
  return unique;
}

/// The rows of a dense table (rows x width) that hold a non-zero: writes their indices,
/// ascending, into idx_out (room for rows) and their values into values_out (room for
/// rows x width); returns how many. Reads the table once, writes the kept rows.
template <class Policy, class T, class Space>
std::size_t dense_to_sparse(const Policy& policy, span<const T, Space> dense, std::size_t width,
                            span<index_t, Space> idx_out, span<T, Space> values_out) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  detail::check_width(width);
  require(dense.size() % width == 0, "dense_to_sparse.dense.size", dense.size(),
          "must be a multiple of width");
  const std::size_t rows = dense.size() / width;
  require(idx_out.size() >= rows, "dense_to_sparse.idx_out.size", idx_out.size(),
          "must be >= the number of rows");
  require(values_out.size() >= dense.size(), "dense_to_sparse.values_out.size",
          values_out.size(), "must be >= dense.size()");
  index_t* end = thrust::copy_if(policy, thrust::counting_iterator<index_t>(0),
                                 thrust::counting_iterator<index_t>(static_cast<index_t>(rows)),
                                 idx_out.data(), detail::row_nonzero<T>{dense.data(), width});
  const std::size_t nnz = static_cast<std::size_t>(end - idx_out.data());
  if (nnz)
    kernels::launch(policy, nnz * width,
                    detail::gather_body<T>{dense.data(), idx_out.data(), values_out.data(), width},
                    values_out.data());
  return nnz;
}

/// dense = 0, then dense[idx[k], :] += values[k, :] (duplicates summed in list order).
template <class Policy, class T, class Space>
void sparse_to_dense(const Policy& policy, span<const index_t, Space> idx,
                     span<const T, Space> values, std::size_t width, span<T, Space> dense,
                     bool unique_indices = false) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  detail::check_width(width);
  require(dense.size() % width == 0, "sparse_to_dense.dense.size", dense.size(),
          "must be a multiple of width");
  require_same_size("sparse_to_dense.values", values.size(), "idx.size() * width",
                    idx.size() * width);
  detail::check_indices(idx, dense.size() / width, "sparse_to_dense.idx");
  kernels::launch(policy, dense.size(), detail::fill_body<T>{dense.data(), T(0)}, dense.data());
  scatter_add_rows(policy, idx, values, width, dense, T(1), unique_indices);
}

}  // namespace heterograd::sparse
