#pragma once
// An in-memory labelled dataset: row-major float features and integer labels. A plain value;
// workers hold index lists into it (see partition.hpp) and gather batches (batch.hpp).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::data {

struct dataset {
  std::vector<float> features;       // size() * dim, row-major
  std::vector<std::int32_t> labels;  // size()
  std::size_t dim = 0;
  std::size_t classes = 0;
  std::string name;

  std::size_t size() const { return labels.size(); }
  span<const float> row(std::size_t i) const {
    return span<const float>(features.data() + i * dim, dim);
  }
  /// Checks the invariants a model relies on; throws naming the broken field.
  void validate() const {
    require_positive("dataset.dim", dim);
    require_positive("dataset.classes", classes);
    require(features.size() == labels.size() * dim, "dataset.features.size", features.size(),
            "must equal labels.size() * dim");
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (labels[i] < 0 || static_cast<std::size_t>(labels[i]) >= classes) {
        require(false, "dataset.labels[" + std::to_string(i) + "]", labels[i],
                "must be in [0, classes)");
      }
    }
  }
  /// The first n rows (n <= size()), e.g. a subset for quick experiments.
  dataset head(std::size_t n) const {
    require(n <= size(), "dataset.head.n", n, "must be <= dataset size");
    dataset d;
    d.dim = dim;
    d.classes = classes;
    d.name = name;
    d.features.assign(features.begin(), features.begin() + static_cast<std::ptrdiff_t>(n * dim));
    d.labels.assign(labels.begin(), labels.begin() + static_cast<std::ptrdiff_t>(n));
    return d;
  }
};

/// Gathers rows `indices` of `d` into contiguous buffers (x: |indices| * dim, y: |indices|).
inline void gather(const dataset& d, span<const std::size_t> indices, std::vector<float>& x,
                   std::vector<std::int32_t>& y) {
  x.resize(indices.size() * d.dim);
  y.resize(indices.size());
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const std::size_t i = indices[k];
    require(i < d.size(), "gather.indices", i, "must be < dataset size");
    const float* src = d.features.data() + i * d.dim;
    std::copy(src, src + d.dim, x.data() + k * d.dim);
    y[k] = d.labels[i];
  }
}

}  // namespace heterograd::data
