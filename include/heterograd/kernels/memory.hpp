#pragma once
// Where an algorithm keeps its parameter-sized state, and how it runs kernels on it.
//
// An algorithm (a parameter server, a gradient table, an accumulator) is written once over a
// *memory*: a small value that owns the allocator and the execution policy of the
// parameters' memory space. Every buffer the algorithm holds is made by the memory, once,
// when the algorithm is built; every pass over a buffer is a kernel run through the memory;
// the only host/device transfers are the memory's own upload and download (construction,
// checkpoints, equality, error messages) and the scalars a kernel returns through read(),
// so a step makes no transfer beyond the scalars the algorithm documents.
//
//   host_memory            std::vector, kernels run sequentially below parallel_threshold
//                          elements and with OpenMP above it (when the build has it): every
//                          kernel here is element-wise, so both are bitwise the same. The
//                          default of every algorithm, and what every earlier result used.
//   host_memory_on<P>      std::vector, every kernel with host policy P (serial_host_memory:
//                          thrust::cpp::par, one core; the sync family's default)
//   thrust_memory<P, A>    thrust::device_vector<T, A> (A: the caller's allocator, rebound to
//                          each element type; thrust::device_allocator by default), kernels
//                          run with the caller's policy P (thrust::cuda::par.on(stream) on a
//                          GPU; thrust::omp::par with the OpenMP device system on the CPU).
//                          In kernels/thrust_memory.hpp (it includes thrust's vectors).
//
// The memory concept (algorithm_memory below):
//   memory_space                  host_space or device_space (of the spans it hands out)
//   policy_type                   a policy of that space (what state types are computed with)
//   vector<T>                     the owning buffer type
//   make<T>(n, value)             a buffer of n copies of value
//   upload<T>(host span)          a buffer holding a copy of host data          (transfer)
//   download(span)                a std::vector copy of a buffer's contents     (transfer)
//   upload(host span, span)       host data into a buffer that exists (sizes equal; transfer)
//   download(span, host span)     a buffer into host memory that exists         (transfer)
//                                 (the last two allocate nothing: runtime/staging.hpp's
//                                 per-step staging uses them)
//   run(n, f)                     f(policy) for a kernel over n elements, nothing returned
//   read(n, f)                    f(policy) for a kernel that returns one host scalar (a norm,
//                                 a finiteness flag): the scalar is a documented transfer
// and view(v) / cview(v) give a buffer's span in memory_space.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <thrust/detail/raw_pointer_cast.h>
#include <thrust/system/cpp/detail/par.h>
#if defined(_OPENMP)
#include <thrust/system/omp/detail/par.h>
#endif

#include "heterograd/core/error.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"

#if defined(__CUDACC__)
#include <string>

#include <cuda_runtime.h>
#endif

namespace heterograd::kernels {

/// Below this many elements a host kernel runs on one thread: a parallel region costs more
/// than it saves (and far more on a loaded machine), and scalar / small models are the common
/// case of the simulator's experiments.
inline constexpr std::size_t parallel_threshold = std::size_t{1} << 15;

/// Calls f with the host execution policy for a buffer of n elements: OpenMP when the build
/// has it and n >= parallel_threshold, else sequential. For element-wise kernels both give
/// bitwise the same result.
template <class F>
decltype(auto) with_host_policy(std::size_t n, F&& f) {
#if defined(_OPENMP)
  if (n >= parallel_threshold) return f(thrust::omp::par);
#endif
  (void)n;
  return f(thrust::cpp::par);
}

/// Host memory: std::vector buffers, the host policy by size (the default of every algorithm).
struct host_memory {
  using memory_space = host_space;
  /// A policy of the memory's space (its kernels use thrust::omp::par too, above the threshold).
  using policy_type = std::remove_cvref_t<decltype(thrust::cpp::par)>;
  template <class T>
  using vector = std::vector<T>;

