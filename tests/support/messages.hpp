#pragma once
// The message of the std::invalid_argument a call throws. The tests hold every refusal to its
// text (the field, the value and the rule, STYLE.md), so they all read it the same way.

#include <stdexcept>
#include <string>

namespace hg_test {

/// The message of the std::invalid_argument that fn throws, or "" if it throws none.
template <class Fn>
std::string invalid_argument_message(Fn&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace hg_test
