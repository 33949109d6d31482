#include <type_traits>

#include <boost/test/unit_test.hpp>

#include "heterograd/core/execution.hpp"
#include "hg_test.hpp"

namespace hg = heterograd;
namespace ex = heterograd::exec;

BOOST_AUTO_TEST_SUITE(execution)

BOOST_AUTO_TEST_CASE(policies_name_their_backend_and_memory_space) {
  static_assert(ex::backend_of_v<decltype(thrust::cpp::par)> == ex::backend::cpp);
  static_assert(std::is_same_v<ex::memory_space_of_t<decltype(thrust::cpp::par)>, hg::host_space>);
  static_assert(ex::accessible_v<decltype(thrust::cpp::par), hg::host_space>);
  static_assert(!ex::accessible_v<decltype(thrust::cpp::par), hg::device_space>);
#if defined(_OPENMP)
  static_assert(ex::backend_of_v<decltype(thrust::omp::par)> == ex::backend::omp);
#endif
#if defined(__CUDACC__)
  static_assert(ex::backend_of_v<decltype(thrust::cuda::par)> == ex::backend::cuda);
  static_assert(ex::accessible_v<decltype(thrust::cuda::par), hg::device_space>);
#endif
  BOOST_TEST(ex::backend_name(ex::backend::omp) == "omp");
}

BOOST_AUTO_TEST_CASE(default_policy_is_the_backend_this_build_targets) {
  static_assert(ex::backend_of_v<decltype(ex::default_policy())> == ex::default_backend);
#if defined(__CUDACC__)
  BOOST_TEST(ex::backend_name(ex::default_backend) == "cuda");
#elif defined(_OPENMP)
  BOOST_TEST(ex::backend_name(ex::default_backend) == "omp");
#else
  BOOST_TEST(ex::backend_name(ex::default_backend) == "cpp");
#endif
}

BOOST_AUTO_TEST_SUITE_END()
