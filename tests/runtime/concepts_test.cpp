// The runtime concepts: every asynchronous server policy and every round method of the
// library satisfies its concept, against the archetype handle and against the drivers' own
// handles; the negative archetypes do not; the positive archetypes run under the drivers.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/algorithms/async.hpp"
#include "heterograd/algorithms/sync/bsp.hpp"
#include "heterograd/algorithms/sync/common.hpp"
#include "heterograd/algorithms/sync/eager.hpp"
#include "heterograd/algorithms/sync/local_sgd.hpp"
#include "heterograd/algorithms/sync/selsync.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/runtime.hpp"
#include "heterograd/runtime/round_threads.hpp"
#include "heterograd/sim/worker_time.hpp"
#include "heterograd/comm/inproc_partial.hpp"
#include "heterograd/testing/runtime_archetypes.hpp"
#include "heterograd/testing/runtime_round_archetypes.hpp"
#include "under_test.hpp"

namespace hg = heterograd;
namespace async = heterograd::algorithms::async;
namespace hs = heterograd::algorithms::sync;
namespace hr = heterograd::runtime;
namespace ht = heterograd::testing;
namespace ho = heterograd::optim;
namespace sim = heterograd::sim;

namespace {

// The drivers' own control handles, for a policy P (the simulator's handle is named by its
// compute type, which these compile-time checks never call).
struct never_called_compute {
  template <class R>
  void operator()(hr::worker_id, std::uint64_t, std::uint64_t, R&) const {}
};
template <class P, class Result>
using sim_control = typename hr::async_runtime<Result, sim::fixed_times>::template control<
    P, never_called_compute>;
template <class P, class T>
using server_control = hr::detail::remote_server<T, P, hg::comm::inproc::communicator,
                                                 sim::fixed_times>;
using round_control = hr::round_runtime<hs::round_stats, sim::fixed_times>::control;

// A server policy is one for the archetype handle, the simulator's and the remote server's.
template <class P, class T = typename P::value_type>
constexpr bool runs_everywhere =
    hr::server_policy<P, T, ht::async_control_archetype> &&
    hr::async_policy<P, std::vector<T>, sim_control<P, std::vector<T>>> &&
    hr::server_policy<P, T, server_control<P, T>>;

// Every server policy under test (tests/support/under_test.hpp), over a double server.
template <class Policies>
constexpr bool all_run_everywhere = false;
template <class... P>
constexpr bool all_run_everywhere<std::tuple<P...>> = (runs_everywhere<P> && ...);
static_assert(all_run_everywhere<hg_test::server_policy_types<async::model_server<double>>>);
static_assert(runs_everywhere<async::asgd<float, ho::adam>>);
static_assert(runs_everywhere<ht::server_policy_archetype<float>, float>);

// The handles themselves.
static_assert(hr::async_control<sim_control<async::asgd<double>, std::vector<double>>>);
static_assert(hr::async_control<server_control<async::asgd<double>, double>>);
static_assert(hr::round_control<round_control>);

// The synchronous methods, over any gradient oracle.
struct oracle {
  double operator()(std::size_t, std::uint64_t, std::size_t, hg::span<const float>,
                    hg::span<float>) const {
    return 0.0;
  }
};
template <class P>
constexpr bool round_method_everywhere =
    hr::round_method<P, hs::round_stats, ht::round_control_archetype> &&
    hr::round_method<P, hs::round_stats, round_control>;

// The round methods under test (tests/support/under_test.hpp).
using collective_methods = hg_test::collective_round_methods<float, ho::sgd, oracle>;
using partial_methods = hg_test::partial_round_methods<float, ho::sgd, oracle>;
template <template <class> class Check, class Methods>
constexpr bool all_of = false;
template <template <class> class Check, class... P>
constexpr bool all_of<Check, std::tuple<P...>> = (Check<P>::value && ...);

template <class P>
struct round_method_everywhere_t : std::bool_constant<round_method_everywhere<P>> {};
static_assert(all_of<round_method_everywhere_t, collective_methods>);
static_assert(round_method_everywhere<hs::bsp<float, ho::momentum, oracle>>);
// Eager-SGD is an asynchronous policy of the simulator (a rank's job end is its arrival).
template <class P>
struct simulated_as_async_t
    : std::bool_constant<hr::async_policy<P, std::vector<float>, ht::async_control_archetype> &&
                         hr::async_policy<P, std::vector<float>, sim_control<P, std::vector<float>>>> {};
static_assert(all_of<simulated_as_async_t, partial_methods>);

// The one round contract: every round method runs one rank's round over a real transport's
// exchange and over the archetype exchange of its kind, and not over the other kind's.
using inproc_exchange = hs::transport_exchange<hg::comm::inproc::communicator>;
using inproc_partial = hs::transport_partial<hg::comm::inproc::partial_allreduce<float>>;
template <class P>
constexpr bool collective_round_everywhere =
    hr::rank_round_method<P, inproc_exchange> &&
    hr::rank_round_method<P, ht::exchange_archetype<float>> &&
    !hr::rank_round_method<P, ht::not_an_exchange_no_allreduce_sum<float>> &&
    !hr::rank_round_method<P, ht::partial_exchange_archetype<float>> &&
    hr::per_rank_round_policy<P> && !hr::partial_round_method<P>;
template <class P>
constexpr bool partial_round_everywhere =
    hr::rank_round_method<P, inproc_partial> &&
    hr::rank_round_method<P, ht::partial_exchange_archetype<float>> &&
    !hr::rank_round_method<P, ht::not_a_partial_exchange_no_flush<float>> &&
    !hr::rank_round_method<P, ht::exchange_archetype<float>> &&
    hr::partial_round_method<P> && !hr::per_rank_round_policy<P>;
template <class P>
struct collective_round_everywhere_t : std::bool_constant<collective_round_everywhere<P>> {};
template <class P>
struct partial_round_everywhere_t : std::bool_constant<partial_round_everywhere<P>> {};
static_assert(all_of<collective_round_everywhere_t, collective_methods>);
static_assert(collective_round_everywhere<hs::bsp<float, ho::momentum, oracle>>);
static_assert(all_of<partial_round_everywhere_t, partial_methods>);
static_assert(hr::rank_round_method<ht::rank_round_method_archetype, hs::transport_exchange<
                                        hg::comm::inproc::communicator>>);

// A method is not a policy of the other family.
static_assert(!hr::round_policy<async::asgd<double>, hs::round_stats, round_control>);
static_assert(!hr::async_policy<hs::bsp<float, ho::sgd, oracle>, std::vector<float>,
                                ht::async_control_archetype>);

}  // namespace

