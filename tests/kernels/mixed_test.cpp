// Mixed-precision and capturable updates (kernels/mixed.hpp, kernels/capturable.hpp): the
// master weights follow the fp32 update bitwise and the 16-bit parameters are their rounding;
// a capturable step (coefficients computed by a device prologue) equals the host-coefficient
// step bitwise; sizes are checked before anything is written. Typed over the backends.
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/kernels/capturable.hpp"
#include "heterograd/kernels/cast.hpp"
#include "heterograd/kernels/mixed.hpp"
#include "heterograd/kernels/reduce.hpp"
#include "heterograd/kernels/updates.hpp"
#include "heterograd/optim/schedule.hpp"
#include "kernel_test_util.hpp"
#include "messages.hpp"

namespace hg = heterograd;
namespace hk = heterograd::kernels;

namespace {

using sched = heterograd::optim::schedule;

// One optimizer under every path. Each runs step t (1-based) on spans of the backend.
struct sgd_case {
  static constexpr int slots = 0;
  static constexpr const char* name = "sgd";
  hk::sgd_config<sched> a;
  template <class Pol, class T, class S>
  void full(const Pol& pol, hg::span<T, S> p, hg::span<const T, S> g, hg::span<T, S>,
            hg::span<T, S>, std::int64_t t) const {
    hk::sgd(pol, p, g, a, {.step = t});
  }
  template <class Pol, class P, class G, class S>
  void mixed(const Pol& pol, hg::span<P, S> p, hg::span<const G, S> g, hg::span<float, S> w,
             hg::span<float, S>, hg::span<float, S>, std::int64_t t, float gs) const {
    hk::sgd_mixed(pol, p, g, w, a, {.step = t}, {.grad_scale = gs});
  }
  template <class Pol, class T, class S>
  void captured(const Pol& pol, hg::span<T, S> p, hg::span<const T, S> g, hg::span<T, S>,
                hg::span<T, S>, hg::span<T, S> words) const {
    hk::sgd_capturable(pol, p, g, words, a);
  }
  template <class Pol, class P, class G, class S>
  void captured_mixed(const Pol& pol, hg::span<P, S> p, hg::span<const G, S> g,
                      hg::span<float, S> w, hg::span<float, S>, hg::span<float, S>,
                      hg::span<float, S> words) const {
    hk::sgd_capturable(pol, p, g, w, words, a);
  }
};

struct momentum_case {
  static constexpr int slots = 1;
  static constexpr const char* name = "momentum";
  hk::momentum_config<sched> a;
  bool nesterov;
  template <class Pol, class T, class S>
  void full(const Pol& pol, hg::span<T, S> p, hg::span<const T, S> g, hg::span<T, S> s0,
            hg::span<T, S>, std::int64_t t) const {
    hk::momentum(pol, p, g, s0, a, {.step = t, .nesterov = nesterov});
  }
  template <class Pol, class P, class G, class S>
  void mixed(const Pol& pol, hg::span<P, S> p, hg::span<const G, S> g, hg::span<float, S> w,
             hg::span<float, S> s0, hg::span<float, S>, std::int64_t t, float gs) const {
    hk::momentum_mixed(pol, p, g, w, s0, a, {.step = t, .nesterov = nesterov}, {.grad_scale = gs});
  }
  template <class Pol, class T, class S>
  void captured(const Pol& pol, hg::span<T, S> p, hg::span<const T, S> g, hg::span<T, S> s0,
                hg::span<T, S>, hg::span<T, S> words) const {
    hk::momentum_capturable(pol, p, g, s0, words, a, {.nesterov = nesterov});
  }
  template <class Pol, class P, class G, class S>
  void captured_mixed(const Pol& pol, hg::span<P, S> p, hg::span<const G, S> g,
                      hg::span<float, S> w, hg::span<float, S> s0, hg::span<float, S>,
                      hg::span<float, S> words) const {
    hk::momentum_capturable(pol, p, g, w, s0, words, a, {.nesterov = nesterov});
  }
};

struct adam_case {
  static constexpr int slots = 2;
  static constexpr const char* name = "adam";
  hk::adam_config<sched> a;
  bool decoupled;
  template <class Pol, class T, class S>
  void full(const Pol& pol, hg::span<T, S> p, hg::span<const T, S> g, hg::span<T, S> s0,
            hg::span<T, S> s1, std::int64_t t) const {
    hk::adam(pol, p, g, s0, s1, a, {.step = t, .decoupled_weight_decay = decoupled});
  }
  template <class Pol, class P, class G, class S>
  void mixed(const Pol& pol, hg::span<P, S> p, hg::span<const G, S> g, hg::span<float, S> w,
             hg::span<float, S> s0, hg::span<float, S> s1, std::int64_t t, float gs) const {
    hk::adam_mixed(pol, p, g, w, s0, s1, a, {.step = t, .decoupled_weight_decay = decoupled},
                   {.grad_scale = gs});
  }
  template <class Pol, class T, class S>
  void captured(const Pol& pol, hg::span<T, S> p, hg::span<const T, S> g, hg::span<T, S> s0,
                hg::span<T, S> s1, hg::span<T, S> words) const {
    hk::adam_capturable(pol, p, g, s0, s1, words, a, {.decoupled_weight_decay = decoupled});
  }
  template <class Pol, class P, class G, class S>
  void captured_mixed(const Pol& pol, hg::span<P, S> p, hg::span<const G, S> g,
                      hg::span<float, S> w, hg::span<float, S> s0, hg::span<float, S> s1,
                      hg::span<float, S> words) const {
    hk::adam_capturable(pol, p, g, w, s0, s1, words, a, {.decoupled_weight_decay = decoupled});
  }
};

struct adagrad_case {
  static constexpr int slots = 1;
  static constexpr const char* name = "adagrad";
  hk::adagrad_config<sched> a;
  template <class Pol, class T, class S>
  void full(const Pol& pol, hg::span<T, S> p, hg::span<const T, S> g, hg::span<T, S> s0,
            hg::span<T, S>, std::int64_t t) const {
    hk::adagrad(pol, p, g, s0, a, {.step = t});
  }
  template <class Pol, class P, class G, class S>
  void mixed(const Pol& pol, hg::span<P, S> p, hg::span<const G, S> g, hg::span<float, S> w,
             hg::span<float, S> s0, hg::span<float, S>, std::int64_t t, float gs) const {
    hk::adagrad_mixed(pol, p, g, w, s0, a, {.step = t}, {.grad_scale = gs});
  }
  template <class Pol, class T, class S>
  void captured(const Pol& pol, hg::span<T, S> p, hg::span<const T, S> g, hg::span<T, S> s0,
                hg::span<T, S>, hg::span<T, S> words) const {
    hk::adagrad_capturable(pol, p, g, s0, words, a);
  }
  template <class Pol, class P, class G, class S>
  void captured_mixed(const Pol& pol, hg::span<P, S> p, hg::span<const G, S> g,
                      hg::span<float, S> w, hg::span<float, S> s0, hg::span<float, S>,
                      hg::span<float, S> words) const {
    hk::adagrad_capturable(pol, p, g, w, s0, words, a);
  }
};

// Learning rates that change every step, so a wrong step index shows.
const sched warm_cosine = heterograd::optim::cosine_decay(0.05, 20, 0.1, 3);

template <class F>
void for_each_case(F&& f) {
  f(sgd_case{{.lr = warm_cosine, .weight_decay = 0.0}});
  f(sgd_case{{.lr = warm_cosine, .weight_decay = 0.01}});
  f(momentum_case{{.lr = warm_cosine, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01},
                  false});
  f(momentum_case{{.lr = warm_cosine, .momentum = 0.8, .weight_decay = 0.0}, true});
  f(adam_case{{.lr = warm_cosine, .weight_decay = 0.01}, false});
  f(adam_case{{.lr = warm_cosine, .weight_decay = 0.05}, true});
  f(adagrad_case{{.lr = warm_cosine, .weight_decay = 0.01, .lr_decay = 0.1,
                  .initial_accumulator = 0.1}});
}

template <class H>
H round_to(float x) {
  if constexpr (std::is_same_v<H, float>)
    return x;
  else
    return hk::detail::convert_value<float, H>(x);
}
template <class H>
std::vector<H> to_half(const std::vector<float>& v) {
  std::vector<H> h(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) h[i] = round_to<H>(v[i]);
  return h;
}
template <class H>
std::vector<float> from_half(const std::vector<H>& h) {
  std::vector<float> v(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) v[i] = hk::to_float(h[i]);
  return v;
}

// A capturable run against the host-coefficient run: bitwise on the CPU backends. On a GPU the
// prologue computes the coefficients with the device's pow and cos, which may differ from the
// host's in the last bit of a double (so, rarely, of the float coefficient): 1e-5 there.
template <class T>
void check_captured(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
#if defined(__CUDACC__)
  kt::check_close(got, kt::to_double(want), 1e-5, what);
#else
  BOOST_TEST(got == want, what);
#endif
}

// Mixed run (16-bit params P, grads G) against the fp32 run on the same gradients.
template <class B, class P, class G, class Case>
void check_mixed_follows_fp32(const Case& c) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8193}}) {
    const auto w0 = kt::random_vector<float>(n, 11);
    const std::vector<float> init_state(n, 0.1f);
    // fp32: params = the master's start (the 16-bit params' values, as init does).
    const auto p16_0 = to_half<P>(w0);
    auto fp = kt::to_backend<B>(from_half(p16_0));
    auto fs0 = kt::to_backend<B>(init_state), fs1 = kt::to_backend<B>(init_state);
    auto mp = kt::to_backend<B>(p16_0);
    auto mw = kt::to_backend<B>(from_half(p16_0));
    auto ms0 = kt::to_backend<B>(init_state), ms1 = kt::to_backend<B>(init_state);
    for (std::int64_t t = 1; t <= 5; ++t) {
      // Gradients as the model gives them: of type G; the fp32 run sees their exact value.
      const auto graw = kt::random_vector<float>(n, 20 + t);
      std::vector<G> gh(n);
      std::vector<float> gf(n);
      for (std::size_t i = 0; i < n; ++i) {
        gh[i] = round_to<G>(graw[i]);
        gf[i] = hk::detail::load_float(gh[i]);
      }
      auto gfb = kt::to_backend<B>(gf);
      auto ghb = kt::to_backend<B>(gh);
      c.full(B::policy(), kt::span_of<B>(fp), kt::cspan_of<B>(gfb), kt::span_of<B>(fs0),
             kt::span_of<B>(fs1), t);
      c.mixed(B::policy(), kt::span_of<B>(mp), kt::cspan_of<B>(ghb), kt::span_of<B>(mw),
              kt::span_of<B>(ms0), kt::span_of<B>(ms1), t, 1.0f);
    }
    const auto master = hg_test::to_host(mw);
    BOOST_TEST(master == hg_test::to_host(fp), c.name << " master, n = " << n);
    if (Case::slots >= 1) BOOST_TEST(hg_test::to_host(ms0) == hg_test::to_host(fs0));
    if (Case::slots >= 2) BOOST_TEST(hg_test::to_host(ms1) == hg_test::to_host(fs1));
    BOOST_TEST((hg_test::to_host(mp) == to_half<P>(master)), c.name << " params = rounded master");
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kernels_mixed)

