#pragma once
// Shared by the decoupled tests: heavy-ball SGD from optim/ as a module stepper.
#include <cstdint>
#include <optional>
#include <vector>

#include "heterograd/algorithms/decoupled/local_learning.hpp"
#include "heterograd/data/dataset.hpp"
#include "heterograd/data/sampler.hpp"
#include "heterograd/nn/mlp.hpp"
#include "heterograd/optim/optimizers.hpp"

namespace hg_test {

/// optim::momentum (heavy ball, PyTorch's form) as a module stepper, configured by fields.
struct sgd_stepper {
  float lr = 0.05f, momentum = 0.9f;
  std::optional<heterograd::algorithms::decoupled::optim_stepper<heterograd::optim::momentum>> impl;
  void step(heterograd::span<float> p, heterograd::span<const float> g) {
    if (!impl) impl.emplace(heterograd::optim::momentum({.lr = lr, .momentum = momentum}));
    impl->step(p, g);
  }
  template <class Archive>
  void serialize(Archive& ar) {
    if (!impl) impl.emplace(heterograd::optim::momentum({.lr = lr, .momentum = momentum}));
    impl->serialize(ar);
  }
};

}  // namespace hg_test
