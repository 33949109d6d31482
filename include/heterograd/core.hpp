#pragma once
// The core layer: spans with memory spaces, execution policies, errors, RNG, clocks.
#include "heterograd/core/clock.hpp"
#include "heterograd/core/concepts.hpp"
#include "heterograd/core/config.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/core/span.hpp"
