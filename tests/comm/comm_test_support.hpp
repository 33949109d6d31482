#pragma once
// Helpers of the comm tests. Boost.Test assertions are not thread-safe, so rank threads record
// what they saw (or throw, which spawn rethrows) and the test's main thread asserts.

#include <cstdint>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "heterograd/core/rng.hpp"
#include "hg_test.hpp"

namespace comm_test {

/// Throws from a rank thread when a condition fails (spawn rethrows it in the test thread).
inline void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("rank check failed: " + what);
}

/// The message of the E that waiting on `r` throws; nothing if the wait returns. Other
/// exceptions propagate.
template <class E, class Request>
std::optional<std::string> wait_error(Request& r) {
  try {
    r.wait();
  } catch (const E& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

/// Integer-valued inputs: exact in float and double, so sums can be compared bitwise.
template <class T>
std::vector<T> integer_input(std::uint64_t seed, int rank, std::size_t n, int lo = -8, int hi = 9) {
  heterograd::counter_rng rng(seed, static_cast<std::uint64_t>(rank) + 1);
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<T>(lo + static_cast<int>(rng.below(i, static_cast<std::uint64_t>(hi - lo))));
  return v;
}

/// Real-valued inputs in [-1, 1).
template <class T>
std::vector<T> real_input(std::uint64_t seed, int rank, std::size_t n) {
  heterograd::counter_rng rng(seed, static_cast<std::uint64_t>(rank) + 1000);
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(rng.uniform(i, -1.0, 1.0));
  return v;
}

}  // namespace comm_test
