// Partial collectives over inproc (eager-SGD, #21): same result on every rank, no lost
// contribution, staleness within the bound, and the policies' firing rules. Late ranks are
// made late by waiting on observable state (a round fired, k ranks arrived) or on a manual
// clock, not by sleeping.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <set>
#include <mutex>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "comm_test_support.hpp"
#include "heterograd/comm/inproc_partial.hpp"
#include "heterograd/comm/partial_rounds.hpp"

namespace hg = heterograd;
namespace hc = heterograd::comm;
namespace hi = heterograd::comm::inproc;
using comm_test::expect;

namespace {

void wait_until(const std::function<bool()>& f) {
  while (!f()) std::this_thread::yield();
}

struct run_record {
  std::vector<std::vector<std::int64_t>> results;  // [rank][round] first element
  std::vector<std::vector<hc::round_report>> reports;
  std::vector<std::int64_t> contributed;
  explicit run_record(int n)
      : results(static_cast<std::size_t>(n)), reports(static_cast<std::size_t>(n)),
        contributed(static_cast<std::size_t>(n), 0) {}
};

/// Whether the ranks that are on time in round t can fire it without the late ones.
bool on_time_can_fire(const hc::partial_policy& p, int n, int t, const std::vector<bool>& late) {
  int on_time = 0;
  for (bool l : late) on_time += !l;
  switch (p.what) {
    case hc::partial_policy::kind::solo: return on_time >= 1;
    case hc::partial_policy::kind::majority:
      return !late[static_cast<std::size_t>(hc::detail::majority_initiator(p.seed, static_cast<std::uint64_t>(t), n))];
    case hc::partial_policy::kind::quorum: return on_time >= p.k;
    default: return on_time == n;
  }
}

/// R rounds of `policy` where rank r is late in round t when late(r, t); then a flush. A late
/// rank arrives once its round fired; if the on-time ranks cannot fire it alone, once they
/// all arrived.
template <class Late>
run_record run_rounds(int n, int rounds, hc::partial_policy policy, int bound, Late late) {
  run_record rec(n);
  const std::size_t m = 33;
  hi::spawn(n, [&](hi::communicator c) {
    const int r = c.rank();
    const auto ru = static_cast<std::size_t>(r);
    hc::partial_options o;
    o.staleness_bound = bound;
    hi::partial_allreduce<std::int64_t> pa(c, m, policy, o);
    std::vector<std::int64_t> v(m);
    for (int t = 0; t <= rounds; ++t) {
      const std::int64_t g = (r + 1) * 1000003LL + t * 7919LL;
      std::fill(v.begin(), v.end(), g);
      rec.contributed[ru] += g;
      if (t < rounds && late(r, t)) {
        std::vector<bool> lates(static_cast<std::size_t>(n));
        int on_time = 0;
        for (int j = 0; j < n; ++j) {
          lates[static_cast<std::size_t>(j)] = late(j, t);
          on_time += !late(j, t);
        }
        if (on_time_can_fire(policy, n, t, lates))
          wait_until([&] { return pa.fired_rounds() > static_cast<std::uint64_t>(t); });
        else
          wait_until([&] { return pa.fired_rounds() > static_cast<std::uint64_t>(t) || pa.arrivals() >= on_time; });
      }
      (t == rounds ? pa.flush(hg::span<std::int64_t>(v)) : pa.allreduce(hg::span<std::int64_t>(v))).wait();
      for (std::size_t i = 1; i < m; ++i) expect(v[i] == v[0], "uniform result");
      rec.results[ru].push_back(v[0]);
      rec.reports[ru].push_back(pa.last_report());
    }
  });
  return rec;
}

void check_invariants(const run_record& rec, int n, int bound) {
  // Same result and report on every rank, round by round.
  for (int r = 1; r < n; ++r) {
    BOOST_TEST(rec.results[static_cast<std::size_t>(r)] == rec.results[0]);
    BOOST_TEST((rec.reports[static_cast<std::size_t>(r)] == rec.reports[0]));
  }
  // Nothing lost: the results over all rounds sum to all contributions.
  std::int64_t results = 0, contributed = 0;
  for (auto x : rec.results[0]) results += x;
  for (auto x : rec.contributed) contributed += x;
  BOOST_TEST(results == contributed);
  for (const auto& rep : rec.reports[0]) {
    BOOST_TEST(rep.max_staleness <= bound);
    BOOST_TEST(!rep.fresh.empty());
  }
  // The flush round is complete: everyone fresh.
  BOOST_TEST(rec.reports[0].back().fresh.size() == static_cast<std::size_t>(n));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(partial_collectives)

BOOST_AUTO_TEST_CASE(solo_with_an_always_late_rank_folds_its_gradient_into_the_next_round_with_staleness_one) {
  // Bound 1: round t+1 fires only once rank 1 took round t's result (and left its gradient).
  const int rounds = 12;
  auto rec = run_rounds(2, rounds, hc::partial_policy::solo(), 1, [](int r, int) { return r == 1; });
  check_invariants(rec, 2, 1);
  for (int t = 0; t < rounds; ++t) {
    const auto& rep = rec.reports[0][static_cast<std::size_t>(t)];
    BOOST_TEST(rep.fresh == std::vector<int>{0});
    const std::int64_t g0 = 1000003LL + t * 7919LL;
    const std::int64_t g1_prev = 2 * 1000003LL + (t - 1) * 7919LL;
    if (t == 0) {
      BOOST_TEST(rep.stale.empty());
      BOOST_TEST(rec.results[0][0] == g0);
    } else {
      BOOST_TEST(rep.stale == std::vector<int>{1});
      BOOST_TEST(rep.staleness[1] == 1);
      BOOST_TEST(rep.max_staleness == 1);
      BOOST_TEST(rec.results[0][static_cast<std::size_t>(t)] == g0 + g1_prev);
    }
  }
}

BOOST_AUTO_TEST_CASE(on_time_ranks_run_up_to_the_staleness_bound_ahead_without_waiting_for_a_late_one) {
  const int bound = 3;
  std::atomic<int> done0{0};
  std::atomic<bool> checked{false};
  hi::spawn(2, [&](hi::communicator c) {
    hc::partial_options o;
    o.staleness_bound = bound;
    hi::partial_allreduce<float> pa(c, 4, hc::partial_policy::solo(), o);
    std::vector<float> v(4, 1.0f);
    if (c.rank() == 0) {
      // Rank 1 has not called at all: rank 0 still completes `bound` rounds alone.
      for (int t = 0; t < bound; ++t) {
        pa.allreduce(hg::span<float>(v)).wait();
        ++done0;
      }
      // The next round would exceed the bound: it cannot complete before rank 1 moves.
      auto r = pa.allreduce(hg::span<float>(v));
      for (int i = 0; i < 50; ++i) expect(!r.test(), "bounded staleness");
      checked = true;
      r.wait();
    } else {
      wait_until([&] { return checked.load(); });
      for (int t = 0; t <= bound; ++t) pa.allreduce(hg::span<float>(v)).wait();
    }
  });
  BOOST_TEST(done0.load() == bound);
}

BOOST_AUTO_TEST_CASE(majority_fires_at_the_seeded_initiator_which_is_always_fresh) {
  const int n = 4, rounds = 30;
  const std::uint64_t seed = hg_test::seed();
  // Everybody but the initiator is late half of the time.
  auto late = [&](int r, int t) {
    return r != hc::detail::majority_initiator(seed, static_cast<std::uint64_t>(t), n) && (r + t) % 2 == 0;
  };
  auto rec = run_rounds(n, rounds, hc::partial_policy::majority(seed), 4, late);
  check_invariants(rec, n, 4);
  std::set<int> initiators;
  for (int t = 0; t < rounds; ++t) {
    const auto& rep = rec.reports[0][static_cast<std::size_t>(t)];
    const int init = hc::detail::majority_initiator(seed, static_cast<std::uint64_t>(t), n);
    BOOST_TEST(rep.initiator == init);
    BOOST_TEST(std::count(rep.fresh.begin(), rep.fresh.end(), init) == 1);
    initiators.insert(init);
  }
  BOOST_TEST(initiators.size() > 1u);  // drawn, not fixed
}

BOOST_AUTO_TEST_CASE(quorum_k_fires_with_at_least_k_fresh_contributions) {
  const int n = 5, k = 3, rounds = 20;
  auto rec = run_rounds(n, rounds, hc::partial_policy::quorum(k), 2,
                        [&](int r, int t) { return (r + t) % n >= k; });
  check_invariants(rec, n, 2);
  for (int t = 0; t < rounds; ++t) BOOST_TEST(rec.reports[0][static_cast<std::size_t>(t)].fresh.size() >= std::size_t{k});
}

BOOST_AUTO_TEST_CASE(deadline_fires_when_the_manual_clock_passes_first_arrival_plus_the_deadline) {
  hg::manual_clock clock;
  const int n = 3;
  std::vector<hc::round_report> reps(n);
  std::vector<std::vector<float>> res(n);
  hi::spawn(
      n,
      [&](hi::communicator c) {
        hi::partial_allreduce<float> pa(c, 2, hc::partial_policy::deadline(hg::seconds{2.0}));
        std::vector<float> v(2, static_cast<float>(c.rank() + 1));
        if (c.rank() == 2) {
          // The straggler: let ranks 0 and 1 arrive, move time 1.5 s (not enough), then past.
          wait_until([&] { return pa.arrivals() == 2; });
          clock.advance(hg::seconds{1.5});
          expect(pa.fired_rounds() == 0, "fired before the deadline");
          clock.advance(hg::seconds{0.6});
          wait_until([&] { return pa.fired_rounds() == 1; });
        }
        pa.allreduce(hg::span<float>(v)).wait();
        reps[static_cast<std::size_t>(c.rank())] = pa.last_report();
        // Round 1: everyone on time; rank 2's round-0 gradient comes in stale.
        std::vector<float> w(2, 10.0f);
        pa.allreduce(hg::span<float>(w)).wait();
        res[static_cast<std::size_t>(c.rank())] = {v[0], w[0]};
        expect(pa.last_report().staleness[2] == 1, "stale by one round");
      },
      clock);
  for (int r = 0; r < n; ++r) {
    BOOST_TEST(reps[static_cast<std::size_t>(r)].fresh == (std::vector<int>{0, 1}));
    BOOST_TEST(res[static_cast<std::size_t>(r)][0] == 3.0f);        // 1 + 2
    BOOST_TEST(res[static_cast<std::size_t>(r)][1] == 30.0f + 3.0f);  // fresh 3*10 + stale 3
  }
}

BOOST_AUTO_TEST_CASE(random_lateness_keeps_every_invariant_for_every_policy) {
  const std::uint64_t seed = hg_test::seed();
  const int n = 4, rounds = 40, bound = 2;
  for (auto p : {hc::partial_policy::solo(), hc::partial_policy::majority(seed),
                 hc::partial_policy::quorum(2)}) {
    hg::counter_rng rng(seed, 77);
    auto late = [&](int r, int t) {
      return rng.uniform(static_cast<std::uint64_t>(t * n + r)) < 0.3;
    };
    auto rec = run_rounds(n, rounds, p, bound, late);
    check_invariants(rec, n, bound);
  }
}

BOOST_AUTO_TEST_CASE(avg_divides_by_all_ranks_like_eager_sgd) {
  std::vector<double> out(3);
  hi::spawn(3, [&](hi::communicator c) {
    hc::partial_options o;
    o.op = hc::reduce_op::avg;
    hi::partial_allreduce<double> pa(c, 1, hc::partial_policy::quorum(3), o);
    std::vector<double> v{static_cast<double>(c.rank() * 3)};
    pa.allreduce(hg::span<double>(v)).wait();
    out[static_cast<std::size_t>(c.rank())] = v[0];
  });
  for (double x : out) BOOST_TEST(x == 3.0);
}

BOOST_AUTO_TEST_CASE(different_policies_on_different_ranks_are_a_mismatch_on_every_rank) {
  std::atomic<int> mismatches{0};
  hi::spawn(2, [&](hi::communicator c) {
    try {
      hi::partial_allreduce<float> pa(c, 8, c.rank() ? hc::partial_policy::solo() : hc::partial_policy::quorum(2));
    } catch (const hc::mismatch_error&) {
      ++mismatches;
    }
  });
  BOOST_TEST(mismatches.load() == 2);
}

BOOST_AUTO_TEST_SUITE_END()

// The rounds' state machine alone (comm::partial_rounds: inproc's shared state, and the
// simulated eager-SGD's partial allreduce), driven in a scripted order from one thread.
BOOST_AUTO_TEST_SUITE(partial_rounds_state)

BOOST_AUTO_TEST_CASE(a_scripted_solo_run_fires_folds_and_bounds_staleness_as_the_semantics_say) {
  // 3 ranks, solo, B = 1, contributions of rank r in round t: 10^r * (t + 1). Rank 2 is late
  // in round 0: rank 0 fires round 0 alone; rank 2 arrives after, takes round 0's result at
  // once and its contribution waits for round 1.
  hc::partial_options o;
  o.staleness_bound = 1;
  hc::partial_rounds<double> s(3, 1, hc::partial_policy::solo(), o);
  s.fired_sum.assign(1, 0.0);
  auto c = [](int r, int t) { return (r == 0 ? 1.0 : r == 1 ? 10.0 : 100.0) * (t + 1); };
  double b0 = c(0, 0);
  BOOST_TEST(s.arrive(0, 0, &b0, false, hg::seconds{0}));  // solo: fires with rank 0 alone
  BOOST_TEST(b0 == 1.0);
  BOOST_TEST(s.next == 1);
  BOOST_TEST((s.reports[0].fresh == std::vector<int>{0}));
  double b1 = c(1, 0);
  BOOST_TEST(s.arrive(1, 0, &b1, false, hg::seconds{0}));  // late: round 0's result at once
  BOOST_TEST(b1 == 1.0);
  // Round 1 cannot fire while rank 2 has not taken round 0's result (B = 1): rank 0 waits.
  double a1 = c(0, 1);
  BOOST_TEST(!s.arrive(0, 1, &a1, false, hg::seconds{0}));
  BOOST_TEST(s.waiting(0, 1));
  BOOST_TEST(s.arrivals() == 1);
  double b2 = c(2, 0);
  BOOST_TEST(s.arrive(2, 0, &b2, false, hg::seconds{0}));  // late too; now every slot is read
  BOOST_TEST(b2 == 1.0);
  BOOST_TEST(s.try_fire(hg::seconds{0}));  // round 1: fresh 0, stale 1 and 2 (rank order)
  BOOST_TEST(s.complete(0, 1));
  BOOST_TEST(a1 == c(0, 1) + c(1, 0) + c(2, 0));
  const auto& rep = s.reports[1 % 1];
  BOOST_TEST((rep.fresh == std::vector<int>{0}));
  BOOST_TEST((rep.stale == std::vector<int>{1, 2}));
  BOOST_TEST(rep.max_staleness == 1);
  BOOST_TEST(!s.try_fire(hg::seconds{0}));  // nobody waits in round 2
  // A flush round waits for every rank and folds in nothing left: the sums balance.
  s.flush_round = 2;
  double f0 = c(0, 2), f1 = c(1, 1), f2 = c(2, 1);
  BOOST_TEST(!s.arrive(0, 2, &f0, true, hg::seconds{0}));
  // Ranks 1 and 2 are in round 1, which fired: late, their parts go to round 2.
  BOOST_TEST(s.arrive(1, 1, &f1, false, hg::seconds{0}));
  BOOST_TEST(s.arrive(2, 1, &f2, false, hg::seconds{0}));
  BOOST_TEST(!s.try_fire(hg::seconds{0}));  // the flush needs ranks 1 and 2 fresh in round 2
  double g1 = c(1, 2), g2 = c(2, 2);
  BOOST_TEST(!s.arrive(1, 2, &g1, true, hg::seconds{0}));
  BOOST_TEST(s.arrive(2, 2, &g2, true, hg::seconds{0}));
  BOOST_TEST(s.complete(0, 2));
  BOOST_TEST(s.complete(1, 2));
  double all = 0;
  for (int r = 0; r < 3; ++r)
    for (int t = 0; t < 3; ++t) all += c(r, t);
  BOOST_TEST(s.fired_sum[0] == all);  // nothing dropped, nothing counted twice
  BOOST_TEST(f0 == g1);                // one result for every fresh rank
}

BOOST_AUTO_TEST_CASE(a_withdrawn_rank_is_neither_written_nor_counted) {
  hc::partial_rounds<float> s(2, 2, hc::partial_policy::quorum(2), hc::partial_options{});
  std::vector<float> a{1, 2}, b{3, 4};
  BOOST_TEST(!s.arrive(0, 0, a.data(), false, hg::seconds{0}));
  s.withdraw(0, 0);
  BOOST_TEST(s.arrivals() == 0);
  BOOST_TEST(!s.arrive(1, 0, b.data(), false, hg::seconds{0}));  // quorum 2 not reached
  BOOST_TEST((a == std::vector<float>{1, 2}));
}

BOOST_AUTO_TEST_SUITE_END()
