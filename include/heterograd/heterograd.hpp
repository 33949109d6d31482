#pragma once
// Everything host-compilable in heterograd, one include per layer. CUDA-only parts (*.cuh)
// are included by their users under nvcc.
#include "heterograd/version.hpp"
#include "heterograd/core.hpp"
#include "heterograd/kernels.hpp"
#include "heterograd/optim.hpp"
#include "heterograd/comm.hpp"
#include "heterograd/data.hpp"
#include "heterograd/nn.hpp"
#include "heterograd/balance.hpp"
#include "heterograd/sim.hpp"
#include "heterograd/algorithms/decoupled.hpp"
#include "heterograd/algorithms/pipeline.hpp"
#include "heterograd/algorithms/async.hpp"
#include "heterograd/algorithms/sync.hpp"
#include "heterograd/algorithms/sharded.hpp"
#include "heterograd/runtime/round_threads.hpp"
#if defined(HG_HAS_MPI)
#include "heterograd/runtime/round_mpi.hpp"
#endif
#include "heterograd/sparse.hpp"
#include "heterograd/runtime.hpp"
