#pragma once
// heterograd's fused Adam on the example's flat parameter buffer, in host or CUDA memory
// (train.cpp --mode adam; no LibTorch header here).
//
// Why two translation units: heterograd's device kernels are compiled by nvcc, and LibTorch's
// headers (1.13, as Debian ships it) do not compile under nvcc as C++20. So train.cpp
// (LibTorch, the host compiler) hands raw pointers into the CUDA tensors to fused_adam_cuda.cu
// (heterograd, nvcc), built as its own shared library with hidden symbols (it is compiled with
// another Thrust device system than train.cpp). Both sides make their step from the template
// below, with the memory of their space: the same heterograd calls on host and device.

#include <cstddef>
#include <memory>

#include "heterograd/algorithms/decoupled/concepts.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/memory.hpp"
#include "heterograd/optim/optimizers.hpp"

#if defined(__GNUC__)
#define HG_EXAMPLE_EXPORT __attribute__((visibility("default")))
#else
#define HG_EXAMPLE_EXPORT
#endif

namespace hg_example {

/// One optimizer step on n floats, in place.
class fused_step {
 public:
  virtual ~fused_step() = default;
  virtual void step(float* params, const float* grads) = 0;
};

/// heterograd's Adam over `memory` (kernels/memory.hpp) on n floats: optim's Adam as a
/// stepper through the memory (algorithms/decoupled's optim_stepper: the state made on the
/// first step, in the memory's space and from its allocator); each step is one fused pass on
/// the memory's policy (for a CUDA memory, ordered on its stream after the work LibTorch
/// queued there), with no host copy.
template <class Memory>
class adam_step final : public fused_step {
  using space = typename Memory::memory_space;

 public:
  adam_step(double lr, std::size_t n, Memory memory)
      : stepper_(heterograd::optim::adam({.lr = lr}), std::move(memory)), n_(n) {}

  void step(float* params, const float* grads) override {
    stepper_.step(heterograd::span<float, space>(params, n_), heterograd::span<const float, space>(grads, n_));
  }

 private:
  heterograd::algorithms::decoupled::optim_stepper<heterograd::optim::adam, Memory> stepper_;
  std::size_t n_;
};

/// Adam on CUDA memory, its kernels on `cuda_stream` (a cudaStream_t; nullptr: the legacy
/// default stream, the one LibTorch computes on unless the caller set another). Defined in
/// fused_adam_cuda.cu; a build without it (no nvcc or a LibTorch without CUDA) throws
/// std::runtime_error saying so.
HG_EXAMPLE_EXPORT std::unique_ptr<fused_step> make_cuda_adam(double lr, std::size_t n, void* cuda_stream);

}  // namespace hg_example
