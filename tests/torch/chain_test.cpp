// heterograd/torch/chain.hpp: a torch::nn::Sequential as decoupled modules.
//
// - The split: modules start at the named children; the flat layout is the whole network's
//   (parameters() order), so an evaluation of the flat buffer needs no reordering.
// - Gradient isolation: module k's local gradient writes its own slice and head only.
// - PGL's global step is end-to-end backpropagation: its gradient equals the whole network's
//   (a flat_module of the same preset at the same parameters), bitwise; with K = 1 a
//   local_learning step is that step.
// - The module pipeline on threads equals the sequential loop bitwise (ResNet-8, 3 modules,
//   batch norm in every module).
// - Heads: conv 3x3 + pool 2x2 + dense on a feature map, dense on a vector; their sizes.
// - Bad input: a name the network lacks, names out of order, a module without parameters, an
//   input the network cannot take: std::invalid_argument naming the entry.
//
// heterograd/torch/stages.hpp (issue 47), in this translation unit to spare a LibTorch compile:
// - The pipeline of LibTorch stages (an MLP-like Sequential and ResNet-8; GPipe and 1F1B;
//   S = 2, 3; M = 1, 2, 4 over 7 rows) equals the unsplit network stepping on the sum of its
//   micro-batches' LibTorch gradients (each row's loss weighted 1/B), bitwise: parameters,
//   losses and batch norm's running statistics. With M = 1 that is one large-batch step; with
//   M > 1 the MLP is within rounding of it and ResNet-8 is not (batch norm's per-micro-batch
//   statistics).
// - run_pipeline_over on inproc threads equals the simulated pipeline, bitwise.
// - Peak activation bytes per stage: 1F1B's min(S - s, M) slots against GPipe's M.
// - Bad splits and weight stashing refused naming the key, value and rule.
#include <torch/torch.h>

#include "heterograd/torch/chain.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "heterograd/algorithms/decoupled/local_learning.hpp"
#include "heterograd/algorithms/decoupled/pipeline.hpp"
#include "heterograd/algorithms/pipeline.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/torch/stages.hpp"

namespace hg = heterograd;
namespace lt = heterograd::libtorch;
namespace dc = heterograd::algorithms::decoupled;

namespace {

struct one_thread {
  one_thread() {
    torch::manual_seed(3);
    torch::set_num_threads(1);
  }
};

// Plain SGD over a slice (the module optimizer of the tests).
struct sgd {
  float lr = 0.05f;
  void step(hg::span<float> p, hg::span<const float> g) {
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= lr * g[i];
  }
};

struct images {
  std::vector<float> x;
  std::vector<std::int32_t> y;
};

images batch_of(std::size_t rows, std::uint64_t seed, std::size_t pixels = 28 * 28) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  images b;
  b.x.resize(rows * pixels);
  for (auto& v : b.x) v = n(g);
  for (std::size_t r = 0; r < rows; ++r) b.y.push_back(static_cast<std::int32_t>(g() % 10));
  return b;
}

lt::chain_options options(std::vector<std::string> split, std::vector<std::int64_t> head = {}) {
  lt::chain_options o;
  o.split = std::move(split);
  o.head_channels = std::move(head);
  o.input = {1, 28, 28};
  return o;
}

