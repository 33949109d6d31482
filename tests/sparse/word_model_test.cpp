// SLIDE's word model (nn/word_model.hpp): the LSH layer's input gradient against a float64
// softmax computed here; SLIDE with every neuron active against the dense GEMM trainer with
// batches of one (same steps, float reassociation only); Hogwild threads step every sample
// once; word_accuracy against a hand-scored argmax; bad samples refused by key.

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/core/rng.hpp"
#include "heterograd/nn/lsh_layer.hpp"
#include "heterograd/nn/word_model.hpp"
#include "hg_test.hpp"

namespace hg = heterograd;
namespace nn = heterograd::nn;
namespace hd = heterograd::data;

namespace {
// n samples over a vocabulary of V ids (targets in [1, V), contexts in [0, V], V = bos).
hd::word_samples random_samples(std::size_t n, std::size_t V, std::size_t k, std::uint64_t seed) {
  const hg::counter_rng rng(seed, 0x30d);
  hd::word_samples s;
  s.context = k;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < k; ++j) s.contexts.push_back(static_cast<std::uint32_t>(rng.below(i * 8 + j, V + 1)));
    s.targets.push_back(static_cast<std::uint32_t>(1 + rng.below(i * 8 + 7, V - 1)));
  }
  return s;
}

std::vector<std::size_t> iota(std::size_t n) {
  std::vector<std::size_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

const nn::lsh_layer_config every_neuron{.lsh = {.parts = 0, .tables = 1}};
}  // namespace

BOOST_AUTO_TEST_SUITE(word_model)

BOOST_AUTO_TEST_CASE(the_input_gradient_is_the_softmax_gradient_through_the_active_rows) {
  const std::size_t dim = 11, neurons = 40;
  nn::lsh_softmax_layer layer(dim, neurons, {.lsh = {.parts = 3, .tables = 4, .seed = 5}});
  std::vector<float> p(layer.num_params());
  layer.init(hg::span<float>(p), hg_test::seed(), 0.3);
  layer.rebuild(hg::span<const float>(p));
  const hg::counter_rng rng(hg_test::seed(), 9);
  std::vector<float> x(dim), dx(dim);
  for (std::size_t i = 0; i < dim; ++i) x[i] = static_cast<float>(rng.normal(i));
  const std::vector<float> before = p;
  std::vector<float> q = p;
  nn::lsh_workspace ws, ws2;
  layer.train_step(hg::span<float>(p), hg::span<const float>(x), 7, 0.1f, ws, hg::span<float>(dx));
  layer.train_step(hg::span<float>(q), hg::span<const float>(x), 7, 0.1f, ws2);
  BOOST_TEST(p == q, boost::test_tools::per_element());  // asking for dx changes no weight
  // float64 over the same active set: dz = softmax - onehot, dx = sum dz_j w_j (old weights).
  const auto& act = ws.active;
  std::vector<double> z(act.size());
  double zmax = -1e300, sum = 0;
  for (std::size_t a = 0; a < act.size(); ++a) {
    z[a] = before[neurons * dim + act[a]];
    for (std::size_t i = 0; i < dim; ++i) z[a] += static_cast<double>(before[act[a] * dim + i]) * x[i];
    zmax = std::max(zmax, z[a]);
  }
  for (double v : z) sum += std::exp(v - zmax);
  for (std::size_t i = 0; i < dim; ++i) {
    double g = 0;
    for (std::size_t a = 0; a < act.size(); ++a)
      g += (std::exp(z[a] - zmax) / sum - (act[a] == 7 ? 1.0 : 0.0)) * before[act[a] * dim + i];
    BOOST_TEST(dx[i] == g, boost::test_tools::tolerance(1e-5));
  }
  BOOST_TEST(act.size() < neurons);  // a real subset, not the dense case
}

