// heterograd's Adam on CUDA tensors' memory for the LibTorch example (fused_adam.hpp says why
// this is a translation unit of its own). Compiled by nvcc into hg-libtorch-cuda-steps when
// the build has CUDA (HG_ENABLE_CUDA) and LibTorch was built with it; compiled (not run) by
// the test cuda_compile_device_paths everywhere nvcc is.
#include <cuda_runtime.h>
#include <thrust/system/cuda/execution_policy.h>

#include "fused_adam.hpp"
#include "heterograd/kernels/thrust_memory.hpp"

namespace hg_example {

std::unique_ptr<fused_step> make_cuda_adam(double lr, std::size_t n, void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  // par_nosync: the step queues its kernels on the stream and returns; LibTorch's next forward
  // on the same stream runs after them.
  heterograd::kernels::thrust_memory memory(thrust::cuda::par_nosync.on(stream));
  return std::make_unique<adam_step<decltype(memory)>>(lr, n, memory);
}

}  // namespace hg_example