BOOST_AUTO_TEST_SUITE(runtime_concepts)

BOOST_AUTO_TEST_CASE(archetypes_are_accepted_and_each_negative_one_is_rejected) {
  BOOST_TEST(hr::async_control<ht::async_control_archetype>);
  BOOST_TEST(!hr::async_control<ht::not_an_async_control_no_interrupt>);
  BOOST_TEST(!hr::async_control<ht::not_an_async_control_version_is_text>);
  BOOST_TEST((hr::server_policy<ht::server_policy_archetype<float>, float,
                                ht::async_control_archetype>));
  BOOST_TEST(!(hr::async_policy<ht::not_an_async_policy_no_version, std::vector<float>,
                                ht::async_control_archetype>));
  BOOST_TEST(!(hr::async_policy<ht::not_an_async_policy_takes_a_worker, std::vector<float>,
                                ht::async_control_archetype>));
  BOOST_TEST((hr::async_policy<ht::not_a_server_policy_no_params, std::vector<float>,
                               ht::async_control_archetype>));
  BOOST_TEST(!(hr::server_policy<ht::not_a_server_policy_no_params, float,
                                 ht::async_control_archetype>));
  BOOST_TEST(!(hr::server_policy<ht::not_a_server_policy_ready_is_void, float,
                                 ht::async_control_archetype>));
  BOOST_TEST(hr::round_control<ht::round_control_archetype>);
  BOOST_TEST(!hr::round_control<ht::not_a_round_control_no_round>);
  BOOST_TEST((hr::round_method<ht::round_method_archetype, double, ht::round_control_archetype>));
  BOOST_TEST(!(hr::round_policy<ht::not_a_round_policy_one_contribution, double,
                                ht::round_control_archetype>));
  BOOST_TEST(!(hr::round_policy<ht::not_a_round_policy_batch_is_text, double,
                                ht::round_control_archetype>));
  BOOST_TEST(!(hr::round_method<ht::not_a_round_method_no_limit, double,
                                ht::round_control_archetype>));
  BOOST_TEST((hs::exchange<ht::exchange_archetype<float>, float>));
  BOOST_TEST(!(hs::exchange<ht::not_an_exchange_no_allreduce_sum<float>, float>));
  BOOST_TEST(!(hs::exchange<ht::not_an_exchange_allreduce_is_void<float>, float>));
  BOOST_TEST((hs::partial_exchange<ht::partial_exchange_archetype<float>, float>));
  BOOST_TEST(!(hs::partial_exchange<ht::not_a_partial_exchange_no_flush<float>, float>));
  using ex = ht::exchange_archetype<double>;
  BOOST_TEST((hr::rank_round_method<ht::rank_round_method_archetype, ex>));
  BOOST_TEST(!(hr::rank_round_method<ht::not_a_rank_round_method_outcome_is_void, ex>));
  BOOST_TEST(!(hr::rank_round_method<ht::not_a_rank_round_method_exchange_kind_is_void, ex>));
  BOOST_TEST(!(hr::rank_round_method<ht::not_a_rank_round_method_set_shared_is_text, ex>));
}

