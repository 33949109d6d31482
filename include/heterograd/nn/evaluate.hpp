#pragma once
// Loss and accuracy of a model over a whole dataset, in chunks (bounded workspace).

#include <algorithm>
#include <cstddef>

#include "heterograd/core/span.hpp"
#include "heterograd/data/dataset.hpp"
#include "heterograd/nn/mlp.hpp"

namespace heterograd::nn {

template <class Model>
eval_result evaluate_dataset(Model& model, span<const float> params, const data::dataset& d,
                             std::size_t chunk = 1024) {
  require_positive("evaluate_dataset.chunk", chunk);
  eval_result total;
  for (std::size_t begin = 0; begin < d.size(); begin += chunk) {
    const std::size_t rows = std::min(chunk, d.size() - begin);
    const batch<float> b{span<const float>(d.features.data() + begin * d.dim, rows * d.dim),
                         span<const std::int32_t>(d.labels.data() + begin, rows)};
    total += model.evaluate(params, b);
  }
  return total;
}

}  // namespace heterograd::nn
