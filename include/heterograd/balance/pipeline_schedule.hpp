#pragma once
// The pipeline schedules' names, below algorithms so that the planner (balance/) and the stage
// runtime (algorithms/pipeline/) share one enumeration and one table of names. The schedules
// themselves are algorithms/decoupled/schedule.hpp's schedule_gpipe and schedule_1f1b.

#include "heterograd/core/describe.hpp"

namespace heterograd::balance {

/// The order in which a pipeline stage runs its forwards and backwards.
enum class pipeline_schedule_kind {
  gpipe,       ///< all forwards, then all backwards: a worker holds all its micro-batches
  one_f_one_b  ///< DAPPLE's early backward: stage s holds at most S − s micro-batches
};
inline constexpr choice<pipeline_schedule_kind> pipeline_schedule_kinds[] = {
    {"gpipe", pipeline_schedule_kind::gpipe}, {"1f1b", pipeline_schedule_kind::one_f_one_b}};

}  // namespace heterograd::balance