BOOST_AUTO_TEST_CASE(slide_with_every_neuron_active_takes_the_dense_trainers_steps) {
  const nn::word_model_shape shape{.vocabulary = 60, .context = 3, .dim = 8};
  const auto d = random_samples(40, shape.vocabulary, shape.context, hg_test::seed());
  nn::word_model a(shape, hg_test::seed()), b(shape, hg_test::seed());
  nn::lsh_softmax_layer layer(shape.input(), shape.vocabulary, every_neuron);
  const auto order = iota(d.size());
  const auto rep = nn::train_slide_words(layer, a, d, order, 0.5f, 1);
  BOOST_TEST(rep.samples == d.size());
  BOOST_TEST(rep.active_sum == d.size() * shape.vocabulary);
  nn::dense_word_workspace ws;
  const double loss = nn::train_dense_words(b, d, order, 0.5f, 1, ws);
  BOOST_TEST(rep.loss_sum == loss, boost::test_tools::tolerance(1e-4));
  // Same steps in the same order; only the GEMMs' summation order differs (BLAS).
  BOOST_TEST(max_abs_diff(a.output, b.output) < 1e-5);
  BOOST_TEST(max_abs_diff(a.embedding, b.embedding) < 1e-5);
  const nn::word_model init(shape, hg_test::seed());
  BOOST_TEST(max_abs_diff(a.embedding, init.embedding) > 1e-2);  // the embedding trained
}

