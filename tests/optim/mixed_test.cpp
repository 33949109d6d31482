// Mixed precision, capturable steps and dynamic loss scaling through optim's API: bf16/fp16
// parameters with fp32 master weights in the state, the optimizer's arithmetic bitwise;
// capturable(opt) equal to opt bitwise with the count on the device; the loss scaler's rule
// (skip and back off on overflow, grow after growth_interval finite steps), its exactness for
// powers of two, and why it exists (fp16 gradients below 2^-24 vanish unscaled).
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>
#if defined(__CUDACC__)
#include <cuda_runtime.h>
#include <thrust/device_vector.h>
#endif

#include "heterograd/kernels/cast.hpp"
#include "heterograd/optim.hpp"
#include "messages.hpp"
#include "optim_test_util.hpp"

namespace hg = heterograd;
namespace hk = heterograd::kernels;
namespace o = heterograd::optim;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

template <class H>
std::vector<H> rounded(const std::vector<double>& v) {
  std::vector<H> h(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    h[i] = hk::detail::convert_value<float, H>(static_cast<float>(v[i]));
  return h;
}
template <class H>
std::vector<float> widened(const std::vector<H>& h) {
  std::vector<float> v(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) v[i] = hk::to_float(h[i]);
  return v;
}

const o::schedule lr_changing = o::cosine_decay(0.02, 30, 0.1, 4);

// Every single-pass optimizer, with learning rates that change every step.
const auto single_pass = std::make_tuple(
    o::sgd({.lr = lr_changing, .weight_decay = 0.01}), o::sgd({.lr = lr_changing}),
    o::momentum({.lr = lr_changing, .dampening = 0.1}), o::nesterov({.lr = lr_changing}),
    o::adam({.lr = lr_changing, .weight_decay = 0.01}), o::adamw({.lr = lr_changing}),
    o::adagrad({.lr = lr_changing, .lr_decay = 0.05, .initial_accumulator = 0.1}));

// A capturable run against the host-coefficient run: bitwise on the CPU backends; on a GPU the
// device's pow and cos may differ from the host's in the last bit: 1e-5 relative there.
template <class T>
void check_captured(const std::vector<T>& got, const std::vector<T>& want) {
#if defined(__CUDACC__)
  BOOST_TEST_REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double w = static_cast<double>(want[i]);
    BOOST_TEST(std::abs(static_cast<double>(got[i]) - w) <= 1e-5 * (1 + std::abs(w)));
  }
#else
  BOOST_TEST(got == want);
#endif
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optim_mixed_precision)

BOOST_AUTO_TEST_CASE_TEMPLATE(bf16_and_fp16_params_train_through_fp32_master_weights, B,
                              hg_test::backends) {
  const std::size_t n = 777;
  ot::for_each_in(single_pass, [&](const auto& opt) {
    auto check = [&](auto half) {
      using H = decltype(half);
      const auto p16 = rounded<H>(ot::random_vector(n, 1));
      auto p = ot::to_backend<B>(p16);
      auto ref = ot::to_backend<B>(widened(p16));  // the fp32 run starts at the same values
      auto st = opt.init(B::policy(), ot::span_of<B>(p));
      auto rst = opt.init(B::policy(), ot::span_of<B>(ref));
      // The state: the optimizer's slots, then the master weights (the params as float).
      BOOST_TEST(st.slots.size() == rst.slots.size() + 1);
      BOOST_TEST(hg_test::to_host(st.slots.back()) == widened(p16));
      for (int t = 0; t < 6; ++t) {
        const auto g16 = rounded<H>(ot::random_vector(n, 10 + t));
        auto g = ot::to_backend<B>(g16);
        auto gf = ot::to_backend<B>(widened(g16));
        opt.update(B::policy(), g, st, ot::span_of<B>(p));
        opt.update(B::policy(), gf, rst, ot::span_of<B>(ref));
      }
      const auto master = hg_test::to_host(st.slots.back());
      BOOST_TEST(master == hg_test::to_host(ref), opt.name());
      for (std::size_t k = 0; k + 1 < st.slots.size(); ++k)
        BOOST_TEST(hg_test::to_host(st.slots[k]) == hg_test::to_host(rst.slots[k]));
      BOOST_TEST(st.count == rst.count);
      std::vector<double> md(master.begin(), master.end());
      BOOST_TEST((hg_test::to_host(p) == rounded<H>(md)), "params are the master's rounding");
      // fp32 gradients into bf16 params: the same arithmetic.
      auto gf32 = ot::to_backend<B>(widened(rounded<H>(ot::random_vector(n, 99))));
      opt.update(B::policy(), gf32, st, ot::span_of<B>(p));
      opt.update(B::policy(), gf32, rst, ot::span_of<B>(ref));
      BOOST_TEST(hg_test::to_host(st.slots.back()) == hg_test::to_host(ref));
      // The state is a value like any other: bytes and back.
      BOOST_TEST((o::deserialize<float, typename B::space>(o::serialize(st)) == st));
    };
    check(hk::bf16{});
    check(hk::fp16{});
  });
}

