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
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "heterograd/algorithms/decoupled/local_learning.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::algorithms::decoupled {

/// Activations of one batch between two modules.
struct activation_message {
  std::size_t iteration = 0;
  std::vector<float> x;
  std::vector<std::int32_t> y;
};

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
};

/// Per-module results of a pipeline run.
struct pipeline_report {
  std::vector<double> busy_seconds;   // per module: time spent in step_module
  std::vector<float> last_loss;       // per module: local loss of the last batch
};

namespace detail {
/// Module k's step on one batch, timed into the report.
template <class Opt, class Chain, class Memory>
module_step timed_step(local_learning<Opt, Chain, Memory>& ll, std::size_t k, const activation_message& in,
                       pipeline_report& report) {
  static_assert(std::is_same_v<typename Memory::memory_space, host_space>,
                "the module pipelines carry activations in host messages: a local_learning in device memory "
                "runs its modules through step() / step_module() on its own stream");
  const auto start = std::chrono::steady_clock::now();
  const auto r = ll.step_module(k, in.x.data(), in.y);
  report.busy_seconds[k] +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.last_loss[k] = r.loss;
  return r;
}
}  // namespace detail

/// Runs `iterations` batches through the modules of `ll`, one thread per module. `next_batch(t)`
/// returns batch t (inputs and labels by value). Rethrows the first stage failure after
/// stopping the others.
template <class Opt, class Chain, class Memory>
pipeline_report run_pipeline(local_learning<Opt, Chain, Memory>& ll,
                             const std::function<activation_message(std::size_t)>& next_batch,
                             std::size_t iterations, pipeline_options opt = {}) {
  require_positive("pipeline.queue_capacity", opt.queue_capacity);
  require_positive("pipeline.timeout", opt.timeout.count());
  const std::size_t K = ll.modules();
  std::vector<std::unique_ptr<bounded_queue<activation_message>>> queues;
  for (std::size_t k = 0; k + 1 < K; ++k)
    queues.push_back(std::make_unique<bounded_queue<activation_message>>(opt.queue_capacity));
  pipeline_report report;
  report.busy_seconds.assign(K, 0.0);
  report.last_loss.assign(K, 0.0f);
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto fail = [&](std::exception_ptr e) {
    std::lock_guard lk(error_mutex);
    if (!first_error) first_error = e;
    for (auto& q : queues) q->abort();
  };
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < K; ++k) {
    threads.emplace_back([&, k] {
      try {
        for (std::size_t t = 0; t < iterations; ++t) {
          activation_message in = k == 0 ? next_batch(t) : queues[k - 1]->pop(opt.timeout);
          const auto r = detail::timed_step(ll, k, in, report);
          if (k + 1 < K) {
            activation_message out{in.iteration, std::vector<float>(r.output.begin(), r.output.end()),
                                   std::move(in.y)};
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
