#pragma once
// An asynchronous module pipeline for decoupled local learning: module k runs on its own
// worker and receives activations from module k-1 through a bounded queue. Nothing flows
// backwards, so no module ever waits for a backward pass from above; a module waits only when
// its input queue is empty or its output queue is full (the bound caps activation memory).
//
// Because each module consumes its inputs in order and touches only its own parameters, the
// parameters after T batches equal those of the sequential loop (local_learning::step) on the
// same T batches, whatever the thread timing -- the property the tests check.
//
// Activations between two modules travel in buffers of the local_learning's memory (device
// buffers for a model on a device): each edge owns queue_capacity + 2 of them, recycled
// through a free list (one filling, queue_capacity queued, one being read), remade only when a
// batch has more rows than before. A module's output is copied into one by a kernel of the
// memory; the batches (next_batch, host data) enter module 0 by one upload each unless the
// memory's buffers are host vectors, which module 0 reads directly.
//
// Every wait has a deadline: a stuck or failed stage surfaces as an exception, never a hang.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "heterograd/algorithms/decoupled/local_learning.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/kernels/blend.hpp"
#include "heterograd/kernels/memory.hpp"

namespace heterograd::algorithms::decoupled {

/// Activations of one batch between two modules: inputs in a buffer of type X, host labels.
template <class X>
struct basic_activation_message {
  std::size_t iteration = 0;
  X x;
  std::vector<std::int32_t> y;
};
/// A batch on the host (what next_batch returns, and what the transport pipeline sends).
using activation_message = basic_activation_message<std::vector<float>>;

/// A bounded multi-producer/multi-consumer queue whose waits time out or abort.
template <class T>
class bounded_queue {
 public:
  explicit bounded_queue(std::size_t capacity) : capacity_(capacity) {
    require_positive("bounded_queue.capacity", capacity);
  }
  void push(T v, std::chrono::duration<double> timeout) {
    std::unique_lock lk(m_);
    if (!not_full_.wait_for(lk, timeout, [&] { return aborted_ || q_.size() < capacity_; }))
      throw std::runtime_error("heterograd: pipeline queue push timed out");
    if (aborted_) throw std::runtime_error("heterograd: pipeline aborted");
    q_.push_back(std::move(v));
    if (q_.size() > high_water_) high_water_ = q_.size();
    not_empty_.notify_one();
  }
  T pop(std::chrono::duration<double> timeout) {
    std::unique_lock lk(m_);
    if (!not_empty_.wait_for(lk, timeout, [&] { return aborted_ || !q_.empty(); }))
      throw std::runtime_error("heterograd: pipeline queue pop timed out");
    if (aborted_) throw std::runtime_error("heterograd: pipeline aborted");
    T v = std::move(q_.front());
    q_.pop_front();
    not_full_.notify_one();
    return v;
  }
  void abort() {
    std::lock_guard lk(m_);
    aborted_ = true;
    not_full_.notify_all();
    not_empty_.notify_all();
  }
  /// The most items the queue ever held (<= capacity: the activation-memory bound).
  std::size_t high_water() const {
    std::lock_guard lk(m_);
    return high_water_;
  }

