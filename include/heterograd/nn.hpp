#pragma once
// The nn layer: reference models on flat parameters (softmax regression, MLP), the loss.
#include "heterograd/nn/concepts.hpp"
#include "heterograd/nn/evaluate.hpp"
#include "heterograd/nn/loss.hpp"
#include "heterograd/nn/mlp.hpp"
// CUDA only: heterograd/kernels/gemm_cublas.cuh (GEMM on device memory through cuBLAS).
