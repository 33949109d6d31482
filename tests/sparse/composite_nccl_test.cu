// The composite transport with NCCL inside each group and a host-only backend across (inproc
// here; MPI across nodes), device buffers staged through host memory by cuda_stager (#4's
// CPU-forwarding path). Two groups of one GPU rank each share the machine's first GPU: the
// allreduce must equal the sum of both groups' inputs, and the stager must have moved 2 S
// bytes per exchange on each leader.

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <thrust/copy.h>
#include <thrust/device_vector.h>

#include "heterograd/comm/composite.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/comm/nccl.cuh"
#include "heterograd/comm/staging.cuh"
#include "hg_test.hpp"

namespace hg = heterograd;
namespace hc = heterograd::comm;

BOOST_AUTO_TEST_CASE(nccl_inside_and_host_staged_transport_across_equal_the_flat_sum,
                     *boost::unit_test::timeout(120)) {
  const std::size_t n = 1 << 20;
  std::mutex m;
  std::size_t bad = 0, staged = 0;
  hc::inproc::spawn(2, [&](hc::inproc::communicator world) {
    // Group g = world rank g: its inner group is one NCCL rank on GPU 0.
    const auto self = world.split(world.rank(), 0);
    cudaStream_t s = nullptr;
    cudaStreamCreate(&s);
    const auto inner = hc::nccl::communicator::create(self, 0, s, hg::seconds{60});
    using comp = hc::composite<hc::nccl::communicator, hc::inproc::communicator, hc::cuda_stager>;
    const auto c = comp::create(inner, std::optional(world), {.rails = 2, .stripe_min_bytes = 4096},
                                hc::cuda_stager{s});
    std::vector<std::int64_t> host(n);
    for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<std::int64_t>(i % 1000) * (world.rank() + 1);
    thrust::device_vector<std::int64_t> d(host.begin(), host.end());
    c.allreduce(hg::span<std::int64_t, hg::device_space>(thrust::raw_pointer_cast(d.data()), n)).wait();
    thrust::copy(d.begin(), d.end(), host.begin());
    std::size_t b = 0;
    for (std::size_t i = 0; i < n; ++i) b += host[i] != static_cast<std::int64_t>(i % 1000) * 3;
    std::lock_guard<std::mutex> l(m);
    bad += b;
    staged += *c.stager().staged;
    cudaStreamDestroy(s);
  });
  BOOST_TEST(bad == 0u);
  BOOST_TEST(staged == 2 * 2 * n * sizeof(std::int64_t));  // 2 leaders, down and up
}