std::vector<float> initial(torch::nn::Sequential net) {
  const lt::flat_module m(net.ptr());
  return {m.params().begin(), m.params().end()};
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(torch_chain)

BOOST_FIXTURE_TEST_CASE(modules_start_at_the_named_children_over_the_networks_layout, one_thread) {
  auto net = lt::resnet8();
  const auto p0 = initial(net);
  lt::sequential_chain c(net, options({"layer2", "layer3"}));
  BOOST_TEST(c.modules() == 3u);
  BOOST_TEST(c.num_params() == p0.size());
  // stem + layer1 | layer2 | layer3 + pool + fc, by the architecture's counts: stem 3x3x1x16
  // conv + batch norm 32; layer1 two 3x3x16x16 convs + 2 batch norms.
  const std::size_t stem = 9 * 16 + 32, layer1 = 2 * (9 * 16 * 16 + 32);
  const std::size_t layer2 = 9 * 16 * 32 + 9 * 32 * 32 + 2 * 64 + (16 * 32 + 64);  // + 1x1 shortcut with batch norm
  BOOST_TEST(c.module_offset(1) == stem + layer1);
  BOOST_TEST(c.module_offset(2) == stem + layer1 + layer2);
  BOOST_TEST(c.module_offset(3) == p0.size());
  BOOST_TEST(c.input_width(0) == 784u);
  BOOST_TEST(c.input_width(1) == 16u * 28 * 28);
  BOOST_TEST(c.input_width(2) == 32u * 14 * 14);
  // Heads: pool to 2 x 2 and a dense layer (no hidden width), or a 3x3 conv of 8 maps first.
  BOOST_TEST(c.head_size(0) == 16u * 4 * 10 + 10);
  lt::sequential_chain h(lt::resnet8(), options({"layer2"}, {8}));
  BOOST_TEST(h.head_size(0) == 9u * 16 * 8 + 8 + 8 * 4 * 10 + 10);
  // A flat feature vector (LeNet-5 split at fc2: fc1's 120 outputs): dense layers.
  lt::sequential_chain v(lt::lenet5(), options({"fc2"}, {20}));
  BOOST_TEST(v.input_width(1) == 120u);
  BOOST_TEST(v.head_size(0) == 120u * 20 + 20 + 20 * 10 + 10);
  // Without names: `modules` groups of children (ResNet-8 has 6: stem layer1 layer2 | layer3 pool fc).
  lt::chain_options even = options({});
  even.modules = 2;
  lt::sequential_chain e(lt::resnet8(), even);
  BOOST_TEST(e.module_offset(1) == stem + layer1 + layer2);
}

BOOST_FIXTURE_TEST_CASE(a_modules_local_gradient_writes_its_slice_and_head_only, one_thread) {
  auto net = lt::resnet8();
  auto p = initial(net);
  lt::sequential_chain c(net, options({"layer2", "layer3"}));
  const auto b = batch_of(4, 11);
  for (std::size_t k = 0; k < 3; ++k) {
    std::vector<float> g(p.size(), -7.0f);
    std::vector<float> head(k < 2 ? c.head_size(k) : 0), hgr(head.size(), -7.0f);
    if (k < 2) c.init_head(k, hg::span<float>(head), 5);
    // Module k's input: the previous modules' outputs on the batch.
    std::vector<float> x = b.x;
    for (std::size_t j = 0; j < k; ++j) {
      std::vector<float> hj(c.head_size(j)), gj(p.size()), hgj(hj.size());
      c.init_head(j, hg::span<float>(hj), 5);
      const auto r = c.local_gradient(j, hg::span<float>(p), x.data(), b.y, hg::span<float>(gj), hg::span<float>(hj),
                                      hg::span<float>(hgj));
      x.assign(r.output.begin(), r.output.end());
    }
    const auto r = c.local_gradient(k, hg::span<float>(p), x.data(), b.y, hg::span<float>(g), hg::span<float>(head),
                                    hg::span<float>(hgr));
    BOOST_TEST(std::isfinite(r.loss));
    BOOST_TEST(r.loss > 0.0f);
    std::size_t outside = 0, inside_set = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      const bool mine = i >= c.module_offset(k) && i < c.module_offset(k + 1);
      if (!mine && g[i] != -7.0f) ++outside;
      if (mine && g[i] != -7.0f) ++inside_set;
    }
    BOOST_TEST(outside == 0u, "module " << k);
    BOOST_TEST(inside_set > (c.module_offset(k + 1) - c.module_offset(k)) / 2, "module " << k);
    for (const float v : hgr) BOOST_TEST(v != -7.0f);
    BOOST_TEST(r.output.size() == (k < 2 ? 4 * c.input_width(k + 1) : 0u));
  }
}

