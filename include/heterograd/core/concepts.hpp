#pragma once
// Concepts of the core layer. Each has a positive and a negative archetype in
// heterograd/testing/core_archetypes.hpp.

#include <concepts>
#include <type_traits>

#include "heterograd/core/clock.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd {

/// A clock: a cheap copyable handle whose now() is seconds since its own origin.
template <class C>
concept clock = std::copyable<C> && requires(const C& c) {
  { c.now() } -> std::convertible_to<seconds>;
};

/// A flat buffer view in a known memory space.
template <class S>
concept flat_span = std::is_trivially_copyable_v<S> && requires(const S& s) {
  typename S::memory_space;
  typename S::value_type;
  { s.data() } -> std::convertible_to<const typename S::value_type*>;
  { s.size() } -> std::convertible_to<std::size_t>;
} && is_memory_space_v<typename S::memory_space>;

static_assert(clock<steady_clock> && clock<manual_clock>);
static_assert(flat_span<span<float>> && flat_span<span<const double, device_space>>);

}  // namespace heterograd
