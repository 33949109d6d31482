#pragma once
// What a server or a round does with a worker's gradient that holds an infinity or a NaN
// (DESIGN.md, "Errors": non-finite gradients are a policy, never a silent corruption). One
// rule for every method, written once here and called where each method accepts a
// gradient (async: detail::policy_base::admit; sync: detail::cluster::compute_gradient and
// the per-worker helpers):
//
//   fail  (default)  throw nonfinite_gradient_error naming the worker, the step and the first
//                    bad element, before anything changes: parameters, optimizer state and
//                    the method's own state (tables, buffers, counters) stay as they were;
//   skip             the gradient is dropped and counted; nothing else moves (an async
//                    server records it as discarded and the worker restarts at the current
//                    model; a round treats the worker as having no gradient this step);
//   zero             its non-finite entries are replaced by 0 and it is used as such (bitwise
//                    the same as receiving the zeroed gradient).
//
// The scan reads the gradient once (sizeof(T) bytes per element); zero writes a copy (async,
// whose gradient belongs to the runtime) or the buffer itself (sync, whose buffer is the
// worker's own).

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::algorithms {

enum class nonfinite_policy : std::uint8_t {
  fail,  ///< throw nonfinite_gradient_error; nothing changes
  skip,  ///< drop the gradient (counted)
  zero,  ///< replace its non-finite entries by 0
};

/// The policies by name (a described config's `nonfinite` field).
inline constexpr choice<nonfinite_policy> nonfinite_policies[] = {
    {"fail", nonfinite_policy::fail}, {"skip", nonfinite_policy::skip}, {"zero", nonfinite_policy::zero}};

/// The policy's name in the table ("unknown" for a value outside it).
constexpr std::string_view nonfinite_policy_name(nonfinite_policy p) {
  const std::string_view n = name_of(nonfinite_policies, p);
  return n.empty() ? std::string_view("unknown") : n;
}

/// Throws std::invalid_argument naming `field` unless p is one of the policies of the table
/// (an enum can hold any value of its underlying type).
inline void validate_nonfinite_policy(std::string_view field, nonfinite_policy p) {
  require(!name_of(nonfinite_policies, p).empty(), field, static_cast<int>(p),
          choices_rule(nonfinite_policies));
}

/// A gradient with an infinity or a NaN reached a method whose policy is fail. Names the
/// worker, the step (async: the server's version k when it arrived; sync: the worker's
/// gradient count), and the first non-finite element.
class nonfinite_gradient_error : public std::domain_error {
 public:
  nonfinite_gradient_error(std::string_view method, std::uint64_t worker, std::uint64_t step,
                           std::string_view step_meaning, std::size_t index, double value)
      : std::domain_error(message(method, worker, step, step_meaning, index, value)),
        worker_(worker), step_(step), index_(index) {}

  std::uint64_t worker() const { return worker_; }
  std::uint64_t step() const { return step_; }
  /// Index of the first non-finite element.
  std::size_t index() const { return index_; }

 private:
  static std::string message(std::string_view method, std::uint64_t worker, std::uint64_t step,
                             std::string_view step_meaning, std::size_t index, double value) {
    // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on
    // "literal" + std::to_string(...).
    std::string m = "heterograd: ";
    m += method;
    m += ": non-finite gradient from worker ";
    m += std::to_string(worker);
    m += " at step ";
    m += std::to_string(step);
    m += " (";
    m += step_meaning;
    m += "): element ";
    m += std::to_string(index);
    m += " is ";
    m += detail::format_value(value);
    m += "; nothing was applied (nonfinite policy fail; skip drops such gradients, zero "
         "zeroes their non-finite entries)";
    return m;
  }

  std::uint64_t worker_, step_;
  std::size_t index_;
};

/// Index of the first infinite or NaN element of g, or g.size() when there is none. A
/// branch-free pass first, the search only when it finds something. The pass is an integer
/// OR over "all exponent bits set" (infinities and NaNs, IEEE 754), which the compiler
/// vectorises; a floating-point sum would not be reordered without -ffast-math.
template <class T>
std::size_t first_nonfinite(span<const T> g) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "float or double gradients");
  using bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  constexpr bits exponent = static_cast<bits>(sizeof(T) == 4 ? 0x7f800000ull : 0x7ff0000000000000ull);
  bits any = 0;
  for (std::size_t j = 0; j < g.size(); ++j) any |= bits((std::bit_cast<bits>(g[j]) & exponent) == exponent);
  if (any == 0) return g.size();
  for (std::size_t j = 0; j < g.size(); ++j)
    if (!std::isfinite(g[j])) return j;
  return g.size();
}

/// What apply_nonfinite_policy did to a gradient.
enum class nonfinite_outcome : std::uint8_t { finite, zeroed, skipped };

/// The policy on a gradient the caller owns, in place: finite gradients are left alone; zero
/// sets the non-finite entries to 0; skip sets every entry to 0 (the gradient adds nothing);
/// fail throws nonfinite_gradient_error naming `method`, `worker` and `step`. Reads g once
/// (sizeof(T) per element); zero and skip write it (+sizeof(T)).
template <class T>
nonfinite_outcome apply_nonfinite_policy(nonfinite_policy p, span<T> g, std::string_view method,
                                         std::uint64_t worker, std::uint64_t step,
                                         std::string_view step_meaning) {
  const std::size_t bad = first_nonfinite(span<const T>(g.data(), g.size()));
  if (bad == g.size()) return nonfinite_outcome::finite;
  switch (p) {
    case nonfinite_policy::zero:
      for (auto& x : g)
        if (!std::isfinite(x)) x = T(0);
      return nonfinite_outcome::zeroed;
    case nonfinite_policy::skip:
      for (auto& x : g) x = T(0);
      return nonfinite_outcome::skipped;
    case nonfinite_policy::fail: break;
  }
  throw nonfinite_gradient_error(method, worker, step, step_meaning, bad, static_cast<double>(g[bad]));
}

}  // namespace heterograd::algorithms
