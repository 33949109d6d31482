#pragma once
// The optim layer: Optax-style optimizers with explicit state values, schedules and outer
// optimizers, over the fused kernels of the kernels layer.
#include "heterograd/optim/average.hpp"
#include "heterograd/optim/capturable.hpp"
#include "heterograd/optim/combinators.hpp"
#include "heterograd/optim/concepts.hpp"
#include "heterograd/optim/loss_scale.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/optim/outer.hpp"
#include "heterograd/optim/schedule.hpp"
#include "heterograd/optim/state.hpp"
#include "heterograd/optim/transforms.hpp"
