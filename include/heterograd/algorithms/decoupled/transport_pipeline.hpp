#pragma once
// The module pipeline over a transport: module k runs on rank k (inproc threads or MPI ranks).
// Activations travel forward as three tagged messages per batch (header: the batch's position
// in the run, its iteration and its rows, each checked by the receiver before it sizes
// anything, the rows against pipeline_options::max_rows when it is set; inputs; labels);
// the only backward traffic is a one-integer credit per consumed batch, which bounds the
// batches in flight between two ranks to `queue_capacity` (flow control, not a backward
// pass: no module waits for gradients from above). Every wait carries the options' timeout,
// so a lost rank surfaces as the transport's timeout or abort error.
//
// Each rank holds a full local_learning object but updates only its own module; the result on
// rank k's module slice equals the sequential loop's bitwise. global_step_over() is PGL's
// global step over the ranks; gather_modules() collects every module (and head) on rank 0.
//
// The transports that carry tagged messages (inproc, MPI) take host buffers. A local_learning
// whose memory's buffers are not host vectors (a device, guarded memory) is staged explicitly,
// as eager-SGD's rounds are: each rank uploads the inputs it receives (or its batch) into one
// buffer of its memory and downloads its module's output into one host vector before sending
// it, both made once and grown only for a larger batch: one upload and one download of the
// activations per batch, nothing else; gather_modules downloads a module and head on its
// owner and uploads them on rank 0.

#include <cstddef>
#include <string>
#include <cstdint>
#include <functional>
#include <span>
#include <type_traits>
#include <vector>

#include "heterograd/algorithms/decoupled/local_learning.hpp"
#include "heterograd/algorithms/decoupled/pipeline.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/kernels/memory.hpp"

