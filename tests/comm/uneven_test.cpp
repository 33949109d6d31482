// allgather_v and reduce_scatter_v (comm/uneven.hpp) over the inproc transport: uneven counts
// with zeros, against references computed in rank order and against the transport's own
// allreduce (bitwise); counts that differ across ranks fail on every rank; bad arguments are
// refused before anything is posted; a rank that never calls ends in a timeout, not a hang.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "comm_test_support.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/comm/uneven.hpp"

namespace hg = heterograd;
namespace hc = heterograd::comm;
namespace hi = heterograd::comm::inproc;
using comm_test::expect;

namespace {

/// Uneven counts for n ranks: some zero, some past the 64 KiB eager limit (rendezvous sends).
std::vector<std::vector<std::size_t>> count_sets(int n) {
  std::vector<std::vector<std::size_t>> sets;
  std::vector<std::size_t> a(static_cast<std::size_t>(n)), b(a.size(), 0), c(a.size());
  for (int r = 0; r < n; ++r) {
    a[static_cast<std::size_t>(r)] = static_cast<std::size_t>(3 * r + 1);
    c[static_cast<std::size_t>(r)] = r % 2 == 0 ? 20000 + static_cast<std::size_t>(r) : 0;
  }
  b.back() = 7;  // every element on the last rank
  sets.push_back(a);
  sets.push_back(b);
  sets.push_back(c);
  sets.push_back(std::vector<std::size_t>(a.size(), 0));  // nothing at all
  return sets;
}

std::size_t offset_of(const std::vector<std::size_t>& counts, int r) {
  return std::accumulate(counts.begin(), counts.begin() + r, std::size_t{0});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(uneven_collectives)

BOOST_AUTO_TEST_CASE(allgather_v_gives_every_rank_all_pieces_in_rank_order_with_zero_counts) {
  const auto seed = hg_test::seed();
  for (int n : {1, 2, 3, 4, 5}) {
    for (const auto& counts : count_sets(n)) {
      const std::size_t total = offset_of(counts, n);
      std::vector<std::int32_t> expected;
      for (int r = 0; r < n; ++r) {
        const auto in = comm_test::integer_input<std::int32_t>(seed, r, counts[static_cast<std::size_t>(r)]);
        expected.insert(expected.end(), in.begin(), in.end());
      }
      std::vector<std::vector<std::int32_t>> got(static_cast<std::size_t>(n));
      hi::spawn(n, [&](hi::communicator c) {
        const auto me = static_cast<std::size_t>(c.rank());
        const auto in = comm_test::integer_input<std::int32_t>(seed, c.rank(), counts[me]);
        std::vector<std::int32_t> out(total, -77777);  // poisoned
        hc::allgather_v(c, hg::span<const std::int32_t>(in), hg::span<std::int32_t>(out), counts).wait();
        // In place: the rank's piece already in the output buffer.
        std::vector<std::int32_t> inplace(total, -77777);
        std::copy(in.begin(), in.end(), inplace.begin() + static_cast<long>(offset_of(counts, c.rank())));
        hc::allgather_v(c, hg::span<const std::int32_t>(inplace.data() + offset_of(counts, c.rank()), counts[me]),
                        hg::span<std::int32_t>(inplace), counts)
            .wait();
        expect(inplace == out, "in-place allgather_v equals the out-of-place one");
        got[me] = out;
      });
      for (int r = 0; r < n; ++r)
        BOOST_TEST(got[static_cast<std::size_t>(r)] == expected, "n=" << n << " rank " << r);
    }
  }
}

BOOST_AUTO_TEST_CASE(reduce_scatter_v_equals_the_slices_of_the_inproc_allreduce_bitwise) {
  // Real-valued floats: the sum in rank order then the division by n are those of the inproc
  // allreduce, so every owner's slice has the allreduce's bits (sum and avg).
  const auto seed = hg_test::seed();
  for (int n : {1, 2, 3, 4, 5}) {
    for (const auto& counts : count_sets(n)) {
      const std::size_t total = offset_of(counts, n);
      for (auto op : {hc::reduce_op::sum, hc::reduce_op::avg}) {
        std::vector<std::string> failures;
        std::mutex m;
        hi::spawn(n, [&](hi::communicator c) {
          const auto me = static_cast<std::size_t>(c.rank());
          const auto in = comm_test::real_input<float>(seed, c.rank(), total);
          std::vector<float> full = in;
          c.allreduce(hg::span<float>(full), {.op = op}).wait();
          std::vector<float> out(counts[me], std::nanf("1"));  // poisoned
          hc::uneven_options o;
          o.op = op;
          hc::reduce_scatter_v(c, hg::span<const float>(in), hg::span<float>(out), counts, o).wait();
          const std::size_t off = offset_of(counts, c.rank());
          if (out.size() && std::memcmp(out.data(), full.data() + off, out.size() * sizeof(float)) != 0) {
            std::lock_guard<std::mutex> l(m);
            failures.push_back("n=" + std::to_string(n) + " rank " + std::to_string(me) + " op " +
                               std::string(hc::reduce_op_name(op)));
          }
        });
        BOOST_TEST(failures.empty(), (failures.empty() ? "" : failures.front()));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(reduce_scatter_v_min_and_max_equal_the_integer_reference) {
  const auto seed = hg_test::seed();
  const int n = 4;
  const std::vector<std::size_t> counts = {5, 0, 9, 1};
  const std::size_t total = 15;
  for (auto op : {hc::reduce_op::min, hc::reduce_op::max, hc::reduce_op::sum}) {
    std::vector<std::int64_t> expected = comm_test::integer_input<std::int64_t>(seed, 0, total);
    for (int r = 1; r < n; ++r) {
      const auto in = comm_test::integer_input<std::int64_t>(seed, r, total);
      for (std::size_t i = 0; i < total; ++i)
        expected[i] = op == hc::reduce_op::min   ? std::min(expected[i], in[i])
                      : op == hc::reduce_op::max ? std::max(expected[i], in[i])
                                                 : expected[i] + in[i];
    }
    std::vector<std::vector<std::int64_t>> got(n);
    hi::spawn(n, [&](hi::communicator c) {
      const auto me = static_cast<std::size_t>(c.rank());
      const auto in = comm_test::integer_input<std::int64_t>(seed, c.rank(), total);
      std::vector<std::int64_t> out(counts[me], -1);
      hc::uneven_options o;
      o.op = op;
      hc::reduce_scatter_v(c, hg::span<const std::int64_t>(in), hg::span<std::int64_t>(out), counts, o).wait();
      got[me] = out;
    });
    for (int r = 0; r < n; ++r) {
      const std::size_t off = offset_of(counts, r);
      const std::vector<std::int64_t> want(expected.begin() + static_cast<long>(off),
                                           expected.begin() + static_cast<long>(off + counts[static_cast<std::size_t>(r)]));
      BOOST_TEST(got[static_cast<std::size_t>(r)] == want, "op " << hc::reduce_op_name(op) << " rank " << r);
    }
  }
}

BOOST_AUTO_TEST_CASE(counts_that_differ_across_ranks_fail_on_every_rank_and_the_group_stays_usable) {
  // Rank 1 moves one element from rank 0's piece to its own; every rank must throw
  // mismatch_error (before any data moves), and a correct call afterwards must work.
  for (int n : {2, 3, 5}) {
    for (bool gather : {true, false}) {
      std::vector<std::string> errors(static_cast<std::size_t>(n));
      std::vector<int> after(static_cast<std::size_t>(n), 0);
      hi::spawn(n, [&](hi::communicator c) {
        const auto me = static_cast<std::size_t>(c.rank());
        std::vector<std::size_t> counts(static_cast<std::size_t>(n), 2);
        if (c.rank() == 1) {
          counts[0] = 1;
          counts[1] = 3;
        }
        const std::size_t total = 2 * static_cast<std::size_t>(n);
        std::vector<float> full(total, 1.0f), piece(counts[me], 1.0f);
        try {
          if (gather)
            hc::allgather_v(c, hg::span<const float>(piece), hg::span<float>(full), counts).wait();
          else
            hc::reduce_scatter_v(c, hg::span<const float>(full), hg::span<float>(piece), counts).wait();
        } catch (const hc::mismatch_error& e) {
          errors[me] = e.what();
        }
        // The group is still usable: the same call with agreed counts.
        std::vector<std::size_t> good(static_cast<std::size_t>(n), 2);
        std::vector<float> p2(2, static_cast<float>(c.rank())), f2(total, -1.0f);
        hc::allgather_v(c, hg::span<const float>(p2), hg::span<float>(f2), good).wait();
        after[me] = f2.back() == static_cast<float>(n - 1) ? 1 : 0;
      });
      for (int r = 0; r < n; ++r) {
        const auto& e = errors[static_cast<std::size_t>(r)];
        BOOST_TEST(!e.empty(), "rank " << r << " of " << n << " threw no mismatch_error");
        BOOST_TEST(e.find("counts must be the same on every rank") != std::string::npos, e);
        BOOST_TEST(e.find(gather ? "allgather_v" : "reduce_scatter_v") != std::string::npos, e);
        BOOST_TEST(after[static_cast<std::size_t>(r)] == 1);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(another_element_type_or_operator_on_one_rank_is_a_mismatch_on_every_rank) {
  const int n = 3;
  std::vector<int> threw(n, 0);
  hi::spawn(n, [&](hi::communicator c) {
    const std::vector<std::size_t> counts = {1, 2, 3};
    std::vector<float> in(6, 1.0f), out(counts[static_cast<std::size_t>(c.rank())]);
    hc::uneven_options o;
    o.op = c.rank() == 2 ? hc::reduce_op::max : hc::reduce_op::sum;
    try {
      hc::reduce_scatter_v(c, hg::span<const float>(in), hg::span<float>(out), counts, o).wait();
    } catch (const hc::mismatch_error&) {
      threw[static_cast<std::size_t>(c.rank())] = 1;
    }
  });
  BOOST_TEST(threw == std::vector<int>(n, 1), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_refused_before_anything_is_posted) {
  hi::spawn(2, [&](hi::communicator c) {
    std::vector<float> a(5), b(3);
    const std::vector<std::size_t> three = {1, 1, 1}, counts = {3, 2};
    const auto me = static_cast<std::size_t>(c.rank());
    const auto refused = [](auto&& call, const std::string& word) {
      try {
        auto r = call();
        r.wait();
      } catch (const std::invalid_argument& e) {
        return std::string(e.what()).find(word) != std::string::npos;
      }
      return false;
    };
    expect(refused([&] { return hc::allgather_v(c, hg::span<const float>(b.data(), counts[me]), hg::span<float>(a), three); },
                   "allgather_v.counts (size)"),
           "counts of the wrong length");
    expect(refused([&] { return hc::allgather_v(c, hg::span<const float>(a.data(), counts[me] + 1), hg::span<float>(a), counts); },
                   "allgather_v.in"),
           "allgather_v input of the wrong size");
    expect(refused([&] { return hc::reduce_scatter_v(c, hg::span<const float>(b), hg::span<float>(a), counts); },
                   "reduce_scatter_v.in"),
           "reduce_scatter_v input of the wrong size");
    const std::vector<std::size_t> huge = {~std::size_t{0} - 1, 5};
    expect(refused([&] { return hc::allgather_v(c, hg::span<const float>(b.data(), huge[me]), hg::span<float>(a), huge); },
                   "counts (sum)"),
           "counts whose sum overflows");
    hc::uneven_options o;
    o.tag = 40000;
    expect(refused([&] { return hc::allgather_v(c, hg::span<const float>(b.data(), counts[me]), hg::span<float>(a), counts, o); },
                   "allgather_v_options.tag"),
           "a tag MPI does not guarantee");
    o.tag = 1;
    o.timeout = hg::seconds{0.0};
    expect(refused([&] { return hc::allgather_v(c, hg::span<const float>(b.data(), counts[me]), hg::span<float>(a), counts, o); },
                   "allgather_v_options.timeout"),
           "a zero timeout");
    // Nothing was posted: a correct call now completes.
    std::vector<float> piece(counts[me], 1.0f);
    hc::allgather_v(c, hg::span<const float>(piece), hg::span<float>(a), counts).wait();
    expect(a == std::vector<float>(5, 1.0f), "the group is untouched by refused calls");
  });
}

BOOST_AUTO_TEST_CASE(a_rank_that_never_calls_ends_in_a_timeout_error_not_a_hang,
                     *boost::unit_test::timeout(30)) {
  std::string error;
  try {
    hi::spawn(2, [&](hi::communicator c) {
      if (c.rank() == 1) return;  // never calls
      std::vector<float> in(3, 1.0f), out(3);
      const std::vector<std::size_t> counts = {0, 3};
      hc::uneven_options o;
      o.timeout = hg::seconds{0.2};
      auto r = hc::reduce_scatter_v(c, hg::span<const float>(in), hg::span<float>(out.data(), 0), counts, o);
      r.wait();
    });
  } catch (const hc::comm_error& e) {
    error = e.what();
  }
  BOOST_TEST(error.find("timed out") != std::string::npos, error);
}

BOOST_AUTO_TEST_SUITE_END()
