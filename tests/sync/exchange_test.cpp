// The exchanges of the per-rank steps (heterograd/algorithms/sync/exchange.hpp): one step
// coroutine, run over the sequential exchange (n ranks in one thread) and over the inproc
// transport (n threads), gives the same bits; the sequential exchange reports a deadlock and
// surfaces a rank's exception; groups and gossip's neighbour exchange match the transport's.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "hg_test.hpp"
#include "sync_support.hpp"
#include "heterograd/algorithms/sync/exchange.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/core/rng.hpp"

namespace hg = heterograd;
namespace hs = heterograd::algorithms::sync;
namespace hc = heterograd::comm;

namespace {

using seq = hs::sequential_exchange<float>;

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return sync_test::bitwise_equal(hg::span<const float>(a), hg::span<const float>(b));
}

// Two weighted allreduces and a vote, written once against any exchange.
template <class Ex>
hs::step_task<std::int64_t> two_averages_and_a_vote(Ex& ex, hg::span<const float> in,
                                                     hg::span<float> out, double w,
                                                     std::int64_t vote) {
  co_await ex.allreduce(in, out, w);
  co_await ex.allreduce(hg::span<const float>(out), out, w);
  std::int64_t v = vote;
  co_await ex.allreduce_sum(hg::span<std::int64_t>(&v, 1));
  co_return v;
}