namespace heterograd::algorithms::decoupled {

namespace detail {
enum pipeline_tag : int { header_tag = 7100, x_tag = 7101, y_tag = 7102, credit_tag = 7103,
                          gather_tag = 7104, gather_head_tag = 7105 };
/// A row count from another rank, checked before anything is sized by it: rows x width floats
/// must be a size this process can name, and at most `max_rows` (the option named
/// `max_rows_key`) when that is not 0.
inline void check_rows(const std::string& key, std::int64_t rows, std::size_t width, std::size_t max_rows,
                       const std::string& max_rows_key) {
  require(rows > 0 && static_cast<std::uint64_t>(rows) <= ~std::size_t{0} / sizeof(float) / width, key, rows,
          "must be > 0 and rows x input width floats addressable");
  require(max_rows == 0 || static_cast<std::uint64_t>(rows) <= max_rows, key, rows,
          "must be at most " + max_rows_key + " (" + std::to_string(max_rows) + ")");
}
inline void check_rows(const std::string& key, std::int64_t rows, std::size_t width, const pipeline_options& opt) {
  check_rows(key, rows, width, opt.max_rows, "pipeline_options.max_rows");
}
/// Receives exactly `buf` from `peer` (comm refuses a message of another size or type and
/// writes nothing); a refusal is rethrown with the field in front ("pipeline.x: message from
/// rank 0 ... has 4 bytes ...").
template <class Transport, class T>
void receive_field(const Transport& t, span<T> buf, int peer, int tag, const comm::recv_options& ro,
                   const char* field) {
  try {
    t.recv(buf, peer, tag, ro).wait();
  } catch (const comm::size_error& e) {
    throw comm::size_error(field, e);
  } catch (const comm::mismatch_error& e) {
    throw comm::mismatch_error(std::string(field) + ": " + e.what(), e.source());
  }
}
/// Rank k runs module k: the transport has one rank per module.
template <class Transport, class LL>
void check_one_rank_per_module(const Transport& t, const LL& ll) {
  require(static_cast<std::size_t>(t.size()) == ll.modules(), "pipeline.transport.size", t.size(),
          "must equal the number of modules (" + std::to_string(ll.modules()) + ")");
}
}  // namespace detail

/// Runs `iterations` batches through the pipeline; rank k of `t` runs module k (t.size() must
/// equal the number of modules). Only rank 0 calls `next_batch`.
template <class Transport, class Opt, class Chain, class Memory>
pipeline_report run_pipeline_over(const Transport& t, local_learning<Opt, Chain, Memory>& ll,
                                  const std::function<activation_message(std::size_t)>& next_batch,
                                  std::size_t iterations, pipeline_options opt = {}) {
  detail::check_one_rank_per_module(t, ll);
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
  using buffer = typename Memory::template vector<float>;
  constexpr bool staged = !kernels::host_vectors_v<Memory>;
  const Memory& memory = ll.memory();
  buffer input{};              // staged: this batch's inputs in the memory
  std::vector<float> output;   // staged: the module's output on the host, to be sent
  for (std::size_t it = 0; it < iterations; ++it) {
    activation_message in;
    if (k == 0) {
      in = next_batch(it);
      ll.check_input("pipeline.batch.x", in.x.size(), in.y.size());
    } else {
      std::int64_t header[3] = {0, 0, 0};  // position in this run, the batch's iteration, rows
      detail::receive_field(t, span<std::int64_t>(header, 3), prev, detail::header_tag, ro, "pipeline.header");
      // The previous rank's word, checked before it sizes anything: batches arrive in order,
      // and rows x width floats must be a size this process can name.
      require(header[0] == static_cast<std::int64_t>(it), "pipeline.header.position", header[0],
              "must be the next batch of the run (" + std::to_string(it) + ")");
      detail::check_rows("pipeline.header.rows", header[2], ll.chain().input_width(k), opt);
      const auto rows = static_cast<std::size_t>(header[2]);
      in.iteration = static_cast<std::size_t>(header[1]);
      in.x.resize(rows * ll.chain().input_width(k));
      in.y.resize(rows);
      // Exactly the header's rows of activations and labels: a longer, shorter or other-typed
      // message is refused by the transport before a byte of it is written.
      detail::receive_field(t, span<float>(in.x), prev, detail::x_tag, ro, "pipeline.x");
      detail::receive_field(t, span<std::int32_t>(in.y), prev, detail::y_tag, ro, "pipeline.y");
      t.send(span<const std::int64_t>(&credit, 1), prev, detail::credit_tag, so).wait();
    }
    const float* x = in.x.data();
    if constexpr (staged) {
      const auto v = kernels::fit(memory, input, in.x.size());
      memory.upload(std::span<const float>(in.x), v);
      x = v.data();
    }
    const auto r = detail::timed_step(ll, k, x, span<const std::int32_t>(in.y), report);
    if (k + 1 < K) {
      if (sent - credits >= opt.queue_capacity) {  // wait for the consumer to free a slot
        detail::receive_field(t, span<std::int64_t>(&credit, 1), next, detail::credit_tag, ro, "pipeline.credit");
        ++credits;
      }
      const std::int64_t header[3] = {static_cast<std::int64_t>(it), static_cast<std::int64_t>(in.iteration),
                                      static_cast<std::int64_t>(in.y.size())};
      // Sends complete when buffered or received; waiting keeps the buffers alive until then.
      t.send(span<const std::int64_t>(header, 3), next, detail::header_tag, so).wait();
      if constexpr (staged) {
        output.resize(r.output.size());
        memory.download(r.output, std::span<float>(output));
        t.send(span<const float>(output), next, detail::x_tag, so).wait();
      } else {
        t.send(span<const float>(r.output), next, detail::x_tag, so).wait();
      }
      t.send(span<const std::int32_t>(in.y), next, detail::y_tag, so).wait();
      ++sent;
    }
  }
  for (; credits < sent; ++credits)  // leave no message behind
    detail::receive_field(t, span<std::int64_t>(&credit, 1), next, detail::credit_tag, ro, "pipeline.credit");
  return report;
}

/// PGL's global step over a transport (rank k owns module k, as in run_pipeline_over):
/// backpropagation through every module needs every slice, so rank 0 broadcasts its host batch
/// `x`, `y` (its row count first, which every rank checks as a pipeline header's before it
/// sizes anything; then inputs and labels, into the others' `x`, `y`), each rank k broadcasts
/// module k's slice, and every rank takes the same end-to-end step on the same parameters and
/// batch. Rank k's own slice is then what the sequential loop's global step makes of it,
/// stepped by its own optimizer; the other slices it computed are overwritten by their owners'
/// at the next global step before they are read, and gather_modules collects the owners'.
/// A memory whose buffers are not host vectors is staged as above: rank k downloads its slice
/// before broadcasting it and uploads the K - 1 others it receives, and every rank uploads the
/// batch into one buffer of its memory, made for this step. Returns the global loss.
template <class Transport, class Opt, class Chain, class Memory>
float global_step_over(const Transport& t, local_learning<Opt, Chain, Memory>& ll, std::vector<float>& x,
                       std::vector<std::int32_t>& y, pipeline_options opt = {}) {
  detail::check_one_rank_per_module(t, ll);
  if (t.rank() == 0) ll.check_input("pipeline.batch.x", x.size(), y.size());
  comm::broadcast_options bo;
  bo.timeout = opt.timeout;
  std::int64_t rows = t.rank() == 0 ? static_cast<std::int64_t>(y.size()) : 0;
  t.broadcast(span<std::int64_t>(&rows, 1), 0, bo).wait();
  const std::size_t width = ll.chain().input_width(0);
  detail::check_rows("pipeline.global_step.rows", rows, width, opt);
  if (t.rank() != 0) {
    x.resize(static_cast<std::size_t>(rows) * width);
    y.resize(static_cast<std::size_t>(rows));
  }
  t.broadcast(span<float>(x), 0, bo).wait();
  t.broadcast(span<std::int32_t>(y), 0, bo).wait();
  constexpr bool staged = !kernels::host_vectors_v<Memory>;
  const Memory& memory = ll.memory();
  for (std::size_t k = 0; k < ll.modules(); ++k) {
    const auto slice = ll.module_params(k);
    if constexpr (staged) {
      const bool mine = k == static_cast<std::size_t>(t.rank());
      std::vector<float> h = mine ? memory.download(slice) : std::vector<float>(slice.size());
      t.broadcast(span<float>(h), static_cast<int>(k), bo).wait();
      if (!mine) memory.upload(std::span<const float>(h), slice);
    } else {
      t.broadcast(slice, static_cast<int>(k), bo).wait();
    }
  }
  if constexpr (staged) {
    const auto input = memory.template upload<float>(std::span<const float>(x));
    return ll.global_step(kernels::cview(memory, input).data(), span<const std::int32_t>(y));
  } else {
    return ll.global_step(x.data(), span<const std::int32_t>(y));
  }
}

/// Rank 0 receives every module's slice and head from its owner; the others send theirs
/// (staged through host vectors as above).
template <class Transport, class Opt, class Chain, class Memory>
void gather_modules(const Transport& t, local_learning<Opt, Chain, Memory>& ll, pipeline_options opt = {}) {
  comm::send_options so;
  comm::recv_options ro;
  so.timeout = ro.timeout = opt.timeout;
  const std::size_t K = ll.modules();
  constexpr bool staged = !kernels::host_vectors_v<Memory>;
  const Memory& memory = ll.memory();
  auto receive = [&](auto to, int from, int tag) {
    if constexpr (staged) {
      std::vector<float> h(to.size());
      detail::receive_field(t, span<float>(h), from, tag, ro, "pipeline.gather");
      memory.upload(std::span<const float>(h), to);
    } else {
      detail::receive_field(t, to, from, tag, ro, "pipeline.gather");
    }
  };
  auto send = [&](auto from, int tag) {
    if constexpr (staged) {
      const std::vector<float> h = memory.download(from);
      t.send(span<const float>(h), 0, tag, so).wait();
    } else {
      t.send(span<const float>(from), 0, tag, so).wait();
    }
  };
  if (t.rank() == 0) {
    for (std::size_t k = 1; k < K; ++k) {
      receive(ll.module_params(k), static_cast<int>(k), detail::gather_tag);
      if (k + 1 < K) receive(ll.head_params_mut(k), static_cast<int>(k), detail::gather_head_tag);
    }
  } else {
    const std::size_t k = static_cast<std::size_t>(t.rank());
    send(ll.module_params(k), detail::gather_tag);
    if (k + 1 < K) send(ll.head_params_mut(k), detail::gather_head_tag);
  }
}

}  // namespace heterograd::algorithms::decoupled
