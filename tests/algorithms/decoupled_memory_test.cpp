// Decoupled local learning (local_learning, optim_stepper) with its state in the memories of
// kernels/memory.hpp: Thrust device vectors of the build's device system (OpenMP on the CPU)
// and guarded memory (tests/support/guarded_memory.hpp: emulated device buffers, inaccessible
// outside the memory's kernels, every transfer counted), each against the default host run.
//   - K = 3 modules with auxiliary heads, PGL's global steps every 4th iteration, Adam in
//     every module and head: the same losses, parameters and heads bit for bit;
//   - a step makes no upload, no download, no scalar read and no buffer: the chain computes
//     on the buffers where they are and the steppers update them there;
//   - a checkpoint is the same bytes in every memory and restores across memories; one of
//     another model (parameter count, head count) is refused by name and changes nothing;
//   - the module pipeline on 3 threads carries its activations in the memory's buffers and
//     equals the sequential host loop bitwise; on guarded memory it makes one upload per batch
//     (the batch entering module 0), no download, and a bounded number of buffers however
//     many batches run;
//   - the pipeline over 3 inproc ranks stages each batch through the host (one upload of its
//     inputs, one download of its output per rank and batch, nothing else) and gathers the
//     sequential host loop's modules and heads bitwise; PGL's global steps over the ranks stage
//     each slice (its owner downloads it, the others upload it) and the batch, and equal the
//     host loop's bitwise;
//   - a host chain cannot compute on device spans, nor a host stepper step them (compile-time
//     checks; local_learning on CUDA memory is compiled by nvcc in device_paths.cu).
// The chains here are the MLP chain behind the memory: on guarded memory the MLP computes with
// the guarded pages open (as a device model computes on its device's memory); Thrust's OpenMP
// device system is host memory (host_space), so there the MLP reads the device vectors through
// their raw pointers. On a GPU the chain would be a model on that device.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <thrust/execution_policy.h>

#include "guarded_memory.hpp"
#include "hg_test.hpp"
#include "messages.hpp"
#include "heterograd/algorithms/decoupled/local_learning.hpp"
#include "heterograd/algorithms/decoupled/pipeline.hpp"
#include "heterograd/algorithms/decoupled/transport_pipeline.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/core/archive.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/kernels/thrust_memory.hpp"
#include "heterograd/optim/optimizers.hpp"

namespace {

namespace hg = heterograd;
namespace hk = heterograd::kernels;
namespace nn = heterograd::nn;
namespace dc = heterograd::algorithms::decoupled;

struct no_guard {};

/// mlp_chain computing on spans of `Space` (see the top of this file). `Open` is held while the
/// MLP touches the buffers.
template <class Space, class Open>
class mirrored_chain {
 public:
  using memory_space = Space;
  explicit mirrored_chain(dc::mlp_chain c) : c_(std::move(c)) {}

  std::size_t modules() const { return c_.modules(); }
  std::size_t num_params() const { return c_.num_params(); }
  std::size_t module_offset(std::size_t k) const { return c_.module_offset(k); }
  std::size_t input_width(std::size_t k) const { return c_.input_width(k); }
  std::size_t head_size(std::size_t k) const { return c_.head_size(k); }
  void init_head(std::size_t k, hg::span<float, Space> head, std::uint64_t seed) {
    [[maybe_unused]] const Open open;
    c_.init_head(k, host(head), seed);
  }
  dc::basic_module_step<Space> local_gradient(std::size_t k, hg::span<float, Space> p, const float* x,
                                              hg::span<const std::int32_t> y, hg::span<float, Space> g,
                                              hg::span<float, Space> head, hg::span<float, Space> head_g) {
    [[maybe_unused]] const Open open;
    const auto r = c_.local_gradient(k, host(p), x, y, host(g), host(head), host(head_g));
    return {r.loss, hg::span<const float, Space>(r.output.data(), r.output.size())};
  }
  float global_gradient(hg::span<float, Space> p, const float* x, hg::span<const std::int32_t> y,
                        hg::span<float, Space> g) {
    [[maybe_unused]] const Open open;
    return c_.global_gradient(host(p), x, y, host(g));
  }

