#pragma once
// Deprecated: moved to heterograd/algorithms/sparse/hybrid.hpp on 2026-12-01 (namespace heterograd::algorithms::sparse).
// This forwarding header stays for one release so that code including the old path still
// compiles; it will then be removed. Include heterograd/algorithms/sparse/hybrid.hpp instead.
#pragma message("heterograd/comm/sparse/hybrid.hpp is deprecated: include heterograd/algorithms/sparse/hybrid.hpp")

#include "heterograd/algorithms/sparse/hybrid.hpp"

namespace heterograd::comm {
using algorithms::sparse::hybrid_aggregator;
using hybrid_options [[deprecated("use heterograd::algorithms::sparse::hybrid_config")]] =
    algorithms::sparse::hybrid_config;
}  // namespace heterograd::comm
