// The nccl transport on the GPUs of one machine (./hg gpu-check): a single-rank communicator,
// and one rank per GPU when there are several, bootstrapped over inproc threads.

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>

#include "heterograd/comm/inproc.hpp"
#include "heterograd/comm/nccl.cuh"

namespace hg = heterograd;
namespace hc = heterograd::comm;

namespace {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

/// Every rank allreduces (rank+1)*(i%5): returns the first element seen on each rank.
std::vector<std::vector<float>> run(int ranks, hc::reduce_op op, bool weighted) {
  std::vector<std::vector<float>> out(static_cast<std::size_t>(ranks));
  hc::inproc::spawn(ranks, [&](hc::inproc::communicator boot) {
    const int r = boot.rank();
    cudaSetDevice(r);
    cudaStream_t s;
    cudaStreamCreate(&s);
    auto c = hc::nccl::communicator::create(boot, r, s, hg::seconds{60});
    std::vector<float> h(1000);
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>((r + 1) * (i % 5));
    thrust::device_vector<float> d(h.begin(), h.end());
    hc::allreduce_options o;
    o.op = op;
    if (weighted) o.weight = r + 1.0;
    c.allreduce(hg::span<float, hg::device_space>(thrust::raw_pointer_cast(d.data()), d.size()), o).wait();
    c.barrier().wait();
    thrust::host_vector<float> back = d;
    out[static_cast<std::size_t>(r)].assign(back.begin(), back.end());
    cudaStreamDestroy(s);
  });
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(nccl_transport)

BOOST_AUTO_TEST_CASE(a_single_rank_communicator_reduces_to_its_own_buffer) {
  BOOST_TEST_REQUIRE(device_count() >= 1);
  auto out = run(1, hc::reduce_op::sum, false);
  for (std::size_t i = 0; i < out[0].size(); ++i) BOOST_TEST(out[0][i] == static_cast<float>(i % 5));
  out = run(1, hc::reduce_op::avg, true);
  for (std::size_t i = 0; i < out[0].size(); ++i) BOOST_TEST(out[0][i] == static_cast<float>(i % 5));
}

BOOST_AUTO_TEST_CASE(one_rank_per_gpu_sums_and_averages_like_the_reference) {
  const int n = device_count();
  if (n < 2) {
    BOOST_TEST_MESSAGE("one GPU: the multi-rank nccl test needs two or more");
    return;
  }
  auto out = run(n, hc::reduce_op::sum, false);
  const float tot = static_cast<float>(n * (n + 1) / 2);
  for (const auto& o : out)
    for (std::size_t i = 0; i < o.size(); ++i) BOOST_TEST(o[i] == tot * static_cast<float>(i % 5));
  out = run(n, hc::reduce_op::avg, true);
  double num = 0, den = 0;
  for (int r = 1; r <= n; ++r) {
    num += r * r;
    den += r;
  }
  for (const auto& o : out)
    for (std::size_t i = 0; i < o.size(); ++i)
      BOOST_TEST(o[i] == static_cast<float>(num / den * (i % 5)), boost::test_tools::tolerance(1e-5f));
}

BOOST_AUTO_TEST_SUITE_END()