BOOST_AUTO_TEST_CASE(the_rank_round_method_archetype_runs_on_threads_through_the_generic_runner) {
  // Three ranks contribute 1, 2, 3 each round: every rank adds 6 per round to its total, and
  // rank 0 (the counting one) writes its round count back.
  ht::rank_round_method_archetype p{.n = 3, .totals = std::vector<double>(3, 0.0)};
  hr::run_threads(p, 4);
  hr::run_threads(p, 1);  // continues from the written-back state
  BOOST_TEST(p.rounds == 5u);
  for (double t : p.totals) BOOST_TEST(t == 5 * 6.0);
}

// A gradient of ones at every step, loss 2.
struct ones {
  double operator()(std::size_t, std::uint64_t, std::size_t, hg::span<const float>,
                    hg::span<float> g) const {
    for (auto& v : g) v = 1.0f;
    return 2.0;
  }
};

BOOST_AUTO_TEST_CASE(one_rank_rounds_over_the_archetype_exchanges_are_the_simulated_steps) {
  // With one worker every weight is 1, so a round over the archetype exchange (the sum over
  // one rank) is the simulated step bitwise; eager-SGD over the partial archetype stops
  // itself after its configured rounds (the last a flush) with every gradient applied once.
  const std::vector<float> x0{0.5f, -1.0f};
  const auto sgd = ho::sgd({.lr = 0.25});
  const auto check = [&](auto sim, auto real) {
    for (int k = 0; k < 3; ++k) {
      if constexpr (requires { sim.step(); })
        sim.step();
      else
        sim.round();  // local SGD's simulated round
    }
    ht::exchange_archetype<float> ex;
    hs::rank_round<ht::exchange_archetype<float>> r{.world = ex, .worker = 0};
    auto s = real.shared_state();
    for (int k = 0; k < 3; ++k) {
      const auto out = real.run_round(r, s);
      BOOST_TEST(out.loss == 2.0);
      BOOST_TEST(out.steps >= 1u);
    }
    BOOST_TEST(real.params(0)[0] == sim.params(0)[0]);
    BOOST_TEST(real.params(0)[1] == sim.params(0)[1]);
    BOOST_TEST(real.params(0)[0] == -0.25f);  // three steps of 0.25 x 1 from 0.5
    BOOST_TEST(real.params(0)[1] == -1.75f);
  };
  check(hs::bsp<float, ho::sgd, ones>(1, x0, sgd, ones{}, {4}),
        hs::bsp<float, ho::sgd, ones>(1, x0, sgd, ones{}, {4}));
  check(hs::selsync<float, ho::sgd, ones>(1, x0, sgd, ones{}, {4}),
        hs::selsync<float, ho::sgd, ones>(1, x0, sgd, ones{}, {4}));
  check(hs::local_sgd<float, ho::sgd, ones>(1, x0, sgd, ones{}, {4}, {.period = 1}),
        hs::local_sgd<float, ho::sgd, ones>(1, x0, sgd, ones{}, {4}, {.period = 1}));

  hs::eager_sgd<float, ho::sgd, ones> e(1, x0, sgd, ones{}, {4}, {.average = false, .rounds = 3});
  ht::partial_exchange_archetype<float> px;
  hs::rank_round<ht::partial_exchange_archetype<float>> r{.world = px, .worker = 0};
  auto s = e.shared_state();
  hs::compute_end_hook hook;
  hs::run_rank_rounds(e, r, s, std::numeric_limits<std::uint64_t>::max(), {}, hook);
  BOOST_TEST(s.round == 3u);
  BOOST_TEST(e.rounds_applied(0) == 3u);
  BOOST_TEST(e.params(0)[0] == 0.5f - 0.75f);
  BOOST_TEST(e.params(0)[1] == -1.0f - 0.75f);
  BOOST_TEST(e.applied_sum() == e.computed_sum());
  BOOST_TEST(e.computed_sum()[0] == 3.0);
}

