#pragma once
// Everything host-compilable in heterograd, one include per layer. CUDA-only parts (*.cuh)
// are included by their users under nvcc.
#include "heterograd/version.hpp"
#include "heterograd/core.hpp"
#include "heterograd/comm.hpp"
