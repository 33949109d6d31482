#pragma once
// The runners of the round methods and of local learning (run_sync.cpp, run_local.cpp): one
// per row of the algorithm table (algorithms.hpp), each returning the method's summary (null
// on an MPI rank that writes nothing), and whether the method's whole state goes into a
// checkpoint.

#include "config.hpp"

namespace hgrun {

struct context;

json run_bsp(context& ctx);
json run_omnilearn(context& ctx);
json run_local_sgd(context& ctx);
json run_selsync(context& ctx);
json run_eager(context& ctx);
json run_biased_local_sgd(context& ctx);
json run_local_learning(context& ctx);
bool bsp_checkpointable();
bool omnilearn_checkpointable();
bool local_sgd_checkpointable();
bool selsync_checkpointable();
bool eager_checkpointable();
bool biased_local_sgd_checkpointable();
bool local_learning_checkpointable();

}  // namespace hgrun
