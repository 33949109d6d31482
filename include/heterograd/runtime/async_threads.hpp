#pragma once
// The asynchronous threads runtime: one server and n worker threads in this process over the
// inproc transport (heterograd/comm/inproc.hpp), driving the same policy objects as the
// simulator.
//
//   auto s = runtime::run_threads<float>(policy, compute, {.max_updates = 10000});
//
// compute(worker, version, job_index, span<const T> params, std::vector<T>& grads) runs on
// the worker threads, concurrently (it must be thread-safe), on the copy of the model the
// worker pulled. The policy runs on the calling thread only. With a worker-time model,
// options.time_scale > 0 paces workers (a job lasts scale x the model's time; pacing.hpp) and
// options.order = arrival_order::virtual_time hands results to the policy in the simulator's
// order, so a deterministic policy gives bitwise the parameters runtime::async_runtime gives
// (see server.hpp). The summary carries each worker's report (where its wall time went).

#include <cstddef>
#include <utility>
#include <vector>

#include "heterograd/comm/inproc.hpp"
#include "heterograd/runtime/server.hpp"

namespace heterograd::runtime {

template <class T, class Policy, class Compute, optional_time_model Model = no_time_model>
  requires server_policy<Policy, T,
                         detail::remote_server<T, Policy, comm::inproc::communicator, Model>>
remote_summary run_threads(Policy& policy, Compute&& compute, const remote_options& o = {},
                           const Model& model = {}) {
  o.validate();
  require(o.server_rank == 0, "remote_options.server_rank", o.server_rank,
          "must be 0 for the threads runtime (the calling thread serves)");
  remote_summary out;
  std::vector<worker_report> reports(policy.workers());
  comm::inproc::spawn(static_cast<int>(policy.workers()) + 1, [&](comm::inproc::communicator c) {
    if (c.rank() == 0) {
      out = serve<T>(policy, c, o, model);
    } else {
      reports[static_cast<std::size_t>(c.rank() - 1)] = work<T>(c, policy.dim(), compute, o, model);
    }
  });
  out.workers = std::move(reports);
  return out;
}

}  // namespace heterograd::runtime
