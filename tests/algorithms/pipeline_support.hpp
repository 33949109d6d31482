#pragma once
// Shared by the stage-runtime tests (issue 47): bitwise comparison, a seeded batch source,
// the five-layer MLP and its initial parameters.
#include <cstdint>
#include <cstring>
#include <vector>

#include "decoupled_support.hpp"
#include "heterograd/algorithms/pipeline.hpp"
#include "hg_test.hpp"

namespace hg_pipeline_test {

namespace hg = heterograd;
namespace pl = heterograd::algorithms::pipeline;

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
/// Batch t: `rows` rows of `dim` normal inputs shifted towards their class.
inline pl::batch_source batches(std::size_t dim, std::size_t classes, std::size_t rows,
                                std::uint64_t seed) {
  return [=](std::size_t t) {
    const hg::counter_rng rng(seed, t);
    pl::batch_data b;
    for (std::size_t r = 0; r < rows; ++r) {
      b.y.push_back(static_cast<std::int32_t>(rng.below(1u << 30 | r, classes)));
      for (std::size_t j = 0; j < dim; ++j)
        b.x.push_back(
            static_cast<float>(rng.normal(r * dim + j) +
                               (j % classes == static_cast<std::size_t>(b.y[r]) ? 1.0 : 0.0)));
    }
    return b;
  };
}
inline hg_test::sgd_stepper make_sgd(std::size_t) {
  return hg_test::sgd_stepper{};
}
// Five dense layers: 2, 3 and 4 stages split them unevenly (3+2, 2+2+1, 2+1+1+1).
inline const heterograd::nn::mlp<float> five_layers({12, 10, 9, 8, 7, 5});
inline std::vector<float> initial(const heterograd::nn::mlp<float>& net) {
  std::vector<float> p(net.num_params());
  net.init(p, hg_test::seed());
  return p;
}

}  // namespace hg_pipeline_test
