// The property suite, run over every named optimizer (Optax's approach): convergence on a
// quadratic and on Rosenbrock, a bitwise serialise/deserialise round trip, every_k(1) equal
// to the bare optimizer, chain of the elementary pieces equal to the fused optimizer within
// 1e-6 relative, and apply_if_finite leaving everything untouched on a NaN.
// Typed over the backends; double precision (so that the chain/fused comparison measures
// the algorithms, not float rounding).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/optim.hpp"
#include "optim_test_util.hpp"

namespace hg = heterograd;
namespace o = heterograd::optim;

namespace {

// Hyper-parameters for the property checks: non-zero weight decay and a schedule, so the
// chain comparison covers them.
auto all_named() {
  return std::make_tuple(
      o::sgd({.lr = o::cosine_decay(0.1, 50, 0.1, 3), .weight_decay = 1e-3}),
      o::momentum({.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-3}),
      o::nesterov({.lr = o::step_decay(0.05, 7, 0.5), .momentum = 0.9, .weight_decay = 1e-3}),
      o::adam({.lr = o::linear_warmup(1e-2, 5), .weight_decay = 1e-2}),
      o::adamw({.lr = 1e-2, .weight_decay = 0.1}),
      o::lamb({.lr = 1e-2, .weight_decay = 0.01, .tensor_sizes = {100, 0, 33, 67}}),
      o::adagrad({.lr = 0.1, .weight_decay = 1e-3, .lr_decay = 0.01, .initial_accumulator = 0.1}));
}

constexpr std::size_t kN = 200;

std::vector<double> grad_at(int t) {
  return ot::random_vector(kN, 5000 + static_cast<std::uint64_t>(t));
}

template <class B, class O>
void run_steps(const O& opt, typename B::template vector<double>& x, auto& st, int from, int to) {
  typename B::template vector<double> g(kN);
  for (int t = from; t < to; ++t) {
    const auto hg = grad_at(t);
    thrust::copy(hg.begin(), hg.end(), g.begin());
    opt.update(B::policy(), ot::cspan_of<B>(g), st, ot::span_of<B>(x));
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optim_properties)

BOOST_AUTO_TEST_CASE_TEMPLATE(every_named_optimizer_converges_on_a_quadratic, B,
                              hg_test::backends) {
  const ot::quadratic q(50);
  const double f0 = q.value(q.start());
  // Each with its usual kind of step size; adaptive methods with a decaying schedule, since a
  // constant step leaves them oscillating at a scale of lr.
  const auto opts = std::make_tuple(
      o::sgd({.lr = 0.5}), o::momentum({.lr = 0.1, .momentum = 0.9}),
      o::nesterov({.lr = 0.1, .momentum = 0.9}), o::adam({.lr = o::cosine_decay(0.05, 3000)}),
      o::adamw({.lr = o::cosine_decay(0.05, 3000), .weight_decay = 0.0}),
      o::lamb({.lr = o::cosine_decay(0.02, 3000), .weight_decay = 0.0}), o::adagrad({.lr = 0.5}));
  ot::for_each_in(opts, [&](const auto& opt) {
    const auto x = ot::minimise<B>(opt, q, 3000);
    const double f = q.value(x);
    BOOST_TEST(f <= 1e-8 * f0, opt.name() << ": f = " << f << " (f0 = " << f0 << ")");
  });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(every_named_optimizer_converges_on_rosenbrock, B, hg_test::backends) {
  const ot::rosenbrock r;
  const auto opts = std::make_tuple(
      o::sgd({.lr = 1.5e-3}), o::momentum({.lr = 2e-4, .momentum = 0.9}),
      o::nesterov({.lr = 2e-4, .momentum = 0.9}), o::adam({.lr = o::cosine_decay(0.02, 20000)}),
      o::adamw({.lr = o::cosine_decay(0.02, 20000), .weight_decay = 0.0}),
      o::lamb({.lr = o::cosine_decay(0.01, 20000), .weight_decay = 0.0}), o::adagrad({.lr = 0.2}));
  ot::for_each_in(opts, [&](const auto& opt) {
    const auto x = ot::minimise<B>(opt, r, 20000);
    const double dist = std::hypot(x[0] - 1, x[1] - 1);
    BOOST_TEST(dist <= 1e-2, opt.name() << ": ended at (" << x[0] << ", " << x[1] << ")");
  });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(state_survives_a_serialise_round_trip_bitwise, B, hg_test::backends) {
  ot::for_each_in(all_named(), [&](const auto& opt) {
    auto x = ot::to_backend<B>(ot::random_vector(kN, 1));
    auto st = opt.init(B::policy(), ot::span_of<B>(x));
    run_steps<B>(opt, x, st, 0, 5);
    const auto bytes = o::serialize(st);
    auto back = o::deserialize<double, typename B::space>(bytes);
    BOOST_TEST((back == st), opt.name());
    BOOST_TEST((o::serialize(back) == bytes), opt.name());
    // Training on from the restored state gives bitwise the same parameters.
    auto y = x;
    run_steps<B>(opt, x, st, 5, 9);
    run_steps<B>(opt, y, back, 5, 9);
    BOOST_TEST((hg_test::to_host(x) == hg_test::to_host(y)), opt.name());
    BOOST_TEST((back == st), opt.name());
  });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(every_k_with_k_1_equals_the_bare_optimizer, B, hg_test::backends) {
  ot::for_each_in(all_named(), [&](const auto& opt) {
    const o::every_k wrapped(opt, 1);
    auto x = ot::to_backend<B>(ot::random_vector(kN, 2));
    auto y = x;
    auto sx = opt.init(B::policy(), ot::span_of<B>(x));
    auto sy = wrapped.init(B::policy(), ot::span_of<B>(y));
    run_steps<B>(opt, x, sx, 0, 10);
    run_steps<B>(wrapped, y, sy, 0, 10);
    BOOST_TEST((hg_test::to_host(x) == hg_test::to_host(y)), opt.name());
    BOOST_TEST((sy.children.at(0) == sx), opt.name());
  });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(chain_of_elementary_pieces_matches_the_fused_optimizer, B,
                              hg_test::backends) {
  ot::for_each_in(all_named(), [&](const auto& opt) {
    const auto pieces = opt.as_chain();
    auto x = ot::to_backend<B>(ot::random_vector(kN, 3));
    auto y = x;
    auto sx = opt.init(B::policy(), ot::span_of<B>(x));
    auto sy = pieces.init(B::policy(), ot::span_of<B>(y));
    run_steps<B>(opt, x, sx, 0, 20);
    run_steps<B>(pieces, y, sy, 0, 20);
    const auto hx = hg_test::to_host(x), hy = hg_test::to_host(y), h0 = ot::random_vector(kN, 3);
    double worst = 0, moved = 0;
    for (std::size_t i = 0; i < kN; ++i) {
      worst = std::max(worst, std::abs(hx[i] - hy[i]) / std::max(std::abs(hx[i]), 1e-300));
      moved = std::max(moved, std::abs(hx[i] - h0[i]));
    }
    BOOST_TEST(worst <= 1e-6, opt.name() << ": worst relative difference " << worst);
    BOOST_TEST(moved > 1e-3, opt.name() << " must actually move the parameters");
  });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(apply_if_finite_leaves_everything_untouched_on_a_nan, B,
                              hg_test::backends) {
  ot::for_each_in(all_named(), [&](const auto& opt) {
    const o::apply_if_finite safe(opt);
    auto x = ot::to_backend<B>(ot::random_vector(kN, 4));
    auto st = safe.init(B::policy(), ot::span_of<B>(x));
    run_steps<B>(safe, x, st, 0, 3);
    for (double bad :
         {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
      const auto before_x = hg_test::to_host(x);
      const auto before = st;
      auto hg = grad_at(3);
      hg[kN / 2] = bad;
      auto g = ot::to_backend<B>(hg);
      safe.update(B::policy(), ot::cspan_of<B>(g), st, ot::span_of<B>(x));
      BOOST_TEST((hg_test::to_host(x) == before_x), opt.name());
      BOOST_TEST((st.children.at(0) == before.children.at(0)), opt.name());
      BOOST_TEST(st.count == before.count);
      BOOST_TEST(o::apply_if_finite<std::decay_t<decltype(opt)>>::skips(st) ==
                 before.counters[0] + 1);
    }
    BOOST_TEST(st.counters[1] == 2);
    // A finite step afterwards is applied and resets the consecutive count.
    const auto before_x = hg_test::to_host(x);
    run_steps<B>(safe, x, st, 3, 4);
    BOOST_TEST((hg_test::to_host(x) != before_x), opt.name());
    BOOST_TEST(st.counters[1] == 0);
    BOOST_TEST(st.counters[0] == 2);
  });
}

BOOST_AUTO_TEST_SUITE_END()
