#pragma once
// thrust_memory<Policy, Alloc>: an algorithm's memory (kernels/memory.hpp) of a Thrust
// system. Buffers are thrust::device_vector<T, Alloc rebound to T>, made with a copy of the
// caller's allocator (a caching or stream-ordered allocator serves them); kernels run with
// the caller's policy, e.g.
//     thrust_memory(thrust::cuda::par.on(stream))                    on a GPU (under nvcc)
//     thrust_memory(thrust::device)                                  the build's device system
//     thrust_memory<decltype(thrust::omp::par), my_alloc>(thrust::omp::par, my_alloc{...})
// The policy must reach the allocator's memory (checked at compile time). Buffers are
// allocated and filled when made (thrust fills on the system's default stream); the steps
// use the policy only. Transfers: upload and download (copy_to_host on the policy's stream).
// run and read install the allocator as the thread's state resource while the kernel call
// runs (kernels/state_resource.hpp), so optimizer states made through the memory (an
// algorithm's optim::state in device memory) come from the caller's allocator too.

#include <cstddef>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <thrust/device_allocator.h>
#include <thrust/device_vector.h>

#include "heterograd/core/error.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/memory.hpp"
#include "heterograd/kernels/scratch.hpp"
#include "heterograd/kernels/state_resource.hpp"

namespace heterograd::kernels {

template <class Policy, class Alloc = thrust::device_allocator<std::byte>>
class thrust_memory {
 public:
  using policy_type = Policy;
  using memory_space = exec::memory_space_of_t<Policy>;
  template <class T>
  using allocator = typename std::allocator_traits<Alloc>::template rebind_alloc<T>;
  template <class T>
  using vector = thrust::device_vector<T, allocator<T>>;

  static_assert(std::is_same_v<heterograd::detail::thrust_space_t<vector<float>>, memory_space>,
                "the policy cannot reach the allocator's memory");

  explicit thrust_memory(const Policy& policy, Alloc alloc = Alloc())
      : policy_(policy), alloc_(std::move(alloc)),
        states_(std::make_shared<allocator_resource<Alloc>>(alloc_)) {}

  const Policy& policy() const { return policy_; }
  const Alloc& get_allocator() const { return alloc_; }

  template <class T>
  vector<T> make(std::size_t n, T value = T(0)) const {
    return vector<T>(n, value, allocator<T>(alloc_));
  }
  template <class T>
  vector<T> upload(std::span<const T> host) const {
    vector<T> v(host.size(), T(0), allocator<T>(alloc_));
    copy_from_host(policy_, host.data(), host.size(), thrust::raw_pointer_cast(v.data()));
    return v;
  }
  template <class T>
  std::vector<std::remove_const_t<T>> download(span<T, memory_space> s) const {
    std::vector<std::remove_const_t<T>> h(s.size());
    copy_to_host(policy_, s.data(), s.size(), h.data());
    return h;
  }
  template <class T>
  void upload(std::span<const T> host, span<T, memory_space> to) const {
    require_same_size("upload.to", to.size(), "upload.host", host.size());
    copy_from_host(policy_, host.data(), host.size(), to.data());
  }
  template <class T>
  void download(span<const T, memory_space> from, std::span<T> host) const {
    require_same_size("download.host", host.size(), "download.from", from.size());
    copy_to_host(policy_, from.data(), from.size(), host.data());
  }
  template <class F>
  decltype(auto) run(std::size_t, F&& f) const {
    const state_resource_scope scope(states_);
    return std::forward<F>(f)(policy_);
  }
  template <class F>
  decltype(auto) read(std::size_t, F&& f) const {
    const state_resource_scope scope(states_);
    return std::forward<F>(f)(policy_);
  }
  /// The allocator as a state resource (what run and read install).
  const std::shared_ptr<state_resource>& states() const { return states_; }

 private:
  Policy policy_;
  Alloc alloc_;
  std::shared_ptr<state_resource> states_;  // shared by copies of this memory and the slots it made
};

template <class Policy>
thrust_memory(const Policy&) -> thrust_memory<Policy>;

}  // namespace heterograd::kernels
