#pragma once
// Deprecated: moved to heterograd/runtime/server.hpp on 2026-12-01 (namespace heterograd::runtime).
// This forwarding header stays for one release so that code including the old path still
// compiles; it will then be removed. Include heterograd/runtime/server.hpp instead.
#pragma message("heterograd/algorithms/async/remote.hpp is deprecated: include heterograd/runtime/server.hpp")

#include "heterograd/runtime/server.hpp"

namespace heterograd::algorithms::async {
using runtime::no_time_model;
using runtime::remote_options;
using runtime::remote_summary;
using runtime::run_remote;
using runtime::serve;
using runtime::work;
using runtime::worker_client;
}  // namespace heterograd::algorithms::async
