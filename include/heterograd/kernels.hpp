#pragma once
// The kernels layer: stateless fused kernels over flat buffers, each taking a Thrust
// execution policy first (cpp, omp, cuda). Bytes per element are stated next to each kernel.
#include "heterograd/kernels/blend.hpp"
#include "heterograd/kernels/capturable.hpp"
#include "heterograd/kernels/cast.hpp"
#include "heterograd/kernels/hyperparameters.hpp"
#include "heterograd/kernels/clip.hpp"
#include "heterograd/kernels/gemm.hpp"
#include "heterograd/kernels/launch.hpp"
#include "heterograd/kernels/mixed.hpp"
#include "heterograd/kernels/multi_tensor.hpp"
#include "heterograd/kernels/reduce.hpp"
#include "heterograd/kernels/scratch.hpp"
#include "heterograd/kernels/select.hpp"
#include "heterograd/kernels/updates.hpp"
// CUDA only: heterograd/kernels/gemm_cublas.cuh (GEMM on device memory through cuBLAS).