struct inputs {
  std::vector<std::vector<float>> x;
  std::vector<double> w;
  inputs(std::size_t n, std::size_t d, std::uint64_t seed) : x(n, std::vector<float>(d)), w(n) {
    const hg::counter_rng rng(seed, 3);
    double total = 0;
    for (std::size_t r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < d; ++i) x[r][i] = static_cast<float>(rng.normal(r * d + i));
      w[r] = 1.0 + static_cast<double>(rng.substream(1).below(r, 7));
      total += w[r];
    }
    for (auto& v : w) v /= total;
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(sequential_exchange)

BOOST_AUTO_TEST_CASE(one_step_over_the_sequential_exchange_and_over_inproc_threads_gives_the_same_bits) {
  const std::uint64_t seed = hg_test::seed();
  // Sizes below and above inproc's staging threshold (its two allreduce paths).
  for (std::size_t n : {1u, 2u, 3u, 5u}) {
    for (std::size_t d : {7u, 70000u}) {
      const inputs in(n, d, seed + n * 31 + d);
      std::vector<std::vector<float>> a(n, std::vector<float>(d)), b = a;
      std::vector<std::int64_t> va(n), vb(n);

      seq ex(n);
      std::vector<seq::view> views;
      for (std::size_t r = 0; r < n; ++r) views.push_back(ex.rank(r));
      std::vector<hs::step_task<std::int64_t>> steps;
      for (std::size_t r = 0; r < n; ++r)
        steps.push_back(two_averages_and_a_vote(views[r], hg::span<const float>(in.x[r]),
                                                hg::span<float>(a[r]), in.w[r],
                                                static_cast<std::int64_t>(r) + 1));
      ex.run_in_rank_order(steps);
      for (std::size_t r = 0; r < n; ++r) va[r] = steps[r].result();

      hc::inproc::spawn(static_cast<int>(n), [&](hc::inproc::communicator c) {
        const auto r = static_cast<std::size_t>(c.rank());
        hs::transport_exchange<hc::inproc::communicator> tx(c, {.timeout = hg::seconds{30}});
        vb[r] = two_averages_and_a_vote(tx, hg::span<const float>(in.x[r]), hg::span<float>(b[r]),
                                        in.w[r], static_cast<std::int64_t>(r) + 1)
                    .run();
      });
      for (std::size_t r = 0; r < n; ++r) {
        BOOST_TEST(bitwise_equal(a[r], b[r]), "n = " << n << ", d = " << d << ", rank " << r);
        BOOST_TEST(va[r] == static_cast<std::int64_t>(n * (n + 1) / 2));
        BOOST_TEST(vb[r] == va[r]);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(groups_reduce_apart_and_gossip_neighbours_match_the_inproc_transport) {
  const std::size_t n = 4, d = 33;
  const inputs in(n, d, hg_test::seed());
  const std::vector<std::size_t> color = {1, 0, 1, 0};
  // A group average, then a ring exchange: every rank gets its left and right neighbours.
  auto step = [&](auto& world, auto& group, std::size_t r, std::vector<float>& out,
                  std::vector<std::vector<float>>& got) -> hs::step_task<bool> {
    co_await group.allreduce(hg::span<const float>(in.x[r]), hg::span<float>(out), 0.5);
    const std::size_t left = (r + n - 1) % n, right = (r + 1) % n;
    std::vector<std::size_t> peers(2);
    peers[0] = std::min(left, right);
    peers[1] = std::max(left, right);
    got.assign(2, std::vector<float>(d));
    std::vector<hg::span<float>> into;
    into.emplace_back(got[0]);
    into.emplace_back(got[1]);
    co_await world.neighbours(hg::span<const float>(in.x[r]), peers, peers, std::move(into));
    co_return true;
  };
  std::vector<std::vector<float>> a(n, std::vector<float>(d)), b = a;
  std::vector<std::vector<std::vector<float>>> ga(n), gb(n);

  seq ex(n);
  std::vector<seq::view> world;
  for (std::size_t r = 0; r < n; ++r) world.push_back(ex.rank(r));
  auto groups = ex.split(color);
  BOOST_TEST(groups[2].rank() == 1u);
  BOOST_TEST(groups[2].size() == 2u);
  std::vector<hs::step_task<bool>> steps;
  for (std::size_t r = 0; r < n; ++r) steps.push_back(step(world[r], groups[r], r, a[r], ga[r]));
  ex.run_in_rank_order(steps);

  hc::inproc::spawn(static_cast<int>(n), [&](hc::inproc::communicator c) {
    const auto r = static_cast<std::size_t>(c.rank());
    const auto sub = c.split(static_cast<int>(color[r]), static_cast<int>(r));
    hs::transport_exchange<hc::inproc::communicator> tw(c, {.timeout = hg::seconds{30}}), tg(sub, {.timeout = hg::seconds{30}});
    step(tw, tg, r, b[r], gb[r]).run();
  });
  for (std::size_t r = 0; r < n; ++r) {
    BOOST_TEST(bitwise_equal(a[r], b[r]), "rank " << r);
    BOOST_TEST(bitwise_equal(a[r], a[(r + 2) % n]), "rank " << r << " and its group partner");
    const std::size_t lo = std::min((r + n - 1) % n, (r + 1) % n);
    BOOST_TEST(bitwise_equal(ga[r][0], in.x[lo]));
    BOOST_TEST(bitwise_equal(ga[r][0], gb[r][0]));
    BOOST_TEST(bitwise_equal(ga[r][1], gb[r][1]));
  }
}

BOOST_AUTO_TEST_CASE(a_rank_waiting_on_a_collective_nobody_else_posts_is_reported_as_a_deadlock) {
  seq ex(3);
  std::vector<seq::view> views;
  for (std::size_t r = 0; r < 3; ++r) views.push_back(ex.rank(r));
  std::vector<float> x(4, 1.0f);
  auto step = [&](seq::view& v, bool post) -> hs::step_task<bool> {
    if (post) co_await v.allreduce(hg::span<const float>(x), hg::span<float>(x), 1.0);
    co_return true;
  };
  std::vector<hs::step_task<bool>> steps;
  steps.push_back(step(views[0], false));
  steps.push_back(step(views[1], true));
  steps.push_back(step(views[2], true));
  try {
    ex.run_in_rank_order(steps);
    BOOST_FAIL("no deadlock reported");
  } catch (const std::logic_error& e) {
    const std::string m = e.what();
    BOOST_TEST(m.find("deadlock") != std::string::npos, m);
    BOOST_TEST(m.find("ranks 1, 2") != std::string::npos, m);
  }
}

BOOST_AUTO_TEST_CASE(ranks_posting_different_collectives_are_refused) {
  seq ex(2);
  auto v0 = ex.rank(0), v1 = ex.rank(1);
  std::vector<float> x(2, 1.0f);
  std::int64_t k = 1;
  auto reduce = [&](seq::view& v) -> hs::step_task<bool> {
    co_await v.allreduce(hg::span<const float>(x), hg::span<float>(x), 0.5);
    co_return true;
  };
  auto vote = [&](seq::view& v) -> hs::step_task<bool> {
    co_await v.allreduce_sum(hg::span<std::int64_t>(&k, 1));
    co_return true;
  };
  std::vector<hs::step_task<bool>> steps;
  steps.push_back(reduce(v0));
  steps.push_back(vote(v1));
  BOOST_CHECK_THROW(ex.run_in_rank_order(steps), std::logic_error);
}

BOOST_AUTO_TEST_CASE(an_exception_in_one_rank_surfaces_from_the_run_and_the_others_are_abandoned) {
  seq ex(3);
  std::vector<seq::view> views;
  for (std::size_t r = 0; r < 3; ++r) views.push_back(ex.rank(r));
  std::vector<std::vector<float>> x(3, std::vector<float>(5, 2.0f));
  auto step = [&](seq::view& v, std::size_t r) -> hs::step_task<bool> {
    co_await v.allreduce(hg::span<const float>(x[r]), hg::span<float>(x[r]), 1.0 / 3);
    if (r == 1) throw std::runtime_error("rank 1 failed after the first average");
    co_await v.allreduce(hg::span<const float>(x[r]), hg::span<float>(x[r]), 1.0 / 3);
    co_return true;
  };
  std::vector<hs::step_task<bool>> steps;
  for (std::size_t r = 0; r < 3; ++r) steps.push_back(step(views[r], r));
  try {
    ex.run_in_rank_order(steps);
    BOOST_FAIL("no exception surfaced");
  } catch (const std::runtime_error& e) {
    BOOST_TEST(std::string(e.what()) == "rank 1 failed after the first average");
  }
  // Rank 1's failure stopped the run before its second average: nobody saw it complete.
  BOOST_TEST(!steps[0].done());
  BOOST_TEST(!steps[2].done());
}

BOOST_AUTO_TEST_CASE(a_step_over_a_real_transport_never_suspends_and_a_suspending_one_is_refused_by_run) {
  seq ex(2);
  auto v0 = ex.rank(0);
  std::vector<float> x(3, 1.0f);
  auto step = [&](seq::view& v) -> hs::step_task<bool> {
    co_await v.allreduce(hg::span<const float>(x), hg::span<float>(x), 0.5);
    co_return true;
  };
  auto t = step(v0);
  BOOST_CHECK_THROW(t.run(), std::logic_error);  // rank 1 never posts
}

BOOST_AUTO_TEST_SUITE_END()
