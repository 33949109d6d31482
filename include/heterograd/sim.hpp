#pragma once
// The sim layer: a deterministic discrete-event simulator of heterogeneous clusters (virtual
// clock, worker-time models, network cost model, recorder). The runtimes that drive policies
// on it are in heterograd/runtime/sim.hpp.
#include "heterograd/sim/churn.hpp"
#include "heterograd/sim/engine.hpp"
#include "heterograd/sim/network.hpp"
#include "heterograd/sim/recorder.hpp"
#include "heterograd/sim/worker_time.hpp"