 private:
  std::size_t capacity_;
  std::size_t high_water_ = 0;
  bool aborted_ = false;
  std::deque<T> q_;
  mutable std::mutex m_;
  std::condition_variable not_full_, not_empty_;
};

struct pipeline_options {
  std::size_t queue_capacity = 4;                      // batches in flight between two modules
  std::chrono::duration<double> timeout{60.0};         // per wait
  // Over a transport: the most rows a batch may have (the run's batch size); a receiving rank
  // refuses a header above it before it sizes anything. 0: any count whose floats are
  // addressable (a hostile previous rank can then make this one allocate that much).
  std::size_t max_rows = 0;
};

/// Per-module results of a pipeline run.
struct pipeline_report {
  std::vector<double> busy_seconds;   // per module: time spent in step_module
  std::vector<float> last_loss;       // per module: local loss of the last batch
};

namespace detail {
/// Module k's step on one batch (inputs x in the memory's space), timed into the report.
template <class Opt, class Chain, class Memory>
auto timed_step(local_learning<Opt, Chain, Memory>& ll, std::size_t k, const float* x, span<const std::int32_t> y,
                pipeline_report& report) {
  const auto start = std::chrono::steady_clock::now();
  const auto r = ll.step_module(k, x, y);
  report.busy_seconds[k] +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.last_loss[k] = r.loss;
  return r;
}
}  // namespace detail

/// Runs `iterations` batches through the modules of `ll`, one thread per module. `next_batch(t)`
/// returns batch t (host inputs and labels by value). Rethrows the first stage failure after
/// stopping the others.
template <class Opt, class Chain, class Memory>
pipeline_report run_pipeline(local_learning<Opt, Chain, Memory>& ll,
                             const std::function<activation_message(std::size_t)>& next_batch,
                             std::size_t iterations, pipeline_options opt = {}) {
  require_positive("pipeline.queue_capacity", opt.queue_capacity);
  require_positive("pipeline.timeout", opt.timeout.count());
  using buffer = typename Memory::template vector<float>;
  using message = basic_activation_message<buffer>;
  constexpr bool host_buffers = kernels::host_vectors_v<Memory>;
  const Memory& memory = ll.memory();
  const std::size_t K = ll.modules();
  std::vector<std::unique_ptr<bounded_queue<message>>> queues;
  std::vector<std::unique_ptr<bounded_queue<buffer>>> free;  // per edge: its recycled buffers
  for (std::size_t k = 0; k + 1 < K; ++k) {
    queues.push_back(std::make_unique<bounded_queue<message>>(opt.queue_capacity));
    free.push_back(std::make_unique<bounded_queue<buffer>>(opt.queue_capacity + 2));
    for (std::size_t i = 0; i < opt.queue_capacity + 2; ++i) free.back()->push(buffer{}, opt.timeout);
  }
  pipeline_report report;
  report.busy_seconds.assign(K, 0.0);
  report.last_loss.assign(K, 0.0f);
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto fail = [&](std::exception_ptr e) {
    std::lock_guard lk(error_mutex);
    if (!first_error) first_error = e;
    for (auto& q : queues) q->abort();
    for (auto& q : free) q->abort();
  };
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < K; ++k) {
    threads.emplace_back([&, k] {
      try {
        buffer input{};  // module 0: the batch uploaded (memories without host vectors)
        for (std::size_t t = 0; t < iterations; ++t) {
          message in;
          if (k == 0) {
            activation_message batch = next_batch(t);
            ll.check_input("pipeline.batch.x", batch.x.size(), batch.y.size());
            in.iteration = batch.iteration;
            in.y = std::move(batch.y);
            if constexpr (host_buffers)
              in.x = std::move(batch.x);
            else
              memory.upload(std::span<const float>(batch.x), kernels::fit(memory, input, batch.x.size()));
          } else {
            in = queues[k - 1]->pop(opt.timeout);
          }
          const float* x = k == 0 && !host_buffers ? kernels::view(memory, input).data() : kernels::view(memory, in.x).data();
          const auto r = detail::timed_step(ll, k, x, span<const std::int32_t>(in.y), report);
          if (k > 0) free[k - 1]->push(std::move(in.x), opt.timeout);  // read: back to its edge
          if (k + 1 < K) {
            message out{in.iteration, free[k]->pop(opt.timeout), std::move(in.y)};
            const auto to = kernels::fit(memory, out.x, r.output.size());
            memory.run(to.size(), [&](const auto& policy) { kernels::copy(policy, r.output, to); });
            queues[k]->push(std::move(out), opt.timeout);
          }
        }
      } catch (...) {
        fail(std::current_exception());
      }
    });
  }
  for (auto& th : threads) th.join();
  if (first_error) std::rethrow_exception(first_error);
  return report;
}

}  // namespace heterograd::algorithms::decoupled
