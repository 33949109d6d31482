// heterograd.sim's bindings in their own translation unit: the simulator's policies and
// runtime compile beside module.cpp's kernels (parallel builds), not after them.
#include "sim.hpp"

namespace hgpy::simpy {
void bind_sim_module(nanobind::module_& m) { bind_sim(m); }
}  // namespace hgpy::simpy
