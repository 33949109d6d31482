#pragma once
// What decoupled training needs from an optimizer: a stateful stepper over one flat slice in
// the parameters' memory space. optim's transformations become steppers through
// optim_stepper (state held by value, made and updated through an algorithm memory).

#include <concepts>
#include <cstddef>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "heterograd/core/span.hpp"
#include "heterograd/kernels/memory.hpp"
#include "heterograd/optim/concepts.hpp"
#include "heterograd/optim/state.hpp"

namespace heterograd::algorithms::decoupled {

/// `o.step(params, grads)` updates `params` (memory space Space) in place from `grads` and the
/// stepper's own state.
template <class O, class Space = host_space>
concept module_optimizer = std::copyable<O> && requires(O& o, span<float, Space> p, span<const float, Space> g) {
  o.step(p, g);
};

/// Any optim:: optimizer as a stepper: the state is created on the first step (it needs the
/// slice's size) and kept by value; every pass runs through `Memory` (kernels/memory.hpp) with
/// its policy, on spans of its space. One core by default (serial_host_memory): module updates
/// are small and already run concurrently, one thread per module.
template <optim::optimizer Opt, kernels::algorithm_memory Memory = kernels::serial_host_memory>
class optim_stepper {
 public:
  using memory_space = typename Memory::memory_space;
  using state_type = decltype(std::declval<const Opt&>().init(
      std::declval<const typename Memory::policy_type&>(), std::declval<span<float, memory_space>>()));

  explicit optim_stepper(Opt opt, Memory memory = {}) : opt_(std::move(opt)), memory_(std::move(memory)) {}
  void step(span<float, memory_space> p, span<const float, memory_space> g) {
    memory_.run(p.size(), [&](const auto& policy) {
      if (!state_) state_ = opt_.init(policy, p);
      opt_.update(policy, g, *state_, p);
    });
  }
  const std::optional<state_type>& state() const { return state_; }
  /// Checks a restored state against a slice of n parameters (the optimizer's own state
  /// check: kind, slot count and sizes), std::invalid_argument naming `where`; nothing to
  /// check before the first step.
  void check(std::size_t n, std::string_view where) const
    requires requires(const Opt& o, const state_type& st) { o.check_state(st, n, where); }
  {
    if (state_) opt_.check_state(*state_, n, where);
  }
  /// Checkpointing: the optimizer state (none before the first step); `ar(...)` writes or
  /// reads it. The optimizer itself is configuration, rebuilt by the caller.
  template <class Archive>
  void serialize(Archive& ar) {
    // Through the memory, so that a state read here (on a device) takes its slots from the
    // memory's allocator as one made by a step does (kernels/state_resource.hpp).
    memory_.run(0, [&](const auto&) { ar(state_); });
  }

 private:
  Opt opt_;
  Memory memory_;
  std::optional<state_type> state_;
};

}  // namespace heterograd::algorithms::decoupled