 private:
  static hg::span<float> host(hg::span<float, Space> s) { return hg::span<float>(s.data(), s.size()); }
  dc::mlp_chain c_;
};

using thrust_memory_t = decltype(hk::thrust_memory(thrust::device));

struct thrust_case {
  static constexpr const char* name = "thrust device vectors";
  static auto make() { return hk::thrust_memory(thrust::device); }
  using chain = mirrored_chain<typename thrust_memory_t::memory_space, no_guard>;  // host: OpenMP
};
struct guarded_case {
  static constexpr const char* name = "guarded memory";
  static auto make() { return hg_test::guarded_memory{}; }
  using chain = mirrored_chain<hg::host_space, hg_test::guard_scope>;
};
using memories = std::tuple<thrust_case, guarded_case>;

const nn::mlp<float>& network() {
  static const nn::mlp<float> net({14, 12, 10, 8, 4});
  return net;
}
dc::local_learning_config config() {
  return {.modules = 3, .head_hidden = {6}, .pgl = {.period = 4, .total_epochs = 1}, .seed = 5};
}
std::vector<float> initial() {
  std::vector<float> p(network().num_params());
  network().init(p, hg_test::seed());
  return p;
}
dc::mlp_chain mlp_chain() {
  const auto cfg = config();
  return dc::mlp_chain(network(), cfg.bounds, cfg.modules, cfg.head_hidden);
}

/// Batch t: rows x 14 inputs, labels in [0, 4), class-dependent means.
struct batch_data {
  std::vector<float> x;
  std::vector<std::int32_t> y;
};
batch_data batch(std::size_t t) {
  constexpr std::size_t rows = 8, dim = 14, classes = 4;
  const hg::counter_rng rng(hg_test::seed() + 17, t);
  batch_data b{std::vector<float>(rows * dim), std::vector<std::int32_t>(rows)};
  for (std::size_t r = 0; r < rows; ++r) {
    b.y[r] = static_cast<std::int32_t>(rng.below(1u << 30 | r, classes));
    for (std::size_t j = 0; j < dim; ++j)
      b.x[r * dim + j] = static_cast<float>(rng.normal(r * dim + j)) +
                         (j % classes == static_cast<std::size_t>(b.y[r]) ? 1.0f : 0.0f);
  }
  return b;
}

const hg::optim::adam adam_opt({.lr = 0.01f});

template <class Memory>
using stepper = dc::optim_stepper<hg::optim::adam, Memory>;
template <class Memory, class Chain>
using ll_t = dc::local_learning<stepper<Memory>, Chain, Memory>;

template <class Memory, class Chain>
ll_t<Memory, Chain> make_ll(Chain chain, const Memory& m) {
  return ll_t<Memory, Chain>(std::move(chain), initial(), config(), [&](std::size_t) { return stepper<Memory>(adam_opt, m); },
                             m);
}

/// Trains iterations [from, to): the losses.
template <class LL>
std::vector<float> train(LL& ll, std::size_t from, std::size_t to) {
  std::vector<float> losses;
  for (std::size_t t = from; t < to; ++t) {
    const auto b = batch(t);
    losses.push_back(ll.step(b.x.data(), hg::span<const std::int32_t>(b.y), t, 0));
  }
  return losses;
}

template <class LL>
std::vector<float> host_params(const LL& ll) {
  return ll.memory().download(hk::cview(ll.memory(), ll.params()));
}
template <class LL>
std::vector<float> host_head(const LL& ll, std::size_t k) {
  return ll.memory().download(hk::cview(ll.memory(), ll.head_params(k)));
}
bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Rank 0's modules and heads after gather_modules, as host vectors, against the host loop's.
struct gathered_model {
  std::vector<float> params, head0, head1;
  template <class LL>
  void take(const LL& ll) {
    params = host_params(ll);
    head0 = host_head(ll, 0);
    head1 = host_head(ll, 1);
  }
  template <class LL>
  void check_equals(const LL& host, const char* name) const {
    BOOST_TEST(bitwise_equal(params, host.params()), name);
    BOOST_TEST(bitwise_equal(head0, host.head_params(0)), name);
    BOOST_TEST(bitwise_equal(head1, host.head_params(1)), name);
  }
};

template <class LL>
std::vector<std::byte> checkpoint(LL& ll) {
  hg::archive_writer w;
  ll.serialize(w);
  return w.bytes();
}

// ---- compile-time: the spaces must agree ----------------------------------------------------
// (The CPU has no device memory: Thrust's OpenMP device system is host memory. The same checks
// on a CUDA memory, local_learning included, are compiled by nvcc in tests/support/device_paths.cu.)
using device_chain = mirrored_chain<hg::device_space, no_guard>;
static_assert(dc::module_chain<dc::mlp_chain>);
static_assert(!dc::module_chain<dc::mlp_chain, hg::device_space>, "the MLP chain computes on host spans");
static_assert(dc::module_chain<device_chain>);
static_assert(!dc::module_chain<device_chain, hg::host_space>, "a device chain takes no host spans");
static_assert(dc::module_optimizer<stepper<hk::serial_host_memory>>);
static_assert(!dc::module_optimizer<stepper<hk::serial_host_memory>, hg::device_space>,
              "a host stepper takes no device spans");

}  // namespace

