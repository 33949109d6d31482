#pragma once
// Deprecated: moved to heterograd/algorithms/sparse/parameter_server.hpp on 2026-12-01 (namespace heterograd::algorithms::sparse).
// This forwarding header stays for one release so that code including the old path still
// compiles; it will then be removed. Include heterograd/algorithms/sparse/parameter_server.hpp instead.
#pragma message("heterograd/comm/sparse/parameter_server.hpp is deprecated: include heterograd/algorithms/sparse/parameter_server.hpp")

#include "heterograd/algorithms/sparse/parameter_server.hpp"

namespace heterograd::comm {
using algorithms::sparse::allreduce_bytes_per_rank;
using algorithms::sparse::shard_block;
using algorithms::sparse::shard_range;
using algorithms::sparse::sparse_parameter_server;
using algorithms::sparse::traffic;
using sparse_ps_options [[deprecated("use heterograd::algorithms::sparse::sparse_ps_config")]] =
    algorithms::sparse::sparse_ps_config;
}  // namespace heterograd::comm
