#pragma once
// Minimal archetypes for the core concepts: copy one to start a custom clock or buffer view.

#include <cstddef>

#include "heterograd/core/concepts.hpp"

namespace heterograd::testing {

/// The least a clock must provide.
struct clock_archetype {
  seconds now() const { return seconds{0}; }
};

/// Not a clock: now() returns a raw number without a unit.
struct not_a_clock {
  double now() const { return 0; }
};
struct not_a_clock_no_now {};

/// The least a flat span must provide.
struct flat_span_archetype {
  using memory_space = host_space;
  using value_type = float;
  float* data() const { return nullptr; }
  std::size_t size() const { return 0; }
};

/// Not a flat span: no memory space.
struct not_a_flat_span {
  using value_type = float;
  float* data() const { return nullptr; }
  std::size_t size() const { return 0; }
};

static_assert(clock<clock_archetype>);
static_assert(!clock<not_a_clock>);
static_assert(!clock<not_a_clock_no_now>);
static_assert(flat_span<flat_span_archetype>);
static_assert(!flat_span<not_a_flat_span>);

}  // namespace heterograd::testing
