#pragma once
// The message of the exception a call throws (std::invalid_argument by default; the
// driver's config_error). The tests hold every refusal to its text (the field, the value and
// the rule, STYLE.md), so they all read it the same way.

#include <stdexcept>
#include <string>

namespace hg_test {

/// The message of the E that fn throws, or "" if it throws none (another exception escapes).
template <class E, class Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

/// The message of the std::invalid_argument that fn throws, or "" if it throws none.
template <class Fn>
std::string invalid_argument_message(Fn&& fn) {
  return message_of<std::invalid_argument>(fn);
}

}  // namespace hg_test
