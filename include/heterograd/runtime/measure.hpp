#pragma once
// Each worker's speed where it will run, measured before a real-clock run without injected
// time (real_scale 0: its speeds are whatever the cores give), for a method that sizes its
// work by speed (local SGD's H_i proportional to speed, biased local SGD's):
//
//     auto tau = runtime::measure_seconds_per_gradient(runtime::where::threads{placement}, n,
//                                                      [&](std::size_t w) { one_gradient(w); });
//
// Every worker at once, on its own thread pinned to its placement (a process group: rank w
// measures worker w and the ranks share the times), calls gradient(w) for `window` wall
// seconds: its time per gradient is the window over the gradients it finished (a throughput: a
// worker sharing a core is slower by its share, which a single gradient shorter than a
// scheduler slice would not show). What the gradients draw from their streams is the caller's.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "heterograd/comm/types.hpp"
#include "heterograd/core/clock.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/runtime/live.hpp"
#include "heterograd/runtime/run.hpp"

namespace heterograd::runtime {

namespace detail {
/// Worker w's seconds per gradient: gradient(w) from `begin` until `window` seconds after it.
template <class Gradient>
double seconds_per_gradient(std::size_t w, Gradient& gradient, live_run::clock::time_point begin, double window) {
  using clock = live_run::clock;
  std::this_thread::sleep_until(begin);
  std::uint64_t done = 0;
  const auto end = begin + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(window));
  do {
    gradient(w);
    ++done;
  } while (clock::now() < end);
  return std::chrono::duration<double>(clock::now() - begin).count() / static_cast<double>(done);
}
}  // namespace detail

/// Threads: `workers` threads of this process at once, worker w pinned to
/// where.placement.workers[w] when given; `thread_init` first on each.
template <class Gradient>
std::vector<double> measure_seconds_per_gradient(const where::threads& where, std::size_t workers, Gradient gradient,
                                                 double window = 0.25, const std::function<void()>& thread_init = {}) {
  require(window > 0 && window < 3600, "measure.window", window, "must be in (0, 3600) seconds");
  where.placement.validate(workers, where.placement_key);
  std::vector<double> out(workers, 0.0);
  const auto begin = live_run::clock::now() + std::chrono::milliseconds(20);  // every thread started by then
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      if (thread_init) thread_init();
      where.placement.pin(w, where.placement_key);
      out[w] = detail::seconds_per_gradient(w, gradient, begin, window);
    });
  for (auto& t : threads) t.join();
  return out;
}

/// A process group: rank w measures worker w (pinned to where.placement.workers[w] when
/// given), on the calling thread, all ranks together; every rank gets every worker's time.
template <class Transport, class Gradient>
std::vector<double> measure_seconds_per_gradient(const where::mpi<Transport>& where, std::size_t workers,
                                                 Gradient gradient, double window = 0.25,
                                                 seconds timeout = seconds{real_clock_timeout_s}) {
  require(window > 0 && window < 3600, "measure.window", window, "must be in (0, 3600) seconds");
  const auto& t = where.communicator;
  require(t.size() >= 1 && static_cast<std::size_t>(t.size()) == workers, "where::mpi.communicator.size", t.size(),
          "must be the workers (rank w measures worker w)");
  where.placement.validate(workers, where.placement_key);
  const auto me = static_cast<std::size_t>(t.rank());
  where.placement.pin(me, where.placement_key);
  const comm::allreduce_options o{.op = comm::reduce_op::sum, .timeout = timeout};
  std::vector<double> out(workers, 0.0);
  t.allreduce(span<double>(out.data(), 1), o).wait();  // every rank here: they measure together
  out[me] = detail::seconds_per_gradient(me, gradient, live_run::clock::now(), window);
  t.allreduce(span<double>(out.data(), out.size()), o).wait();
  return out;
}

}  // namespace heterograd::runtime
