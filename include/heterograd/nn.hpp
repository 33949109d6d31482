#pragma once
// The nn layer: reference models on flat parameters (softmax regression, MLP), the loss, GEMM.
#include "heterograd/nn/concepts.hpp"
#include "heterograd/nn/evaluate.hpp"
#include "heterograd/nn/gemm.hpp"
#include "heterograd/nn/loss.hpp"
#include "heterograd/nn/mlp.hpp"
// CUDA only: heterograd/nn/gemm_cublas.cuh (GEMM on device memory through cuBLAS).
