#pragma once
// Deprecated: moved to heterograd/runtime/round_threads.hpp on 2026-12-01 (namespace heterograd::runtime).
// This forwarding header stays for one release so that code including the old path still
// compiles; it will then be removed. Include heterograd/runtime/round_threads.hpp instead.
#pragma message("heterograd/algorithms/sync/threads.hpp is deprecated: include heterograd/runtime/round_threads.hpp")

#include "heterograd/runtime/round_threads.hpp"

namespace heterograd::algorithms::sync {
using runtime::run_threads;
}  // namespace heterograd::algorithms::sync
