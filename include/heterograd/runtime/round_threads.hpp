#pragma once
// The threads runtime of the round methods: one real thread per worker over the inproc
// transport (comm::inproc::spawn), each running the per-worker helper of
// algorithms/sync/workers.hpp on its replica of the SAME policy object the simulator drives
// (rounds.hpp):
//
//     sync::local_sgd<float, optim::sgd, Grad> p(n, x0, optim::sgd({.lr = 0.1}), grad, b, cfg);
//     runtime::run_threads(p, 100);           // 100 rounds on n threads
//     p.params(w);  p.optimizer_state(w);  p.rounds();
//
// The gradient oracle is called concurrently for different workers (never twice at once for
// one worker): give each worker its own model scratch. With equal inputs the threads runtime
// and the sim runtimes give bitwise-identical replicas (the averages are the inproc weighted
// allreduce in rank order, which is the simulated order; tests/sync). A worker that throws
// aborts the others (their collectives fail instead of waiting) and the first error is
// rethrown here.

#include <cstdint>

#include "heterograd/algorithms/sync/workers.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/comm/inproc_partial.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/runtime/rounds.hpp"

namespace heterograd::runtime {

/// Runs `rounds` more rounds (SelSync: steps) of `p` on p.workers() threads.
template <per_rank_round_policy Policy>
void run_threads(Policy& p, std::uint64_t rounds, algorithms::sync::worker_options o = {}) {
  o.validate();
  const auto start = p.shared_state();  // read before any worker moves
  comm::inproc::spawn(static_cast<int>(p.workers()), [&](comm::inproc::communicator c) {
    run_worker(p, c, rounds, start, o, c.rank() == 0);
  });
}

/// A method that ends itself (eager-SGD) on p.workers() threads over the inproc partial
/// allreduce, until its configured rounds (eager.rounds) are over or the ranks vote to stop
/// (o.stop).
template <partial_round_method Policy>
void run_threads(Policy& p, algorithms::sync::worker_options o = {}) {
  o.validate();
  (void)p.partial_setup(static_cast<bool>(o.stop));  // refused before any thread starts
  comm::inproc::spawn(static_cast<int>(p.workers()), [&](comm::inproc::communicator c) {
    run_worker(p, c, o, c.rank() == 0);
  });
}

}  // namespace heterograd::runtime
