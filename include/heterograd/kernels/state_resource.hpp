#pragma once
// Where optimizer state made on a device gets its memory: the allocator of the algorithm's
// memory (kernels/thrust_memory.hpp), as every other buffer of the algorithm.
//
// optim::state keeps its slots in containers of the parameters' memory space; in device
// memory they are thrust::device_vector<T, state_allocator<T>> (optim/state.hpp). An
// optimizer makes its state in init(policy, params), which is given a policy and no
// allocator; algorithms call it through their memory (memory.run(n, f)). thrust_memory<Policy,
// Alloc>::run and read install the memory's allocator as this thread's state resource while
// f runs, so a state made there takes its slots from the caller's allocator (a caching or
// stream-ordered one). Each slot keeps the resource it was made from (shared ownership): it is
// freed there, wherever and whenever it dies, and a copy of a state allocates from the same
// resource. A state made with no resource installed (opt.init called directly) uses Thrust's
// device allocator, as before.
//
// Only device slots (under nvcc) use the resource; host slots are std::vectors. The
// allocator is Thrust's device allocator with a resource, so the CPU builds check it on
// Thrust's OpenMP device system (tests/optim/state_resource_test.cpp).

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

#include <thrust/detail/raw_pointer_cast.h>
#include <thrust/device_allocator.h>
#include <thrust/device_ptr.h>

namespace heterograd::kernels {

/// An allocator of bytes for state slots.
class state_resource {
 public:
  virtual ~state_resource() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p, std::size_t bytes) = 0;
};

/// A state_resource over a copy of a Thrust allocator (rebound to bytes).
template <class Alloc>
class allocator_resource final : public state_resource {
  using bytes_alloc = typename std::allocator_traits<Alloc>::template rebind_alloc<std::byte>;
  using traits = std::allocator_traits<bytes_alloc>;

 public:
  explicit allocator_resource(const Alloc& a) : alloc_(a) {}
  void* allocate(std::size_t bytes) override {
    return thrust::raw_pointer_cast(traits::allocate(alloc_, bytes));
  }
  void deallocate(void* p, std::size_t bytes) override {
    traits::deallocate(alloc_, typename traits::pointer(static_cast<std::byte*>(p)), bytes);
  }

 private:
  bytes_alloc alloc_;
};

namespace detail {
/// This thread's installed resource (a pointer to the installing memory's own shared_ptr,
/// which outlives the call it is installed for), or null.
inline const std::shared_ptr<state_resource>*& installed_state_resource() {
  static thread_local const std::shared_ptr<state_resource>* r = nullptr;
  return r;
}
}  // namespace detail

/// The resource installed on this thread (empty when none is).
inline std::shared_ptr<state_resource> current_state_resource() {
  const auto* r = detail::installed_state_resource();
  return r ? *r : nullptr;
}

/// Installs `r` as this thread's state resource while it lives (nests: the previous one comes
/// back at its end). `r` must outlive the scope.
class state_resource_scope {
 public:
  explicit state_resource_scope(const std::shared_ptr<state_resource>& r)
      : previous_(std::exchange(detail::installed_state_resource(), &r)) {}
  ~state_resource_scope() { detail::installed_state_resource() = previous_; }
  state_resource_scope(const state_resource_scope&) = delete;
  state_resource_scope& operator=(const state_resource_scope&) = delete;

 private:
  const std::shared_ptr<state_resource>* previous_;
};

/// The allocator of device state slots: the state resource installed when the slot's
/// container was made (Thrust's device allocator when none was), kept for the slot's life.
/// Containers propagate it on copy, move and swap.
template <class T>
class state_allocator : public thrust::device_allocator<T> {
  using base = thrust::device_allocator<T>;

 public:
  using pointer = thrust::device_ptr<T>;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  template <class U>
  struct rebind {
    using other = state_allocator<U>;
  };

  state_allocator() : resource_(current_state_resource()) {}
  state_allocator(const state_allocator&) = default;
  state_allocator& operator=(const state_allocator&) = default;
  template <class U>
  state_allocator(const state_allocator<U>& o) : resource_(o.resource()) {}

  pointer allocate(std::size_t n) {
    if (!resource_) return pointer(thrust::raw_pointer_cast(base::allocate(n)));
    return pointer(static_cast<T*>(resource_->allocate(n * sizeof(T))));
  }
  void deallocate(pointer p, std::size_t n) {
    if (!resource_) return base::deallocate(typename base::pointer(thrust::raw_pointer_cast(p)), n);
    resource_->deallocate(thrust::raw_pointer_cast(p), n * sizeof(T));
  }
  const std::shared_ptr<state_resource>& resource() const { return resource_; }

  template <class U>
  friend bool operator==(const state_allocator& a, const state_allocator<U>& b) {
    return a.resource() == b.resource();
  }
  template <class U>
  friend bool operator!=(const state_allocator& a, const state_allocator<U>& b) {
    return !(a == b);
  }

 private:
  std::shared_ptr<state_resource> resource_;
};

}  // namespace heterograd::kernels