BOOST_FIXTURE_TEST_CASE(the_global_step_is_the_whole_networks_gradient_bitwise, one_thread) {
  auto net = lt::resnet8();
  auto p = initial(net);
  lt::sequential_chain c(net, options({"layer2"}));
  const auto b = batch_of(6, 12);
  std::vector<float> g(p.size());
  const float loss = c.global_gradient(hg::span<float>(p), b.x.data(), hg::span<const std::int32_t>(b.y), hg::span<float>(g));
  // The preset as one module at the same parameters.
  lt::flat_module whole(lt::resnet8().ptr());
  std::copy(p.begin(), p.end(), whole.params().begin());
  whole.zero_grad();
  whole.module().train();
  const auto logits = dynamic_cast<torch::nn::SequentialImpl&>(whole.module())
                          .forward(torch::from_blob(const_cast<float*>(b.x.data()), {6, 1, 28, 28}));
  const auto y = torch::from_blob(const_cast<std::int32_t*>(b.y.data()), {6}, torch::kInt).to(torch::kLong);
  const auto ref = torch::nn::functional::cross_entropy(logits, y);
  ref.backward();
  BOOST_TEST(loss == ref.item<float>());
  BOOST_TEST(bitwise_equal(g, std::vector<float>(whole.grads().begin(), whole.grads().end())));
}

BOOST_FIXTURE_TEST_CASE(one_module_local_learning_is_end_to_end_sgd_bitwise, one_thread) {
  auto net = lt::lenet5();
  const auto p0 = initial(net);
  lt::chain_options o = options({});
  o.modules = 1;
  dc::local_learning<sgd, lt::sequential_chain> ll(lt::sequential_chain(net, o), p0, {}, [](std::size_t) { return sgd{}; });
  lt::flat_module ref(lt::lenet5().ptr());
  std::copy(p0.begin(), p0.end(), ref.params().begin());
  sgd opt;
  for (std::uint64_t t = 0; t < 5; ++t) {
    const auto b = batch_of(8, 100 + t);
    ll.step(hg::nn::batch<float>{b.x, b.y}, t);
    ref.zero_grad();
    const auto logits = dynamic_cast<torch::nn::SequentialImpl&>(ref.module())
                            .forward(torch::from_blob(const_cast<float*>(b.x.data()), {8, 1, 28, 28}));
    torch::nn::functional::cross_entropy(
        logits, torch::from_blob(const_cast<std::int32_t*>(b.y.data()), {8}, torch::kInt).to(torch::kLong))
        .backward();
    opt.step(ref.params(), ref.grads());
  }
  BOOST_TEST(bitwise_equal(ll.params(), std::vector<float>(ref.params().begin(), ref.params().end())));
}

BOOST_FIXTURE_TEST_CASE(the_module_pipeline_on_threads_equals_the_sequential_loop_bitwise, one_thread) {
  const auto p0 = initial(lt::resnet8());
  auto make = [](std::size_t) { return sgd{}; };
  const dc::local_learning_config cfg{.seed = 9};
  dc::local_learning<sgd, lt::sequential_chain> seq(lt::sequential_chain(lt::resnet8(), options({"layer2", "layer3"}, {4})),
                                                   p0, cfg, make);
  dc::local_learning<sgd, lt::sequential_chain> par(lt::sequential_chain(lt::resnet8(), options({"layer2", "layer3"}, {4})),
                                                   p0, cfg, make);
  const std::size_t T = 6;
  for (std::size_t t = 0; t < T; ++t) {
    const auto b = batch_of(4, 200 + t);
    seq.step(hg::nn::batch<float>{b.x, b.y}, t);
  }
  const auto rep = dc::run_pipeline(
      par,
      [](std::size_t t) {
        auto b = batch_of(4, 200 + t);
        return dc::activation_message{t, std::move(b.x), std::move(b.y)};
      },
      T, {.queue_capacity = 2});
  BOOST_TEST(bitwise_equal(seq.params(), par.params()));
  for (std::size_t k = 0; k < 2; ++k) BOOST_TEST(bitwise_equal(seq.head_params(k), par.head_params(k)), "head " << k);
  BOOST_TEST(rep.busy_seconds.size() == 3u);
  BOOST_TEST(seq.params() != p0);
}

