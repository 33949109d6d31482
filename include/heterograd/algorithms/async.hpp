#pragma once
// Asynchronous and delayed SGD: parameter-server policies (pure state machines) that the
// sim, threads and MPI runtimes (heterograd/runtime.hpp) drive. See docs/async.md.
#include "heterograd/algorithms/async/asgd.hpp"
#include "heterograd/algorithms/async/dc_asgd.hpp"
#include "heterograd/algorithms/async/fedbuff.hpp"
#include "heterograd/algorithms/async/gradient_table.hpp"
#include "heterograd/algorithms/async/omnilearn.hpp"
#include "heterograd/algorithms/async/rennala.hpp"
#include "heterograd/algorithms/async/rescaled.hpp"
#include "heterograd/algorithms/async/ringmaster.hpp"
#include "heterograd/algorithms/async/server.hpp"
#include "heterograd/algorithms/async/ssp.hpp"
