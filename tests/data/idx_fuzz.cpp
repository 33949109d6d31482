// libFuzzer entry: any byte string must either parse into a consistent IDX array or throw
// data::format_error -- never crash, read out of bounds or trip a sanitizer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "heterograd/data/idx.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto a = heterograd::data::parse_idx(data, size, "fuzz");
    std::size_t count = 1;
    for (auto d : a.dims) count *= d;
    if (count != a.values.size() || a.dims.empty()) std::abort();
  } catch (const heterograd::data::format_error& e) {
    if (e.offset() > size) std::abort();  // the offset must point into (or just past) the input
  }
  return 0;
}
