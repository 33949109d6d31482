// The mpi transport under mpirun -np 2..4: every collective against a reference, the
// schedule algorithms over MPI point-to-point, any-source receives, split, partial
// collectives (same result everywhere, nothing lost, staleness within the bound), and the
// uneven-count collectives of comm/uneven.hpp over MPI's send/recv.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "comm_test_support.hpp"
#include "transport_conformance.hpp"
#include "heterograd/comm/mpi_partial.hpp"
#include "heterograd/comm/uneven.hpp"
#include "hg_mpi.hpp"

namespace hg = heterograd;
namespace hc = heterograd::comm;
namespace hm = heterograd::comm::mpi;

using mpi_test::mpi_session;
BOOST_TEST_GLOBAL_FIXTURE(mpi_session);

namespace {

std::uint64_t shared_seed() {
  // Rank 0's seed, so every rank draws the same inputs.
  std::uint64_t s = hg_test::seed();
  hm::communicator& c = mpi_test::world();
  c.broadcast(hg::span<std::uint64_t>(&s, 1), 0).wait();
  return s;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(mpi_transport)

BOOST_AUTO_TEST_CASE(the_handle_reports_rank_size_and_the_thread_level_mpi_granted) {
  auto& c = mpi_test::world();
  int r = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  BOOST_TEST(c.rank() == r);
  BOOST_TEST(c.size() == n);
  BOOST_TEST(c.threads() == hm::query_thread_level());
  BOOST_TEST(c.native() != MPI_COMM_WORLD);  // a duplicate, the user's communicator untouched
}

BOOST_AUTO_TEST_CASE(allreduce_by_every_algorithm_equals_the_integer_reference_bitwise) {
  comm_conformance::allreduce_equals_the_integer_reference(
      mpi_test::world(), {hc::algorithm::automatic, hc::algorithm::native, hc::algorithm::ring,
                          hc::algorithm::recursive_halving_doubling, hc::algorithm::tree,
                          hc::algorithm::hierarchical, hc::algorithm::torus_2d});
}

BOOST_AUTO_TEST_CASE(float_allreduce_matches_the_reference_within_reordering_tolerance_and_weights_average) {
  auto& c = mpi_test::world();
  const auto seed = shared_seed();
  const int n = c.size();
  const std::size_t m = 5000;
  std::vector<double> ref(m, 0.0);
  for (int r = 0; r < n; ++r) {
    const auto in = comm_test::real_input<float>(seed, r, m);
    for (std::size_t i = 0; i < m; ++i) ref[i] += in[i];
  }
  for (auto a : {hc::algorithm::native, hc::algorithm::ring, hc::algorithm::torus_2d}) {
    auto v = comm_test::real_input<float>(seed, c.rank(), m);
    hc::allreduce_options o;
    o.algo = a;
    c.allreduce(hg::span<float>(v), o).wait();
    for (std::size_t i = 0; i < m; ++i) BOOST_TEST(std::abs(v[i] - ref[i]) <= 2.0 * n * n * 1.2e-7);
  }
  comm_conformance::weighted_average_is_the_sum_of_weighted_inputs_over_the_sum_of_weights(c);
}

// Weighted calls run schedules over matched receives (1 MiB segments): a buffer of 10^6
// floats once failed on 3 ranks with a segment's receive taking its sibling's message.
BOOST_AUTO_TEST_CASE(weighted_allreduce_across_segments_by_every_algorithm_equals_the_reference_bitwise) {
  comm_conformance::weighted_allreduce_across_segments_equals_the_reference(
      mpi_test::world(), hm::mpi_allreduce_tuning{}.segment_bytes,
      {hc::algorithm::automatic, hc::algorithm::native, hc::algorithm::ring,
       hc::algorithm::recursive_halving_doubling, hc::algorithm::tree, hc::algorithm::hierarchical,
       hc::algorithm::torus_2d});
}

// Receives are matched in posting order, but a later any-source receive still takes a message
// that the earlier, waiting receive cannot match: rank 0 receives from rank 1, then from any
// source; rank 2's message completes the second while the first waits (rank 1 sends only once
// told so). Holding every later overlapping receive back would hang here until the timeout.
BOOST_AUTO_TEST_CASE(a_later_any_source_receive_takes_a_message_the_earlier_waiting_receive_cannot_match) {
  auto& c = mpi_test::world();
  if (c.size() < 3) return;
  const hc::recv_options ro{.timeout = hg::seconds{20}};
  if (c.rank() == 0) {
    std::vector<std::int32_t> a(4, -1), b(4, -1), go{1};
    auto ra = c.recv(hg::span<std::int32_t>(a), 1, 21, ro);
    auto rb = c.recv(hg::span<std::int32_t>(b), hc::any_source, 21, ro);
    rb.wait();
    BOOST_TEST(rb.status().source == 2);
    BOOST_TEST(b == std::vector<std::int32_t>(4, 2), boost::test_tools::per_element());
    c.send(hg::span<const std::int32_t>(go), 1, 22).wait();
    ra.wait();
    BOOST_TEST(a == std::vector<std::int32_t>(4, 1), boost::test_tools::per_element());
  } else if (c.rank() == 1) {
    std::vector<std::int32_t> go{0}, mine(4, 1);
    c.recv(hg::span<std::int32_t>(go), 0, 22, ro).wait();
    c.send(hg::span<const std::int32_t>(mine), 0, 21).wait();
  } else if (c.rank() == 2) {
    std::vector<std::int32_t> mine(4, 2);
    c.send(hg::span<const std::int32_t>(mine), 0, 21).wait();
  }
  c.barrier().wait();
}

BOOST_AUTO_TEST_CASE(waits_yield_between_polls_only_when_ranks_outnumber_cores_and_mpi_does_not_yield_itself) {
  auto& c = mpi_test::world();
  // OpenMPI's mpirun sets mpi_oversubscribe when it places more ranks than slots, and then
  // mpi_yield_when_idle defaults to true unless given explicitly.
  const char* over = std::getenv("OMPI_MCA_mpi_oversubscribe");
  const char* yield = std::getenv("OMPI_MCA_mpi_yield_when_idle");
  const hm::thread_level granted = hm::query_thread_level();
  (void)hm::detail::library_yields_when_idle();
  BOOST_TEST(hm::query_thread_level() == granted);  // the tool interface leaves it alone
  if (yield != nullptr) {
    BOOST_TEST(hm::detail::library_yields_when_idle() == (std::string(yield) == "1" || std::string(yield) == "true"));
  } else if (over != nullptr) {
    BOOST_TEST(hm::detail::library_yields_when_idle() == (std::string(over) == "1"));
  }
  const bool crowded = c.size() > static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  BOOST_TEST(c.oversubscribed() == crowded);  // one node here
  BOOST_TEST(c.yields_between_polls() == (crowded && !hm::detail::library_yields_when_idle()));
}

BOOST_AUTO_TEST_CASE(automatic_allreduce_picks_its_algorithm_by_size_and_each_equals_the_reference_bitwise) {
  auto& c = mpi_test::world();
  const auto seed = shared_seed();
  const int n = c.size();
  const bool pow2 = (n & (n - 1)) == 0;
  const auto& t = c.tuning;
  // Sizes on both sides of every threshold (bytes of int64 elements), each run twice so the
  // second call reuses the first one's state and cached schedule.
  std::vector<std::size_t> bytes{8, t.doubling_max_bytes, t.doubling_max_bytes + 8, 64 * 1024,
                                 t.rhd_max_bytes, t.rhd_max_bytes + 8,
                                 t.oversubscribed_doubling_max_bytes, t.oversubscribed_doubling_max_bytes + 8,
                                 t.oversubscribed_native_max_bytes + 8, t.oversubscribed_tree_max_bytes,
                                 t.oversubscribed_tree_max_bytes + 8};
  for (std::size_t b : bytes) {
    const std::size_t m = b / sizeof(std::int64_t);
    const hc::algorithm a = c.choose(hc::algorithm::automatic, b);
    if (c.oversubscribed()) {
      // Doubling (reported as halving/doubling) first, then MPI_Iallreduce, the tree, and the
      // sizes of the uncrowded rule.
      const bool doubling = pow2 && b <= t.oversubscribed_doubling_max_bytes;
      BOOST_TEST(c.use_doubling(b) == doubling);
      BOOST_TEST((a == (doubling                                 ? hc::algorithm::recursive_halving_doubling
                        : b <= t.oversubscribed_native_max_bytes ? hc::algorithm::native
                        : b <= t.oversubscribed_tree_max_bytes   ? hc::algorithm::tree
                        : b <= t.rhd_max_bytes                   ? hc::algorithm::recursive_halving_doubling
                                                                 : hc::algorithm::ring)));
    } else {
      BOOST_TEST((a == (n == 2 || b <= t.rhd_max_bytes ? hc::algorithm::recursive_halving_doubling
                                                        : hc::algorithm::ring)));
      BOOST_TEST(c.use_doubling(b) == (pow2 && b <= t.doubling_max_bytes));
    }
    std::vector<std::int64_t> expected(m, 0);
    for (int r = 0; r < n; ++r) {
      const auto in = comm_test::integer_input<std::int64_t>(seed, r, m, -1000, 1000);
      for (std::size_t i = 0; i < m; ++i) expected[i] += in[i];
    }
    for (int repeat = 0; repeat < 2; ++repeat) {
      auto v = comm_test::integer_input<std::int64_t>(seed, c.rank(), m, -1000, 1000);
      c.allreduce(hg::span<std::int64_t>(v)).wait();
      BOOST_TEST(v == expected, "bytes=" << b << " algorithm " << hc::algorithm_name(a) << " repeat " << repeat);
    }
  }
}

BOOST_AUTO_TEST_CASE(allreduces_in_flight_together_each_get_their_own_state_and_scratch) {
  auto& c = mpi_test::world();
  const int n = c.size(), r = c.rank();
  // Three of one element type posted before any is waited for (none may reuse another's
  // state or receive buffer), one of another type, then waited for in reverse order.
  const std::size_t m = 30000;
  std::vector<std::vector<std::int32_t>> v(3);
  std::vector<double> d(m, 0.5 * r);
  std::vector<hc::request> q;
  for (int k = 0; k < 3; ++k) {
    v[static_cast<std::size_t>(k)].assign(m, (k + 1) * (r + 1));
    q.push_back(c.allreduce(hg::span<std::int32_t>(v[static_cast<std::size_t>(k)])));
  }
  q.push_back(c.allreduce(hg::span<double>(d)));
  for (auto it = q.rbegin(); it != q.rend(); ++it) it->wait();
  const std::int32_t tri = n * (n + 1) / 2;
  for (int k = 0; k < 3; ++k)
    BOOST_TEST(std::count(v[static_cast<std::size_t>(k)].begin(), v[static_cast<std::size_t>(k)].end(), (k + 1) * tri) ==
               static_cast<std::ptrdiff_t>(m));
  BOOST_TEST(std::count(d.begin(), d.end(), 0.25 * n * (n - 1)) == static_cast<std::ptrdiff_t>(m));
  // A request kept alive (not dropped) while the next call runs: the next call must not
  // take its state.
  std::vector<std::int32_t> a(100, r), b(100, 2 * r);
  hc::request kept = c.allreduce(hg::span<std::int32_t>(a));
  kept.wait();
  c.allreduce(hg::span<std::int32_t>(b)).wait();
  kept.wait();  // still reports its own (successful) completion
  BOOST_TEST(a[0] == n * (n - 1) / 2);
  BOOST_TEST(b[99] == n * (n - 1));
}

BOOST_AUTO_TEST_CASE(the_blocking_mode_equals_the_deadline_path_bitwise) {
  auto& c = mpi_test::world();
  const auto seed = shared_seed();
  for (std::size_t m : {std::size_t{1}, std::size_t{777}, std::size_t{70001}}) {
    for (auto op : {hc::reduce_op::sum, hc::reduce_op::max, hc::reduce_op::avg}) {
      auto x = comm_test::integer_input<std::int64_t>(seed, c.rank(), m, 0, 1000);
      auto y = x;
      hc::allreduce_options o;
      o.op = op;
      c.allreduce(hg::span<std::int64_t>(x), o).wait();
      o.timeout = hc::no_wait_limit;  // opts into MPI_Allreduce
      BOOST_TEST(hm::communicator::blocking_requested(o));
      c.allreduce(hg::span<std::int64_t>(y), o).wait();
      BOOST_TEST(x == y, "m=" << m << " " << hc::reduce_op_name(op));
    }
  }
}

BOOST_AUTO_TEST_CASE(reduce_scatter_allgather_broadcast_gather_and_barrier) {
  comm_conformance::reduce_scatter_allgather_broadcast_gather_and_barrier(mpi_test::world());
}

// Receives are matched (their message's size is learnt before they post), yet a posted
// receive is taken while its rank waits on something else of the communicator, as a posted
// MPI_Irecv is: two ranks that each wait on a rendezvous send before their receive finish.
BOOST_AUTO_TEST_CASE(a_posted_receive_is_taken_while_its_rank_waits_on_a_rendezvous_send) {
  comm_conformance::a_posted_receive_is_taken_while_its_rank_waits_on_a_send(mpi_test::world());
}

BOOST_AUTO_TEST_CASE(any_source_receive_serves_every_worker_and_reports_the_sender) {
  comm_conformance::any_source_receive_serves_every_worker_and_reports_the_sender(mpi_test::world(), hc::any_tag);
}

BOOST_AUTO_TEST_CASE(split_makes_subgroups_ordered_by_key) {
  comm_conformance::split_makes_subgroups_ordered_by_key(mpi_test::world());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(mpi_partial_collectives)

namespace {

struct record {
  std::vector<std::int64_t> results;
  std::vector<hc::round_report> reports;
  std::int64_t contributed = 0;
};

template <class Late>
record run_rounds(hc::partial_policy policy, int rounds, int bound, Late late) {
  auto& c = mpi_test::world();
  hc::partial_options o;
  o.staleness_bound = bound;
  o.timeout = hg::seconds{20};
  hm::partial_allreduce<std::int64_t> pa(c, 9, policy, o);
  record rec;
  std::vector<std::int64_t> v(9);
  for (int t = 0; t <= rounds; ++t) {
    const std::int64_t g = (c.rank() + 1) * 1000003LL + t * 7919LL;
    std::fill(v.begin(), v.end(), g);
    rec.contributed += g;
    if (t < rounds && late(c.rank(), t)) {
      // Late: arrive once this rank's progress thread took part in round t without us.
      while (pa.fired_rounds() <= static_cast<std::uint64_t>(t)) std::this_thread::yield();
    }
    (t == rounds ? pa.flush(hg::span<std::int64_t>(v)) : pa.allreduce(hg::span<std::int64_t>(v))).wait();
    rec.results.push_back(v[0]);
    rec.reports.push_back(pa.last_report());
  }
  return rec;
}

void check_invariants(const record& rec, int bound) {
  auto& c = mpi_test::world();
  // Same result on every rank: compare with rank 0's through min/max allreduces.
  std::vector<std::int64_t> lo = rec.results, hi = rec.results;
  hc::allreduce_options mn, mx;
  mn.op = hc::reduce_op::min;
  mx.op = hc::reduce_op::max;
  c.allreduce(hg::span<std::int64_t>(lo), mn).wait();
  c.allreduce(hg::span<std::int64_t>(hi), mx).wait();
  BOOST_TEST(lo == hi);
  // Nothing lost.
  std::int64_t total = rec.contributed;
  c.allreduce(hg::span<std::int64_t>(&total, 1)).wait();
  std::int64_t results = 0;
  for (auto x : rec.results) results += x;
  BOOST_TEST(results == total);
  for (const auto& rep : rec.reports) BOOST_TEST(rep.max_staleness <= bound);
  BOOST_TEST(rec.reports.back().fresh.size() == static_cast<std::size_t>(c.size()));
}

}  // namespace

BOOST_AUTO_TEST_CASE(solo_with_every_other_rank_late_folds_their_gradients_one_round_stale) {
  auto& c = mpi_test::world();
  const int rounds = 8, n = c.size();
  auto rec = run_rounds(hc::partial_policy::solo(), rounds, 1, [](int r, int) { return r != 0; });
  check_invariants(rec, 1);
  for (int t = 1; t < rounds; ++t) {
    const auto& rep = rec.reports[static_cast<std::size_t>(t)];
    BOOST_TEST(rep.fresh == std::vector<int>{0});
    BOOST_TEST(rep.stale.size() == static_cast<std::size_t>(n - 1));
    BOOST_TEST(rep.max_staleness == 1);
    std::int64_t expected = 1000003LL + t * 7919LL;
    for (int j = 1; j < n; ++j) expected += (j + 1) * 1000003LL + (t - 1) * 7919LL;
    BOOST_TEST(rec.results[static_cast<std::size_t>(t)] == expected);
  }
}

BOOST_AUTO_TEST_CASE(majority_and_quorum_keep_every_invariant_with_random_lateness) {
  auto& c = mpi_test::world();
  const auto seed = shared_seed();
  const int n = c.size();
  hg::counter_rng rng(seed, 5);
  auto late = [&](int r, int t) {
    return r != hc::detail::majority_initiator(seed, static_cast<std::uint64_t>(t), n) &&
           rng.uniform(static_cast<std::uint64_t>(t * n + r)) < 0.4;
  };
  auto rec = run_rounds(hc::partial_policy::majority(seed), 12, 2, late);
  check_invariants(rec, 2);
  for (std::size_t t = 0; t + 1 < rec.reports.size(); ++t) {
    const int init = hc::detail::majority_initiator(seed, t, n);
    BOOST_TEST(std::count(rec.reports[t].fresh.begin(), rec.reports[t].fresh.end(), init) == 1);
  }
  auto rec2 = run_rounds(hc::partial_policy::quorum(1), 10, 3, [&](int r, int t) { return (r + t) % n != 0; });
  check_invariants(rec2, 3);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(mpi_uneven_collectives)

// Counts with zeros and a piece past OpenMPI's shared-memory eager limit (~4 KiB).
std::vector<std::size_t> uneven_counts(int n) {
  std::vector<std::size_t> c(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) c[static_cast<std::size_t>(r)] = r == 1 ? 0 : r == 0 ? 3000 : 7 * static_cast<std::size_t>(r);
  return c;
}

BOOST_AUTO_TEST_CASE(allgather_v_and_reduce_scatter_v_with_uneven_counts_equal_the_rank_ordered_reference_bitwise) {
  auto& c = mpi_test::world();
  const auto seed = shared_seed();
  const int n = c.size(), r = c.rank();
  const auto counts = uneven_counts(n);
  std::vector<std::size_t> off(static_cast<std::size_t>(n) + 1, 0);
  for (int q = 0; q < n; ++q) off[static_cast<std::size_t>(q) + 1] = off[static_cast<std::size_t>(q)] + counts[static_cast<std::size_t>(q)];
  const std::size_t total = off.back(), mine = counts[static_cast<std::size_t>(r)];
  // allgather_v: every rank's piece, in rank order.
  std::vector<float> expected;
  for (int q = 0; q < n; ++q) {
    const auto p = comm_test::real_input<float>(seed, q, counts[static_cast<std::size_t>(q)]);
    expected.insert(expected.end(), p.begin(), p.end());
  }
  const auto piece = comm_test::real_input<float>(seed, r, mine);
  std::vector<float> all(total, hg_test::poison<float>());
  hc::allgather_v(c, hg::span<const float>(piece), hg::span<float>(all), counts).wait();
  BOOST_TEST((std::memcmp(all.data(), expected.data(), total * sizeof(float)) == 0));
  // reduce_scatter_v: x_0 + x_1 + ... in rank order, then / n for avg.
  for (auto op : {hc::reduce_op::sum, hc::reduce_op::avg}) {
    std::vector<float> sum = comm_test::real_input<float>(seed, 100, total);
    for (int q = 1; q < n; ++q) {
      const auto x = comm_test::real_input<float>(seed, 100 + q, total);
      for (std::size_t i = 0; i < total; ++i) sum[i] += x[i];
    }
    if (op == hc::reduce_op::avg)
      for (auto& v : sum) v = v / static_cast<float>(n);
    const auto in = comm_test::real_input<float>(seed, 100 + r, total);
    std::vector<float> out(mine, hg_test::poison<float>());
    hc::uneven_options o;
    o.op = op;
    hc::reduce_scatter_v(c, hg::span<const float>(in), hg::span<float>(out), counts, o).wait();
    BOOST_TEST((mine == 0 || std::memcmp(out.data(), sum.data() + off[static_cast<std::size_t>(r)], mine * sizeof(float)) == 0),
               "op " << hc::reduce_op_name(op));
  }
}

BOOST_AUTO_TEST_CASE(uneven_counts_that_differ_across_ranks_are_a_mismatch_on_every_rank) {
  auto& c = mpi_test::world();
  const int n = c.size(), r = c.rank();
  std::vector<std::size_t> counts(static_cast<std::size_t>(n), 2);
  if (r == n - 1) {
    counts[0] = 3;
    counts[static_cast<std::size_t>(n - 1)] = 1;
  }
  std::vector<double> piece(counts[static_cast<std::size_t>(r)], 1.0), all(2 * static_cast<std::size_t>(n));
  bool threw = false;
  try {
    hc::allgather_v(c, hg::span<const double>(piece), hg::span<double>(all), counts).wait();
  } catch (const hc::mismatch_error& e) {
    threw = std::string(e.what()).find("counts must be the same on every rank") != std::string::npos;
  }
  BOOST_TEST(threw);
  // Nothing moved: the communicator still works.
  const std::vector<std::size_t> good(static_cast<std::size_t>(n), 2);
  std::vector<double> two(2, static_cast<double>(r));
  hc::allgather_v(c, hg::span<const double>(two), hg::span<double>(all), good).wait();
  BOOST_TEST(all.back() == static_cast<double>(n - 1));
}

BOOST_AUTO_TEST_SUITE_END()
