// Optimizer API rules (validation, bad input throws before any write, state bytes), the
// wrappers' semantics, schedules and outer optimizers.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/optim.hpp"
#include "messages.hpp"
#include "optim_test_util.hpp"

namespace hg = heterograd;
namespace o = heterograd::optim;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optim_api)

BOOST_AUTO_TEST_CASE(bad_hyper_parameters_throw_naming_field_value_and_rule) {
  auto m = hg_test::invalid_argument_message([] { o::adam({.beta1 = 1.0}); });
  BOOST_TEST(contains(m, "'adam.beta1' = 1: must be in [0, 1)"), m);
  m = hg_test::invalid_argument_message([] { o::sgd({.lr = -0.5}); });
  BOOST_TEST(contains(m, "'sgd.lr' = -0.5: must be finite and >= 0"), m);
  m = hg_test::invalid_argument_message([] { o::adamw({.eps = 0.0}); });
  BOOST_TEST(contains(m, "'adamw.eps' = 0: must be finite and > 0"), m);
  m = hg_test::invalid_argument_message([] { o::nesterov({.momentum = -0.1}); });
  BOOST_TEST(contains(m, "'nesterov.momentum' = -0.10000000000000001"), m);
  BOOST_CHECK_THROW(o::lamb({.beta2 = 1.5}), std::invalid_argument);
  BOOST_CHECK_THROW(o::adagrad({.lr_decay = -1}), std::invalid_argument);
  BOOST_CHECK_THROW(o::momentum({.dampening = 2}), std::invalid_argument);
  BOOST_CHECK_THROW(o::every_k(o::sgd{}, 0), std::invalid_argument);
  BOOST_CHECK_THROW(o::cosine_decay(1.0, 0), std::invalid_argument);
  m = hg_test::invalid_argument_message([] { o::adam({.lr = o::step_decay(0.1, 10, 1.5)}); });
  BOOST_TEST(contains(m, "step_decay.gamma"), m);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bad_input_throws_before_anything_is_written, B, hg_test::backends) {
  const o::adam opt;
  auto x = ot::to_backend<B>(ot::random_vector(10, 1));
  auto g = ot::to_backend<B>(ot::random_vector(10, 2));
  auto st = opt.init(B::policy(), ot::span_of<B>(x));
  opt.update(B::policy(), ot::cspan_of<B>(g), st, ot::span_of<B>(x));
  const auto x0 = hg_test::to_host(x);
  const auto st0 = st;
  // Sizes of params and grads differ.
  auto short_g = ot::to_backend<B>(ot::random_vector(9, 3));
  auto m = hg_test::invalid_argument_message(
      [&] { opt.update(B::policy(), ot::cspan_of<B>(short_g), st, ot::span_of<B>(x)); });
  BOOST_TEST(contains(m, "adam.grads"), m);
  // Sizes of params and state differ.
  auto long_x = ot::to_backend<B>(ot::random_vector(11, 4));
  auto long_g = ot::to_backend<B>(ot::random_vector(11, 5));
  BOOST_CHECK_THROW(opt.update(B::policy(), ot::cspan_of<B>(long_g), st, ot::span_of<B>(long_x)),
                    std::invalid_argument);
  // The state belongs to another optimizer.
  auto other = o::momentum{}.init(B::policy(), ot::span_of<B>(x));
  m = hg_test::invalid_argument_message(
      [&] { opt.update(B::policy(), ot::cspan_of<B>(g), other, ot::span_of<B>(x)); });
  BOOST_TEST(contains(m, "the state belongs to another optimizer"), m);
  auto adamw_state = o::adamw{}.init(B::policy(), ot::span_of<B>(x));
  BOOST_CHECK_THROW(opt.update(B::policy(), ot::cspan_of<B>(g), adamw_state, ot::span_of<B>(x)),
                    std::invalid_argument);
  // Inside a wrapper, the inner state is checked too, before the wrapper writes anything.
  const o::every_k acc(opt, 2);
  auto sa = acc.init(B::policy(), ot::span_of<B>(x));
  sa.children[0].slots.pop_back();
  const auto sa0 = sa;
  BOOST_CHECK_THROW(acc.update(B::policy(), ot::cspan_of<B>(g), sa, ot::span_of<B>(x)),
                    std::invalid_argument);
  BOOST_TEST((sa == sa0));
  BOOST_TEST((hg_test::to_host(x) == x0));
  BOOST_TEST((st == st0));
}

