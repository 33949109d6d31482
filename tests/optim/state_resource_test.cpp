// Where optimizer state in device memory gets its memory (kernels/state_resource.hpp):
// - thrust_memory installs its allocator as the thread's state resource while a kernel call
//   runs (run and read), nested calls restore the outer one, an exception or the call's end
//   uninstalls it, and other threads never see it;
// - state_allocator (the slots' allocator on a device) takes its memory from the resource
//   installed when its container is made, keeps it for the container's life (also after the
//   memory is gone), shares it with copies and moves it with moves; with none installed it is
//   Thrust's device allocator;
// - on a GPU (the CUDA twin), an optimizer state made through a thrust_memory takes every slot
//   from the caller's allocator (and a checkpoint read into it, from the same), and one made
//   with opt.init directly does not.
// On the CPU the allocator runs over Thrust's OpenMP device system (the build's device system),
// where optimizer states are host vectors: the pieces are checked, the GPU twin the whole.
#include <cstddef>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <thrust/device_allocator.h>
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>

#include "heterograd/core/archive.hpp"
#include "heterograd/kernels/state_resource.hpp"
#include "heterograd/kernels/thrust_memory.hpp"
#include "heterograd/optim/optimizers.hpp"

namespace hk = heterograd::kernels;
namespace ho = heterograd::optim;

