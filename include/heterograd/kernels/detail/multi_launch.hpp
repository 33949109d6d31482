#pragma once
// Multi-tensor launch: a list of (body, size) tasks run as one parallel region on the CPU and
// one kernel launch on a GPU, instead of one per tensor.
//   cpp   the tasks one after another, each an `omp simd` loop;
//   omp   one `omp parallel` region; the concatenated index space [0, sum of sizes) is cut
//         into equal contiguous shares, one per thread, and each thread walks the tasks that
//         overlap its share (so 200 small tensors cost one fork/join, not 200);
//   cuda  the task list is copied to device scratch (one host-to-device copy) and one
//         thrust::for_each_n covers the concatenated index space; each element finds its task
//         by binary search over the offsets.

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
