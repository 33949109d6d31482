#pragma once
// The runtime layer: the contracts between runtimes and policies (concepts.hpp) and the
// drivers of the asynchronous family: simulated (sim.hpp), over any transport (server.hpp)
// and on threads of this process (async_threads.hpp); recording a run on real workers as the
// simulator records it (recording.hpp).
#include "heterograd/runtime/async_threads.hpp"
#include "heterograd/runtime/concepts.hpp"
#include "heterograd/runtime/pacing.hpp"
#include "heterograd/runtime/parts.hpp"
#include "heterograd/runtime/placement.hpp"
#include "heterograd/runtime/recording.hpp"
#include "heterograd/runtime/server.hpp"
#include "heterograd/runtime/sim.hpp"
