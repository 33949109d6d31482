#pragma once
// Deprecated: moved to heterograd/runtime/rounds.hpp on 2026-12-01 (namespace heterograd::runtime).
// This forwarding header stays for one release so that code including the old path still
// compiles; it will then be removed. Include heterograd/runtime/rounds.hpp instead.
#pragma message("heterograd/algorithms/sync/drive.hpp is deprecated: include heterograd/runtime/rounds.hpp")

#include "heterograd/runtime/rounds.hpp"

namespace heterograd::algorithms::sync {
using runtime::run_worker;
}  // namespace heterograd::algorithms::sync
