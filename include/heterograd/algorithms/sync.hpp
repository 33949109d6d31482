#pragma once
// Synchronous, local and semi-synchronous SGD: BSP with sample-weighted aggregation, the local
// SGD family (per-worker steps, post-local, hierarchical, device sampling, gossip, FedNova,
// outer optimizers, optimizer-state policies, parameter transforms), SelSync, eager-SGD,
// biased local SGD's data plan, large-batch tools; per-worker helpers over any transport
// (workers.hpp). The threads and MPI runtimes that drive these policies are a layer above:
// heterograd/runtime/round_threads.hpp, round_mpi.hpp.
#include "heterograd/algorithms/sync/biased.hpp"
#include "heterograd/algorithms/sync/bsp.hpp"
#include "heterograd/algorithms/sync/common.hpp"
#include "heterograd/algorithms/sync/eager.hpp"
#include "heterograd/algorithms/sync/large_batch.hpp"
#include "heterograd/algorithms/sync/local_sgd.hpp"
#include "heterograd/algorithms/sync/runtime.hpp"
#include "heterograd/algorithms/sync/selsync.hpp"
#include "heterograd/algorithms/sync/transforms.hpp"
#include "heterograd/algorithms/sync/weights.hpp"
#include "heterograd/algorithms/sync/workers.hpp"
