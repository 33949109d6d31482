#pragma once
// Asynchronous training on one shared parameter buffer (threads of one process).
//
//   layerwise_async  PD-ASGD (#14, Fokam et al.): forward threads run forward passes on a
//                    snapshot of the shared weights and hand the activations to backward threads
//                    through a bounded queue (more forward than backward threads, since a
//                    forward is cheaper); a backward thread walks the layers from the top and
//                    writes each layer's update into the shared buffer as soon as that layer's
//                    gradient exists, so the upper layers are updated before the lower
//                    layers' gradients are even computed.
//   block_hogwild    Kungurtsev et al. (#15): each thread owns a block of layers; it reads the
//                    whole (possibly inconsistent) model, computes a stochastic gradient and
//                    updates only its block with momentum, u <- beta u + g, x <- x - alpha_k u,
//                    with a diminishing step alpha_k = alpha / (1 + k / decay).
//
// Shared weights are read and written element-wise through std::atomic_ref with relaxed order:
// races between threads are the algorithms' design (inconsistent reads, lock-free writes), and
// atomic_ref keeps them well-defined C++ (no torn floats, clean under ThreadSanitizer).
// Results depend on thread timing; these trainers are not bitwise reproducible by design.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "heterograd/algorithms/decoupled/pipeline.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/nn/mlp.hpp"

