#pragma once
// Multi-tensor launch: a list of (body, size) tasks run as one parallel region on the CPU and
// one kernel launch on a GPU, instead of one per tensor.
//   cpp   the tasks one after another, each an `omp simd` loop;
//   omp   one `omp parallel` region; the concatenated index space [0, sum of sizes) is cut
//         into equal contiguous shares, one per thread, and each thread walks the tasks that
//         overlap its share (so 200 small tensors cost one fork/join, not 200);
//   cuda  one kernel launch per batch of tasks that fits in the kernel's parameters (30 KiB:
//         365 Adam tasks of floats), so nothing is copied or allocated per call (and under a
//         nosync policy the call does not wait for the device); every task is cut into chunks of multi_chunk elements starting at the
//         128-byte line at or before its written buffer (line_offset), one chunk per block and
//         one element per thread, and a block finds its task once (a binary search in the
//         constant bank). Measured on an H200 (200 Adam tensors, 256M floats): one element per
//         thread reaches 0.83-0.88 of copy bandwidth where 2 or 4 per thread reach 0.57-0.62
//         (the compiler cannot hoist the next element's loads above this element's stores,
//         which may alias, so each extra element adds a memory round trip); 128-thread blocks
//         did a little better than 256 or 512; a search per element over thrust::for_each_n
//         reached 0.67, and a persistent grid-stride kernel 0.54 on unaligned tensors.
//   other Thrust systems: one thrust::for_each_n over the concatenated index space, each
//         element finding its task by binary search over the offsets.

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "heterograd/core/config.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/kernels/launch.hpp"
#include "heterograd/kernels/scratch.hpp"

#if defined(__CUDACC__)
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include <cuda_runtime.h>
#include <thrust/system/cuda/detail/util.h>
#endif

namespace heterograd::kernels::detail {

template <class Body>
struct tensor_task {
  Body body;
  std::size_t size;
  /// Elements between the 128-byte boundary at or before the buffer the body writes and its
  /// first element (line_offset_of). The GPU launch starts its chunks on that boundary, so a
  /// warp touches whole cache lines; 0 treats the buffer as aligned.
  std::uint32_t line_offset = 0;
};

/// The line_offset of a buffer starting at p (0 if p is not element-aligned).
template <class T>
std::uint32_t line_offset_of(const T* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  if (a % sizeof(T) != 0 || 128 % sizeof(T) != 0) return 0;
  return static_cast<std::uint32_t>((a % 128) / sizeof(T));
}

template <class Body>
struct multi_body {
  const tensor_task<Body>* tasks;
  const std::size_t* offsets;  // count + 1 exclusive prefix sums
  std::size_t count;
  HG_HOST_DEVICE void operator()(std::size_t i) const {
    std::size_t lo = 0, hi = count;  // find the last k with offsets[k] <= i
    while (hi - lo > 1) {
      const std::size_t mid = (lo + hi) / 2;
      if (offsets[mid] <= i)
        lo = mid;
      else
        hi = mid;
    }
    tasks[lo].body(i - offsets[lo]);
  }
};

#if defined(__CUDACC__)
inline constexpr unsigned multi_block_threads = 128;
inline constexpr std::size_t multi_chunk = multi_block_threads;  // one element per thread
// Kernel parameters may take 32764 bytes (Volta and newer, CUDA 12.1 and newer).
static_assert(CUDART_VERSION >= 12010,
              "heterograd: the multi-tensor launch passes 30 KiB of kernel parameters, which "
              "needs CUDA 12.1 or newer");
inline constexpr std::size_t multi_param_bytes = 30 * 1024;

/// One launch's share of the task list, passed by value as the kernel's parameter: the task
/// bodies (raw storage: a Body need not be default-constructible) and the exclusive prefix
/// sums of their chunk counts.
template <class Body>
struct multi_batch {
  using task = tensor_task<Body>;
  static constexpr std::size_t capacity = std::min<std::size_t>(
      1024, (multi_param_bytes - 16) / (sizeof(task) + sizeof(std::uint32_t)));
  static_assert(capacity >= 1, "multi_tensor_apply: the body is too large for a kernel parameter");
  alignas(task) unsigned char tasks[capacity * sizeof(task)];
  std::uint32_t first[capacity + 1];
  std::uint32_t count;
  __host__ __device__ const task& at(std::uint32_t k) const {
    return reinterpret_cast<const task*>(tasks)[k];
  }
};

/// One block per chunk of multi_chunk elements, one element per thread. The block finds its
/// task by a binary search over the batch's chunk prefix sums; the batch is a __grid_constant__
/// parameter, so the search and the body are read from the constant bank, the same address for
/// every thread.
template <class Body>
__global__ void __launch_bounds__(multi_block_threads)
    multi_tensor_kernel(const __grid_constant__ multi_batch<Body> b) {
  const std::uint32_t c = blockIdx.x;
  std::uint32_t lo = 0, hi = b.count;  // the last k with first[k] <= c
  while (hi - lo > 1) {
    const std::uint32_t mid = (lo + hi) / 2;
    if (b.first[mid] <= c)
      lo = mid;
    else
      hi = mid;
  }
  const auto& t = b.at(lo);
  const std::size_t v = std::size_t{c - b.first[lo]} * multi_chunk + threadIdx.x;
  if (v >= t.line_offset && v - t.line_offset < t.size) t.body(v - t.line_offset);
}

template <class Policy, class Body>
void launch_multi_cuda(const Policy& policy, std::span<const tensor_task<Body>> all) {
  using batch = multi_batch<Body>;
  constexpr std::uint32_t max_blocks = 0x7fffffffu;
  auto& p = const_cast<Policy&>(policy);
  const cudaStream_t stream = thrust::cuda_cub::stream(p);
  auto b = std::make_unique<batch>();
  b->count = 0;
  b->first[0] = 0;
  auto flush = [&] {
    if (b->count == 0) return;
    multi_tensor_kernel<Body><<<b->first[b->count], multi_block_threads, 0, stream>>>(*b);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
      throw std::runtime_error(std::string("multi_tensor_apply: kernel launch failed: ") +
                               cudaGetErrorString(e));
    b->count = 0;
  };
  for (const auto& t : all) {
    if (t.size == 0) continue;
    const std::size_t chunks = (t.line_offset + t.size + multi_chunk - 1) / multi_chunk;
    if (chunks > max_blocks)
      throw std::invalid_argument("multi_tensor_apply: a tensor of " + std::to_string(t.size) +
                                  " elements needs " + std::to_string(chunks) + " blocks of " +
                                  std::to_string(multi_chunk) +
                                  " elements, over the grid limit of 2^31 - 1");
    if (b->count == batch::capacity || b->first[b->count] + chunks > max_blocks) flush();
    std::memcpy(b->tasks + b->count * sizeof(t), &t, sizeof(t));
    b->first[b->count + 1] = b->first[b->count] + static_cast<std::uint32_t>(chunks);
    ++b->count;
  }
  flush();
  // Parameters are copied at launch, so nothing of ours needs the launch done; wait only where
  // the policy asks to, as Thrust's algorithms do (thrust::cuda::par blocks, par_nosync not).
  const cudaError_t e = thrust::cuda_cub::synchronize_optional(p);
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("multi_tensor_apply: kernel failed: ") +
                             cudaGetErrorString(e));
}
#endif

