#pragma once
// Sharded training state with uneven shards (FSDP / ZeRO-3 with Cephalo's uneven fractions):
// the layout of the shards, the per-rank state with its gather / reduce-scatter / update, the
// memory a layout needs, checkpoints and resharding onto another layout, and training with a
// Cephalo plan (cephalo_run.hpp). The collectives underneath are heterograd/comm/uneven.hpp.
#include "heterograd/algorithms/sharded/cephalo_run.hpp"
#include "heterograd/algorithms/sharded/checkpoint.hpp"
#include "heterograd/algorithms/sharded/layout.hpp"
#include "heterograd/algorithms/sharded/memory.hpp"
#include "heterograd/algorithms/sharded/state.hpp"
