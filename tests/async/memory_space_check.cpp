// Compiled, not run, by the async_memory_space tests (tests/async/CMakeLists.txt): a gradient
// whose type says it lives in another memory space than the server's parameters (a host
// std::vector for a device-space server) must not compile, with the library's message; the
// same call with a device-space span compiles.

#include <vector>

#include "heterograd/algorithms/async/server.hpp"

namespace ha = heterograd::algorithms::async;

void view(const std::vector<float>& host, heterograd::span<const float, heterograd::device_space> dev) {
#if defined(HG_MIX_SPACES)
  (void)ha::detail::gradient_view<float, heterograd::device_space>(host);
#else
  (void)host;
  (void)ha::detail::gradient_view<float, heterograd::device_space>(dev);
#endif
}