BOOST_AUTO_TEST_SUITE(decoupled_memory)

BOOST_AUTO_TEST_CASE_TEMPLATE(modules_heads_and_global_steps_equal_the_host_run_bitwise, M, memories) {
  const auto memory = M::make();
  auto host = make_ll(mlp_chain(), hk::serial_host_memory{});
  auto dev = make_ll(typename M::chain(mlp_chain()), memory);
  const std::size_t T = 16;  // iterations 3, 7, 11, 15 are PGL's global steps
  const auto lh = train(host, 0, T), ld = train(dev, 0, T);
  BOOST_TEST(bitwise_equal(lh, ld), M::name);
  BOOST_TEST(bitwise_equal(host.params(), host_params(dev)), M::name);
  for (std::size_t k = 0; k + 1 < host.modules(); ++k)
    BOOST_TEST(bitwise_equal(host.head_params(k), host_head(dev, k)), M::name << ": head " << k);
  BOOST_TEST(!bitwise_equal(host.params(), initial()));  // it trained
}

BOOST_AUTO_TEST_CASE(a_step_makes_no_transfer_no_scalar_read_and_no_buffer) {
  const hg_test::guarded_memory memory;
  auto ll = make_ll(guarded_case::chain(mlp_chain()), memory);
  const auto made = memory.counts();
  // Construction: the parameters and two heads uploaded, gradients and head gradients made.
  BOOST_TEST(made.uploads == 3u);
  BOOST_TEST(made.buffers == 3u);
  BOOST_TEST(made.downloads == 0u);
  memory.reset_counts();
  train(ll, 0, 8);  // 6 local iterations (3 modules, 5 optimizer steps each) and 2 global ones
  const auto c = memory.counts();
  BOOST_TEST(c.uploads == 0u);
  BOOST_TEST(c.downloads == 0u);
  BOOST_TEST(c.scalar_reads == 0u);
  BOOST_TEST(c.buffers == 0u);
  BOOST_TEST(c.kernels == 6u * 5u + 2u * 3u);  // one Adam pass per module body and head
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_checkpoint_is_the_same_bytes_in_every_memory_and_restores_across_them, M,
                              memories) {
  const auto memory = M::make();
  auto host = make_ll(mlp_chain(), hk::serial_host_memory{});
  auto dev = make_ll(typename M::chain(mlp_chain()), memory);
  train(host, 0, 6);
  train(dev, 0, 6);
  const auto bytes = checkpoint(dev);
  BOOST_TEST((bytes == checkpoint(host)), M::name);
  // The device run's checkpoint restored into a fresh host run continues like the device run.
  auto restored = make_ll(mlp_chain(), hk::serial_host_memory{});
  hg::archive_reader r(bytes);
  restored.serialize(r);
  BOOST_TEST(r.done());
  const auto lr = train(restored, 6, 12), ld = train(dev, 6, 12);
  BOOST_TEST(bitwise_equal(lr, ld), M::name);
  BOOST_TEST(bitwise_equal(restored.params(), host_params(dev)), M::name);
}

