// The algorithm registry's rows (registry.hpp): the built-in table's keys and the rows added
// at run time.
#include "registry.hpp"

#include <algorithm>
#include <stdexcept>

#include "algorithms.hpp"

namespace hgrun {

namespace {
// The rows: the built-in ones sorted by name (the order the schema and its messages list),
// then those add_algorithm appended. A process adds its rows before it resolves or runs
// anything (a test's main, before its cases), so nothing reads while one is added.
std::vector<algorithm_row>& rows() {
  static std::vector<algorithm_row> v = [] {
    auto b = builtin_algorithms<schema_binder>();
    std::sort(b.begin(), b.end(), [](const auto& x, const auto& y) { return x.name < y.name; });
    return b;
  }();
  return v;
}
std::vector<algorithm_row>& added() {
  static std::vector<algorithm_row> v;
  return v;
}
}  // namespace

void add_algorithm(algorithm_row row) {
  if (!row.run)
    throw std::invalid_argument("add_algorithm: the row of '" + row.name +
                                "' has no factory (run)");
  for (const auto& r : rows())
    if (r.name == row.name)
      throw std::invalid_argument("add_algorithm: an algorithm named '" + row.name +
                                  "' exists already");
  algorithm_row keys = row;
  keys.run = nullptr;
  rows().push_back(std::move(keys));
  added().push_back(std::move(row));
}

const std::vector<algorithm_row>& algorithm_rows() {
  return rows();
}
const std::vector<algorithm_row>& added_algorithms() {
  return added();
}

}  // namespace hgrun