namespace {

struct counts {
  std::size_t allocations = 0, deallocations = 0, live_bytes = 0;
};

/// Thrust's device allocator, counting what passes through it (shared by rebound copies).
template <class T>
struct counting_allocator : thrust::device_allocator<T> {
  using base = thrust::device_allocator<T>;
  template <class U>
  struct rebind {
    using other = counting_allocator<U>;
  };
  std::shared_ptr<counts> c = std::make_shared<counts>();
  counting_allocator() = default;
  counting_allocator(const counting_allocator&) = default;
  template <class U>
  counting_allocator(const counting_allocator<U>& o) : c(o.c) {}
  typename base::pointer allocate(std::size_t n) {
    ++c->allocations;
    c->live_bytes += n * sizeof(T);
    return base::allocate(n);
  }
  void deallocate(typename base::pointer p, std::size_t n) {
    ++c->deallocations;
    c->live_bytes -= n * sizeof(T);
    base::deallocate(p, n);
  }
};

using device_policy = std::remove_cvref_t<decltype(thrust::device)>;
using counted_memory = hk::thrust_memory<device_policy, counting_allocator<std::byte>>;
using slot_vector = thrust::device_vector<float, hk::state_allocator<float>>;

/// Element i through a host copy (Thrust's element read binds a reference through a null
/// system pointer, which UBSan rightly reports).
float at(const slot_vector& v, std::size_t i) {
  std::vector<float> h(v.size());
  thrust::copy(v.begin(), v.end(), h.begin());
  return h.at(i);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(state_resource)

BOOST_AUTO_TEST_CASE(a_memory_installs_its_allocator_while_a_kernel_call_runs) {
  counting_allocator<std::byte> alloc;
  const auto c = alloc.c;
  const counted_memory m(thrust::device, alloc);
  BOOST_TEST(!hk::current_state_resource());
  m.run(1, [&](const auto&) {
    const auto r = hk::current_state_resource();
    BOOST_REQUIRE(r);
    BOOST_TEST((r == m.states()));
    void* p = r->allocate(64);
    BOOST_TEST(c->allocations == 1u);
    BOOST_TEST(c->live_bytes == 64u);
    r->deallocate(p, 64);
    BOOST_TEST(c->deallocations == 1u);
    // A call of another memory inside: its resource, then this one's again.
    const hk::thrust_memory other(thrust::device);
    other.run(1, [&](const auto&) { BOOST_TEST((hk::current_state_resource() == other.states())); });
    BOOST_TEST((hk::current_state_resource() == m.states()));
    // Another thread has none installed.
    bool seen = true;
    std::thread([&] { seen = static_cast<bool>(hk::current_state_resource()); }).join();
    BOOST_TEST(!seen);
  });
  BOOST_TEST(!hk::current_state_resource());
  BOOST_TEST(m.read(1, [&](const auto&) { return hk::current_state_resource() == m.states(); }));
  BOOST_CHECK_THROW(m.run(1, [](const auto&) { throw std::runtime_error("kernel failed"); }), std::runtime_error);
  BOOST_TEST(!hk::current_state_resource());  // uninstalled on the way out
}

BOOST_AUTO_TEST_CASE(slots_take_the_resource_installed_when_made_and_keep_it) {
  counting_allocator<std::byte> alloc;
  const auto c = alloc.c;
  std::optional<slot_vector> a;
  slot_vector outside(8, 0.0f);  // none installed: Thrust's device allocator, nothing counted
  BOOST_TEST(!outside.get_allocator().resource());
  {
    const counted_memory m(thrust::device, alloc);
    m.run(16, [&](const auto&) { a.emplace(16, 1.0f); });
    BOOST_TEST((a->get_allocator().resource() == m.states()));
  }  // the memory is gone; the slot keeps its resource
  BOOST_TEST(c->allocations == 1u);
  BOOST_TEST(c->live_bytes == 16u * sizeof(float));
  {
    const slot_vector copy = *a;  // a copy allocates from the same resource
    BOOST_TEST(c->allocations == 2u);
    BOOST_TEST((copy.get_allocator().resource() == a->get_allocator().resource()));
    BOOST_TEST(at(copy, 3) == 1.0f);
  }
  BOOST_TEST(c->deallocations == 1u);
  slot_vector moved = std::move(*a);  // a move takes the buffer: nothing allocated
  BOOST_TEST(c->allocations == 2u);
  BOOST_TEST(moved.size() == 16u);
  outside = moved;  // copy assignment propagates the resource with the values
  BOOST_TEST(c->allocations == 3u);
  BOOST_TEST((outside.get_allocator().resource() == moved.get_allocator().resource()));
  BOOST_TEST(at(outside, 15) == 1.0f);
  a.reset();
  moved = slot_vector();
  outside = slot_vector();
  BOOST_TEST(c->live_bytes == 0u);  // every counted byte came back through the resource
  BOOST_TEST(c->deallocations == c->allocations);
}

#if defined(__CUDACC__)
BOOST_AUTO_TEST_CASE(an_optimizer_state_made_through_a_memory_comes_from_its_allocator) {
  constexpr std::size_t n = 1000;
  thrust::device_vector<float> p(n, 0.5f);
  counting_allocator<std::byte> alloc;
  const auto c = alloc.c;
  const hk::thrust_memory<std::remove_cvref_t<decltype(thrust::cuda::par)>, counting_allocator<std::byte>> m(
      thrust::cuda::par, alloc);
  const ho::adam adam({.lr = 1e-3});
  std::optional<ho::state<float, heterograd::device_space>> st;
  m.run(n, [&](const auto& pol) { st.emplace(adam.init(pol, p)); });
  BOOST_TEST(c->allocations == 2u);  // Adam's two moments
  BOOST_TEST(c->live_bytes == 2 * n * sizeof(float));
  const auto direct = adam.init(thrust::cuda::par, p);  // not through the memory: not counted
  BOOST_TEST(c->allocations == 2u);
  BOOST_TEST((direct == *st));
  {
    const auto copy = *st;
    BOOST_TEST(c->allocations == 4u);
  }
  // A checkpoint read into the state remakes its slots from the same resource.
  heterograd::archive_writer w;
  st->serialize(w);
  heterograd::archive_reader r(w.bytes());
  st->serialize(r);
  BOOST_TEST(c->allocations == 6u);
  BOOST_TEST(c->live_bytes == 2 * n * sizeof(float));
  BOOST_TEST((direct == *st));
  st.reset();
  BOOST_TEST(c->live_bytes == 0u);
}
#endif

BOOST_AUTO_TEST_SUITE_END()
