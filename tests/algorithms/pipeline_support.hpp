#pragma once
// Shared by the stage-runtime tests (issue 47): bitwise comparison, a seeded batch source,
// the five-layer MLP and its initial parameters.
#include <array>
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

/// A forged header for the hostile-peer tests: the five-layer MLP in 3 stages (bounds 0, 2, 4,
/// 5: stage 1's input width 9, stage 2's 7), batches of 8 rows in M = 2 micro-batches of 4,
/// tags from 7200 (activation header 7200, gradient header 7202, label header 7204).
struct forged {
  int from, to, tag;
  std::array<std::int64_t, 4> header;
  const char* says;          // what the receiving rank's error must say
  std::size_t prelude = 0;   // micro-batches k = 0..prelude-1 the hostile rank sends valid first
};
inline constexpr std::size_t forged_micro_batches = 2;

/// Rank f.from's part over any transport: the valid prelude (rank 0: activations to rank 1 and
/// labels to rank 2; rank 2: gradients to rank 1), then the forged header. Rank 0 forging a
/// label header first sends micro-batch `prelude`'s valid activations, so that rank 2 gets to
/// its label receive.
template <class T>
void forge(const T& c, const forged& f) {
  const std::size_t M = forged_micro_batches;
  auto head = [&](std::size_t k, std::int64_t last) {
    return std::array<std::int64_t, 4>{static_cast<std::int64_t>(k / M),
                                       static_cast<std::int64_t>(k % M), 4, last};
  };
  auto send = [&](const std::array<std::int64_t, 4>& h, int to, int tag, auto payload) {
    c.send(heterograd::span<const std::int64_t>(h.data(), 4), to, tag, {}).wait();
    if (!payload.empty()) c.send(payload, to, tag + 1, {}).wait();
  };
  const std::vector<float> x(4 * 9, 0.5f), dy(4 * 7, 0.25f);
  const std::vector<std::int32_t> y{0, 1, 2, 3};
  const heterograd::span<const float> none;
  for (std::size_t k = 0; k < f.prelude; ++k) {
    if (f.from == 0) {
      send(head(k, 9), 1, 7200, heterograd::span<const float>(x));
      send(head(k, 8), 2, 7204, heterograd::span<const std::int32_t>(y));
    } else {
      send(head(k, 7), 1, 7202, heterograd::span<const float>(dy));
    }
  }
  if (f.from == 0 && f.tag == 7204)
    send(head(f.prelude, 9), 1, 7200, heterograd::span<const float>(x));
  send(f.header, f.to, f.tag, none);
}

}  // namespace hg_pipeline_test
