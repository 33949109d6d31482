#pragma once
// span<T, Space>: a pointer, a size and the memory space the pointer lives in. Every kernel,
// optimizer and algorithm works on these flat views; nothing forces a tensor type on users.
// It is trivially copyable so that device kernels can take it by value.

#include <cstddef>
#include <iterator>
#include <ranges>
#include <type_traits>

// The three Thrust names a span needs (iterator_system, raw_pointer_cast, the host tags), not
// <thrust/memory.h>, which costs an includer about twice as much.
#include <thrust/detail/raw_pointer_cast.h>
#include <thrust/iterator/detail/host_system_tag.h>
#include <thrust/iterator/iterator_traits.h>
#include <thrust/system/cpp/detail/execution_policy.h>

#include "heterograd/core/config.hpp"

namespace heterograd {

/// Memory reachable from the host CPU (ordinary, pinned or OpenMP-backend "device" memory).
struct host_space {
  static constexpr const char* name = "host";
};
/// Memory of a GPU (the CUDA device system).
struct device_space {
  static constexpr const char* name = "device";
};

template <class S>
inline constexpr bool is_memory_space_v =
    std::is_same_v<S, host_space> || std::is_same_v<S, device_space>;

namespace detail {
// Thrust's CPU systems (cpp, omp, tbb) and the host system hold host memory; anything else
// (the CUDA system) holds device memory.
template <class System>
struct space_of_system {
  using type = std::conditional_t<std::is_convertible_v<System, thrust::system::cpp::tag> ||
                                      std::is_convertible_v<System, thrust::host_system_tag>,
                                  host_space, device_space>;
};

template <class C>
concept thrust_vector_like = requires(C& c) {
  typename C::iterator;
  { c.size() } -> std::convertible_to<std::size_t>;
  thrust::raw_pointer_cast(c.data());
} && !std::ranges::contiguous_range<C>;

template <class C>
using thrust_space_t =
    typename space_of_system<typename thrust::iterator_system<typename C::iterator>::type>::type;

// A range that names a memory space other than the host's (a heterograd span of device memory):
// contiguous in its own space, never a host range.
template <class R>
concept foreign_space_range = requires { typename std::remove_cvref_t<R>::memory_space; } &&
                              !std::same_as<typename std::remove_cvref_t<R>::memory_space, host_space>;
}  // namespace detail

template <class T, class Space = host_space>
class span {
  static_assert(is_memory_space_v<Space>, "Space must be host_space or device_space");

 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using size_type = std::size_t;
  using pointer = T*;
  using reference = T&;
  using iterator = T*;
  using memory_space = Space;

  constexpr span() = default;
  HG_HOST_DEVICE constexpr span(T* data, std::size_t size) : data_(data), size_(size) {}

  /// From a host contiguous range (std::vector, std::array, C array, std::span, ...); a span
  /// of device memory is not one.
  template <class R>
    requires std::same_as<Space, host_space> && (!detail::foreign_space_range<R>) &&
             std::ranges::contiguous_range<R> &&
             std::ranges::sized_range<R> &&
             std::is_convertible_v<std::remove_reference_t<std::ranges::range_reference_t<R>> (*)[],
                                   T (*)[]>
  constexpr span(R&& r) : data_(std::ranges::data(r)), size_(std::ranges::size(r)) {}

  /// From a thrust::host_vector or thrust::device_vector (space taken from its system).
  template <detail::thrust_vector_like C>
    requires std::same_as<detail::thrust_space_t<std::remove_cvref_t<C>>, Space> &&
             std::is_convertible_v<decltype(thrust::raw_pointer_cast(std::declval<C&>().data())),
                                   T*>
  span(C& c) : data_(thrust::raw_pointer_cast(c.data())), size_(c.size()) {}

  /// span<T> -> span<const T>.
  template <class U>
    requires(!std::is_same_v<U, T> && std::is_convertible_v<U (*)[], T (*)[]>)
  HG_HOST_DEVICE constexpr span(const span<U, Space>& other)
      : data_(other.data()), size_(other.size()) {}

  HG_HOST_DEVICE constexpr T* data() const { return data_; }
  HG_HOST_DEVICE constexpr std::size_t size() const { return size_; }
  HG_HOST_DEVICE constexpr std::size_t size_bytes() const { return size_ * sizeof(T); }
  HG_HOST_DEVICE constexpr bool empty() const { return size_ == 0; }
  HG_HOST_DEVICE constexpr T* begin() const { return data_; }
  HG_HOST_DEVICE constexpr T* end() const { return data_ + size_; }
  HG_HOST_DEVICE constexpr T& operator[](std::size_t i) const {
    HG_ASSERT(i < size_);
    return data_[i];
  }
  HG_HOST_DEVICE constexpr span subspan(std::size_t offset, std::size_t count) const {
    HG_ASSERT(offset <= size_ && count <= size_ - offset);
    return span(data_ + offset, count);
  }
  HG_HOST_DEVICE constexpr span first(std::size_t count) const { return subspan(0, count); }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

template <class T>
using host_span = span<T, host_space>;
template <class T>
using device_span = span<T, device_space>;

template <class R>
  requires std::ranges::contiguous_range<R>
span(R&&) -> span<std::remove_reference_t<std::ranges::range_reference_t<R>>, host_space>;

/// Makes a span of a container, deducing element type and memory space.
template <class C>
auto make_span(C& c) {
  if constexpr (detail::thrust_vector_like<C>) {
    using T = std::remove_pointer_t<decltype(thrust::raw_pointer_cast(c.data()))>;
    return span<T, detail::thrust_space_t<std::remove_cv_t<C>>>(c);
  } else {
    using T = std::remove_reference_t<std::ranges::range_reference_t<C&>>;
    return span<T, host_space>(c);
  }
}

static_assert(std::is_trivially_copyable_v<span<float>>);

}  // namespace heterograd
