#pragma once
// Host staging of device buffers for the composite transport's outer exchange (Zhu et al.,
// #4: CPU-forwarding across vendors): the leader copies its group's reduced buffer from the
// GPU to a host buffer, the host-only backend (MPI without GPU support) exchanges it, and the
// result is copied back. 2 S bytes over PCIe per exchange, on the leader only. CUDA only.

#if defined(__CUDACC__)
#include <cstddef>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include <cuda_runtime.h>

#include "heterograd/core/span.hpp"

namespace heterograd::comm {

/// Copies on `stream` (synchronised: the host copy is used at once). Counts staged bytes.
struct cuda_stager {
  cudaStream_t stream = nullptr;
  std::shared_ptr<std::size_t> staged = std::make_shared<std::size_t>(0);

  template <class T>
  void to_host(span<const T, device_space> from, T* host) const {
    check(cudaMemcpyAsync(host, from.data(), from.size_bytes(), cudaMemcpyDeviceToHost, stream));
    check(cudaStreamSynchronize(stream));
    *staged += from.size_bytes();
  }
  template <class T>
  void from_host(const T* host, span<T, device_space> to) const {
    check(cudaMemcpyAsync(to.data(), host, to.size_bytes(), cudaMemcpyHostToDevice, stream));
    check(cudaStreamSynchronize(stream));
    *staged += to.size_bytes();
  }
  template <class T>
  void to_host(span<const T, host_space> from, T* host) const {
    std::memcpy(host, from.data(), from.size_bytes());
    *staged += from.size_bytes();
  }
  template <class T>
  void from_host(const T* host, span<T, host_space> to) const {
    std::memcpy(to.data(), host, to.size_bytes());
    *staged += to.size_bytes();
  }

 private:
  static void check(cudaError_t e) {
    if (e != cudaSuccess)
      throw std::runtime_error(std::string("heterograd: comm: host staging: ") + cudaGetErrorString(e));
  }
};

}  // namespace heterograd::comm
#endif
