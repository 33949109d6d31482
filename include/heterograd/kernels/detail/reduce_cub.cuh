#pragma once
// The CUB fast path of the reductions (cuda backend only). cub::DeviceReduce::TransformReduce
// reduces without atomics over a grid fixed by the device and num_items, so for the same GPU
// model and size the result is bitwise repeatable run to run; it is not the CPU's tree.
// Reductions over one buffer (sum of squares, max-abs, all-finite: an `x` pointer and a
// static `map_value`) hand CUB the raw pointer, so it can load vectors (it vectorises only
// native pointers to primitive types); dot reads two buffers through a counting iterator.
#if defined(__CUDACC__)

#include <cstddef>
#include <type_traits>

#include <cuda_runtime.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/system/cuda/detail/util.h>
#include <cub/device/device_reduce.cuh>

#include "heterograd/kernels/scratch.hpp"

namespace heterograd::kernels::detail {

template <class R>
struct cub_map {
  R r;
  __host__ __device__ typename R::acc_type operator()(std::size_t i) const { return r.map(i); }
};

template <class R>
struct cub_combine {
  __host__ __device__ typename R::acc_type operator()(typename R::acc_type a,
                                                      typename R::acc_type b) const {
    return R::combine(a, b);
  }
};

template <class R, class T>
struct cub_map_value {
  __host__ __device__ typename R::acc_type operator()(T v) const { return R::map_value(v); }
};

template <class R>
concept single_input_reduction = requires(const R& r) {
  { R::map_value(*r.x) };
};

template <class Policy, class R>
typename R::acc_type cub_reduce(const Policy& policy, std::size_t n, const R& r) {
  using A = typename R::acc_type;
  if (n == 0) return r.identity();
  auto& p = const_cast<Policy&>(policy);
  cudaStream_t stream = thrust::cuda_cub::stream(p);
  auto run = [&](auto first, auto map) {
    std::size_t bytes = 0;
    cub::DeviceReduce::TransformReduce(nullptr, bytes, first, static_cast<A*>(nullptr), n,
                                       cub_combine<R>{}, map, r.identity(), stream);
    // One allocation: the result, then CUB's temporary storage (aligned to 256 bytes).
    const std::size_t head = 256;
    scratch<unsigned char, Policy> tmp(policy, head + bytes);
    A* out = reinterpret_cast<A*>(tmp.data());
    cub::DeviceReduce::TransformReduce(tmp.data() + head, bytes, first, out, n,
                                       cub_combine<R>{}, map, r.identity(), stream);
    A result{};
    copy_to_host(policy, out, 1, &result);
    return result;
  };
  if constexpr (single_input_reduction<R>) {
    using T = std::remove_cv_t<std::remove_reference_t<decltype(*r.x)>>;
    return run(r.x, cub_map_value<R, T>{});
  } else {
    return run(thrust::counting_iterator<std::size_t>(0), cub_map<R>{r});
  }
}

}  // namespace heterograd::kernels::detail

#endif  // __CUDACC__
