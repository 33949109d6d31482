#pragma once
// Heterogeneous placement of decoupled modules: measure what each layer costs (forward plus
// local backward), then let the balance layer's contiguous partitioner (DAPPLE-style, #3)
// choose module boundaries for workers of given relative speeds, so that the slowest module
// of the pipeline -- which sets its pace -- is as fast as possible.

#include <chrono>
#include <cstddef>
#include <vector>

#include "heterograd/algorithms/decoupled/local_learning.hpp"
#include "heterograd/balance/pipeline.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/nn/mlp.hpp"

namespace heterograd::algorithms::decoupled {

/// Seconds per layer for one forward and backward of `b` (median-free mean over `repeats`).
inline std::vector<double> measure_layer_times(const nn::mlp<float>& net,
                                               const std::vector<float>& params,
                                               const nn::batch<float>& b,
                                               std::size_t repeats = 3) {
  require_positive("measure_layer_times.repeats", repeats);
  const std::size_t L = net.num_layers();
  nn::mlp<float> m = net;
  std::vector<float> grads(net.num_params());
  std::vector<double> t(L, 0.0);
  std::vector<std::vector<float>> inputs(L + 1);
  inputs[0].assign(b.x.begin(), b.x.end());
  for (std::size_t r = 0; r < repeats; ++r)
    for (std::size_t l = 0; l < L; ++l) {
      const auto start = std::chrono::steady_clock::now();
      const auto out = m.forward(params, inputs[l].data(), b.size(), l, l + 1);
      const std::vector<float> dout(out.size(), 1.0f / static_cast<float>(out.size()));
      std::vector<float> din(b.size() * net.sizes()[l]);
      m.backward(params, dout.data(), l, l + 1, grads, din.data());
      t[l] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      inputs[l + 1].assign(out.begin(), out.end());
    }
  for (auto& v : t) v /= static_cast<double>(repeats);
  return t;
}

/// Module boundaries for workers of relative speeds `worker_speeds` (in pipeline order).
inline module_bounds plan_modules(const std::vector<double>& layer_times,
                                  const std::vector<double>& worker_speeds) {
  const auto b = balance::partition_stages(layer_times, worker_speeds);
  return module_bounds(b.begin(), b.end());
}

}  // namespace heterograd::algorithms::decoupled
