#include <array>
#include <ranges>
#include <type_traits>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>

#include "heterograd/core/span.hpp"
#include "hg_test.hpp"

namespace hg = heterograd;

BOOST_AUTO_TEST_SUITE(span)

BOOST_AUTO_TEST_CASE(span_views_contiguous_host_ranges_without_copying) {
  std::vector<float> v{1, 2, 3, 4};
  hg::span<float> s(v);
  BOOST_TEST(s.data() == v.data());
  BOOST_TEST(s.size() == 4u);
  BOOST_TEST(s.size_bytes() == 16u);
  s[2] = 7;
  BOOST_TEST(v[2] == 7.0f);
  std::array<double, 3> a{};
  auto sa = hg::make_span(a);
  static_assert(std::is_same_v<decltype(sa), hg::span<double, hg::host_space>>);
  BOOST_TEST(sa.size() == 3u);
  const std::vector<float>& cv = v;
  hg::span<const float> cs(cv);
  BOOST_TEST(cs.data() == v.data());
}

BOOST_AUTO_TEST_CASE(span_takes_the_memory_space_of_a_thrust_vector) {
  thrust::host_vector<float> h(5, 1.0f);
  auto sh = hg::make_span(h);
  static_assert(std::is_same_v<decltype(sh)::memory_space, hg::host_space>);
  BOOST_TEST(sh.data() == thrust::raw_pointer_cast(h.data()));
  thrust::device_vector<float> d(3, 1.0f);
  auto sd = hg::make_span(d);
#if defined(__CUDACC__)
  static_assert(std::is_same_v<decltype(sd)::memory_space, hg::device_space>);
#else
  // The CPU device systems (cpp, omp) keep "device" vectors in host memory.
  static_assert(std::is_same_v<decltype(sd)::memory_space, hg::host_space>);
#endif
  BOOST_TEST(sd.size() == 3u);
  // A host span cannot be made from memory of the other space, and vice versa.
  static_assert(!std::is_constructible_v<hg::span<float, hg::device_space>, std::vector<float>&>);
  // A span of device memory is contiguous in its own space only: no host span (nor host const
  // span) is made from it, though it is a contiguous range of pointers.
  static_assert(std::ranges::contiguous_range<hg::span<float, hg::device_space>>);
  static_assert(!std::is_constructible_v<hg::span<float>, hg::span<float, hg::device_space>>);
  static_assert(!std::is_convertible_v<hg::span<float, hg::device_space>, hg::span<const float>>);
  static_assert(!std::is_constructible_v<hg::span<const float>, const hg::span<const float, hg::device_space>&>);
  static_assert(!std::is_constructible_v<hg::span<float, hg::device_space>, hg::span<float>>);
}

BOOST_AUTO_TEST_CASE(span_is_trivially_copyable_and_converts_to_const) {
  static_assert(std::is_trivially_copyable_v<hg::span<float>>);
  static_assert(std::is_trivially_copyable_v<hg::device_span<double>>);
  static_assert(std::is_convertible_v<hg::span<float>, hg::span<const float>>);
  static_assert(!std::is_convertible_v<hg::span<const float>, hg::span<float>>);
  static_assert(!std::is_convertible_v<hg::host_span<float>, hg::device_span<float>>);
}

BOOST_AUTO_TEST_CASE(subspan_and_first_select_the_right_elements) {
  std::vector<int> v{0, 1, 2, 3, 4, 5};
  hg::span<int> s(v);
  auto sub = s.subspan(2, 3);
  BOOST_TEST(sub.size() == 3u);
  BOOST_TEST(sub[0] == 2);
  BOOST_TEST(sub[2] == 4);
  BOOST_TEST(s.first(0).empty());
  int sum = 0;
  for (int x : s.subspan(4, 2)) sum += x;
  BOOST_TEST(sum == 9);
}

BOOST_AUTO_TEST_SUITE_END()
