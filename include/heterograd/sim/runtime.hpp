#pragma once
// Deprecated: moved to heterograd/runtime/sim.hpp on 2026-12-01 (namespace heterograd::runtime).
// This forwarding header stays for one release so that code including the old path still
// compiles; it will then be removed. Include heterograd/runtime/sim.hpp instead.
#pragma message("heterograd/sim/runtime.hpp is deprecated: include heterograd/runtime/sim.hpp")

#include "heterograd/runtime/sim.hpp"

namespace heterograd::sim {
using runtime::async_runtime;
using runtime::no_evaluation;
using runtime::round_runtime;
using runtime::run;
using runtime::run_options;
using runtime::run_summary;
}  // namespace heterograd::sim
