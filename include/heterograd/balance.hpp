#pragma once
// The balance layer: load-balancing policies that observe per-worker measurements (samples,
// compute time, memory) and decide batch sizes, local steps or placement.
#include "heterograd/balance/cephalo.hpp"
#include "heterograd/balance/concepts.hpp"
#include "heterograd/balance/cost_model.hpp"
#include "heterograd/balance/dssp.hpp"
#include "heterograd/balance/measurement.hpp"
#include "heterograd/balance/omnilearn.hpp"
#include "heterograd/balance/pipeline.hpp"
#include "heterograd/balance/pipeline_planner.hpp"
#include "heterograd/balance/pipeline_schedule.hpp"
#include "heterograd/balance/proportional.hpp"
