// A C interface to the fused kernels (omp backend, float), loaded with ctypes by
// bench/compare/torch_optim.py so that PyTorch's optimizer step and heterograd's kernels run
// in the same process, interleaved step by step on the same torch-allocated memory (the
// machines are noisy; only side-by-side timings give trustworthy ratios). Benchmark-only;
// not part of the library.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <thrust/system/omp/execution_policy.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "heterograd/kernels.hpp"

namespace hk = heterograd::kernels;
namespace hg = heterograd;

extern "C" {

void hg_capi_set_threads(int threads) {
#if defined(_OPENMP)
  omp_set_num_threads(threads);
#else
  (void)threads;
#endif
}

void hg_capi_sgd(float* p, const float* g, std::size_t n, double lr, double wd) {
  hk::sgd(thrust::omp::par, hg::span<float>(p, n), hg::span<const float>(g, n), {lr, wd});
}

void hg_capi_momentum(float* p, const float* g, float* v, std::size_t n, double lr, double mu,
                      double dampening, double wd, int nesterov) {
  hk::momentum(thrust::omp::par, hg::span<float>(p, n), hg::span<const float>(g, n),
               hg::span<float>(v, n), {lr, mu, dampening, wd}, {.nesterov = nesterov != 0});
}

static hk::adam_config<> adam_config(double lr, double b1, double b2, double eps, double wd) {
  return {.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = wd};
}

void hg_capi_adam(float* p, const float* g, float* m, float* v, std::size_t n, double lr, double b1,
                  double b2, double eps, double wd, std::int64_t step) {
  hk::adam(thrust::omp::par, hg::span<float>(p, n), hg::span<const float>(g, n),
           hg::span<float>(m, n), hg::span<float>(v, n), adam_config(lr, b1, b2, eps, wd),
           {.step = step});
}

// Tensors k = 0..count-1: p[k], g[k], m[k], v[k] of n[k] elements.
void hg_capi_multi_adam(float* const* p, const float* const* g, float* const* m, float* const* v,
                        const std::size_t* n, std::size_t count, double lr, double b1, double b2,
                        double eps, double wd, std::int64_t step) {
  std::vector<hk::adam_tensor<float>> list;
  list.reserve(count);
  for (std::size_t k = 0; k < count; ++k)
    list.push_back({hg::span<float>(p[k], n[k]), hg::span<const float>(g[k], n[k]),
                    hg::span<float>(m[k], n[k]), hg::span<float>(v[k], n[k])});
  hk::multi_tensor_adam(thrust::omp::par, std::span<const hk::adam_tensor<float>>(list),
                        adam_config(lr, b1, b2, eps, wd), {.step = step});
}

}  // extern "C"