BOOST_AUTO_TEST_CASE(training_in_chunks_is_one_long_call_bitwise) {
  const nn::word_model_shape shape{.vocabulary = 50, .context = 2, .dim = 6};
  const auto d = random_samples(300, shape.vocabulary, shape.context, hg_test::seed());
  const nn::lsh_layer_config cfg{.lsh = {.parts = 3, .tables = 3, .seed = 2}, .rebuild = {.first = 20, .growth = 1.5}};
  nn::word_model one(shape, 3), chunked(shape, 3);
  nn::lsh_softmax_layer a(shape.input(), shape.vocabulary, cfg), b(shape.input(), shape.vocabulary, cfg);
  const auto order = iota(d.size());
  const auto whole = nn::train_slide_words(a, one, d, order, 0.3f, 1);
  std::size_t samples = 0;
  for (std::size_t at : {0, 7, 130}) {  // chunks [0, 7), [7, 130), [130, 300)
    const std::size_t to = at == 0 ? 7 : at == 7 ? 130 : 300;
    samples += nn::train_slide_words(b, chunked, d, hg::span<const std::size_t>(order).subspan(at, to - at), 0.3f, 1)
                   .samples;
  }
  BOOST_TEST(samples == d.size());
  // Rebuilds before samples 0, 20, 50, 95, 163, 265 (periods ceil(20 1.5^i): 20, 30, 45, 68, 102).
  BOOST_TEST(whole.rebuilds == 6u);
  BOOST_TEST(b.rebuilds() == 6u);
  BOOST_TEST(one.output == chunked.output, boost::test_tools::per_element());
  BOOST_TEST(one.embedding == chunked.embedding, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(hogwild_threads_step_every_sample_once_and_learn) {
  const nn::word_model_shape shape{.vocabulary = 30, .context = 2, .dim = 16};
  // A learnable rule: the target is a function of the last context word (the first is noise).
  hd::word_samples d;
  d.context = 2;
  const hg::counter_rng rng(hg_test::seed(), 4);
  for (std::size_t i = 0; i < 3000; ++i) {
    const auto c = static_cast<std::uint32_t>(1 + rng.below(i, 29));
    d.contexts.push_back(static_cast<std::uint32_t>(rng.below(i + 100000, 31)));
    d.contexts.push_back(c);
    d.targets.push_back(1 + (c * 7) % 29);
  }
  nn::word_model m(shape, hg_test::seed());
  nn::lsh_softmax_layer layer(shape.input(), shape.vocabulary, {.lsh = {.parts = 4, .tables = 2, .seed = 3},
                                                            .rebuild = {.first = 200, .growth = 1.5}});
  std::vector<std::size_t> order;
  for (int e = 0; e < 2; ++e)
    for (std::size_t i = 0; i < d.size(); ++i) order.push_back(i);
  const auto eval = iota(d.size());
  const double before = nn::word_accuracy(m, d, eval);
  const auto rep = nn::train_slide_words(layer, m, d, order, 0.2f, 2);
  BOOST_TEST(rep.samples == order.size());
  BOOST_TEST(rep.rebuilds > 3u);
  BOOST_TEST(before < 0.15);
  BOOST_TEST(rep.mean_active_fraction(shape.vocabulary) < 0.3);  // measured 0.14
  BOOST_TEST(nn::word_accuracy(m, d, eval) > 0.95);                // measured 1.0
}

BOOST_AUTO_TEST_CASE(accuracy_is_the_argmax_over_every_neuron) {
  const nn::word_model_shape shape{.vocabulary = 3, .context = 1, .dim = 2};
  nn::word_model m(shape, 1);
  // E rows 0..3 (3 = bos): h = E[c]; W rows: (1,0), (0,1), (-1,-1); b = (0, 0, 0.5).
  m.embedding = {1, 0, 0, 1, -1, -1, 0, 0};
  m.output = {1, 0, 0, 1, -1, -1, 0, 0, 0.5f};
  hd::word_samples d;
  d.context = 1;
  d.contexts = {0, 1, 2, 3};
  d.targets = {1, 1, 2, 2};
  // Scores: c=0 -> (1, 0, -0.5): 0; c=1 -> (0, 1, -0.5): 1; c=2 -> (-1, -1, 2.5): 2;
  // c=3 -> (0, 0, 0.5): 2. Hits: samples 1, 2, 3.
  BOOST_TEST(nn::word_accuracy(m, d, iota(4)) == 0.75);
  const std::vector<std::size_t> two{0, 2};
  BOOST_TEST(nn::word_accuracy(m, d, two) == 0.5);
}

BOOST_AUTO_TEST_CASE(samples_the_model_cannot_take_are_refused_by_key) {
  const nn::word_model_shape shape{.vocabulary = 10, .context = 2, .dim = 4};
  nn::word_model m(shape, 1);
  nn::lsh_softmax_layer layer(8, 10, every_neuron);
  auto d = random_samples(5, 10, 2, 1);
  const auto order = iota(5);
  auto refusal = [&](const hd::word_samples& s, std::span<const std::size_t> o) {
    return error_of([&] { nn::train_slide_words(layer, m, s, o, 0.1f); });
  };
  auto bad = d;
  bad.context = 3;
  BOOST_TEST(refusal(bad, order).find("train_slide_words.samples.context") != std::string::npos);
  bad = d;
  bad.targets[2] = 0;  // <unk> is never a target
  BOOST_TEST(refusal(bad, order).find("train_slide_words.samples.targets") != std::string::npos);
  bad = d;
  bad.contexts[3] = 11;  // > bos
  BOOST_TEST(refusal(bad, order).find("train_slide_words.samples.contexts") != std::string::npos);
  const std::vector<std::size_t> out{0, 5};
  BOOST_TEST(refusal(d, out).find("train_slide_words.order") != std::string::npos);
  nn::lsh_softmax_layer wrong(8, 9, every_neuron);
  BOOST_TEST(error_of([&] { nn::train_slide_words(wrong, m, d, order, 0.1f); }).find("train_slide_words.layer") !=
             std::string::npos);
  nn::dense_word_workspace ws;
  BOOST_TEST(error_of([&] { nn::train_dense_words(m, d, order, 0.1f, 0, ws); }).find("train_dense_words.batch") !=
             std::string::npos);
  BOOST_TEST(error_of([] { nn::word_model(nn::word_model_shape{.vocabulary = 1, .context = 1, .dim = 1}, 1); })
                 .find("word_model_shape.vocabulary") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
