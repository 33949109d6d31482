#pragma once
// The module pipeline over a transport: module k runs on rank k (inproc threads or MPI ranks).
// Activations travel forward as three tagged messages per batch (header, inputs, labels);
// the only backward traffic is a one-integer credit per consumed batch, which bounds the
// batches in flight between two ranks to `queue_capacity` (flow control, not a backward
// pass: no module waits for gradients from above). Every wait carries the options' timeout,
// so a lost rank surfaces as the transport's timeout or abort error.
//
// Each rank holds a full local_learning object but updates only its own module; the result on
// rank k's module slice equals the sequential loop's bitwise. gather_modules() collects every
// module (and head) on rank 0.

#include <cstddef>
#include <string>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <vector>

#include "heterograd/algorithms/decoupled/local_learning.hpp"
#include "heterograd/algorithms/decoupled/pipeline.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::algorithms::decoupled {

namespace detail {
enum pipeline_tag : int { header_tag = 7100, x_tag = 7101, y_tag = 7102, credit_tag = 7103,
                          gather_tag = 7104, gather_head_tag = 7105 };
}  // namespace detail

/// Runs `iterations` batches through the pipeline; rank k of `t` runs module k (t.size() must
/// equal the number of modules). Only rank 0 calls `next_batch`.
template <class Transport, class Opt, class Chain, class Memory>
pipeline_report run_pipeline_over(const Transport& t, local_learning<Opt, Chain, Memory>& ll,
                                  const std::function<activation_message(std::size_t)>& next_batch,
                                  std::size_t iterations, pipeline_options opt = {}) {
  static_assert(std::is_same_v<typename Memory::memory_space, host_space>,
                "the transport pipeline sends activations from host memory: a local_learning in device memory "
                "runs its modules on threads (run_pipeline) or through step() / step_module()");
  require(static_cast<std::size_t>(t.size()) == ll.modules(), "pipeline.transport.size", t.size(),
          "must equal the number of modules (" + std::to_string(ll.modules()) + ")");
  require_positive("pipeline.queue_capacity", opt.queue_capacity);
  const std::size_t k = static_cast<std::size_t>(t.rank()), K = ll.modules();
  const int prev = t.rank() - 1, next = t.rank() + 1;
  comm::send_options so;
  comm::recv_options ro;
  so.timeout = ro.timeout = opt.timeout;
  pipeline_report report;
  report.busy_seconds.assign(K, 0.0);
  report.last_loss.assign(K, 0.0f);
  std::size_t sent = 0, credits = 0;
  std::int64_t credit = 0;
  for (std::size_t it = 0; it < iterations; ++it) {
    activation_message in;
    if (k == 0) {
      in = next_batch(it);
    } else {
      std::int64_t header[2] = {0, 0};  // iteration, rows
      t.recv(span<std::int64_t>(header, 2), prev, detail::header_tag, ro).wait();
      const auto rows = static_cast<std::size_t>(header[1]);
      in.iteration = static_cast<std::size_t>(header[0]);
      in.x.resize(rows * ll.chain().input_width(k));
      in.y.resize(rows);
      t.recv(span<float>(in.x), prev, detail::x_tag, ro).wait();
      t.recv(span<std::int32_t>(in.y), prev, detail::y_tag, ro).wait();
      t.send(span<const std::int64_t>(&credit, 1), prev, detail::credit_tag, so).wait();
    }
    const auto r = detail::timed_step(ll, k, in.x.data(), span<const std::int32_t>(in.y), report);
    if (k + 1 < K) {
      if (sent - credits >= opt.queue_capacity) {  // wait for the consumer to free a slot
        t.recv(span<std::int64_t>(&credit, 1), next, detail::credit_tag, ro).wait();
        ++credits;
      }
      const std::int64_t header[2] = {static_cast<std::int64_t>(in.iteration),
                                      static_cast<std::int64_t>(in.y.size())};
      // Sends complete when buffered or received; waiting keeps the buffers alive until then.
      t.send(span<const std::int64_t>(header, 2), next, detail::header_tag, so).wait();
      t.send(span<const float>(r.output), next, detail::x_tag, so).wait();
      t.send(span<const std::int32_t>(in.y), next, detail::y_tag, so).wait();
      ++sent;
    }
  }
  for (; credits < sent; ++credits)  // leave no message behind
    t.recv(span<std::int64_t>(&credit, 1), next, detail::credit_tag, ro).wait();
  return report;
}

/// Rank 0 receives every module's slice and head from its owner; the others send theirs.
template <class Transport, class Opt, class Chain, class Memory>
void gather_modules(const Transport& t, local_learning<Opt, Chain, Memory>& ll, pipeline_options opt = {}) {
  comm::send_options so;
  comm::recv_options ro;
  so.timeout = ro.timeout = opt.timeout;
  const std::size_t K = ll.modules();
  if (t.rank() == 0) {
    for (std::size_t k = 1; k < K; ++k) {
      t.recv(ll.module_params(k), static_cast<int>(k), detail::gather_tag, ro).wait();
      if (k + 1 < K)
        t.recv(ll.head_params_mut(k), static_cast<int>(k), detail::gather_head_tag, ro).wait();
    }
  } else {
    const std::size_t k = static_cast<std::size_t>(t.rank());
    t.send(span<const float>(ll.module_params(k)), 0, detail::gather_tag, so).wait();
    if (k + 1 < K)
      t.send(span<const float>(ll.head_params_mut(k)), 0, detail::gather_head_tag, so).wait();
  }
}

}  // namespace heterograd::algorithms::decoupled
