#pragma once
// Pipeline parallelism (issue 47): a model split into stages, each on its own worker; GPipe and
// 1F1B schedules with synchronous or asynchronous updates (PipeDream, weight stashing,
// SpecTrain), the sequential and one-thread references, the runtime over any transport, and
// PD-ASGD's racing forward and backward threads.
#include "heterograd/algorithms/pipeline/concepts.hpp"
#include "heterograd/algorithms/pipeline/config.hpp"
#include "heterograd/algorithms/pipeline/mlp_stages.hpp"
#include "heterograd/algorithms/pipeline/pd_asgd.hpp"
#include "heterograd/algorithms/pipeline/reference.hpp"
#include "heterograd/algorithms/pipeline/run.hpp"
#include "heterograd/algorithms/pipeline/update.hpp"