BOOST_AUTO_TEST_CASE(master_weights_keep_steps_that_bf16_cannot_hold) {
  // f(x) = (x - 1.5)^2 / 2 from x = 1 with lr 1e-3: every step moves x by at most 5e-4, below
  // half of bf16's spacing at 1 (2^-8 = 0.0039). Rounding each step to bf16 (no master) gives
  // back x = 1 forever; the fp32 master integrates the steps and its rounding reaches 1.5.
  const o::sgd opt({.lr = 1e-3});
  std::vector<hk::bf16> p(4, hk::to_bf16(1.0f));
  auto st = opt.init(thrust::cpp::par, p);
  std::vector<float> naive(4, 1.0f);
  auto naive_st = opt.init(thrust::cpp::par, naive);
  for (int t = 0; t < 20000; ++t) {
    std::vector<hk::bf16> g(4);
    for (std::size_t i = 0; i < 4; ++i) g[i] = hk::to_bf16(hk::to_float(p[i]) - 1.5f);
    opt.update(thrust::cpp::par, g, st, p);
    std::vector<float> ng(4);
    for (std::size_t i = 0; i < 4; ++i) ng[i] = naive[i] - 1.5f;
    opt.update(thrust::cpp::par, ng, naive_st, naive);
    for (auto& x : naive) x = hk::to_float(hk::to_bf16(x));  // bf16 storage, no master
  }
  for (std::size_t i = 0; i < 4; ++i) {
    BOOST_TEST(naive[i] == 1.0f);
    BOOST_TEST(hk::to_float(p[i]) == 1.5f);
  }
}

