#pragma once
// The runtime layer: the contracts between runtimes and policies (concepts.hpp); the entry
// point runtime::run (run.hpp: a server policy or a round method on real threads or MPI ranks
// on the real clock, with its options, report, evaluation grid and the live run's checkpoint
// handshake; measure.hpp: each worker's speed where it runs, before such a run); the
// drivers of the asynchronous family: simulated (sim.hpp), over any transport (server.hpp)
// and on threads of this process (async_threads.hpp); recording a run on real workers as the
// simulator records it (recording.hpp).
#include "heterograd/runtime/async_threads.hpp"
#include "heterograd/runtime/concepts.hpp"
#include "heterograd/runtime/evaluation.hpp"
#include "heterograd/runtime/live.hpp"
#include "heterograd/runtime/measure.hpp"
#include "heterograd/runtime/options.hpp"
#include "heterograd/runtime/pacing.hpp"
#include "heterograd/runtime/parts.hpp"
#include "heterograd/runtime/placement.hpp"
#include "heterograd/runtime/recording.hpp"
#include "heterograd/runtime/report.hpp"
#include "heterograd/runtime/run.hpp"
#include "heterograd/runtime/server.hpp"
#include "heterograd/runtime/sim.hpp"
