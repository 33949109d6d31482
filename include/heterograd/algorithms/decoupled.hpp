#pragma once
// Decoupled locally-supervised modules, PGL, module pipelines.
#include "heterograd/algorithms/decoupled/chain.hpp"
#include "heterograd/algorithms/decoupled/concepts.hpp"
#include "heterograd/algorithms/decoupled/local_learning.hpp"
#include "heterograd/algorithms/decoupled/pipeline.hpp"
#include "heterograd/algorithms/decoupled/pipelined_backprop.hpp"
#include "heterograd/algorithms/decoupled/placement.hpp"
#include "heterograd/algorithms/decoupled/schedule.hpp"
#include "heterograd/algorithms/decoupled/shared_memory.hpp"
#include "heterograd/algorithms/decoupled/transport_pipeline.hpp"