BOOST_AUTO_TEST_CASE(mixed_states_and_optimizers_are_checked_by_name) {
  const o::adam opt;
  std::vector<hk::bf16> p(10, hk::to_bf16(1.0f)), g(10, hk::to_bf16(0.5f));
  std::vector<float> pf(10, 1.0f);
  auto plain = opt.init(thrust::cpp::par, pf);  // no master weights
  auto m = hg_test::invalid_argument_message([&] { opt.update(thrust::cpp::par, g, plain, p); });
  BOOST_TEST(contains(m, "adam.state.slots (count)"), m);
  BOOST_TEST(contains(m, "master"), m);
  BOOST_TEST((p == std::vector<hk::bf16>(10, hk::to_bf16(1.0f))));
  auto st = opt.init(thrust::cpp::par, p);
  std::vector<hk::bf16> short_g(9);
  m = hg_test::invalid_argument_message([&] { opt.update(thrust::cpp::par, short_g, st, p); });
  BOOST_TEST(contains(m, "adam.grads"), m);
  BOOST_TEST(st.count == 0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(optim_capturable)

BOOST_AUTO_TEST_CASE_TEMPLATE(capturable_optimizers_equal_their_host_steps_bitwise, B,
                              hg_test::backends) {
  const std::size_t n = 513;
  ot::for_each_in(single_pass, [&](const auto& opt) {
    const auto c = o::capturable(opt);
    auto x = ot::to_backend<B>(ot::random_vector(n, 2)), y = x;
    auto st = opt.init(B::policy(), ot::span_of<B>(x));
    auto cst = c.init(B::policy(), ot::span_of<B>(y));
    BOOST_TEST(cst.kind == "capturable");
    for (int t = 0; t < 9; ++t) {
      auto g = ot::to_backend<B>(ot::random_vector(n, 30 + t));
      opt.update(B::policy(), g, st, ot::span_of<B>(x));
      c.update(B::policy(), g, cst, ot::span_of<B>(y));
    }
    check_captured(hg_test::to_host(y), hg_test::to_host(x));
    BOOST_TEST(c.steps(cst) == 9);
    BOOST_TEST(cst.children[0].count == 0);  // the count lives on the device
    for (std::size_t k = 0; k < st.slots.size(); ++k)
      check_captured(hg_test::to_host(cst.children[0].slots[k]), hg_test::to_host(st.slots[k]));
    // bf16 params: the mixed-precision step, bitwise.
    const auto p16 = rounded<hk::bf16>(ot::random_vector(n, 3));
    auto p = ot::to_backend<B>(p16), q = p;
    auto mst = opt.init(B::policy(), ot::span_of<B>(p));
    auto cmst = c.init(B::policy(), ot::span_of<B>(q));
    for (int t = 0; t < 4; ++t) {
      auto g = ot::to_backend<B>(rounded<hk::bf16>(ot::random_vector(n, 50 + t)));
      opt.update(B::policy(), g, mst, ot::span_of<B>(p));
      c.update(B::policy(), g, cmst, ot::span_of<B>(q));
    }
#if !defined(__CUDACC__)
    BOOST_TEST((hg_test::to_host(q) == hg_test::to_host(p)));
#endif
    check_captured(hg_test::to_host(cmst.children[0].slots.back()),
                   hg_test::to_host(mst.slots.back()));
    BOOST_TEST(c.steps(cmst) == 4);
  });
}

#if defined(__CUDACC__)
BOOST_AUTO_TEST_CASE(a_captured_cuda_graph_replays_capturable_steps) {
  // One step captured on a stream under a non-waiting policy, replayed 5 times, equals 5
  // ordinary capturable steps bitwise (both compute their coefficients on the device), and
  // the device count advances at every replay: nothing of the step ran on the host.
  const auto opt = o::capturable(o::adamw({.lr = lr_changing}));
  const std::size_t n = std::size_t{1} << 16;
  const auto h = ot::random_vector(n, 7);
  const std::vector<float> hx(h.begin(), h.end());
  thrust::device_vector<float> x(hx.begin(), hx.end()), y = x, g(x.size(), 0.01f);
  auto st = opt.init(thrust::cuda::par, x);
  auto rst = opt.init(thrust::cuda::par, y);
  cudaStream_t s = nullptr;
  BOOST_TEST_REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  const auto pol = thrust::cuda::par_nosync.on(s);
  opt.update(pol, g, st, x);  // first calls outside the capture (one-time initialisation)
  opt.update(pol, g, rst, y);
  BOOST_TEST_REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  BOOST_TEST_REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  opt.update(pol, g, st, x);
  BOOST_TEST_REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  BOOST_TEST_REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  for (int k = 0; k < 5; ++k) BOOST_TEST_REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  for (int k = 0; k < 5; ++k) opt.update(pol, g, rst, y);
  BOOST_TEST_REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  BOOST_TEST(opt.steps(st) == 6);
  BOOST_TEST(hg_test::to_host(x) == hg_test::to_host(y));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}
#endif

BOOST_AUTO_TEST_CASE(a_capturable_state_of_the_wrong_shape_is_refused_by_name) {
  const auto c = o::capturable(o::adam{});
  std::vector<float> x(8, 1.0f), g(8, 0.1f);
  auto st = c.init(thrust::cpp::par, x);
  st.slots[0].pop_back();
  auto m = hg_test::invalid_argument_message([&] { c.update(thrust::cpp::par, g, st, x); });
  BOOST_TEST(contains(m, "capturable.state.slots[0] (size)"), m);
  auto plain = o::adam{}.init(thrust::cpp::par, x);
  m = hg_test::invalid_argument_message([&] { c.update(thrust::cpp::par, g, plain, x); });
  BOOST_TEST(contains(m, "capturable.state.kind"), m);
  // A hostile count: negative, fractional, NaN, or one the next step cannot count exactly.
  for (float bad : {-1.0f, 2.5f, std::numeric_limits<float>::quiet_NaN(), 16777216.0f}) {
    auto forged = c.init(thrust::cpp::par, x);
    forged.slots[0][0] = bad;
    m = hg_test::invalid_argument_message([&] { c.update(thrust::cpp::par, g, forged, x); });
    BOOST_TEST(contains(m, "capturable.state.slots[0][0] (step count)"), m);
    if (bad != 16777216.0f) BOOST_CHECK_THROW(c.steps(forged), std::invalid_argument);
  }
  auto last = c.init(thrust::cpp::par, x);
  last.slots[0][0] = 16777215.0f;  // 2^24 - 1: one more step counts exactly
  c.update(thrust::cpp::par, g, last, x);
  BOOST_TEST(c.steps(last) == 16777216);
  x.assign(8, 1.0f);
  BOOST_TEST((x == std::vector<float>(8, 1.0f)));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(optim_loss_scale)

BOOST_AUTO_TEST_CASE(bad_settings_are_refused_by_name) {
  auto m = hg_test::invalid_argument_message(
      [] { o::dynamic_loss_scale(o::sgd{}, {.growth_factor = 1.0}); });
  BOOST_TEST(contains(m, "'dynamic_loss_scale.growth_factor' = 1: must be finite and > 1"), m);
  m = hg_test::invalid_argument_message(
      [] { o::dynamic_loss_scale(o::sgd{}, {.backoff_factor = 1.0}); });
  BOOST_TEST(contains(m, "dynamic_loss_scale.backoff_factor"), m);
  m = hg_test::invalid_argument_message(
      [] { o::dynamic_loss_scale(o::sgd{}, {.growth_interval = 0}); });
  BOOST_TEST(contains(m, "dynamic_loss_scale.growth_interval"), m);
  m = hg_test::invalid_argument_message([] { o::dynamic_loss_scale(o::sgd{}, {.init_scale = 0}); });
  BOOST_TEST(contains(m, "dynamic_loss_scale.init_scale"), m);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(overflow_skips_and_backs_off_finite_runs_grow_the_scale, B,
                              hg_test::backends) {
  const auto opt = o::dynamic_loss_scale(o::adam{}, {.init_scale = 8.0, .growth_interval = 3});
  const std::size_t n = 300;
  auto x = ot::to_backend<B>(ot::random_vector(n, 4));
  auto st = opt.init(B::policy(), ot::span_of<B>(x));
  BOOST_TEST(opt.scale(st) == 8.0);
  // finite, finite, overflow, then four finite: scales 8 8 | 4 | 4 4 8 | 8.
  const std::vector<bool> finite = {true, true, false, true, true, true, true};
  const std::vector<double> want = {8, 8, 4, 4, 4, 8, 8};
  for (std::size_t t = 0; t < finite.size(); ++t) {
    auto hgv = ot::random_vector(n, 70 + t);
    if (!finite[t]) hgv[n / 2] = std::numeric_limits<double>::infinity();
    auto g = ot::to_backend<B>(hgv);
    const auto x0 = hg_test::to_host(x);
    const auto inner0 = st.children[0];
    opt.update(B::policy(), g, st, ot::span_of<B>(x));
    if (!finite[t]) {  // skipped: nothing but the scale and the skip count changed
      BOOST_TEST(hg_test::to_host(x) == x0);
      BOOST_TEST((st.children[0] == inner0));
    }
    BOOST_TEST(opt.scale(st) == want[t], "after step " << t);
  }
  BOOST_TEST(opt.skips(st) == 1);
  BOOST_TEST(st.count == 6);
  BOOST_TEST(st.children[0].count == 6);
  BOOST_TEST((o::deserialize<double, typename B::space>(o::serialize(st)) == st));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_power_of_two_scale_trains_bitwise_as_unscaled, B,
                              hg_test::backends) {
  // Gradients of the loss times 2^10, divided back by 2^10: exact, so the run equals the
  // unscaled one bit for bit (float params, and fp16 params through the mixed kernel).
  const o::adamw inner({.lr = lr_changing});
  const auto opt = o::dynamic_loss_scale(inner, {.init_scale = 1024.0, .growth_interval = 2});
  const std::size_t n = 400;
  auto x = ot::to_backend<B>(ot::random_vector(n, 5)), y = x;
  auto st = opt.init(B::policy(), ot::span_of<B>(x));
  auto rst = inner.init(B::policy(), ot::span_of<B>(y));
  for (int t = 0; t < 5; ++t) {
    const auto hgv = ot::random_vector(n, 80 + t);
    const double s = opt.scale(st);  // grows: 1024, 1024, 2048, ...
    std::vector<double> scaled(n);
    for (std::size_t i = 0; i < n; ++i) scaled[i] = hgv[i] * s;
    auto gs = ot::to_backend<B>(scaled);
    auto g = ot::to_backend<B>(hgv);
    opt.update(B::policy(), gs, st, ot::span_of<B>(x));
    inner.update(B::policy(), g, rst, ot::span_of<B>(y));
  }
  BOOST_TEST(opt.scale(st) == 4096.0);
  BOOST_TEST(hg_test::to_host(x) == hg_test::to_host(y));
  // fp16 params and gradients.
  const auto p16 = rounded<hk::fp16>(ot::random_vector(n, 6));
  auto p = ot::to_backend<B>(p16), q = p;
  auto mst = opt.init(B::policy(), ot::span_of<B>(p));
  auto rmst = inner.init(B::policy(), ot::span_of<B>(q));
  for (int t = 0; t < 3; ++t) {
    const auto g16 = rounded<hk::fp16>(ot::random_vector(n, 90 + t, -0.01, 0.01));
    const double s = opt.scale(mst);
    std::vector<hk::fp16> gs16(n);
    for (std::size_t i = 0; i < n; ++i) gs16[i] = hk::to_fp16(hk::to_float(g16[i]) * float(s));
    auto gs = ot::to_backend<B>(gs16);
    auto g = ot::to_backend<B>(g16);
    opt.update(B::policy(), gs, mst, ot::span_of<B>(p));
    inner.update(B::policy(), g, rmst, ot::span_of<B>(q));
  }
  BOOST_TEST(hg_test::to_host(mst.children[0].slots.back()) ==
             hg_test::to_host(rmst.slots.back()));
  BOOST_TEST((hg_test::to_host(p) == hg_test::to_host(q)));
}

BOOST_AUTO_TEST_CASE(scaling_keeps_fp16_gradients_that_would_vanish) {
  // Gradients of 1e-8 are below fp16's least subnormal (2^-24 = 6e-8): cast to fp16 they are
  // 0 and plain mixed-precision SGD does not move; scaled by 2^16 first they are 6.6e-4,
  // normal fp16 values, and the master moves by lr * 1e-8 to within fp16's relative
  // rounding (2^-11).
  const o::sgd inner({.lr = 1000.0});
  const auto opt = o::dynamic_loss_scale(inner, {.init_scale = 65536.0});
  const float g = 1e-8f;
  std::vector<hk::fp16> p(3, hk::to_fp16(0.0f)), q = p;
  auto st = opt.init(thrust::cpp::par, p);
  auto rst = inner.init(thrust::cpp::par, q);
  const std::vector<hk::fp16> unscaled(3, hk::to_fp16(g));
  const std::vector<hk::fp16> scaled(3, hk::to_fp16(g * 65536.0f));
  BOOST_TEST(unscaled[0].bits == 0);
  inner.update(thrust::cpp::par, unscaled, rst, q);
  opt.update(thrust::cpp::par, scaled, st, p);
  BOOST_TEST(rst.slots.back()[0] == 0.0f);
  const float moved = -st.children[0].slots.back()[0];
  BOOST_TEST(std::abs(moved - 1e-5f) <= 1e-5f * std::ldexp(1.0f, -11));
}

BOOST_AUTO_TEST_CASE(a_forged_loss_scale_state_is_refused_by_name) {
  const auto opt = o::dynamic_loss_scale(o::sgd{});
  std::vector<float> x(4, 1.0f), g(4, 0.5f);
  auto forge = [&](std::size_t k, std::int64_t v) {
    auto st = opt.init(thrust::cpp::par, x);
    st.counters[k] = v;
    return hg_test::invalid_argument_message([&] { opt.update(thrust::cpp::par, g, st, x); });
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (double bad : {nan, 0.0, -2.0, 1e-300, 1e300}) {
    const auto m = forge(2, std::bit_cast<std::int64_t>(bad));
    BOOST_TEST(contains(m, "dynamic_loss_scale.state.counters[2] (scale)"), m);
  }
  BOOST_TEST(contains(forge(0, -1), "dynamic_loss_scale.state.counters (skips, growth count)"));
  BOOST_TEST(contains(forge(1, -1), "dynamic_loss_scale.state.counters (skips, growth count)"));
  BOOST_TEST((x == std::vector<float>(4, 1.0f)));
}

BOOST_AUTO_TEST_CASE(a_scale_that_would_underflow_throws_and_changes_nothing) {
  const auto opt = o::dynamic_loss_scale(o::sgd{}, {.init_scale = 1.0, .backoff_factor = 0.5});
  std::vector<float> x(4, 1.0f), bad(4, std::numeric_limits<float>::quiet_NaN());
  auto st = opt.init(thrust::cpp::par, x);
  for (int t = 0; t < 126; ++t) opt.update(thrust::cpp::par, bad, st, x);  // down to 2^-126
  BOOST_TEST(opt.scale(st) == std::ldexp(1.0, -126));
  const auto before = st;
  BOOST_CHECK_THROW(opt.update(thrust::cpp::par, bad, st, x), std::runtime_error);
  BOOST_TEST((st == before));
  BOOST_TEST((x == std::vector<float>(4, 1.0f)));
}

BOOST_AUTO_TEST_SUITE_END()