  template <class T>
  vector<T> make(std::size_t n, T value = T(0)) const {
    return vector<T>(n, value);
  }
  template <class T>
  vector<T> upload(std::span<const T> host) const {
    return vector<T>(host.begin(), host.end());
  }
  template <class T>
  std::vector<std::remove_const_t<T>> download(span<T, host_space> s) const {
    return std::vector<std::remove_const_t<T>>(s.begin(), s.end());
  }
  template <class T>
  void upload(std::span<const T> host, span<T, host_space> to) const {
    require_same_size("upload.to", to.size(), "upload.host", host.size());
    std::copy(host.begin(), host.end(), to.begin());
  }
  template <class T>
  void download(span<const T, host_space> from, std::span<T> host) const {
    require_same_size("download.host", host.size(), "download.from", from.size());
    std::copy(from.begin(), from.end(), host.begin());
  }
  template <class F>
  decltype(auto) run(std::size_t n, F&& f) const {
    return with_host_policy(n, std::forward<F>(f));
  }
  template <class F>
  decltype(auto) read(std::size_t n, F&& f) const {
    return with_host_policy(n, std::forward<F>(f));
  }
};

/// Host memory whose kernels all run with one host policy, whatever their size:
/// host_memory_on<decltype(thrust::cpp::par)> (serial_host_memory) runs each on one core, what the
/// synchronous family's per-rank helpers and simulated replicas use, since several workers
/// share the cores; with thrust::omp::par it runs each on every core.
template <class Policy>
struct host_memory_on : host_memory {
  using policy_type = Policy;
  static_assert(exec::accessible_v<Policy, host_space>, "host_memory_on needs a host policy");

  host_memory_on() = default;
  explicit host_memory_on(const Policy& p) : policy(p) {}

  template <class F>
  decltype(auto) run(std::size_t, F&& f) const {
    return std::forward<F>(f)(policy);
  }
  template <class F>
  decltype(auto) read(std::size_t, F&& f) const {
    return std::forward<F>(f)(policy);
  }

