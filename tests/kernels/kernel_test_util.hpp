#pragma once
// Helpers of the kernels tests: random host inputs from the printed seed, backend buffers,
// spans over them, and a comparison against a double-precision reference.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include <thrust/copy.h>
#include <boost/test/unit_test.hpp>

#include "heterograd/core/span.hpp"
#include "hg_test.hpp"

namespace kt {

namespace hg = heterograd;

/// Sizes that cover empty, one element, odd sizes and the reduction chunk boundaries.
inline const std::vector<std::size_t> sizes = {0, 1, 7, 8191, 8192, 8193, 3 * 8192 + 5};

template <class T>
std::vector<T> random_vector(std::size_t n, std::uint64_t stream, double lo = -1.0,
                             double hi = 1.0) {
  std::mt19937_64 gen(hg_test::seed() ^ (stream * 0x9e3779b97f4a7c15ull));
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(d(gen));
  return v;
}

using hg_test::cspan_of;
using hg_test::span_of;
using hg_test::to_backend;

/// Relative tolerance of a float or double kernel against the double reference.
template <class T>
constexpr double tol() {
  return sizeof(T) == 4 ? 2e-5 : 1e-12;
}

/// Every element within tol * (1 + |ref|) of the reference; counts and reports the first miss.
template <class T>
void check_close(const std::vector<T>& got, const std::vector<double>& ref, double rtol,
                 const char* what) {
  BOOST_TEST_REQUIRE(got.size() == ref.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    if (!(std::abs(g - ref[i]) <= rtol * (1.0 + std::abs(ref[i])))) {
      if (bad++ == 0) first = i;
    }
  }
  BOOST_TEST(bad == 0u, what << ": " << bad << " of " << got.size() << " elements off; first at "
                             << first << ": got " << (bad ? static_cast<double>(got[first]) : 0.0)
                             << " want " << (bad ? ref[first] : 0.0));
}

template <class T>
std::vector<double> to_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

}  // namespace kt