BOOST_AUTO_TEST_CASE(memory_spaces_that_do_not_match_throw_before_anything_is_written) {
  const o::sgd opt;
  std::vector<double> x(8, 1.0), g(8, 0.5);
  auto st = opt.init(thrust::cpp::par, x);
  // Device-space spans over host memory: never dereferenced, since the check throws first.
  const hg::span<double, hg::device_space> dx(x.data(), x.size());
  const hg::span<const double, hg::device_space> dg(g.data(), g.size());
  auto m = hg_test::invalid_argument_message([&] { opt.update(thrust::cpp::par, g, st, dx); });
  BOOST_TEST(contains(m, "memory spaces"), m);
  BOOST_CHECK_THROW(opt.update(thrust::cpp::par, dg, st, x), std::invalid_argument);
  BOOST_CHECK_THROW(opt.init(thrust::cpp::par, dx), std::invalid_argument);
  BOOST_CHECK_THROW(o::diloco_nesterov().step(thrust::cpp::par, dg, st, x), std::invalid_argument);
  BOOST_TEST((x == std::vector<double>(8, 1.0)));
}

BOOST_AUTO_TEST_CASE(state_bytes_carry_a_version_tag_and_a_checksum) {
  const o::adam opt;
  std::vector<float> x(300, 1.0f), g(300, 0.25f);
  auto st = opt.init(thrust::cpp::par, x);
  opt.update(thrust::cpp::par, g, st, x);
  const auto bytes = o::serialize(st);
  BOOST_TEST((o::deserialize<float>(bytes) == st));
  // A flipped bit anywhere is caught by the checksum.
  for (std::size_t pos : {std::size_t{5}, bytes.size() / 2, bytes.size() - 1}) {
    auto bad = bytes;
    bad[pos] ^= std::byte{0x10};
    BOOST_CHECK_THROW(o::deserialize<float>(bad), std::invalid_argument);
  }
  // Truncated bytes, the wrong element type, a future version.
  BOOST_CHECK_THROW(o::deserialize<float>(std::span(bytes).first(bytes.size() - 9)),
                    std::invalid_argument);
  auto m = hg_test::invalid_argument_message([&] { o::deserialize<double>(bytes); });
  BOOST_TEST(contains(m, "element size"), m);
  auto future = bytes;
  future[4] = std::byte{2};
  const std::size_t body = future.size() - 8;
  std::uint64_t h = 0xcbf29ce484222325ull;  // re-sign with FNV-1a so only the version is wrong
  for (std::size_t i = 0; i < body; ++i) {
    h ^= static_cast<unsigned char>(future[i]);
    h *= 0x100000001b3ull;
  }
  std::memcpy(future.data() + body, &h, 8);
  m = hg_test::invalid_argument_message([&] { o::deserialize<float>(future); });
  BOOST_TEST(contains(m, "version"), m);
  // States are values: copies compare equal, a changed element does not.
  auto copy = st;
  BOOST_TEST((copy == st));
  copy.slots[1][7] = 3.0f;
  BOOST_TEST(!(copy == st));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(every_k_applies_the_mean_gradient_once_every_k_calls, B,
                              hg_test::backends) {
  const o::momentum inner({.lr = 0.1, .momentum = 0.5});
  const o::every_k acc(inner, 3);
  const auto h0 = ot::random_vector(50, 7);
  auto x = ot::to_backend<B>(h0);
  auto y = ot::to_backend<B>(h0);
  auto sx = acc.init(B::policy(), ot::span_of<B>(x));
  auto sy = inner.init(B::policy(), ot::span_of<B>(y));
  for (int round = 0; round < 2; ++round) {
    std::vector<double> mean(50, 0.0);
    for (int c = 0; c < 3; ++c) {
      const auto hg = ot::random_vector(50, 100 + 3 * round + c);
      for (std::size_t i = 0; i < 50; ++i) mean[i] += hg[i];
      const auto before = hg_test::to_host(x);
      auto g = ot::to_backend<B>(hg);
      acc.update(B::policy(), ot::cspan_of<B>(g), sx, ot::span_of<B>(x));
      if (c < 2) BOOST_TEST((hg_test::to_host(x) == before));
    }
    for (auto& v : mean) v /= 3;
    auto gm = ot::to_backend<B>(mean);
    inner.update(B::policy(), ot::cspan_of<B>(gm), sy, ot::span_of<B>(y));
    const auto hx = hg_test::to_host(x), hy = hg_test::to_host(y);
    for (std::size_t i = 0; i < 50; ++i) BOOST_TEST(std::abs(hx[i] - hy[i]) <= 1e-14);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(masked_and_partitioned_touch_only_their_segments, B,
                              hg_test::backends) {
  const auto h0 = ot::random_vector(100, 8), hgr = ot::random_vector(100, 9);
  auto g = ot::to_backend<B>(hgr);
  // masked: [10, 30) and [60, 65) move as the bare optimizer on those parts; the rest stays.
  const o::adam inner({.lr = 0.01});
  const o::masked mk(inner, {{60, 5}, {10, 20}});
  auto x = ot::to_backend<B>(h0);
  auto st = mk.init(B::policy(), ot::span_of<B>(x));
  mk.update(B::policy(), ot::cspan_of<B>(g), st, ot::span_of<B>(x));
  auto y = ot::to_backend<B>(h0);
  auto sy = inner.init(B::policy(), ot::span_of<B>(y));
  inner.update(B::policy(), ot::cspan_of<B>(g), sy, ot::span_of<B>(y));
  const auto hx = hg_test::to_host(x), hy = hg_test::to_host(y);
  for (std::size_t i = 0; i < 100; ++i) {
    const bool in = (i >= 10 && i < 30) || (i >= 60 && i < 65);
    BOOST_TEST(hx[i] == (in ? hy[i] : h0[i]));
  }
  // partitioned: sgd on [0, 50), adamw on [50, 100).
  const o::sgd a({.lr = 0.1});
  const o::adamw b({.lr = 0.01});
  const auto part = o::partitioned(o::masked(a, {{0, 50}}), o::masked(b, {{50, 50}}));
  auto z = ot::to_backend<B>(h0);
  auto sz = part.init(B::policy(), ot::span_of<B>(z));
  part.update(B::policy(), ot::cspan_of<B>(g), sz, ot::span_of<B>(z));
  auto za = ot::to_backend<B>(h0), zb = ot::to_backend<B>(h0);
  auto sa = a.init(B::policy(), ot::span_of<B>(za));
  auto sb = b.init(B::policy(), ot::span_of<B>(zb));
  a.update(B::policy(), ot::cspan_of<B>(g), sa, ot::span_of<B>(za));
  b.update(B::policy(), ot::cspan_of<B>(g), sb, ot::span_of<B>(zb));
  const auto hz = hg_test::to_host(z), hza = hg_test::to_host(za), hzb = hg_test::to_host(zb);
  for (std::size_t i = 0; i < 100; ++i) BOOST_TEST(hz[i] == (i < 50 ? hza[i] : hzb[i]));
  // Overlapping parts, and segments past the end of params, are refused.
  BOOST_CHECK_THROW(o::partitioned(o::masked(a, {{0, 51}}), o::masked(b, {{50, 50}})),
                    std::invalid_argument);
  BOOST_CHECK_THROW(o::masked(a, {{0, 10}, {5, 10}}), std::invalid_argument);
  auto small = ot::to_backend<B>(ot::random_vector(40, 10));
  BOOST_CHECK_THROW(mk.init(B::policy(), ot::span_of<B>(small)), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(schedules_follow_their_closed_forms) {
  const double pi = std::numbers::pi;
  BOOST_TEST(o::constant(0.3)(12345) == 0.3);
  const auto w = o::linear_warmup(1.0, 10, 0.1);
  BOOST_TEST(w(0) == 0.1);
  BOOST_TEST(std::abs(w(5) - 0.55) <= 1e-15);
  BOOST_TEST(w(10) == 1.0);
  BOOST_TEST(w(1000) == 1.0);
  const auto s = o::step_decay(0.8, 30, 0.5);
  BOOST_TEST(s(29) == 0.8);
  BOOST_TEST(s(30) == 0.4);
  BOOST_TEST(s(95) == 0.1);
  const auto c = o::cosine_decay(2.0, 100, 0.1, 10);
  BOOST_TEST(c(0) == 0.0);
  BOOST_TEST(c(5) == 1.0);
  BOOST_TEST(c(10) == 2.0);
  BOOST_TEST(std::abs(c(60) - 2.0 * (0.1 + 0.9 * 0.5)) <= 1e-15);
  BOOST_TEST(std::abs(c(35) - 2.0 * (0.1 + 0.9 * 0.5 * (1 + std::cos(pi / 4)))) <= 1e-15);
  BOOST_TEST(std::abs(c(110) - 0.2) <= 1e-15);
  BOOST_TEST(std::abs(c(5000) - 0.2) <= 1e-15);
  const auto r = o::inverse_sqrt(1.0, 100);
  BOOST_TEST(r(50) == 0.5);
  BOOST_TEST(r(100) == 1.0);
  BOOST_TEST(r(400) == 0.5);
  BOOST_TEST(o::inverse_sqrt(1.0)(3) == 0.5);
  BOOST_TEST(o::inverse_time(1.0, 0.5)(2) == 0.5);
  const o::batch_size_schedule b({{0, 32}, {100, 64}, {250, 128}});
  BOOST_TEST(b(0) == 32u);
  BOOST_TEST(b(99) == 32u);
  BOOST_TEST(b(100) == 64u);
  BOOST_TEST(b(10000) == 128u);
  BOOST_CHECK_THROW(o::batch_size_schedule({{1, 32}}), std::invalid_argument);
  BOOST_CHECK_THROW(o::batch_size_schedule({{0, 32}, {0, 64}}), std::invalid_argument);
  BOOST_TEST(o::scale_lr_by_batch(0.1, 8192, 256) == 3.2);
  BOOST_TEST(o::scale_lr_by_batch(0.1, 1024, 256, o::lr_scaling::sqrt) == 0.2);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(outer_optimizers_step_on_the_pseudo_gradient, B, hg_test::backends) {
  const std::size_t n = 64;
  const auto anchor0 = ot::random_vector(n, 20);
  std::vector<std::vector<double>> averages = {ot::random_vector(n, 21), ot::random_vector(n, 22),
                                               ot::random_vector(n, 23)};
  // Outer SGD with lr 1 is FedAvg: the anchor becomes the average.
  {
    auto x = ot::to_backend<B>(anchor0);
    const auto outer = o::outer_sgd(1.0);
    auto st = outer.init(B::policy(), ot::span_of<B>(x));
    auto a = ot::to_backend<B>(averages[0]);
    outer.step(B::policy(), ot::cspan_of<B>(a), st, ot::span_of<B>(x));
    const auto hx = hg_test::to_host(x);
    for (std::size_t i = 0; i < n; ++i) BOOST_TEST(std::abs(hx[i] - averages[0][i]) <= 1e-15);
  }
  // DiLoCo (Nesterov), FedAvgM (heavy ball) and FedAdam (no bias correction) against their
  // update rules written out.
  for (int which = 0; which < 3; ++which) {
    auto x = ot::to_backend<B>(anchor0);
    std::vector<double> rx = anchor0, v(n, 0.0), m(n, 0.0), s(n, 0.0);
    auto run = [&](const auto& outer) {
      auto st = outer.init(B::policy(), ot::span_of<B>(x));
      for (const auto& avg : averages) {
        auto a = ot::to_backend<B>(avg);
        outer.step(B::policy(), ot::cspan_of<B>(a), st, ot::span_of<B>(x));
        for (std::size_t i = 0; i < n; ++i) {
          const double d = rx[i] - avg[i];
          if (which == 0) {
            v[i] = 0.9 * v[i] + d;
            rx[i] -= 0.7 * (d + 0.9 * v[i]);
          } else if (which == 1) {
            v[i] = 0.9 * v[i] + d;
            rx[i] -= 1.0 * v[i];
          } else {
            m[i] = 0.9 * m[i] + 0.1 * d;
            s[i] = 0.99 * s[i] + 0.01 * d * d;
            rx[i] -= 1e-2 * m[i] / (std::sqrt(s[i]) + 1e-3);
          }
        }
      }
    };
    if (which == 0) run(o::diloco_nesterov());
    if (which == 1) run(o::fedavgm());
    if (which == 2) run(o::fedadam());
    const auto hx = hg_test::to_host(x);
    for (std::size_t i = 0; i < n; ++i)
      BOOST_TEST(std::abs(hx[i] - rx[i]) <= 1e-12 * (1 + std::abs(rx[i])));
  }
}

// step_in_place writes the pseudo-gradient over the average instead of a scratch buffer (what
// local SGD's round uses): the same anchor and state bit for bit, the average = anchor - average.
BOOST_AUTO_TEST_CASE_TEMPLATE(the_outer_step_in_place_equals_the_step_bitwise, B, hg_test::backends) {
  const std::size_t n = 61;
  const auto anchor0 = ot::random_vector(n, 30);
  const auto outer = o::diloco_nesterov();
  auto x = ot::to_backend<B>(anchor0), y = ot::to_backend<B>(anchor0);
  auto sx = outer.init(B::policy(), ot::span_of<B>(x)), sy = outer.init(B::policy(), ot::span_of<B>(y));
  for (int r = 0; r < 3; ++r) {
    const auto avg = ot::random_vector(n, 31 + static_cast<std::uint64_t>(r));
    const auto before = hg_test::to_host(y);
    auto a = ot::to_backend<B>(avg), b = ot::to_backend<B>(avg);
    outer.step(B::policy(), ot::cspan_of<B>(a), sx, ot::span_of<B>(x));
    outer.step_in_place(B::policy(), ot::span_of<B>(b), sy, ot::span_of<B>(y));
    const auto hx = hg_test::to_host(x), hy = hg_test::to_host(y), hb = hg_test::to_host(b);
    BOOST_TEST(std::memcmp(hx.data(), hy.data(), n * sizeof(double)) == 0);
    BOOST_TEST((sx == sy));
    for (std::size_t i = 0; i < n; ++i) BOOST_TEST(hb[i] == before[i] - avg[i]);
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(optim_average)

BOOST_AUTO_TEST_CASE_TEMPLATE(average_states_averages_every_slot_at_every_depth, B,
                              hg_test::backends) {
  using state_t = o::state<double, typename B::space>;
  const auto opt = o::apply_if_finite(o::every_k(o::adam{}, 2));
  std::vector<state_t> states;
  for (int k = 0; k < 3; ++k) {
    auto x = ot::to_backend<B>(ot::random_vector(30, 40 + k));
    auto st = opt.init(B::policy(), ot::span_of<B>(x));
    for (int t = 0; t < 2; ++t) {
      auto g = ot::to_backend<B>(ot::random_vector(30, 50 + 2 * k + t));
      opt.update(B::policy(), ot::cspan_of<B>(g), st, ot::span_of<B>(x));
    }
    states.push_back(st);
  }
  const std::vector<double> w = {0.5, 0.25, 0.25};
  const auto avg =
      o::average_states(B::policy(), std::span<const state_t>(states), std::span<const double>(w));
  const auto mh = state_t::host_copy(avg.children[0].children[0].slots[0]);  // adam's m
  for (std::size_t i = 0; i < 30; ++i) {
    double ref = 0;
    for (int k = 0; k < 3; ++k)
      ref += w[k] * state_t::host_copy(states[k].children[0].children[0].slots[0])[i];
    BOOST_TEST(std::abs(mh[i] - ref) <= 1e-15);
  }
  BOOST_TEST(avg.children[0].children[0].count == 1);
  // A state of another structure is refused.
  typename B::template vector<double> y(30);
  states.push_back(o::adam{}.init(B::policy(), ot::span_of<B>(y)));
  BOOST_CHECK_THROW(o::average_states(B::policy(), std::span<const state_t>(states)),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