  Policy policy{};
};

/// One core per kernel (see host_memory_on).
using serial_host_memory = host_memory_on<std::remove_cvref_t<decltype(thrust::cpp::par)>>;

namespace detail {
struct no_kernel {
  template <class P>
  void operator()(const P&) const {}
};
}  // namespace detail

/// What an algorithm's memory must offer (the table at the top of this header).
template <class M>
concept algorithm_memory =
    std::copy_constructible<M> && is_memory_space_v<typename M::memory_space> &&
    exec::accessible_v<typename M::policy_type, typename M::memory_space> &&
    requires(const M& m, typename M::template vector<float>& v, std::span<const float> h,
             std::span<float> out, span<float, typename M::memory_space> d) {
      { m.template make<float>(std::size_t{1}, 0.0f) } -> std::same_as<typename M::template vector<float>>;
      { m.template upload<float>(h) } -> std::same_as<typename M::template vector<float>>;
      m.upload(h, d);
      m.download(span<const float, typename M::memory_space>(d), out);
      m.run(std::size_t{1}, detail::no_kernel{});
    };

/// The span of a buffer a memory made, in that memory's space.
template <class M, class V>
auto view(const M&, V& v) {
  using T = std::remove_pointer_t<decltype(thrust::raw_pointer_cast(v.data()))>;
  return span<T, typename M::memory_space>(thrust::raw_pointer_cast(v.data()), v.size());
}
template <class M, class V>
auto cview(const M& m, const V& v) {
  using T = std::remove_const_t<std::remove_pointer_t<decltype(thrust::raw_pointer_cast(v.data()))>>;
  return span<const T, typename M::memory_space>(view(m, v));
}

/// Bitwise equality of two buffers of one memory (sizes first; downloads both unless on the
/// host). For operator== of the algorithms, not for steps.
template <class M, class V>
bool same_bits(const M& m, const V& a, const V& b) {
  if (a.size() != b.size()) return false;
  if (a.size() == 0) return true;
  using T = typename V::value_type;
  if constexpr (std::is_same_v<V, std::vector<T>>) {
    return std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
  } else {
    const auto ha = m.download(cview(m, a)), hb = m.download(cview(m, b));
    return std::memcmp(ha.data(), hb.data(), ha.size() * sizeof(T)) == 0;
  }
}

/// True when memory M's buffers of T are host std::vectors: host code, host transports and
/// host models reach them directly. Otherwise (a device, guarded memory) data reaches them
/// only through the memory's kernels and transfers, and algorithms stage explicitly.
template <class M, class T = float>
inline constexpr bool host_vectors_v = std::is_same_v<typename M::template vector<T>, std::vector<T>>;

/// The first n elements of buffer v of memory m, remade by m (zeros) only when v holds fewer:
/// a staging buffer reused from step to step, grown for a larger batch.
template <class M, class V>
auto fit(const M& m, V& v, std::size_t n) {
  using T = typename V::value_type;
  if (v.size() < n) v = m.template make<T>(n, T(0));
  return view(m, v).first(n);
}

/// A host vector as a buffer of memory m: moved when m's buffers are std::vectors, uploaded
/// otherwise (one transfer).
template <class M, class T>
typename M::template vector<T> from_host(const M& m, std::vector<T>&& h) {
  if constexpr (host_vectors_v<M, T>)
    return std::move(h);
  else
    return m.template upload<T>(std::span<const T>(h));
}

/// Checkpointing of a buffer through a host copy, in the bytes a std::vector<T> has in an
/// archive (core/archive.hpp), so a checkpoint reads back into any memory. Reading refuses a
/// size other than `expected` (when given) by name before the buffer changes.
template <class Archive, class M, class V>
void archive_buffer(Archive& ar, const M& m, V& v, const char* name,
                    std::size_t expected = ~std::size_t{0}) {
  using T = typename V::value_type;
  constexpr bool on_host = std::is_same_v<V, std::vector<T>>;
  if constexpr (Archive::saving) {
    if constexpr (on_host)
      ar(v);
    else
      ar(m.download(cview(m, v)));
  } else {
    std::vector<T> h;
    ar(h);
    if (expected != ~std::size_t{0}) require_same_size(name, h.size(), "expected", expected);
    v = from_host(m, std::move(h));
  }
}

namespace detail {
template <class G>
struct container_space {
  using type = host_space;
};
template <class T, class S>
struct container_space<span<T, S>> {
  using type = S;
};
template <class G>
  requires heterograd::detail::thrust_vector_like<G>
struct container_space<G> {
  using type = heterograd::detail::thrust_space_t<G>;
};
}  // namespace detail

/// The memory space of a buffer argument: a span's own, a Thrust vector's system's, host for
/// any other contiguous range (std::vector, std::array).
template <class G>
using container_space_t = typename detail::container_space<std::remove_cvref_t<G>>::type;

/// A read-only span of a buffer argument (span, Thrust vector, contiguous host range) in
/// memory space Space. A buffer of another space is a compile-time error.
template <class T, class Space, class G>
span<const T, Space> buffer_view(const G& g) {
  static_assert(std::is_same_v<container_space_t<G>, Space>,
                "the buffer is in another memory space than the algorithm's parameters");
  if constexpr (heterograd::detail::thrust_vector_like<std::remove_cvref_t<G>>)
    return span<const T, Space>(thrust::raw_pointer_cast(g.data()), g.size());
  else
    return span<const T, Space>(std::data(g), std::size(g));
}

/// The check the types cannot make: a pointer placed in a span of the wrong space. Under
/// nvcc, std::invalid_argument naming `name` when a device_space span's memory is not
/// reachable by the device (neither device, managed nor registered host memory) or a
/// host_space span's is device-only memory. Without CUDA every buffer is host memory and
/// there is nothing to check. One driver query, no transfer.
template <class T, class Space>
void check_pointer(span<T, Space> s, const char* name) {
#if defined(__CUDACC__)
  if (s.empty()) return;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, s.data()) != cudaSuccess) {
    cudaGetLastError();
    a.type = cudaMemoryTypeUnregistered;
  }
  const bool device_only = a.type == cudaMemoryTypeDevice;
  const bool device_reachable = a.type != cudaMemoryTypeUnregistered;
  if constexpr (std::is_same_v<Space, device_space>) {
    if (!device_reachable)
      throw std::invalid_argument(std::string(name) + ": a device_space span over host memory (" +
                                  "unregistered): copy it to the device, or use a host_space "
                                  "algorithm");
  } else {
    if (device_only)
      throw std::invalid_argument(std::string(name) + ": a host_space span over device memory: " +
                                  "give the algorithm a device memory, or copy it to the host");
  }
#else
  (void)s;
  (void)name;
#endif
}

}  // namespace heterograd::kernels
