// The LibTorch example's step on CUDA memory (examples/libtorch/fused_adam_cuda.cu) without
// LibTorch: make_cuda_adam on raw device buffers, on the default stream and on a stream of its
// own, against the example's host step (adam_step<host_memory>) from the same parameters and
// gradients. No LibTorch built with CUDA is at hand anywhere the project runs, so this is the
// example's CUDA side checked on a GPU (label cuda: ./hg gpu-check).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <cuda_runtime.h>
#include <thrust/device_vector.h>

#include "../../examples/libtorch/fused_adam_cuda.cu"
#include "heterograd/core/rng.hpp"
#include "hg_test.hpp"

namespace {

void run_against_host(cudaStream_t stream) {
  constexpr std::size_t n = 4099, steps = 20;
  constexpr double lr = 1e-2;
  const heterograd::counter_rng rng(hg_test::seed(), 31);
  std::vector<float> p0(n);
  for (std::size_t i = 0; i < n; ++i) p0[i] = static_cast<float>(rng.normal(i));
  std::vector<float> hp = p0;
  thrust::device_vector<float> dp(p0.begin(), p0.end()), dg(n);
  hg_example::adam_step<heterograd::kernels::host_memory> host(lr, n, {});
  const auto dev = hg_example::make_cuda_adam(lr, n, stream);
  std::vector<float> g(n);
  for (std::size_t s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < n; ++i) g[i] = static_cast<float>(rng.normal(1000000 * (s + 1) + i));
    thrust::copy(g.begin(), g.end(), dg.begin());
    host.step(hp.data(), g.data());
    dev->step(thrust::raw_pointer_cast(dp.data()), thrust::raw_pointer_cast(dg.data()));
    BOOST_REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);  // the next copy reuses dg
  }
  const auto dh = hg_test::to_host(dp);
  // The same fused Adam: equal to the device's rounding of sqrt and division (1e-5 relative).
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i)
    worst = std::max(worst, std::abs(double(dh[i]) - hp[i]) / std::max(1e-3, std::abs(double(hp[i]))));
  BOOST_TEST(worst <= 1e-5, "largest relative difference " << worst);
  std::size_t moved = 0;
  for (std::size_t i = 0; i < n; ++i) moved += dh[i] != p0[i];
  BOOST_TEST(moved == n);  // every parameter took the steps
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_examples_cuda_step_equals_its_host_step_on_the_default_stream) {
  run_against_host(nullptr);
}

BOOST_AUTO_TEST_CASE(the_examples_cuda_step_equals_its_host_step_on_a_stream_of_its_own) {
  cudaStream_t s = nullptr;
  BOOST_REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  run_against_host(s);
  cudaStreamDestroy(s);
}
