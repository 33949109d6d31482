#pragma once
// Deprecated: moved to heterograd/runtime/async_threads.hpp on 2026-12-01 (namespace heterograd::runtime).
// This forwarding header stays for one release so that code including the old path still
// compiles; it will then be removed. Include heterograd/runtime/async_threads.hpp instead.
#pragma message("heterograd/algorithms/async/threads.hpp is deprecated: include heterograd/runtime/async_threads.hpp")

#include "heterograd/runtime/async_threads.hpp"

namespace heterograd::algorithms::async {
using runtime::run_threads;
}  // namespace heterograd::algorithms::async