BOOST_AUTO_TEST_CASE(a_checkpoint_of_another_model_is_refused_by_name) {
  const hg_test::guarded_memory memory;
  auto ll = make_ll(guarded_case::chain(mlp_chain()), memory);
  const nn::mlp<float> other({14, 9, 4});
  std::vector<float> p(other.num_params());
  ll_t<hk::serial_host_memory, dc::mlp_chain> small(
      dc::mlp_chain(other, {}, 2, {6}), p, config(),
      [](std::size_t) { return stepper<hk::serial_host_memory>(adam_opt); });
  const auto bytes = checkpoint(small);
  hg::archive_reader r(bytes);
  const auto before = host_params(ll);
  const std::string what = hg_test::invalid_argument_message([&] { ll.serialize(r); });
  BOOST_TEST(what.find("local_learning.params") != std::string::npos, what);
  BOOST_TEST(bitwise_equal(host_params(ll), before));  // nothing changed
}

dc::activation_message pipeline_batch(std::size_t t) {
  auto b = batch(t);
  return {t, std::move(b.x), std::move(b.y)};
}

BOOST_AUTO_TEST_CASE_TEMPLATE(the_module_pipeline_on_threads_equals_the_sequential_host_loop_bitwise, M, memories) {
  const auto memory = M::make();
  auto host = make_ll(mlp_chain(), hk::serial_host_memory{});
  auto dev = make_ll(typename M::chain(mlp_chain()), memory);
  const std::size_t T = 24;
  for (std::size_t t = 0; t < T; ++t) {  // every module's local step in order (no PGL step)
    const auto b = batch(t);
    const float* x = b.x.data();
    for (std::size_t k = 0; k < host.modules(); ++k) x = host.step_module(k, x, b.y).output.data();
  }
  const dc::pipeline_options opt{.queue_capacity = 2};
  const auto report = dc::run_pipeline(dev, pipeline_batch, T, opt);
  BOOST_TEST(bitwise_equal(host.params(), host_params(dev)), M::name);
  for (std::size_t k = 0; k + 1 < host.modules(); ++k)
    BOOST_TEST(bitwise_equal(host.head_params(k), host_head(dev, k)), M::name << ": head " << k);
  BOOST_TEST(report.busy_seconds.size() == 3u);
}