BOOST_AUTO_TEST_CASE(the_server_policy_archetype_runs_under_the_simulator_and_on_threads) {
  const sim::fixed_times model({1.0, 2.0, 3.0});
  // Every worker's gradient is 1 at every job: the model falls by one per update.
  ht::server_policy_archetype<float> sp{.n = 3, .x = {0.0f, 10.0f}};
  hr::async_runtime<std::vector<float>, sim::fixed_times> rt(3, model);
  hr::run_options o;
  o.max_events = 12;
  rt.run(sp, [](hr::worker_id, std::uint64_t, std::uint64_t, std::vector<float>& g) {
    g.assign(2, 1.0f);
  }, o);
  BOOST_TEST(sp.version() == 12u);
  BOOST_TEST(sp.x[1] == -2.0f);
  BOOST_TEST(rt.recorder().count(sim::update_outcome::applied) == 12u);

  ht::server_policy_archetype<float> tp{.n = 3, .x = {0.0f, 10.0f}};
  const auto s = hr::run_threads<float>(
      tp,
      [](hr::worker_id, std::uint64_t, std::uint64_t, hg::span<const float>,
         std::vector<float>& g) { g.assign(2, 1.0f); },
      {.order = hr::arrival_order::virtual_time, .max_updates = 12}, model);
  BOOST_TEST(tp.version() == 12u);
  BOOST_TEST(tp.x == sp.x);
  BOOST_TEST(s.log.count(sim::update_outcome::applied) == 12u);
  BOOST_TEST(s.log.max_staleness() == rt.recorder().max_staleness());
}

BOOST_AUTO_TEST_CASE(the_round_method_archetype_runs_under_the_round_runtime) {
  ht::round_method_archetype p;
  hr::round_runtime<double, sim::fixed_times> rt(3, sim::fixed_times({1.0, 2.0, 4.0}), 1, 0.5);
  hr::run_options o;
  o.max_events = 5 * (3 + 1);  // five rounds: three job ends and a barrier timer each
  p.limit_rounds(5);
  rt.run(p, [&p](hr::worker_id w, std::uint64_t r, std::uint64_t k, double& out) {
    p.compute(w, r, k, out);
  }, o);
  BOOST_TEST(p.rounds_done == 5u);
  BOOST_TEST(p.total == 5.0 * (1.0 + 2.0 + 3.0));
  BOOST_TEST(rt.recorder().count(sim::update_outcome::applied) == 15u);
  BOOST_TEST(rt.engine().now() == 5 * 4.5);  // the slowest job plus the barrier, per round
}

BOOST_AUTO_TEST_SUITE_END()
