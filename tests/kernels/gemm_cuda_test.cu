// cuBLAS GEMM (row-major convention) against the portable GEMM on the CUDA backend and a host
// double reference, for every transpose combination. Runs under ./hg gpu-check.
#include <cmath>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <thrust/device_vector.h>
#include <thrust/system/cuda/execution_policy.h>

#include "heterograd/core/rng.hpp"
#include "heterograd/kernels/gemm_cublas.cuh"
#include "hg_test.hpp"

namespace kernels = heterograd::kernels;

BOOST_AUTO_TEST_CASE(cublas_and_portable_device_gemm_match_the_host_reference) {
  const std::size_t M = 33, N = 17, K = 65;
  const heterograd::counter_rng rng(hg_test::seed(), 8);
  std::vector<float> A(M * K), B(K * N);
  for (std::size_t i = 0; i < A.size(); ++i) A[i] = static_cast<float>(rng.normal(i));
  for (std::size_t i = 0; i < B.size(); ++i) B[i] = static_cast<float>(rng.normal(5000 + i));
  thrust::device_vector<float> dA(A.begin(), A.end()), dB(B.begin(), B.end());
  kernels::cublas_handle h;
  for (auto ta : {kernels::transpose::no, kernels::transpose::yes})
    for (auto tb : {kernels::transpose::no, kernels::transpose::yes}) {
      const std::size_t lda = ta == kernels::transpose::no ? K : M;
      const std::size_t ldb = tb == kernels::transpose::no ? N : K;
      thrust::device_vector<float> c1(M * N, 1.0f), c2(M * N, 1.0f);
      kernels::gemm_device(h, ta, tb, M, N, K, 2.0f, thrust::raw_pointer_cast(dA.data()), lda,
                      thrust::raw_pointer_cast(dB.data()), ldb, 0.5f,
                      thrust::raw_pointer_cast(c1.data()), N);
      kernels::gemm_portable(thrust::cuda::par, ta, tb, M, N, K, 2.0f,
                        thrust::raw_pointer_cast(dA.data()), lda,
                        thrust::raw_pointer_cast(dB.data()), ldb, 0.5f,
                        thrust::raw_pointer_cast(c2.data()), N);
      const auto h1 = hg_test::to_host(c1), h2 = hg_test::to_host(c2);
      for (std::size_t i = 0; i < M; ++i)
        for (std::size_t j = 0; j < N; ++j) {
          double acc = 0;
          for (std::size_t k = 0; k < K; ++k)
            acc += double(ta == kernels::transpose::no ? A[i * K + k] : A[k * M + i]) *
                   double(tb == kernels::transpose::no ? B[k * N + j] : B[j * K + k]);
          const double ref = 2 * acc + 0.5;
          BOOST_TEST(std::abs(h1[i * N + j] - ref) < 1e-3 * (1 + std::abs(ref)));
          BOOST_TEST(std::abs(h2[i * N + j] - ref) < 1e-3 * (1 + std::abs(ref)));
        }
    }
}
