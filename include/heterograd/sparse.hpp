#pragma once
// Sparse and compressed communication (issue 11; docs/sparse.md, docs/compression.md):
// row-sparse gradients and their kernels (sparse/), the sharded sparse parameter server and
// the hybrid dense-allreduce / sparse-PS aggregator (algorithms/sparse/), the composite transport
// (comm/composite.hpp; host staging of device buffers in comm/staging.cuh under nvcc),
// LSH-sparse layers (nn/lsh.hpp, nn/lsh_layer.hpp), and gradient compression (compress.hpp).
#include "heterograd/algorithms/sparse/hybrid.hpp"
#include "heterograd/algorithms/sparse/parameter_server.hpp"
#include "heterograd/comm/composite.hpp"
#include "heterograd/compress.hpp"
#include "heterograd/nn/lsh.hpp"
#include "heterograd/nn/lsh_layer.hpp"
#include "heterograd/sparse/kernels.hpp"
#include "heterograd/sparse/row_sparse.hpp"
