#pragma once
// Multi-tensor launch: a list of (body, size) tasks run as one parallel region on the CPU and
// one kernel launch on a GPU, instead of one per tensor.
//   cpp   the tasks one after another, each an `omp simd` loop;
//   omp   one `omp parallel` region; the concatenated index space [0, sum of sizes) is cut
//         into equal contiguous shares, one per thread, and each thread walks the tasks that
//         overlap its share (so 200 small tensors cost one fork/join, not 200);
//   cuda  the task list and each task's first chunk are copied to device scratch, and one
//         kernel launch covers every task cut into chunks of multi_chunk elements, one chunk
//         per block: the block finds its task once (a binary search over the chunk prefix
//         sums, the same address for every thread, so a broadcast load), each thread copies
//         the task's body into registers once and applies it to multi_items elements spaced a
//         block apart (coalesced). This is the shape of the single-tensor launch (a large grid
//         of short blocks) with the lookup paid per 1024 elements instead of per element; the
//         H200 run of the per-element binary search over thrust::for_each_n reached 0.61 of
//         copy bandwidth, where one large tensor reaches 1.00.
//   other Thrust systems: one thrust::for_each_n over the concatenated index space, each
//         element finding its task by binary search over the offsets.

#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "heterograd/core/config.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/kernels/detail/launch.hpp"
#include "heterograd/kernels/detail/scratch.hpp"

#if defined(__CUDACC__)
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
};

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
inline constexpr unsigned multi_block_threads = 256;
inline constexpr unsigned multi_items = 4;
inline constexpr std::size_t multi_chunk = std::size_t{multi_block_threads} * multi_items;

/// One block per chunk of multi_chunk elements; first_chunk[k] is task k's first chunk
/// (exclusive prefix sums of the tasks' chunk counts; no task is empty).
template <class Body>
__global__ void __launch_bounds__(multi_block_threads)
    multi_tensor_kernel(const tensor_task<Body>* tasks, const std::size_t* first_chunk,
                        std::size_t count) {
  const std::size_t c = blockIdx.x;
  std::size_t lo = 0, hi = count;  // the last k with first_chunk[k] <= c
  while (hi - lo > 1) {
    const std::size_t mid = (lo + hi) / 2;
    if (first_chunk[mid] <= c)
      lo = mid;
    else
      hi = mid;
  }
  const Body body = tasks[lo].body;
  const std::size_t size = tasks[lo].size;
  const std::size_t base = (c - first_chunk[lo]) * multi_chunk + threadIdx.x;
#pragma unroll
  for (unsigned j = 0; j < multi_items; ++j) {
    const std::size_t i = base + std::size_t{j} * multi_block_threads;
    if (i < size) body(i);
  }
}

template <class Policy, class Body>
void launch_multi_cuda(const Policy& policy, std::span<const tensor_task<Body>> all) {
  std::vector<tensor_task<Body>> tasks;
  tasks.reserve(all.size());
  for (const auto& t : all)
    if (t.size > 0) tasks.push_back(t);
  std::vector<std::size_t> first(tasks.size() + 1, 0);
  for (std::size_t k = 0; k < tasks.size(); ++k)
    first[k + 1] = first[k] + (tasks[k].size + multi_chunk - 1) / multi_chunk;
  const std::size_t chunks = first.back();
  if (chunks > 0x7fffffffu)
    throw std::invalid_argument("multi_tensor_apply: " + std::to_string(chunks) +
                                " chunks of " + std::to_string(multi_chunk) +
                                " elements exceed the grid limit of 2^31 - 1 blocks");
  scratch<tensor_task<Body>, Policy> dev_tasks(policy, tasks.size());
  scratch<std::size_t, Policy> dev_first(policy, first.size());
  copy_from_host(policy, tasks.data(), tasks.size(), dev_tasks.data());
  copy_from_host(policy, first.data(), first.size(), dev_first.data());
  auto& p = const_cast<Policy&>(policy);
  multi_tensor_kernel<Body>
      <<<static_cast<unsigned>(chunks), multi_block_threads, 0, thrust::cuda_cub::stream(p)>>>(
          dev_tasks.data(), dev_first.data(), tasks.size());
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("multi_tensor_apply: kernel launch failed: ") +
                             cudaGetErrorString(e));
  // The scratch is freed when we return: the launch must be done with it first.
  cudaStreamSynchronize(thrust::cuda_cub::stream(p));
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
#if defined(_OPENMP)
      const std::size_t nt = static_cast<std::size_t>(omp_get_num_threads());
      const std::size_t t = static_cast<std::size_t>(omp_get_thread_num());
#else
      const std::size_t nt = 1, t = 0;
#endif
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
