#pragma once
// Host staging of device buffers for the composite transport's outer exchange (Zhu et al.,
// #4: CPU-forwarding across vendors): the leader copies its group's reduced buffer from the
// GPU to a host buffer, the host-only backend (MPI without GPU support) exchanges it, and the
// result is copied back. 2 S bytes over PCIe per exchange, on the leader only. CUDA only.

#if defined(__CUDACC__)
#include <cstddef>
#include <stdexcept>
#include <string>

#include <cuda_runtime.h>

#include "heterograd/comm/composite.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::comm {

/// Copies on `stream` (synchronised: the host copy is used at once); host buffers as
/// host_stager does. Counts staged bytes.
struct cuda_stager : host_stager {
  cudaStream_t stream = nullptr;

  cuda_stager() = default;
  explicit cuda_stager(cudaStream_t s) : stream(s) {}

  using host_stager::from_host;
  using host_stager::to_host;
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

  /// Broadcasts a small host buffer over a device-only transport (NCCL) through a device
  /// bounce buffer.
  template <class Transport, class T>
  void broadcast_host(const Transport& t, span<T, host_space> v, int root, const broadcast_options& o) const {
    T* d = nullptr;
    check(cudaMalloc(&d, v.size_bytes()));
    try {
      check(cudaMemcpy(d, v.data(), v.size_bytes(), cudaMemcpyHostToDevice));
      t.broadcast(span<T, device_space>(d, v.size()), root, o).wait();
      check(cudaMemcpy(v.data(), d, v.size_bytes(), cudaMemcpyDeviceToHost));
    } catch (...) {
      cudaFree(d);
      throw;
    }
    cudaFree(d);
  }

 private:
  static void check(cudaError_t e) {
    if (e != cudaSuccess)
      throw std::runtime_error(std::string("heterograd: comm: host staging: ") + cudaGetErrorString(e));
  }
};

}  // namespace heterograd::comm
#endif
