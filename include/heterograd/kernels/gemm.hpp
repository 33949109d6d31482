#pragma once
// One small GEMM interface for the reference models: row-major C = alpha op(A) op(B) + beta C.
// With HG_HAS_BLAS (the heterograd::blas component) it calls CBLAS (OpenBLAS on Debian);
// without it, a portable loop over a Thrust execution policy computes the same product (the
// fallback is exact-order: each C element is one sequential dot product). cuBLAS lives in
// kernels/gemm_cublas.cuh.

#include <cstddef>
#include <type_traits>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/system/cpp/execution_policy.h>

#include "heterograd/core/config.hpp"

#if defined(HG_HAS_BLAS)
#include <cblas.h>
#endif

namespace heterograd::kernels {

enum class transpose { no, yes };

namespace detail {
template <class T>
struct gemm_element {
  bool ta, tb;
  std::size_t n, k;
  T alpha, beta;
  const T* A;
  std::size_t lda;
  const T* B;
  std::size_t ldb;
  T* C;
  std::size_t ldc;
  HG_HOST_DEVICE void operator()(std::size_t idx) const {
    const std::size_t i = idx / n, j = idx % n;
    T acc = 0;
    for (std::size_t p = 0; p < k; ++p) {
      const T a = ta ? A[p * lda + i] : A[i * lda + p];
      const T b = tb ? B[j * ldb + p] : B[p * ldb + j];
      acc += a * b;
    }
    T& c = C[i * ldc + j];
    c = beta == T(0) ? alpha * acc : alpha * acc + beta * c;
  }
};
}  // namespace detail

/// Portable GEMM over an execution policy (row-major). Writes C fully (beta == 0 ignores C).
template <class Policy, class T>
void gemm_portable(const Policy& policy, transpose ta, transpose tb, std::size_t m,
                   std::size_t n, std::size_t k, T alpha, const T* A, std::size_t lda, const T* B,
                   std::size_t ldb, T beta, T* C, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  thrust::for_each(policy, thrust::counting_iterator<std::size_t>(0),
                   thrust::counting_iterator<std::size_t>(m * n),
                   detail::gemm_element<T>{ta == transpose::yes, tb == transpose::yes, n, k, alpha,
                                           beta, A, lda, B, ldb, C, ldc});
}

/// Host GEMM: CBLAS when available, else the portable loop on one core.
template <class T>
void gemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, T alpha,
          const T* A, std::size_t lda, const T* B, std::size_t ldb, T beta, T* C,
          std::size_t ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "float or double");
#if defined(HG_HAS_BLAS)
  if (m == 0 || n == 0) return;
  const auto opa = ta == transpose::yes ? CblasTrans : CblasNoTrans;
  const auto opb = tb == transpose::yes ? CblasTrans : CblasNoTrans;
  const auto M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, opa, opb, M, N, K, alpha, A, static_cast<int>(lda), B,
                static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, opa, opb, M, N, K, alpha, A, static_cast<int>(lda), B,
                static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
  }
#else
  gemm_portable(thrust::cpp::par, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

/// Limits BLAS to `threads` threads (OpenBLAS). Several simulated or threaded workers sharing
/// one machine should each run BLAS single-threaded instead of oversubscribing the cores.
inline void set_blas_threads(int threads) {
#if defined(HG_HAS_BLAS) && defined(OPENBLAS_VERSION)
  openblas_set_num_threads(threads);
#else
  (void)threads;
#endif
}

/// True when GEMM goes through a BLAS library.
constexpr bool has_blas() {
#if defined(HG_HAS_BLAS)
  return true;
#else
  return false;
#endif
}

}  // namespace heterograd::kernels
