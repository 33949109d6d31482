#pragma once
// Shared by the decoupled tests: an optimizer stepper and Fashion-MNIST batches.
#include <cstdint>
#include <vector>

#include "heterograd/algorithms/decoupled/local_learning.hpp"
#include "heterograd/data/dataset.hpp"
#include "heterograd/data/sampler.hpp"
#include "heterograd/nn/mlp.hpp"

namespace hg_test {

/// Heavy-ball SGD as a stateful stepper (the module_optimizer concept).
struct sgd_stepper {
  float lr = 0.05f, momentum = 0.9f;
  std::vector<float> v;
  void step(heterograd::span<float> p, heterograd::span<const float> g) {
    if (v.empty()) v.assign(p.size(), 0.0f);
    for (std::size_t i = 0; i < p.size(); ++i) {
      v[i] = momentum * v[i] + g[i];
      p[i] -= lr * v[i];
    }
  }
};

}  // namespace hg_test