namespace heterograd::algorithms::decoupled {

namespace detail {
inline void atomic_load_range(const std::vector<float>& shared, std::size_t begin, std::size_t end,
                              float* out) {
  for (std::size_t j = begin; j < end; ++j)
    out[j] = std::atomic_ref<const float>(shared[j]).load(std::memory_order_relaxed);
}
/// x_j <- x_j - step_j for j in [begin, end), each element read and written atomically.
inline void atomic_subtract_range(std::vector<float>& shared, std::size_t begin, std::size_t end,
                                  const float* step) {
  for (std::size_t j = begin; j < end; ++j) {
    std::atomic_ref<float> x(shared[j]);
    x.store(x.load(std::memory_order_relaxed) - step[j - begin], std::memory_order_relaxed);
  }
}
}  // namespace detail

/// A batch a trainer thread asks for: inputs (rows x input width) and labels.
struct shared_batch {
  std::vector<float> x;
  std::vector<std::int32_t> y;
};
/// batch_source(thread, iteration) -> batch; called concurrently from several threads.
using batch_source = std::function<shared_batch(std::size_t, std::size_t)>;

struct layerwise_options {
  std::size_t forward_threads = 2;
  std::size_t backward_threads = 1;
  std::size_t iterations = 100;  // batches in total
  float lr = 0.05f;
  std::size_t queue_capacity = 4;
  std::chrono::duration<double> timeout{60.0};
};

struct layerwise_report {
  std::size_t batches = 0;
  std::size_t layer_updates = 0;
  /// Per layer: mean number of updates other threads applied to the layer between the
  /// forward's read and this layer's own update (the staleness each layer sees).
  std::vector<double> mean_staleness;
};

/// PD-ASGD over `params` (shared, updated in place).
inline layerwise_report layerwise_async(const nn::mlp<float>& net, std::vector<float>& params,
                                        const batch_source& source, layerwise_options opt = {}) {
  require_same_size("layerwise.params", params.size(), "num_params", net.num_params());
  require_positive("layerwise.forward_threads", opt.forward_threads);
  require_positive("layerwise.backward_threads", opt.backward_threads);
  require_positive("layerwise.queue_capacity", opt.queue_capacity);
  require_non_negative("layerwise.lr", opt.lr);
  const std::size_t L = net.num_layers();
  struct work {
    nn::mlp<float> model;            // holds the forward's activations
    std::vector<float> weights;      // the snapshot the forward used
    std::vector<std::uint64_t> seen; // per-layer update counters at the read
    shared_batch b;
    std::vector<float> logits;
  };
  bounded_queue<std::shared_ptr<work>> queue(opt.queue_capacity);
  std::vector<std::atomic<std::uint64_t>> version(L);
  std::atomic<std::size_t> next_batch{0}, done{0};
  std::vector<double> staleness_sum(L, 0.0);
  std::mutex stats_mutex;
  std::exception_ptr error;
  std::mutex error_mutex;
  std::atomic<bool> failed{false};
  auto fail = [&] {
    std::lock_guard lk(error_mutex);
    if (!error) error = std::current_exception();
    failed = true;
    queue.abort();
  };
  std::vector<std::thread> threads;
  for (std::size_t f = 0; f < opt.forward_threads; ++f)
    threads.emplace_back([&, f] {
      try {
        for (std::size_t t; (t = next_batch.fetch_add(1)) < opt.iterations;) {
          auto w = std::make_shared<work>(
              work{net, std::vector<float>(params.size()), {}, source(f, t), {}});
          for (std::size_t l = 0; l < L; ++l) w->seen.push_back(version[l].load());
          detail::atomic_load_range(params, 0, params.size(), w->weights.data());
          const auto out = w->model.forward(w->weights, w->b.x.data(), w->b.y.size(), 0, L);
          w->logits.assign(out.begin(), out.end());
          queue.push(std::move(w), opt.timeout);
        }
      } catch (...) {
        fail();
      }
    });
  for (std::size_t b = 0; b < opt.backward_threads; ++b)
    threads.emplace_back([&] {
      try {
        std::vector<float> grads(params.size()), step, dcur, dprev;
        for (;;) {
          if (done.load() >= opt.iterations || failed.load()) break;
          std::shared_ptr<work> w;
          try {
            w = queue.pop(std::chrono::milliseconds(20));
          } catch (const std::runtime_error&) {
            if (done.load() >= opt.iterations || failed.load()) break;
            continue;
          }
          // Output gradient, then layer by layer from the top, updating each layer at once.
          const std::size_t rows = w->b.y.size(), K = net.classes();
          const auto& logits = w->logits;
          dcur.resize(rows * K);
          for (std::size_t r = 0; r < rows; ++r) {
            std::size_t am = 0;
            nn::softmax_cross_entropy_row(logits.data() + r * K, K, w->b.y[r],
                                          static_cast<float>(net.config().label_smoothing),
                                          1.0f / static_cast<float>(rows), dcur.data() + r * K, am);
          }
          for (std::size_t l = L; l-- > 0;) {
            const std::size_t in = net.sizes()[l];
            dprev.resize(rows * in);
            w->model.backward(w->weights, dcur.data(), l, l + 1, grads, l > 0 ? dprev.data() : nullptr);
            const std::size_t a = net.layer_offset(l), n = net.layer_params(l);
            step.resize(n);
            for (std::size_t j = 0; j < n; ++j) step[j] = opt.lr * grads[a + j];
            detail::atomic_subtract_range(params, a, a + n, step.data());
            const std::uint64_t v = version[l].fetch_add(1);
            {
              std::lock_guard lk(stats_mutex);
              staleness_sum[l] += static_cast<double>(v - w->seen[l]);
            }
            dcur.swap(dprev);
          }
          done.fetch_add(1);
        }
      } catch (...) {
        fail();
      }
    });
  for (auto& th : threads) th.join();
  if (error) std::rethrow_exception(error);
  layerwise_report r;
  r.batches = done.load();
  r.layer_updates = r.batches * L;
  for (std::size_t l = 0; l < L; ++l)
    r.mean_staleness.push_back(r.batches ? staleness_sum[l] / static_cast<double>(r.batches) : 0.0);
  return r;
}

struct block_hogwild_options {
  std::size_t threads = 2;
  std::size_t iterations_per_thread = 100;
  float alpha = 0.05f;   // initial step
  float decay = 1000.0f; // alpha_k = alpha / (1 + k / decay): sum alpha = inf, sum alpha^2 < inf
  float momentum = 0.9f; // beta
};

/// #15 over `params` (shared, updated in place): thread c owns the layers
/// [bounds[c], bounds[c+1]) of even_split(L, threads) (so threads <= number of layers).
inline void block_hogwild(const nn::mlp<float>& net, std::vector<float>& params,
                          const batch_source& source, block_hogwild_options opt = {}) {
  require_same_size("block_hogwild.params", params.size(), "num_params", net.num_params());
  require_non_negative("block_hogwild.alpha", opt.alpha);
  require_positive("block_hogwild.decay", opt.decay);
  require_in_range_co("block_hogwild.momentum", static_cast<double>(opt.momentum), 0.0, 1.0);
  const auto bounds = even_split(net.num_layers(), opt.threads);  // validates threads
  std::exception_ptr error;
  std::mutex error_mutex;
  std::vector<std::thread> threads;
  for (std::size_t c = 0; c < opt.threads; ++c)
    threads.emplace_back([&, c] {
      try {
        nn::mlp<float> model = net;
        const std::size_t a = net.layer_offset(bounds[c]), e = net.layer_offset(bounds[c + 1]);
        std::vector<float> x(params.size()), g(params.size()), u(e - a, 0.0f), step(e - a);
        for (std::size_t k = 0; k < opt.iterations_per_thread; ++k) {
          detail::atomic_load_range(params, 0, params.size(), x.data());  // inconsistent read
          const shared_batch b = source(c, k);
          model.loss_and_gradient(x, nn::batch<float>{b.x, b.y}, g);
          const float alpha = opt.alpha / (1.0f + static_cast<float>(k) / opt.decay);
          for (std::size_t j = 0; j < u.size(); ++j) {
            u[j] = opt.momentum * u[j] + g[a + j];
            step[j] = alpha * u[j];
          }
          detail::atomic_subtract_range(params, a, e, step.data());
        }
      } catch (...) {
        std::lock_guard lk(error_mutex);
        if (!error) error = std::current_exception();
      }
    });
  for (auto& th : threads) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace heterograd::algorithms::decoupled
