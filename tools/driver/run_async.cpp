// The runner's copy of the algorithm table (algorithms.hpp read with servers.hpp's binder):
// every built-in row with its factory. The asynchronous server policies are instantiated here,
// once each (with the type-erased optimizer).
#include "algorithms.hpp"
#include "servers.hpp"

namespace hgrun {

namespace {
const std::vector<algorithm_row>& runnable_rows() {
  static const std::vector<algorithm_row> v = builtin_algorithms<run_binder>();
  return v;
}
}  // namespace

const algorithm_row& runnable_algorithm(const std::string& name) {
  for (const auto& r : runnable_rows())
    if (r.name == name) return r;
  for (const auto& r : added_algorithms())
    if (r.name == name) return r;
  throw config_error("methods[?].algorithm", "expected an algorithm of the schema (--schema), got \"" + name + "\"");
}

}  // namespace hgrun
