#pragma once
// GEMM on device memory through cuBLAS, with the same row-major convention as kernels::gemm:
// C = alpha op(A) op(B) + beta C. cuBLAS is column-major, and a row-major matrix is its
// transpose in column-major, so C^T = op(B)^T op(A)^T is computed with the operands swapped.
// Errors come back as std::runtime_error naming the cuBLAS status.

#if defined(__CUDACC__)

#include <cublas_v2.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "heterograd/kernels/gemm.hpp"

namespace heterograd::kernels {

namespace detail {
inline void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("heterograd: ") + what + " failed with cuBLAS status " +
                             std::to_string(static_cast<int>(s)));
}
}  // namespace detail

/// An owned cuBLAS handle bound to a stream (move-only).
class cublas_handle {
 public:
  explicit cublas_handle(cudaStream_t stream = nullptr) {
    detail::check_cublas(cublasCreate(&h_), "cublasCreate");
    detail::check_cublas(cublasSetStream(h_, stream), "cublasSetStream");
  }
  cublas_handle(const cublas_handle&) = delete;
  cublas_handle& operator=(const cublas_handle&) = delete;
  cublas_handle(cublas_handle&& o) noexcept : h_(o.h_) { o.h_ = nullptr; }
  ~cublas_handle() {
    if (h_) cublasDestroy(h_);
  }
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

/// Row-major GEMM on device pointers.
template <class T>
void gemm_device(const cublas_handle& handle, transpose ta, transpose tb, std::size_t m,
                 std::size_t n, std::size_t k, T alpha, const T* A, std::size_t lda, const T* B,
                 std::size_t ldb, T beta, T* C, std::size_t ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "float or double");
  if (m == 0 || n == 0) return;
  const auto opa = ta == transpose::yes ? CUBLAS_OP_T : CUBLAS_OP_N;
  const auto opb = tb == transpose::yes ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  if constexpr (std::is_same_v<T, float>) {
    detail::check_cublas(cublasSgemm(handle.get(), opb, opa, N, M, K, &alpha, B,
                                     static_cast<int>(ldb), A, static_cast<int>(lda), &beta, C,
                                     static_cast<int>(ldc)),
                         "cublasSgemm");
  } else {
    detail::check_cublas(cublasDgemm(handle.get(), opb, opa, N, M, K, &alpha, B,
                                     static_cast<int>(ldb), A, static_cast<int>(lda), &beta, C,
                                     static_cast<int>(ldc)),
                         "cublasDgemm");
  }
}

}  // namespace heterograd::kernels

#endif  // __CUDACC__
