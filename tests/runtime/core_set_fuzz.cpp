// libFuzzer entry for the core-set parser (runtime/placement.hpp): any text either parses to
// increasing, distinct cores below 1024 whose cpulist form parses back to the same set, or is
// refused with std::invalid_argument naming the key -- never anything else.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "heterograd/runtime/placement.hpp"

namespace hr = heterograd::runtime;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto s = hr::parse_core_set(text, "workers.placement[0]");
    if (s.empty()) std::abort();
    for (std::size_t i = 0; i < s.cores.size(); ++i) {
      if (s.cores[i] < 0 || s.cores[i] >= hr::max_cores) std::abort();
      if (i > 0 && s.cores[i] <= s.cores[i - 1]) std::abort();
    }
    if (!(hr::parse_core_set(s.str(), "again") == s)) std::abort();
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).find("workers.placement[0]") == std::string::npos) std::abort();
  }
  return 0;
}
