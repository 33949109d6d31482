// Under mpirun -np 2: the hybrid aggregator over MPI ranks gives the parameters of an
// all-dense allreduce (1e-6) on the embedding model; the composite transport with 2 inproc
// threads inside each MPI rank and MPI across equals a flat allreduce over all 2n ranks
// (integers bitwise, floats within summation-order tolerance), with striping and staging.

#include <cmath>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/comm/composite.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/core/rng.hpp"
#include "hg_mpi.hpp"
#include "hg_test.hpp"
#include "hybrid_model.hpp"

namespace hg = heterograd;
namespace hc = heterograd::comm;
namespace hps = heterograd::algorithms::sparse;
namespace hi = heterograd::comm::inproc;
namespace hm = heterograd::comm::mpi;

using mpi_test::mpi_session;
BOOST_TEST_GLOBAL_FIXTURE(mpi_session);

namespace {

std::uint64_t shared_seed() {
  std::uint64_t s = hg_test::seed();
  mpi_test::world().broadcast(hg::span<std::uint64_t>(&s, 1), 0).wait();
  return s;
}

template <class T>
std::vector<T> input(std::uint64_t seed, int rank, std::size_t n) {
  const hg::counter_rng rng(seed, static_cast<std::uint64_t>(rank));
  std::vector<T> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (std::is_integral_v<T>)
      x[i] = static_cast<T>(rng.below(i, 2001)) - 1000;
    else
      x[i] = static_cast<T>(rng.uniform(i, -1.0, 1.0));
  }
  return x;
}

}  // namespace

BOOST_AUTO_TEST_CASE(hybrid_over_mpi_gives_the_parameters_of_an_all_dense_allreduce) {
  auto& w = mpi_test::world();
  const auto seed = shared_seed();
  for (double threshold : {-1.0, 0.0, 1.0}) {
    hybrid_model::config c;
    c.seed = seed;
    c.max_sparse_density = threshold;
    const auto ref = hybrid_model::run_dense(w, c);
    const auto hyb = hybrid_model::run_hybrid(w, c);
    BOOST_TEST_INFO("max_sparse_density " << threshold);
    BOOST_TEST(hybrid_model::max_abs_diff(ref.table, hyb.table) <= 1e-6);
    BOOST_TEST(hybrid_model::max_abs_diff(ref.dense, hyb.dense) <= 1e-6);
    BOOST_TEST((hyb.routes.at(0) == (threshold == 0.0 ? hps::route::dense : hps::route::sparse)));
    if (threshold != 0.0) BOOST_TEST(hyb.traffic.ratio() < 0.5);
  }
}

BOOST_AUTO_TEST_CASE(composite_of_inproc_threads_inside_and_mpi_across_equals_a_flat_allreduce) {
  auto& w = mpi_test::world();
  const auto seed = shared_seed();
  const int threads = 2;
  const int n = threads * w.size();
  for (int rails : {1, 2}) {
    for (bool stage : {false, true}) {
      std::mutex m;
      std::size_t bad = 0;
      double err = 0;
      hi::spawn(threads, [&](hi::communicator inner) {
        // Rank 0 of each inproc group runs on this (the MPI) thread: the leader drives MPI.
        const auto c = hc::composite<hi::communicator, hm::communicator>::create(
            inner, inner.rank() == 0 ? std::optional(w) : std::nullopt,
            {.rails = rails, .stripe_min_bytes = 4096, .stage = stage});
        std::size_t b = 0;
        double e = 0;
        b += c.size() != n || c.rank() != w.rank() * threads + inner.rank();
        for (std::size_t len : {std::size_t{1}, std::size_t{1000}, std::size_t{70001}}) {
          std::vector<std::vector<std::int64_t>> ints;
          std::vector<std::vector<float>> floats;
          for (int r = 0; r < n; ++r) {
            ints.push_back(input<std::int64_t>(seed, r, len));
            floats.push_back(input<float>(seed, r, len));
          }
          for (auto op : {hc::reduce_op::sum, hc::reduce_op::min, hc::reduce_op::max}) {
            auto a = ints[static_cast<std::size_t>(c.rank())];
            c.allreduce(hg::span<std::int64_t>(a), {.op = op}).wait();
            // The flat allreduce: every global rank's input combined in rank order.
            for (std::size_t i = 0; i < len; ++i) {
              std::int64_t ref = ints[0][i];
              for (int r = 1; r < n; ++r) {
                const auto v = ints[static_cast<std::size_t>(r)][i];
                ref = op == hc::reduce_op::sum ? ref + v : op == hc::reduce_op::min ? std::min(ref, v) : std::max(ref, v);
              }
              b += a[i] != ref;
            }
          }
          auto x = floats[static_cast<std::size_t>(c.rank())];
          c.allreduce(hg::span<float>(x), {.op = hc::reduce_op::avg}).wait();
          for (std::size_t i = 0; i < len; ++i) {
            double ref = 0;
            for (int r = 0; r < n; ++r) ref += floats[static_cast<std::size_t>(r)][i];
            e = std::max(e, std::fabs(x[i] - ref / n));
          }
        }
        for (int root = 0; root < n; ++root) {
          auto v = input<std::int64_t>(seed, c.rank() == root ? 1000 + root : c.rank(), 17);
          c.broadcast(hg::span<std::int64_t>(v), root).wait();
          b += v != input<std::int64_t>(seed, 1000 + root, 17);
        }
        c.barrier().wait();
        std::lock_guard<std::mutex> l(m);
        bad += b;
        err = std::max(err, e);
      });
      BOOST_TEST_INFO("rails " << rails << ", stage " << stage);
      BOOST_TEST(bad == 0u);
      BOOST_TEST(err <= 1e-6);
    }
  }
}
