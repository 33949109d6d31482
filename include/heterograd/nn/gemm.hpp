#pragma once
// Deprecated: moved to heterograd/kernels/gemm.hpp on 2026-12-01 (namespace heterograd::kernels).
// This forwarding header stays for one release so that code including the old path still
// compiles; it will then be removed. Include heterograd/kernels/gemm.hpp instead.
#pragma message("heterograd/nn/gemm.hpp is deprecated: include heterograd/kernels/gemm.hpp")

#include "heterograd/kernels/gemm.hpp"

namespace heterograd::nn {
using kernels::gemm;
using kernels::gemm_portable;
using kernels::set_blas_threads;
using kernels::transpose;
}  // namespace heterograd::nn
