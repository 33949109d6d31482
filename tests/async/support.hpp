#pragma once
// Shared pieces of the asynchronous-SGD tests: a control handle that only records (to drive
// policies by hand), and sim runs of a policy on heterogeneous scalar quadratics (E1 of
// docs/references.md) and on noisy problems.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "heterograd/algorithms/async.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/runtime/sim.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace async_test {

namespace hg = heterograd;
namespace async = heterograd::algorithms::async;
namespace sim = heterograd::sim;
namespace hr = heterograd::runtime;

/// A control handle that records what a policy asked for (no runtime behind it).
struct ctl {
  std::vector<std::uint64_t> applied_delays, buffered_delays, discarded_delays;
  std::vector<sim::worker_id> held, released, interrupted, restarted;
  std::vector<bool> wait_state = std::vector<bool>(64, false);
  bool busy(sim::worker_id) const { return false; }
  bool waiting(sim::worker_id w) const { return wait_state[w]; }
  std::uint64_t version_of(sim::worker_id) const { return 0; }
  double now() const { return 0; }
  void applied(sim::worker_id, std::uint64_t s) { applied_delays.push_back(s); }
  void buffered(sim::worker_id, std::uint64_t s) { buffered_delays.push_back(s); }
  void discarded(sim::worker_id, std::uint64_t s) { discarded_delays.push_back(s); }
  void hold(sim::worker_id w) {
    held.push_back(w);
    wait_state[w] = true;
  }
  void release(sim::worker_id w) {
    released.push_back(w);
    wait_state[w] = false;
  }
  void interrupt(sim::worker_id w) { interrupted.push_back(w); }
  void restart(sim::worker_id w) { restarted.push_back(w); }
  std::size_t outcomes() const {
    return applied_delays.size() + buffered_delays.size() + discarded_delays.size();
  }
};

inline hr::arrival arrival(sim::worker_id w, std::uint64_t version, double start = 0,
                            double time = 1) {
  return hr::arrival{w, version, 0, start, time};
}

/// Sum over outcomes of the recorder = every delivered job: nothing arrives unrecorded.
inline std::uint64_t recorded_outcomes(const sim::recorder& r) {
  return r.count(sim::update_outcome::applied) + r.count(sim::update_outcome::buffered) +
         r.count(sim::update_outcome::discarded);
}
inline std::uint64_t finished_jobs(const sim::recorder& r) {
  std::uint64_t f = 0;
  for (sim::worker_id w = 0; w < r.workers(); ++w) f += r.worker(w).jobs_finished;
  return f;
}
inline std::uint64_t cancelled_jobs(const sim::recorder& r) {
  std::uint64_t f = 0;
  for (sim::worker_id w = 0; w < r.workers(); ++w) f += r.worker(w).jobs_cancelled;
  return f;
}

/// E1 (docs/references.md): worker i owns f_i(x) = (x - c_i)^2 / 2 and takes tau_i per gradient.
/// Runs `p` for `horizon`, then one more `window` (a common period of the taus) averaging x
/// over the jobs started in it, each weighted by weight(worker) (the step weight the policy
/// gives that worker: on a periodic orbit, sum over one period of w_i (x_start - c_i) = 0,
/// so this weighted mean is the policy's fixed point exactly).
template <class Policy, class Weight>
double e1_fixed_point(Policy& p, const std::vector<double>& c, const std::vector<double>& tau,
                      double horizon, double window, Weight weight) {
  hr::async_runtime<std::vector<double>, sim::fixed_times> rt(c.size(), sim::fixed_times(tau));
  double sum = 0, wsum = 0;
  bool watch = false;
  auto grad = [&](sim::worker_id w, std::uint64_t, std::uint64_t, std::vector<double>& g) {
    const double x = p.params()[0];
    if (watch) {
      sum += weight(w) * x;
      wsum += weight(w);
    }
    g.assign(1, x - c[w]);
  };
  hr::run_options opt;
  opt.horizon = horizon;
  rt.run(p, grad, opt);
  watch = true;
  opt.horizon = horizon + window;
  rt.run(p, grad, opt);
  return sum / wsum;
}

}  // namespace async_test
