// The composite transport over inproc groups (inner) and an inproc leaders' group (outer), all
// split from one world so the flat allreduce of that world is the reference: integer results
// bitwise equal, float ones within summation-order tolerance; striping over rails, host
// staging, broadcast, allgather, reduce_scatter, uneven groups.

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <mutex>
#include <optional>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "hg_test.hpp"
#include "heterograd/comm/composite.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/core/rng.hpp"

namespace hg = heterograd;
namespace hc = heterograd::comm;
namespace hi = heterograd::comm::inproc;

namespace {

using composite_t = hc::composite<hi::communicator, hi::communicator>;
static_assert(hc::collective_transport<composite_t>);

// Splits the world into groups of the given sizes (consecutive ranks) and builds the composite.
composite_t make(const hi::communicator& world, const std::vector<int>& sizes, hc::composite_config o) {
  int g = 0, first = 0;
  while (world.rank() >= first + sizes[static_cast<std::size_t>(g)]) first += sizes[static_cast<std::size_t>(g++)];
  const auto inner = world.split(g, world.rank());
  const auto outer = world.split(inner.rank() == 0 ? 0 : -1, g);
  return composite_t::create(inner, inner.rank() == 0 ? std::optional(outer) : std::nullopt, o);
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

BOOST_AUTO_TEST_SUITE(composite_transport)

BOOST_AUTO_TEST_CASE(hierarchical_allreduce_equals_the_flat_allreduce, *boost::unit_test::timeout(120)) {
  const auto seed = hg_test::seed();
  for (const auto& sizes : {std::vector<int>{2, 2}, std::vector<int>{3, 1}, std::vector<int>{1, 2, 2}}) {
    for (int rails : {1, 3}) {
      for (bool stage : {false, true}) {
        int n = 0;
        for (int s : sizes) n += s;
        std::mutex m;
        std::size_t int_mismatch = 0;
        double float_err = 0;
        std::size_t staged = 0;
        hi::spawn(n, [&](hi::communicator world) {
          const auto c = make(world, sizes, {.rails = rails, .stripe_min_bytes = 1024, .stage = stage});
          if (c.rank() != world.rank() || c.size() != n) throw std::logic_error("global rank numbering");
          std::size_t bad = 0;
          double err = 0;
          for (std::size_t len : {std::size_t{1}, std::size_t{7}, std::size_t{40000}}) {
            for (auto op : {hc::reduce_op::sum, hc::reduce_op::min, hc::reduce_op::max, hc::reduce_op::avg}) {
              auto a = input<std::int64_t>(seed, world.rank(), len), b = a;
              if (op != hc::reduce_op::avg) {
                c.allreduce(hg::span<std::int64_t>(a), {.op = op}).wait();
                world.allreduce(hg::span<std::int64_t>(b), {.op = op}).wait();
                for (std::size_t i = 0; i < len; ++i) bad += a[i] != b[i];
              }
              auto x = input<float>(seed, world.rank(), len), y = x;
              c.allreduce(hg::span<float>(x), {.op = op}).wait();
              world.allreduce(hg::span<float>(y), {.op = op}).wait();
              for (std::size_t i = 0; i < len; ++i) err = std::max(err, static_cast<double>(std::fabs(x[i] - y[i])));
            }
          }
          std::lock_guard<std::mutex> l(m);
          int_mismatch += bad;
          float_err = std::max(float_err, err);
          if (c.leader()) staged += *c.stager().staged;
        });
        BOOST_TEST_INFO("groups " << sizes.size() << ", rails " << rails << ", stage " << stage);
        BOOST_TEST(int_mismatch == 0u);
        BOOST_TEST(float_err <= 1e-5);
        // Staging copies 2 S bytes per exchange on each leader; none without it.
        BOOST_TEST((staged > 0) == stage);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(weighted_average_broadcast_allgather_reduce_scatter_and_barrier) {
  const auto seed = hg_test::seed();
  const int n = 4;
  std::mutex m;
  std::size_t bad = 0;
  hi::spawn(n, [&](hi::communicator world) {
    const auto c = make(world, {2, 2}, {.rails = 2, .stripe_min_bytes = 64});
    std::size_t b = 0;
    // Weighted average: sum w_r x_r / sum w_r with w_r = r + 1 (integer-valued floats: exact).
    std::vector<double> x(100, static_cast<double>(world.rank() * 3));
    c.allreduce(hg::span<double>(x), {.op = hc::reduce_op::avg, .weight = world.rank() + 1.0}).wait();
    for (double v : x) b += v != (0.0 * 1 + 3.0 * 2 + 6.0 * 3 + 9.0 * 4) / 10.0;
    for (int root = 0; root < n; ++root) {
      auto v = input<std::int64_t>(seed, world.rank() == root ? 99 : world.rank(), 33);
      c.broadcast(hg::span<std::int64_t>(v), root).wait();
      b += v != input<std::int64_t>(seed, 99, 33);
    }
    const auto mine = input<std::int32_t>(seed, world.rank(), 5);
    std::vector<std::int32_t> all(5 * n), flat(5 * n);
    c.allgather(hg::span<const std::int32_t>(mine), hg::span<std::int32_t>(all)).wait();
    world.allgather(hg::span<const std::int32_t>(mine), hg::span<std::int32_t>(flat)).wait();
    b += all != flat;
    const auto in = input<std::int64_t>(seed, world.rank(), 3 * n);
    std::vector<std::int64_t> out(3), ref(3);
    c.reduce_scatter(hg::span<const std::int64_t>(in), hg::span<std::int64_t>(out)).wait();
    world.reduce_scatter(hg::span<const std::int64_t>(in), hg::span<std::int64_t>(ref)).wait();
    b += out != ref;
    c.barrier().wait();
    std::lock_guard<std::mutex> l(m);
    bad += b;
  });
  BOOST_TEST(bad == 0u);
}

BOOST_AUTO_TEST_CASE(the_outer_handle_must_be_given_exactly_on_the_leaders) {
  hi::spawn(2, [](hi::communicator world) {
    const auto inner = world.split(0, world.rank());
    // Rank 1 is not a leader but passes an outer handle: invalid on that rank only, so the
    // leader must not wait for it; check the non-leader side alone.
    if (inner.rank() == 1) {
      bool threw = false;
      try {
        composite_t::create(inner, std::optional(world), {});
      } catch (const std::invalid_argument&) {
        threw = true;
      }
      if (!threw) throw std::logic_error("expected invalid_argument");
    }
  });
  BOOST_CHECK_THROW(hc::composite_config{.rails = 0}.validate(), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