BOOST_FIXTURE_TEST_CASE(a_split_the_network_cannot_take_is_refused_naming_the_entry, one_thread) {
  auto refused = [](std::vector<std::string> split, const std::string& expect, std::vector<std::int64_t> input = {1, 28, 28}) {
    lt::chain_options o = options(std::move(split));
    o.input = std::move(input);
    try {
      lt::sequential_chain c(lt::resnet8(), o);
    } catch (const std::invalid_argument& e) {
      const std::string w = e.what();
      BOOST_TEST(w.find(expect) != std::string::npos, w);
      return;
    }
    BOOST_FAIL("accepted a split it cannot take: " + expect);
  };
  refused({"layer9"}, "split[0]: 'layer9' is not a child of the network (its children: stem, layer1, layer2, layer3, pool, fc)");
  refused({"layer3", "layer2"}, "split[1]: 'layer2' must come after 'layer3'");
  refused({"stem"}, "split[0]: 'stem' is the network's first child");
  refused({"layer3", "pool", "fc"}, "split: module 2 (from 'pool') has no parameters");
  refused({"layer2"}, "input: the network cannot take [3, 28, 28]", {3, 28, 28});
  lt::chain_options o = options({});
  o.modules = 7;
  BOOST_CHECK_THROW(lt::sequential_chain(lt::resnet8(), o), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------------
// heterograd/torch/stages.hpp: LibTorch stages in the pipeline runtimes (issue 47).

namespace {
namespace pl = heterograd::algorithms::pipeline;

constexpr std::int64_t stage_classes = 5;  // the classes of the stage tests' networks and labels

// An MLP as a Sequential of named children: 12 -> 10 -> 9 -> 8 -> 5.
torch::nn::Sequential mlp_net() {
  namespace nn = torch::nn;
  nn::Sequential s;
  const std::int64_t w[] = {12, 10, 9, 8, stage_classes};
  for (int l = 0; l < 4; ++l) {
    s->push_back("fc" + std::to_string(l + 1), nn::Linear(w[l], w[l + 1]));
    if (l < 3) s->push_back("relu" + std::to_string(l + 1), nn::ReLU());
  }
  return s;
}
torch::nn::Sequential small_resnet8() { return lt::resnet8({1, 12, 12}, stage_classes); }

struct net_case {
  const char* name;
  torch::nn::Sequential (*make)();
  std::vector<std::int64_t> input;
  std::vector<std::vector<std::string>> splits;  // for S = 2, 3
};
const net_case mlp_case{"mlp", mlp_net, {12}, {{"fc3"}, {"fc2", "fc4"}}};
const net_case resnet_case{"resnet8", small_resnet8, {1, 12, 12}, {{"layer2"}, {"layer1", "layer3"}}};

lt::stages_options stage_options(const net_case& c, std::vector<std::string> split) {
  return {.split = std::move(split), .classes = stage_classes, .input = c.input, .threads = 1};
}
pl::batch_source torch_batches(std::size_t width, std::size_t rows, std::uint64_t seed) {
  return [=](std::size_t t) {
    const auto b = batch_of(rows, seed + t, width);
    pl::batch_data d{b.x, b.y};
    for (auto& y : d.y) y %= static_cast<std::int32_t>(stage_classes);
    return d;
  };
}
auto make_sgd_slice = [](std::size_t) { return sgd{}; };

struct torch_reference {
  std::vector<float> params, buffers, losses;
};
// The unsplit network (a fresh copy of the architecture over the same flat parameters), each
// step: the micro-batches in order, loss = (sum over rows of LibTorch's cross-entropy) * (1/B),
// LibTorch's backward accumulating into one gradient buffer, then p -= lr g. No stage code.
torch_reference unsplit_steps(const net_case& c, const std::vector<float>& p0, const pl::batch_source& src,
                              std::size_t steps, std::size_t M) {
  torch_reference r{p0, {}, {}};
  auto net = c.make();
  lt::flat_module m(net.ptr());
  std::vector<float> g(p0.size());
  m.rebind(hg::span<float>(r.params), hg::span<float>(g));
  net->train();
  namespace F = torch::nn::functional;
  for (std::size_t t = 0; t < steps; ++t) {
    std::fill(g.begin(), g.end(), 0.0f);
    const auto b = src(t);
    const float scale = 1.0f / static_cast<float>(b.rows());
    float loss = 0;
    for (auto& mb : pl::split_micro_batches(b, b.x.size() / b.rows(), M)) {
      std::vector<std::int64_t> shape{static_cast<std::int64_t>(mb.rows())};
      shape.insert(shape.end(), c.input.begin(), c.input.end());
      const auto x = torch::from_blob(mb.x.data(), shape, torch::kFloat);
      const auto y = torch::from_blob(mb.y.data(), {static_cast<std::int64_t>(mb.rows())}, torch::kInt).to(torch::kLong);
      const auto l = F::cross_entropy(net->forward(x), y, F::CrossEntropyFuncOptions().reduction(torch::kSum)) * scale;
      l.backward();
      loss += l.item<float>();
    }
    sgd{}.step(hg::span<float>(r.params), hg::span<const float>(g));
    r.losses.push_back(loss);
  }
  r.buffers.assign(m.buffers().begin(), m.buffers().end());
  return r;
}
std::vector<float> stage_buffers(lt::sequential_stages& st) {
  std::vector<float> b;
  for (std::size_t s = 0; s < st.stages(); ++s) {
    const auto v = st.stage_module(s).buffers();
    b.insert(b.end(), v.begin(), v.end());
  }
  return b;
}
float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}
const pl::pipeline_schedule_kind both_schedules[] = {pl::pipeline_schedule_kind::gpipe,
                                                     pl::pipeline_schedule_kind::one_f_one_b};
}  // namespace

BOOST_AUTO_TEST_SUITE(torch_stages)

BOOST_FIXTURE_TEST_CASE(the_pipeline_of_torch_stages_is_the_unsplit_networks_micro_batch_step_bitwise, one_thread) {
  const std::size_t B = 7, steps = 2;  // M = 2: rows 4, 3; M = 4: rows 2, 2, 2, 1
  for (const net_case* c : {&mlp_case, &resnet_case}) {
    const auto p0 = initial(c->make());
    const lt::sequential_stages probe(c->make(), stage_options(*c, c->splits[0]));
    const auto src = torch_batches(probe.input_width(0), B, 500);
    const auto large = unsplit_steps(*c, p0, src, steps, 1);  // one B-row step per step
    for (std::size_t M : {1, 2, 4}) {
      const auto ref = unsplit_steps(*c, p0, src, steps, M);
      for (std::size_t S : {2, 3}) {
        for (const auto kind : both_schedules) {
          lt::sequential_stages model(c->make(), stage_options(*c, c->splits[S - 2]));
          BOOST_TEST_REQUIRE(model.stages() == S);
          std::vector<float> p = p0;
          const auto r = pl::simulate_pipeline(model, p, make_sgd_slice, {.schedule = kind, .micro_batches = M}, src, steps);
          const std::string at = std::string(c->name) + " S=" + std::to_string(S) + " M=" + std::to_string(M) +
                                 (kind == pl::pipeline_schedule_kind::gpipe ? " gpipe" : " 1f1b");
          BOOST_TEST(bitwise_equal(p, ref.params), at);
          BOOST_TEST(bitwise_equal(r.losses, ref.losses), at);
          BOOST_TEST(bitwise_equal(stage_buffers(model), ref.buffers), at);
          BOOST_TEST(p != p0, at);
        }
      }
      // With M = 1 the reference is one B-row step. With M > 1 the MLP's micro-batch sum rounds
      // apart from the B-row GEMMs (a few ulps), while ResNet-8's batch norm normalises by each
      // micro-batch's statistics: another function, not a rounding.
      if (M == 1) continue;
      const float d = max_abs_diff(ref.params, large.params);
      BOOST_TEST_MESSAGE(c->name << " M=" << M << ": max |micro-batch step - B-row step| = " << d);
      if (c == &mlp_case) BOOST_TEST(d < 1e-6f, c->name << " M=" << M << " differs by " << d);
      else BOOST_TEST(d > 1e-4f, c->name << " M=" << M << " differs by " << d);
    }
  }
}

BOOST_FIXTURE_TEST_CASE(torch_stages_on_inproc_threads_equal_the_simulated_pipeline_bitwise, one_thread) {
  for (const net_case* c : {&mlp_case, &resnet_case}) {
    for (const auto kind : both_schedules) {
      const std::size_t S = 3;
      const pl::pipeline_config cfg{.schedule = kind, .micro_batches = 4};
      const auto p0 = initial(c->make());
      lt::sequential_stages sim_model(c->make(), stage_options(*c, c->splits[1]));
      const auto src = torch_batches(sim_model.input_width(0), 7, 600);
      std::vector<float> sim = p0;
      const auto expect = pl::simulate_pipeline(sim_model, sim, make_sgd_slice, cfg, src, 3);
      std::vector<lt::sequential_stages> models;  // made here: LibTorch's generator is not thread-safe
      for (std::size_t s = 0; s < S; ++s) models.emplace_back(c->make(), stage_options(*c, c->splits[1]));
      std::vector<float> gathered, losses;
      std::vector<std::vector<float>> stage_bufs(S);
      std::vector<std::size_t> peak(S);
      hg::comm::inproc::spawn(static_cast<int>(S), [&](const hg::comm::inproc::communicator& comm) {
        const auto s = static_cast<std::size_t>(comm.rank());
        std::vector<float> p = p0;
        const auto r = pl::run_pipeline_over(comm, models[s], p, make_sgd_slice, cfg, src, 3,
                                             {.timeout = std::chrono::seconds{60}});
        pl::gather_stages(comm, models[s], p);
        peak[s] = r.peak_in_flight[s];
        const auto b = models[s].stage_module(s).buffers();
        stage_bufs[s].assign(b.begin(), b.end());
        if (s == 0) gathered = p;
        if (s + 1 == S) losses = r.losses;
      });
      const std::string at = std::string(c->name) + (kind == pl::pipeline_schedule_kind::gpipe ? " gpipe" : " 1f1b");
      BOOST_TEST(bitwise_equal(gathered, sim), at);
      BOOST_TEST(bitwise_equal(losses, expect.losses), at);
      BOOST_TEST(peak == expect.peak_in_flight, at);
      std::vector<float> all;
      for (const auto& b : stage_bufs) all.insert(all.end(), b.begin(), b.end());
      BOOST_TEST(bitwise_equal(all, stage_buffers(sim_model)), at);
    }
  }
}

BOOST_FIXTURE_TEST_CASE(peak_activation_bytes_per_stage_follow_the_schedules_in_flight_bound, one_thread) {
  // MLP split fc1 relu1 | fc2 relu2 | fc3 relu3 fc4: a slot keeps its input and each child's
  // output, per row 12 + 10 + 10, 10 + 9 + 9 and 9 + 8 + 8 + 5 floats. B = 8 rows in M = 4
  // micro-batches of 2: GPipe holds M slots on every stage, 1F1B min(S - s, M) = 3, 2, 1.
  const std::size_t S = 3, M = 4, rows = 2;
  const double slot_bytes[S] = {32.0 * 4 * rows, 28.0 * 4 * rows, 30.0 * 4 * rows};
  for (const auto kind : both_schedules) {
    lt::sequential_stages model(mlp_net(), stage_options(mlp_case, {"fc2", "fc3"}));
    std::vector<float> p = initial(mlp_net());
    const auto r = pl::simulate_pipeline(model, p, make_sgd_slice, {.schedule = kind, .micro_batches = M},
                                         torch_batches(12, M * rows, 700), 2);
    const bool gpipe = kind == pl::pipeline_schedule_kind::gpipe;
    for (std::size_t s = 0; s < S; ++s) {
      const std::size_t in_flight = gpipe ? M : std::min(S - s, M);
      BOOST_TEST(model.activation_bytes(s, rows) == slot_bytes[s], "stage " << s);
      BOOST_TEST(r.peak_in_flight[s] == in_flight, "stage " << s << " gpipe=" << gpipe);
      BOOST_TEST(model.peak_activation_bytes(s) == static_cast<double>(in_flight) * slot_bytes[s],
                 "stage " << s << " gpipe=" << gpipe);
      BOOST_TEST(model.live_activation_bytes(s) == 0.0, "stage " << s);
      BOOST_TEST_MESSAGE((gpipe ? "gpipe" : "1f1b") << " stage " << s << ": peak activation bytes "
                                                    << model.peak_activation_bytes(s));
    }
  }
}

BOOST_FIXTURE_TEST_CASE(bad_splits_and_stashed_weights_are_refused_by_name, one_thread) {
  auto refused = [](std::vector<std::string> split, std::size_t stages, const std::string& expect) {
    lt::stages_options o = stage_options(resnet_case, std::move(split));
    o.stages = stages;
    try {
      lt::sequential_stages(small_resnet8(), o);
    } catch (const std::invalid_argument& e) {
      BOOST_TEST(std::string(e.what()).find(expect) != std::string::npos, e.what());
      return;
    }
    BOOST_FAIL("accepted a split it cannot take: " + expect);
  };
  refused({"layer9"}, 2, "sequential_stages: split[0]: 'layer9' is not a child of the network (its children: stem, layer1, layer2, layer3, pool, fc)");
  refused({"stem"}, 2, "split[0]: 'stem' is the network's first child, where stage 1 starts");
  refused({"layer3", "layer2"}, 2, "split[1]: 'layer2' must come after 'layer3' in the network's order (stage 2 would be empty");
  refused({"layer2", "layer2"}, 2, "split[1]: 'layer2' must come after 'layer2'");
  refused({}, 7, "sequential_stages: stages: 7 must be in [1, number of children = 6]");
  refused({}, 0, "sequential_stages: stages: 0 must be in [1, number of children = 6]");
  auto refused_shape = [](lt::stages_options o, const std::string& expect) {
    try {
      lt::sequential_stages(small_resnet8(), o);
    } catch (const std::invalid_argument& e) {
      BOOST_TEST(std::string(e.what()).find(expect) != std::string::npos, e.what());
      return;
    }
    BOOST_FAIL("accepted: " + expect);
  };
  lt::stages_options three_channels = stage_options(resnet_case, {"layer2"}), seven = three_channels;
  three_channels.input = {3, 12, 12};
  seven.classes = 7;
  refused_shape(three_channels, "'sequential_stages.input' = [1, 3, 12, 12]: the network's child 'stem' cannot take [1, 3, 12, 12]");
  refused_shape(seven, "'sequential_stages.classes' = 7: the network's output is [1, 5]; expected [rows, classes]");
  // A parameter-free stage is a stage: pool alone.
  BOOST_TEST(lt::sequential_stages(small_resnet8(), stage_options(resnet_case, {"pool", "fc"})).stages() == 3u);
  // Weight stashing hands a backward another buffer than its forward's: refused by name (the
  // first backward of S = 2 under 1F1B is the last stage's loss_backward).
  lt::sequential_stages model(mlp_net(), stage_options(mlp_case, {"fc3"}));
  std::vector<float> p = initial(mlp_net());
  const pl::pipeline_config stash{.micro_batches = 2, .update = pl::pipeline_update::asynchronous, .stash_weights = true};
  try {
    pl::simulate_pipeline(model, p, make_sgd_slice, stash, torch_batches(12, 4, 800), 1);
    BOOST_FAIL("weight stashing accepted");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("'sequential_stages.loss_backward.params'") != std::string::npos, e.what());
    BOOST_TEST(std::string(e.what()).find("must be the flat buffer the forward computed with") != std::string::npos);
  }
}

BOOST_AUTO_TEST_SUITE_END()

