#pragma once
// The transport conformance checks every multi-process transport runs (mpi under mpirun, gloo
// in forked ranks): each takes a rank's communicator and throws (comm_test::expect) on the
// first difference from the reference, so it runs the same inside a Boost.Test case or in a
// forked rank that reports to its parent.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "comm_test_support.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/comm/uneven.hpp"
#include "heterograd/core/span.hpp"

namespace comm_conformance {

namespace hg = heterograd;
namespace hc = heterograd::comm;
using comm_test::expect;

/// Rank 0's seed, so every rank draws the same inputs.
template <class C>
std::uint64_t shared_seed(const C& c) {
  std::uint64_t s = hg_test::seed();
  c.broadcast(hg::span<std::uint64_t>(&s, 1), 0).wait();
  return s;
}

/// Integer allreduce of every operator, m in {1, 1000, 70001}, by each algorithm of `algos`,
/// equals the rank-ordered reference bitwise (avg: the integer sum / n).
template <class C>
void allreduce_equals_the_integer_reference(const C& c,
                                            std::initializer_list<hc::algorithm> algos) {
  const auto seed = shared_seed(c);
  const int n = c.size();
  for (auto a : algos) {
    for (std::size_t m : {std::size_t{1}, std::size_t{1000}, std::size_t{70001}}) {
      for (auto op :
           {hc::reduce_op::sum, hc::reduce_op::min, hc::reduce_op::max, hc::reduce_op::avg}) {
        std::vector<std::int64_t> expected(m);
        for (int r = 0; r < n; ++r) {
          const auto in = comm_test::integer_input<std::int64_t>(seed, r, m, 0, 1000);
          for (std::size_t i = 0; i < m; ++i)
            expected[i] = r == 0                     ? in[i]
                          : op == hc::reduce_op::min ? std::min(expected[i], in[i])
                          : op == hc::reduce_op::max ? std::max(expected[i], in[i])
                                                     : expected[i] + in[i];
        }
        if (op == hc::reduce_op::avg)
          for (auto& e : expected) e /= n;
        auto v = comm_test::integer_input<std::int64_t>(seed, c.rank(), m, 0, 1000);
        hc::allreduce_options o;
        o.op = op;
        o.algo = a;
        o.segment_bytes = 64 * 1024;
        c.allreduce(hg::span<std::int64_t>(v), o).wait();
        expect(v == expected, std::string(hc::algorithm_name(a)) + " m=" + std::to_string(m) + " " +
                                  std::string(hc::reduce_op_name(op)));
      }
    }
  }
}

/// Rank r weighs r + 1 and contributes r + 1: the weighted average is sum r^2 / sum r.
template <class C>
void weighted_average_is_the_sum_of_weighted_inputs_over_the_sum_of_weights(const C& c) {
  const int n = c.size();
  std::vector<double> w(10, static_cast<double>(c.rank() + 1));
  hc::allreduce_options o;
  o.op = hc::reduce_op::avg;
  o.weight = static_cast<double>(c.rank() + 1);
  c.allreduce(hg::span<double>(w), o).wait();
  double num = 0, den = 0;
  for (int r = 1; r <= n; ++r) num += r * r, den += r;
  for (double x : w) expect(std::abs(x - num / den) <= 1e-14 * num / den, "weighted average");
}

/// The rank-ordered reference of a weighted allreduce of integer-valued floats: rank r weighs
/// r + 1, so every partial sum is an integer below 2^24 and exact in float in any order; avg
/// divides the sum by sum_r (r + 1) once, as every path does (bitwise reproducible).
inline std::vector<float> weighted_integer_reference(std::uint64_t seed, int n, std::size_t m,
                                                     hc::reduce_op op) {
  std::vector<double> acc(m, 0.0);
  double den = 0.0;
  for (int r = 0; r < n; ++r) {
    const auto in = comm_test::integer_input<float>(seed, r, m);
    for (std::size_t i = 0; i < m; ++i) acc[i] += (r + 1.0) * in[i];
    den += r + 1.0;
  }
  std::vector<float> out(m);
  for (std::size_t i = 0; i < m; ++i)
    out[i] = op == hc::reduce_op::avg ? static_cast<float>(acc[i]) / static_cast<float>(den)
                                      : static_cast<float>(acc[i]);
  return out;
}

/// Weighted allreduce (avg, and sum with a weight as detail::weighted_allreduce runs it) of
/// float buffers that cross the pipelining segment, by each algorithm of `algos`, equals the
/// reference bitwise. Counts: one element over a segment of `segment_bytes` (the transport's
/// default, which the calls keep), n segments plus 3 (each rank's ring chunk crosses a
/// segment, and n does not divide it), and 10^6 + 3 (several segments per chunk, a short last
/// one); 10^6 + 3 also runs with 64 KiB segments (many equal-size segments per transfer,
/// where a segment received into its sibling's place would swap data unseen by sizes).
template <class C>
void weighted_allreduce_across_segments_equals_the_reference(
    const C& c, std::size_t segment_bytes, std::initializer_list<hc::algorithm> algos) {
  const auto seed = shared_seed(c);
  const int n = c.size();
  const std::size_t seg = segment_bytes / sizeof(float), big = 1000003;
  const std::size_t cases[][2] = {{seg + 1, 0},
                                  {static_cast<std::size_t>(n) * seg + 3, 0},
                                  {big, 0},
                                  {big, 64 * 1024}};
  for (const auto& cs : cases) {
    const std::size_t m = cs[0];
    const auto mine = comm_test::integer_input<float>(seed, c.rank(), m);
    for (auto op : {hc::reduce_op::avg, hc::reduce_op::sum}) {
      const auto expected = weighted_integer_reference(seed, n, m, op);
      for (auto a : algos) {
        auto v = mine;
        hc::allreduce_options o;
        o.op = op;
        o.algo = a;
        o.weight = c.rank() + 1.0;
        o.segment_bytes = cs[1];
        c.allreduce(hg::span<float>(v), o).wait();
        expect(std::memcmp(v.data(), expected.data(), m * sizeof(float)) == 0,
               std::string(hc::algorithm_name(a)) + " weighted " +
                   std::string(hc::reduce_op_name(op)) + " m=" + std::to_string(m) +
                   " segment_bytes=" + std::to_string(cs[1]));
      }
    }
  }
}

template <class C>
void reduce_scatter_allgather_broadcast_gather_and_barrier(const C& c) {
  const int n = c.size(), r = c.rank();
  const std::size_t b = 4;
  std::vector<std::int32_t> in(b * static_cast<std::size_t>(n)),
      out(b, hg_test::poison<std::int32_t>());
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = r + static_cast<std::int32_t>(i);
  c.reduce_scatter(hg::span<const std::int32_t>(in), hg::span<std::int32_t>(out)).wait();
  for (std::size_t i = 0; i < b; ++i)
    expect(out[i] ==
               n * (n - 1) / 2 + n * static_cast<std::int32_t>(static_cast<std::size_t>(r) * b + i),
           "reduce_scatter");
  std::vector<float> mine(b, static_cast<float>(r)),
      all(b * static_cast<std::size_t>(n), hg_test::poison<float>());
  c.allgather(hg::span<const float>(mine), hg::span<float>(all)).wait();
  for (std::size_t i = 0; i < all.size(); ++i)
    expect(all[i] == static_cast<float>(i / b), "allgather");
  std::vector<double> v(3, r == n - 1 ? 2.5 : 0.0);
  c.broadcast(hg::span<double>(v), n - 1).wait();
  for (double x : v) expect(x == 2.5, "broadcast");
  std::vector<std::int64_t> one{r * 10}, g(r == 0 ? static_cast<std::size_t>(n) : 0);
  c.gather(hg::span<const std::int64_t>(one), hg::span<std::int64_t>(g), 0).wait();
  if (r == 0)
    for (int q = 0; q < n; ++q) expect(g[static_cast<std::size_t>(q)] == q * 10, "gather");
  c.barrier().wait();
}

/// Ranks 0 and 1 each post a receive, then wait on a 4 MiB send to the other, then on the
/// receive: a posted receive is taken while its rank waits on something else.
template <class C>
void a_posted_receive_is_taken_while_its_rank_waits_on_a_send(const C& c) {
  if (c.rank() > 1) return;
  const int peer = 1 - c.rank();
  std::vector<float> out(1 << 20, static_cast<float>(c.rank())), in(1 << 20, -1.0f);
  auto r = c.recv(hg::span<float>(in), peer, 11, hc::recv_options{.timeout = hg::seconds{20}});
  c.send(hg::span<const float>(out), peer, 11, hc::send_options{.timeout = hg::seconds{20}}).wait();
  r.wait();
  expect(in.front() == static_cast<float>(peer) && in.back() == static_cast<float>(peer),
         "payload");
}

/// Rank 0 serves 10 requests of every other rank from any source (with `recv_tag`: any_tag,
/// or 3 where the transport has no any_tag), reports each sender and acknowledges it.
template <class C>
void any_source_receive_serves_every_worker_and_reports_the_sender(const C& c, int recv_tag) {
  const int n = c.size(), rounds = 10;
  if (c.rank() == 0) {
    std::vector<int> served(static_cast<std::size_t>(n), 0);
    for (int k = 0; k < (n - 1) * rounds; ++k) {
      std::vector<float> g(16, hg_test::poison<float>());
      auto q = c.recv(hg::span<float>(g), hc::any_source, recv_tag);
      q.wait();
      const auto st = q.status();
      expect(st.tag == 3 && st.bytes == 16 * sizeof(float), "status");
      expect(g[0] == static_cast<float>(st.source), "payload of the reported sender");
      ++served[static_cast<std::size_t>(st.source)];
      std::vector<std::int64_t> ack{k};
      c.send(hg::span<const std::int64_t>(ack), st.source, 4).wait();
    }
    for (int j = 1; j < n; ++j) expect(served[static_cast<std::size_t>(j)] == rounds, "served");
  } else {
    for (int k = 0; k < rounds; ++k) {
      std::vector<float> g(16, static_cast<float>(c.rank()));
      std::vector<std::int64_t> ack{-1};
      auto a = c.recv(hg::span<std::int64_t>(ack), 0, 4);
      c.send(hg::span<const float>(g), 0, 3).wait();
      a.wait();
      expect(ack[0] >= k, "ack");
    }
  }
  c.barrier().wait();
}

/// split(rank % 2, -rank): sums over each parity, sizes, order by key; a negative color gives
/// an invalid handle.
template <class C>
void split_makes_subgroups_ordered_by_key(const C& c) {
  auto sub = c.split(c.rank() % 2, -c.rank());
  std::vector<int> v{c.rank()};
  sub.allreduce(hg::span<int>(v)).wait();
  int expected = 0, count = 0;
  for (int r = c.rank() % 2; r < c.size(); r += 2) expected += r, ++count;
  expect(v[0] == expected && sub.size() == count, "subgroup sum and size");
  expect(sub.rank() == (count - 1) - (c.rank() / 2), "order by key");  // key -rank
  auto none = c.split(c.rank() == 0 ? 0 : -1, 0);
  expect(none.valid() == (c.rank() == 0), "negative color");
}

/// allgather_v with counts {3000, 0, 14, 21, ...}: every rank's piece in rank order, bitwise.
template <class C>
void allgather_v_equals_the_rank_ordered_reference_bitwise(const C& c) {
  const auto seed = shared_seed(c);
  const int n = c.size(), r = c.rank();
  std::vector<std::size_t> counts(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q)
    counts[static_cast<std::size_t>(q)] = q == 1   ? 0
                                          : q == 0 ? 3000
                                                   : 7 * static_cast<std::size_t>(q);
  std::vector<float> expected;
  for (int q = 0; q < n; ++q) {
    const auto p = comm_test::real_input<float>(seed, q, counts[static_cast<std::size_t>(q)]);
    expected.insert(expected.end(), p.begin(), p.end());
  }
  const auto piece = comm_test::real_input<float>(seed, r, counts[static_cast<std::size_t>(r)]);
  std::vector<float> all(expected.size(), hg_test::poison<float>());
  hc::allgather_v(c, hg::span<const float>(piece), hg::span<float>(all), counts).wait();
  expect(std::memcmp(all.data(), expected.data(), all.size() * sizeof(float)) == 0, "allgather_v");
}

}  // namespace comm_conformance