BOOST_AUTO_TEST_CASE(the_pipeline_moves_one_upload_per_batch_and_recycles_its_buffers) {
  const hg_test::guarded_memory memory;
  auto ll = make_ll(guarded_case::chain(mlp_chain()), memory);
  memory.reset_counts();
  const std::size_t T = 30, capacity = 2, edges = 2;
  dc::run_pipeline(ll, pipeline_batch, T, {.queue_capacity = capacity});
  const auto c = memory.counts();
  BOOST_TEST(c.uploads == T);  // each batch into module 0's input buffer
  BOOST_TEST(c.upload_bytes == T * 8 * 14 * sizeof(float));
  BOOST_TEST(c.downloads == 0u);
  BOOST_TEST(c.scalar_reads == 0u);
  // Made once: module 0's input and each edge's capacity + 2 buffers, whatever T is.
  BOOST_TEST(c.buffers <= 1 + edges * (capacity + 2));
  // One Adam pass per body and head, one output copy per edge and batch.
  BOOST_TEST(c.kernels == T * (3 + 2) + T * edges);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(the_pipeline_over_inproc_ranks_stages_through_the_host_and_equals_the_host_loop, M,
                              memories) {
  auto host = make_ll(mlp_chain(), hk::serial_host_memory{});
  const std::size_t T = 20, K = 3;
  for (std::size_t t = 0; t < T; ++t) {
    const auto b = batch(t);
    const float* x = b.x.data();
    for (std::size_t k = 0; k < K; ++k) x = host.step_module(k, x, b.y).output.data();
  }
  gathered_model gathered;
  std::vector<hg_test::transfer_counts> pipeline(K), gather(K);
  hg::comm::inproc::spawn(static_cast<int>(K), [&](const hg::comm::inproc::communicator& c) {
    const auto memory = M::make();
    auto ll = make_ll(typename M::chain(mlp_chain()), memory);
    const auto r = static_cast<std::size_t>(c.rank());
    if constexpr (std::is_same_v<decltype(memory), const hg_test::guarded_memory>) memory.reset_counts();
    dc::run_pipeline_over(c, ll, pipeline_batch, T, {.queue_capacity = 2});
    if constexpr (std::is_same_v<decltype(memory), const hg_test::guarded_memory>) {
      pipeline[r] = memory.counts();
      memory.reset_counts();
    }
    dc::gather_modules(c, ll);
    if constexpr (std::is_same_v<decltype(memory), const hg_test::guarded_memory>) gather[r] = memory.counts();
    if (r == 0) gathered.take(ll);
  });
  gathered.check_equals(host, M::name);
  if constexpr (std::is_same_v<M, guarded_case>) {
    for (std::size_t r = 0; r < K; ++r) {
      BOOST_TEST(pipeline[r].uploads == T, "rank " << r);                         // its inputs
      BOOST_TEST(pipeline[r].downloads == (r + 1 < K ? T : 0u), "rank " << r);  // its output
      BOOST_TEST(pipeline[r].scalar_reads == 0u, "rank " << r);
      BOOST_TEST(pipeline[r].buffers <= 1u, "rank " << r);  // one input buffer, made once
    }
    BOOST_TEST(gather[0].uploads == 3u);  // module 1, head 1, module 2
    BOOST_TEST(gather[1].downloads == 2u);
    BOOST_TEST(gather[2].downloads == 1u);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(pgl_global_steps_over_inproc_ranks_stage_each_slice_and_equal_the_host_loop, M,
                              memories) {
  // Two rounds of T pipelined local iterations and one global step (global_step_over) over K
  // inproc ranks, every rank's local learning in memory M: the gathered modules and heads are
  // the sequential host loop's bitwise. On guarded memory a global step moves exactly the
  // documented transfers: rank k downloads its slice, uploads the K - 1 others and the batch.
  auto host = make_ll(mlp_chain(), hk::serial_host_memory{});
  const std::size_t T = 6, K = 3, rounds = 2;
  for (std::size_t r = 0; r < rounds; ++r) {
    for (std::size_t t = r * T; t < (r + 1) * T; ++t) {
      const auto b = batch(t);
      const float* x = b.x.data();
      for (std::size_t k = 0; k < K; ++k) x = host.step_module(k, x, b.y).output.data();
    }
    const auto g = batch(1000 + r);
    host.global_step(g.x.data(), hg::span<const std::int32_t>(g.y));
  }
  gathered_model gathered;
  std::vector<hg_test::transfer_counts> global(K);
  hg::comm::inproc::spawn(static_cast<int>(K), [&](const hg::comm::inproc::communicator& c) {
    const auto memory = M::make();
    auto ll = make_ll(typename M::chain(mlp_chain()), memory);
    const auto rank = static_cast<std::size_t>(c.rank());
    const dc::pipeline_options opt{.max_rows = 8};
    for (std::size_t r = 0; r < rounds; ++r) {
      dc::run_pipeline_over(c, ll, [&](std::size_t i) { return pipeline_batch(r * T + i); }, T, opt);
      std::vector<float> x;
      std::vector<std::int32_t> y;
      if (rank == 0) {
        auto g = batch(1000 + r);
        x = std::move(g.x);
        y = std::move(g.y);
      }
      if constexpr (std::is_same_v<M, guarded_case>) memory.reset_counts();
      dc::global_step_over(c, ll, x, y, opt);
      if constexpr (std::is_same_v<M, guarded_case>)
        if (r == 0) global[rank] = memory.counts();
    }
    dc::gather_modules(c, ll);
    if (rank == 0) gathered.take(ll);
  });
  gathered.check_equals(host, M::name);
  if constexpr (std::is_same_v<M, guarded_case>) {
    for (std::size_t r = 0; r < K; ++r) {
      BOOST_TEST(global[r].downloads == 1u, "rank " << r);    // its own slice
      BOOST_TEST(global[r].uploads == K - 1 + 1, "rank " << r);  // the others' slices, the batch
      BOOST_TEST(global[r].upload_bytes == (network().num_params() - global[r].download_bytes / sizeof(float) +
                                            8 * 14) * sizeof(float),
                 "rank " << r);
      BOOST_TEST(global[r].buffers == 0u, "rank " << r);  // the batch's buffer comes with its upload
      BOOST_TEST(global[r].scalar_reads == 0u, "rank " << r);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_checkpoint_with_other_heads_is_refused_and_changes_nothing) {
  // K = 2 over the same network: the same parameter count, one head instead of two. The
  // parameters are read before the head count: the read must not have kept them.
  const hg_test::guarded_memory memory;
  auto ll = make_ll(guarded_case::chain(mlp_chain()), memory);
  train(ll, 0, 3);
  auto cfg = config();
  cfg.modules = 2;
  ll_t<hk::serial_host_memory, dc::mlp_chain> two(
      dc::mlp_chain(network(), {}, 2, cfg.head_hidden), initial(), cfg,
      [](std::size_t) { return stepper<hk::serial_host_memory>(adam_opt); });
  train(two, 0, 5);
  const auto bytes = checkpoint(two);
  const auto before = host_params(ll), head0 = host_head(ll, 0), head1 = host_head(ll, 1);
  BOOST_REQUIRE(!bitwise_equal(before, two.params()));
  hg::archive_reader r(bytes);
  const std::string what = hg_test::invalid_argument_message([&] { ll.serialize(r); });
  BOOST_TEST(what.find("local_learning.heads") != std::string::npos, what);
  BOOST_TEST(bitwise_equal(host_params(ll), before));
  BOOST_TEST(bitwise_equal(host_head(ll, 0), head0));
  BOOST_TEST(bitwise_equal(host_head(ll, 1), head1));
  // ...and it trains on as an untouched twin does.
  auto twin = make_ll(guarded_case::chain(mlp_chain()), memory);
  train(twin, 0, 3);
  BOOST_TEST(bitwise_equal(train(ll, 3, 6), train(twin, 3, 6)));
}

BOOST_AUTO_TEST_CASE(a_checkpoint_of_the_same_network_split_elsewhere_is_refused_at_load) {
  // Equal hidden widths: split after layer 1 or after layer 2, the parameter count, the head
  // count and the head's size agree; only the module slices (so the optimizer states) differ.
  const nn::mlp<float> net({14, 10, 10, 10, 4});
  std::vector<float> p(net.num_params());
  net.init(p, hg_test::seed());
  auto cfg = config();
  cfg.modules = 2;
  const auto chain = [&](dc::module_bounds bounds) { return dc::mlp_chain(net, std::move(bounds), 2, cfg.head_hidden); };
  ll_t<hk::serial_host_memory, dc::mlp_chain> early(chain({0, 1, 4}), p, cfg,
                                                    [](std::size_t) { return stepper<hk::serial_host_memory>(adam_opt); });
  train(early, 0, 3);  // states exist: the first module's slice is 14 x 10 + 10 = 150
  const auto bytes = checkpoint(early);
  const hg_test::guarded_memory memory;
  const auto make = [&](dc::module_bounds bounds) {
    using C = guarded_case::chain;
    return ll_t<hg_test::guarded_memory, C>(C(chain(std::move(bounds))), p, cfg,
                                            [&](std::size_t) { return stepper<hg_test::guarded_memory>(adam_opt, memory); },
                                            memory);
  };
  auto late = make({0, 2, 4});
  train(late, 0, 3);
  const auto before = host_params(late), head = host_head(late, 0);
  hg::archive_reader r(bytes);
  const std::string what = hg_test::invalid_argument_message([&] { late.serialize(r); });
  BOOST_TEST(what.find("local_learning.module[0].optimizer") != std::string::npos, what);
  BOOST_TEST(what.find("150") != std::string::npos, what);  // the state's size, named
  BOOST_TEST(bitwise_equal(host_params(late), before));     // nothing changed
  BOOST_TEST(bitwise_equal(host_head(late, 0), head));
  // ...and it trains on as an untouched twin does (its optimizer states were kept too).
  auto twin = make({0, 2, 4});
  train(twin, 0, 3);
  BOOST_TEST(bitwise_equal(train(late, 3, 6), train(twin, 3, 6)));
}

BOOST_AUTO_TEST_SUITE_END()