template <class Body>
inline void run_task_range(const Body& body, std::size_t lo, std::size_t hi) {
  const Body b = body;
  HG_PRAGMA_SIMD
  for (std::size_t i = lo; i < hi; ++i) b(i);
}

template <class Policy, class Body>
void launch_multi(const Policy& policy, std::span<const tensor_task<Body>> tasks) {
  static_assert(std::is_trivially_copyable_v<Body>);
  std::size_t total = 0;
  for (const auto& t : tasks) total += t.size;
  if (total == 0) return;
  if constexpr (backend_v<Policy> == exec::backend::cpp) {
    (void)policy;
    for (const auto& t : tasks) run_task_range(t.body, 0, t.size);
  } else if constexpr (backend_v<Policy> == exec::backend::omp) {
    (void)policy;
    const tensor_task<Body>* list = tasks.data();
    const std::size_t count = tasks.size();
    HG_PRAGMA_PARALLEL {
      const detail::team_place me = detail::this_thread_place();
      const std::size_t nt = me.count, t = me.index;
      const std::size_t base = total / nt, extra = total % nt;
      const std::size_t lo = t * base + (t < extra ? t : extra);
      const std::size_t hi = lo + base + (t < extra ? 1 : 0);
      std::size_t off = 0;
      for (std::size_t k = 0; k < count && off < hi; ++k) {
        const std::size_t end = off + list[k].size;
        if (end > lo) {
          const std::size_t a = lo > off ? lo - off : 0;
          const std::size_t b = (hi < end ? hi : end) - off;
          run_task_range(list[k].body, a, b);
        }
        off = end;
      }
    }
  } else if constexpr (backend_v<Policy> == exec::backend::cuda) {
#if defined(__CUDACC__)
    launch_multi_cuda(policy, tasks);
#endif
  } else {
    std::vector<std::size_t> offsets(tasks.size() + 1, 0);
    for (std::size_t k = 0; k < tasks.size(); ++k) offsets[k + 1] = offsets[k] + tasks[k].size;
    scratch<tensor_task<Body>, Policy> dev_tasks(policy, tasks.size());
    scratch<std::size_t, Policy> dev_offsets(policy, offsets.size());
    copy_from_host(policy, tasks.data(), tasks.size(), dev_tasks.data());
    copy_from_host(policy, offsets.data(), offsets.size(), dev_offsets.data());
    thrust::for_each_n(policy, thrust::counting_iterator<std::size_t>(0), total,
                       multi_body<Body>{dev_tasks.data(), dev_offsets.data(), tasks.size()});
  }
}

}  // namespace heterograd::kernels::detail
