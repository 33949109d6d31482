#pragma once
// Argument validation. Every public entry point checks its arguments before it changes any
// state and throws std::invalid_argument naming the parameter, the value and the rule, e.g.
//   heterograd: invalid argument 'adam.beta1' = 1: must be in [0, 1)

#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace heterograd {

namespace detail {
template <class T>
std::string format_value(const T& value) {
  std::ostringstream os;
  if constexpr (std::is_same_v<T, bool>) {
    os << (value ? "true" : "false");
  } else if constexpr (std::is_same_v<T, std::nullptr_t>) {
    os << "null";
  } else {
    os.precision(17);
    os << value;
  }
  return os.str();
}
}  // namespace detail

/// Builds the message of an invalid-argument error: parameter, value, rule.
template <class T>
std::string invalid_argument_message(std::string_view parameter, const T& value,
                                     std::string_view rule) {
  std::string msg = "heterograd: invalid argument '";
  msg += parameter;
  msg += "' = ";
  msg += detail::format_value(value);
  msg += ": ";
  msg += rule;
  return msg;
}

/// Throws std::invalid_argument naming `parameter`, `value` and `rule` unless `ok`.
template <class T>
void require(bool ok, std::string_view parameter, const T& value, std::string_view rule) {
  if (!ok) throw std::invalid_argument(invalid_argument_message(parameter, value, rule));
}

template <class T>
void require_positive(std::string_view parameter, const T& value) {
  require(value > T(0), parameter, value, "must be > 0");
}

template <class T>
void require_non_negative(std::string_view parameter, const T& value) {
  require(value >= T(0), parameter, value, "must be >= 0");
}

/// Closed-open range check [lo, hi).
template <class T>
void require_in_range_co(std::string_view parameter, const T& value, const T& lo, const T& hi) {
  if (!(value >= lo && value < hi)) {
    std::ostringstream rule;
    rule << "must be in [" << lo << ", " << hi << ")";
    throw std::invalid_argument(invalid_argument_message(parameter, value, rule.str()));
  }
}

/// Closed range check [lo, hi].
template <class T>
void require_in_range(std::string_view parameter, const T& value, const T& lo, const T& hi) {
  if (!(value >= lo && value <= hi)) {
    std::ostringstream rule;
    rule << "must be in [" << lo << ", " << hi << "]";
    throw std::invalid_argument(invalid_argument_message(parameter, value, rule.str()));
  }
}

/// Size agreement between two buffers: `parameter` has `size`, `other` has `expected`.
inline void require_same_size(std::string_view parameter, std::size_t size,
                              std::string_view other, std::size_t expected) {
  if (size != expected) {
    std::string rule = "must equal the size of '";
    rule += other;
    rule += "' (";
    rule += std::to_string(expected);
    rule += ")";
    throw std::invalid_argument(invalid_argument_message(parameter, size, rule));
  }
}

}  // namespace heterograd
