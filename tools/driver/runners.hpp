#pragma once
// The runners of the round methods and of local learning (run_sync.cpp, run_local.cpp): one
// per row of the algorithm table (algorithms.hpp), each `run` returning the method's summary
// (null on an MPI rank that writes nothing), and `checkpointable` whether the method's whole
// state goes into a checkpoint. They are types, so that the table's schema binder (the
// configuration checker and its fuzzer, which link no runner) names them without using them:
// only the runner's binder (servers.hpp) takes their functions.

#include "config.hpp"

namespace hgrun {

struct context;

/// A row's runner as the registry holds it (empty in the schema's copy of the table).
struct method_runner {
  json (*run)(context&) = nullptr;
  bool (*checkpointable)() = nullptr;
};

struct bsp_runner {
  static json run(context& ctx);
  static bool checkpointable();
};
struct omnilearn_runner {
  static json run(context& ctx);
  static bool checkpointable();
};
struct local_sgd_runner {
  static json run(context& ctx);
  static bool checkpointable();
};
struct selsync_runner {
  static json run(context& ctx);
  static bool checkpointable();
};
struct eager_runner {
  static json run(context& ctx);
  static bool checkpointable();
};
struct biased_local_sgd_runner {
  static json run(context& ctx);
  static bool checkpointable();
};
struct local_learning_runner {
  static json run(context& ctx);
  static bool checkpointable();
};

}  // namespace hgrun