BOOST_AUTO_TEST_CASE_TEMPLATE(master_weights_follow_the_fp32_update_bitwise_and_params_round_them,
                              B, hg_test::backends) {
  for_each_case([](const auto& c) {
    using C = std::remove_cvref_t<decltype(c)>;
    check_mixed_follows_fp32<B, hk::bf16, hk::bf16, C>(c);
    check_mixed_follows_fp32<B, hk::fp16, hk::fp16, C>(c);
    check_mixed_follows_fp32<B, hk::bf16, float, C>(c);
  });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_power_of_two_grad_scale_undoes_a_scaled_loss_exactly, B,
                              hg_test::backends) {
  // fp16 gradients of a loss scaled by 2^10, used with grad_scale 2^-10, give bitwise the
  // update of the unscaled fp32 gradients (both scalings are exact in the normal range).
  const std::size_t n = 1000;
  const adam_case c{{.lr = 1e-3}, false};
  const auto w0 = to_half<hk::fp16>(kt::random_vector<float>(n, 3));
  auto p = kt::to_backend<B>(w0);
  auto w = kt::to_backend<B>(from_half(w0));
  auto m = kt::to_backend<B>(std::vector<float>(n)), v = kt::to_backend<B>(std::vector<float>(n));
  auto rp = kt::to_backend<B>(from_half(w0));
  auto rm = m, rv = v;
  const auto graw = kt::random_vector<float>(n, 4, 1e-3, 1e-2);
  std::vector<hk::fp16> scaled(n);
  std::vector<float> exact(n);
  for (std::size_t i = 0; i < n; ++i) {
    scaled[i] = hk::to_fp16(graw[i] * 1024.0f);
    exact[i] = hk::to_float(scaled[i]) / 1024.0f;
  }
  auto gs = kt::to_backend<B>(scaled);
  auto ge = kt::to_backend<B>(exact);
  c.mixed(B::policy(), kt::span_of<B>(p), kt::cspan_of<B>(gs), kt::span_of<B>(w),
          kt::span_of<B>(m), kt::span_of<B>(v), 1, 1.0f / 1024.0f);
  c.full(B::policy(), kt::span_of<B>(rp), kt::cspan_of<B>(ge), kt::span_of<B>(rm),
         kt::span_of<B>(rv), 1);
  BOOST_TEST(hg_test::to_host(w) == hg_test::to_host(rp));
  BOOST_TEST(hg_test::to_host(m) == hg_test::to_host(rm));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(capturable_steps_equal_host_coefficient_steps_bitwise, B,
                              hg_test::backends) {
  for_each_case([](const auto& c) {
    using C = std::remove_cvref_t<decltype(c)>;
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{8193}}) {
      auto check = [&](auto zero) {
        using T = decltype(zero);
        const auto p0 = kt::random_vector<T>(n, 5);
        const std::vector<T> s(n, T(0.1));
        auto p = kt::to_backend<B>(p0), q = p;
        auto a0 = kt::to_backend<B>(s), a1 = a0, b0 = a0, b1 = a0;
        auto words = kt::to_backend<B>(std::vector<T>(hk::capturable_words<T>, T(0)));
        for (std::int64_t t = 1; t <= 7; ++t) {
          auto g = kt::to_backend<B>(kt::random_vector<T>(n, 40 + t));
          c.full(B::policy(), kt::span_of<B>(p), kt::cspan_of<B>(g), kt::span_of<B>(a0),
                 kt::span_of<B>(a1), t);
          c.captured(B::policy(), kt::span_of<B>(q), kt::cspan_of<B>(g), kt::span_of<B>(b0),
                     kt::span_of<B>(b1), kt::span_of<B>(words));
        }
        check_captured(hg_test::to_host(q), hg_test::to_host(p), C::name);
        check_captured(hg_test::to_host(b0), hg_test::to_host(a0), C::name);
        check_captured(hg_test::to_host(b1), hg_test::to_host(a1), C::name);
        BOOST_TEST(hg_test::to_host(words)[0] == T(7));  // the device's step count
      };
      check(float{});
      check(double{});
      // Mixed and capturable: the mixed host-coefficient step, bitwise.
      const auto w0 = to_half<hk::bf16>(kt::random_vector<float>(n, 6));
      auto p = kt::to_backend<B>(w0), q = p;
      auto w = kt::to_backend<B>(from_half(w0)), x = w;
      const std::vector<float> s(n, 0.1f);
      auto a0 = kt::to_backend<B>(s), a1 = a0, b0 = a0, b1 = a0;
      auto words = kt::to_backend<B>(std::vector<float>(hk::capturable_words<float>, 0.0f));
      for (std::int64_t t = 1; t <= 4; ++t) {
        auto g = kt::to_backend<B>(to_half<hk::bf16>(kt::random_vector<float>(n, 60 + t)));
        c.mixed(B::policy(), kt::span_of<B>(p), kt::cspan_of<B>(g), kt::span_of<B>(w),
                kt::span_of<B>(a0), kt::span_of<B>(a1), t, 1.0f);
        c.captured_mixed(B::policy(), kt::span_of<B>(q), kt::cspan_of<B>(g), kt::span_of<B>(x),
                         kt::span_of<B>(b0), kt::span_of<B>(b1), kt::span_of<B>(words));
      }
      check_captured(hg_test::to_host(x), hg_test::to_host(w), C::name);
#if !defined(__CUDACC__)
      BOOST_TEST((hg_test::to_host(q) == hg_test::to_host(p)));
#endif
      check_captured(hg_test::to_host(b1), hg_test::to_host(a1), C::name);
    }
  });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(multi_tensor_capturable_adam_equals_one_capturable_call_per_tensor,
                              B, hg_test::backends) {
  using T = float;
  using S = typename B::space;
  const std::vector<std::size_t> sz = {0, 1, 7, 8193, 255, 256, 257, 3000};
  std::vector<typename B::template vector<T>> p, g, m, v;
  for (std::size_t k = 0; k < sz.size(); ++k) {
    p.push_back(kt::to_backend<B>(kt::random_vector<T>(sz[k], 100 + k)));
    g.push_back(kt::to_backend<B>(kt::random_vector<T>(sz[k], 200 + k)));
    m.push_back(kt::to_backend<B>(std::vector<T>(sz[k], T(0))));
    v.push_back(kt::to_backend<B>(std::vector<T>(sz[k], T(0))));
  }
  auto p2 = p, m2 = m, v2 = v;
  const hk::adam_config<sched> a{.lr = warm_cosine, .weight_decay = 0.01};
  auto words = kt::to_backend<B>(std::vector<T>(hk::capturable_words<T>, T(0)));
  std::vector<hk::adam_tensor<T, S>> list;
  for (std::size_t k = 0; k < sz.size(); ++k)
    list.push_back(
        {kt::span_of<B>(p[k]), kt::cspan_of<B>(g[k]), kt::span_of<B>(m[k]), kt::span_of<B>(v[k])});
  for (int t = 0; t < 3; ++t)
    hk::multi_tensor_adam_capturable(B::policy(), std::span<const hk::adam_tensor<T, S>>(list),
                                     kt::span_of<B>(words), a, {.decoupled_weight_decay = true});
  BOOST_TEST(hg_test::to_host(words)[0] == T(3));
  for (std::size_t k = 0; k < sz.size(); ++k) {
    auto wk = kt::to_backend<B>(std::vector<T>(hk::capturable_words<T>, T(0)));
    for (int t = 0; t < 3; ++t)
      hk::adam_capturable(B::policy(), kt::span_of<B>(p2[k]), kt::cspan_of<B>(g[k]),
                          kt::span_of<B>(m2[k]), kt::span_of<B>(v2[k]), kt::span_of<B>(wk), a,
                          {.decoupled_weight_decay = true});
    BOOST_TEST(hg_test::to_host(p[k]) == hg_test::to_host(p2[k]));
    BOOST_TEST(hg_test::to_host(v[k]) == hg_test::to_host(v2[k]));
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(sizes_are_checked_before_the_step_count_or_anything_moves, B,
                              hg_test::backends) {
  const std::size_t n = 10;
  auto p = kt::to_backend<B>(kt::random_vector<float>(n, 1));
  auto g = kt::to_backend<B>(kt::random_vector<float>(n, 2));
  auto m = kt::to_backend<B>(std::vector<float>(n)), v = m;
  auto short_v = kt::to_backend<B>(std::vector<float>(n - 1));
  auto words = kt::to_backend<B>(std::vector<float>(hk::capturable_words<float>, 0.0f));
  auto short_words = kt::to_backend<B>(std::vector<float>(hk::capturable_words<float> - 1, 0.0f));
  const auto p0 = hg_test::to_host(p);
  const hk::adam_config<> a;
  auto msg = hg_test::invalid_argument_message([&] {
    hk::adam_capturable(B::policy(), kt::span_of<B>(p), kt::cspan_of<B>(g), kt::span_of<B>(m),
                        kt::span_of<B>(short_v), kt::span_of<B>(words), a);
  });
  BOOST_TEST(msg.find("adam_capturable.state[1]") != std::string::npos, msg);
  BOOST_TEST(hg_test::to_host(words)[0] == 0.0f);  // the count did not move
  msg = hg_test::invalid_argument_message([&] {
    hk::adam_capturable(B::policy(), kt::span_of<B>(p), kt::cspan_of<B>(g), kt::span_of<B>(m),
                        kt::span_of<B>(v), kt::span_of<B>(short_words), a);
  });
  BOOST_TEST(msg.find("adam_capturable.words") != std::string::npos, msg);
  auto ph = kt::to_backend<B>(to_half<hk::bf16>(p0));
  auto master = kt::to_backend<B>(std::vector<float>(n - 1));
  msg = hg_test::invalid_argument_message([&] {
    hk::adam_mixed(B::policy(), kt::span_of<B>(ph), kt::cspan_of<B>(g), kt::span_of<B>(master),
                   kt::span_of<B>(m), kt::span_of<B>(v), a);
  });
  BOOST_TEST(msg.find("adam_mixed.master") != std::string::npos, msg);
  BOOST_TEST(hg_test::to_host(p) == p0);
  BOOST_TEST(hg_test::to_host(m) == std::vector<float>(n));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(all_finite_reads_bf16_and_fp16, B, hg_test::backends) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {inf, -inf, std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> v(9000, 1.5f);
    v[8191] = bad;
    auto b = kt::to_backend<B>(to_half<hk::bf16>(v));
    auto h = kt::to_backend<B>(to_half<hk::fp16>(v));
    BOOST_TEST(!hk::all_finite(B::policy(), kt::cspan_of<B>(b)));
    BOOST_TEST(!hk::all_finite(B::policy(), kt::cspan_of<B>(h)));
  }
  // The largest finite values are finite; 65520 is fp16's first value that rounds to infinity.
  auto b = kt::to_backend<B>(std::vector<hk::bf16>(5, hk::bf16{0x7f7f}));
  auto h = kt::to_backend<B>(std::vector<hk::fp16>(5, hk::to_fp16(65504.0f)));
  BOOST_TEST(hk::all_finite(B::policy(), kt::cspan_of<B>(b)));
  BOOST_TEST(hk::all_finite(B::policy(), kt::cspan_of<B>(h)));
  auto o = kt::to_backend<B>(std::vector<hk::fp16>(5, hk::to_fp16(65520.0f)));
  BOOST_TEST(!hk::all_finite(B::policy(), kt::cspan_of<B>(o)));
}

BOOST_AUTO_TEST_SUITE_END()
