#pragma once
// Driving the synchronous policies for a given number of rounds.
//
// run_rounds(rt, policy, R, options [, evaluate]) runs R more rounds of a runtime::round_runtime
// (or any runtime with the same members: round(), engine().workers(), run(policy, compute,
// options, evaluate)) and stops right after round R's synchronisation. The runtime starts the
// next round's jobs before it stops; the policy defers that round's work to the round's end
// (replicas are private within a round, so the bits are the same) and a later run_rounds
// continues from there.

#include <cstdint>
#include <utility>

namespace heterograd::algorithms::sync {

template <class Runtime, class Policy, class Options>
auto run_rounds(Runtime& rt, Policy& policy, std::uint64_t rounds, Options options) {
  const std::uint64_t workers = rt.engine().workers();
  policy.limit_rounds(rt.round() + rounds);
  options.max_events = rounds * (workers + 1);  // n job ends and one barrier timer per round
  return rt.run(policy,
                [&policy](auto w, std::uint64_t round, std::uint64_t k, auto& out) {
                  policy.compute(w, round, k, out);
                },
                options);
}

template <class Runtime, class Policy, class Options, class Evaluate>
auto run_rounds(Runtime& rt, Policy& policy, std::uint64_t rounds, Options options,
                Evaluate&& evaluate) {
  const std::uint64_t workers = rt.engine().workers();
  policy.limit_rounds(rt.round() + rounds);
  options.max_events = rounds * (workers + 1);
  return rt.run(policy,
                [&policy](auto w, std::uint64_t round, std::uint64_t k, auto& out) {
                  policy.compute(w, round, k, out);
                },
                options, std::forward<Evaluate>(evaluate));
}

}  // namespace heterograd::algorithms::sync
