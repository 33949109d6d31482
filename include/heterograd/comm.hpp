#pragma once
// The transport layer: the concept, requests and options, collective schedules, the inproc
// transport, partial collectives, collectives with uneven counts; the mpi transport when the mpi component is linked
// (HG_HAS_MPI); the gloo transport when the gloo component is linked (HG_HAS_GLOO). The nccl transport (heterograd/comm/nccl.cuh) is CUDA-only: include it under nvcc.
#include "heterograd/comm/concepts.hpp"
#include "heterograd/comm/executor.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/comm/inproc_partial.hpp"
#include "heterograd/comm/partial.hpp"
#include "heterograd/comm/partial_rounds.hpp"
#include "heterograd/comm/reduce.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/schedule.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/comm/uneven.hpp"
#if defined(HG_HAS_MPI)
#include "heterograd/comm/mpi.hpp"
#include "heterograd/comm/mpi_partial.hpp"
#endif
#if defined(HG_HAS_GLOO)
#include "heterograd/comm/gloo.hpp"
#endif
