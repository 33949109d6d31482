// The round entry points deprecated by the one round contract (issue 44) still compile and
// forward to it for one release: the old per-rank members (bsp, selsync, local_sgd
// run_round(ex, w, ...), eager_sgd::run_rank) and runtime's named eager-SGD overloads
// (run_worker(eager, partial, count, options), eager_elements). Compiled with
// -Wno-deprecated-declarations (tests/sync/CMakeLists.txt); nothing else in the project may
// call them.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/algorithms/sync.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/comm/inproc_partial.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/runtime/round_threads.hpp"

namespace hg = heterograd;
namespace hs = heterograd::algorithms::sync;
namespace hr = heterograd::runtime;
namespace ho = heterograd::optim;
namespace hc = heterograd::comm;

namespace {

// The gradient of sum_i (x_i - w - 1)^2 / 2 plus an integer per step: every worker pulls
// towards its own point, so the average matters.
struct pull {
  double operator()(std::size_t w, std::uint64_t s, std::size_t, hg::span<const float> x,
                    hg::span<float> g) const {
    for (std::size_t i = 0; i < g.size(); ++i)
      g[i] = x[i] - static_cast<float>(w + 1) + static_cast<float>((s + i) % 3);
    return 0.0;
  }
};

// Integer gradients: eager-SGD's sums are exact, so applied == computed compares with ==.
struct integers {
  double operator()(std::size_t w, std::uint64_t s, std::size_t, hg::span<const float>,
                    hg::span<float> g) const {
    for (std::size_t i = 0; i < g.size(); ++i)
      g[i] = static_cast<float>(static_cast<int>((w * 7 + s * 3 + i * 5) % 9) - 4);
    return 0.0;
  }
};

constexpr std::size_t n = 3;
const std::vector<float> x0{0.5f, -1.0f, 2.0f};
const std::vector<std::size_t> batches{2, 4, 6};

ho::sgd sgd() { return ho::sgd({.lr = 0.125}); }

bool same(hg::span<const float> a, hg::span<const float> b) {
  return std::vector<float>(a.begin(), a.end()) == std::vector<float>(b.begin(), b.end());
}

// `rounds` rounds of every worker of `old` through its deprecated member `step(ex, w, count)`
// on threads; `now` the same through the round contract (run_threads).
template <class P, class OldRound>
void compare(P& old, P& now, std::uint64_t rounds, OldRound step) {
  hc::inproc::spawn(static_cast<int>(n), [&](hc::inproc::communicator c) {
    hs::transport_exchange<hc::inproc::communicator> ex(c);
    const auto w = static_cast<std::size_t>(c.rank());
    for (std::uint64_t r = 0; r < rounds; ++r) step(old, ex, w, c.rank() == 0);
  });
  hr::run_threads(now, rounds);
  for (std::size_t w = 0; w < n; ++w) BOOST_TEST(same(old.params(w), now.params(w)));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(deprecated_round_entry_points)

BOOST_AUTO_TEST_CASE(the_old_per_rank_members_forward_to_run_round_bitwise) {
  using bsp = hs::bsp<float, ho::sgd, pull>;
  bsp b1(n, x0, sgd(), pull{}, batches), b2(n, x0, sgd(), pull{}, batches);
  compare(b1, b2, 4, [](bsp& p, auto& ex, std::size_t w, bool count) { p.run_round(ex, w, count); });
  BOOST_TEST(b1.rounds() == 4u);
  BOOST_TEST(b2.rounds() == 4u);

  using selsync = hs::selsync<float, ho::sgd, pull>;
  selsync s1(n, x0, sgd(), pull{}, batches), s2(n, x0, sgd(), pull{}, batches);
  compare(s1, s2, 5, [](selsync& p, auto& ex, std::size_t w, bool count) {
    p.run_round(ex, w, count);
  });
  BOOST_TEST(s1.decisions() == s2.decisions());
  BOOST_TEST(s1.decisions().size() == 5u);

  using local = hs::local_sgd<float, ho::sgd, pull>;
  local l1(n, x0, sgd(), pull{}, batches, {.period = 2}), l2(n, x0, sgd(), pull{}, batches, {.period = 2});
  auto st = l1.shared_state();
  std::vector<local::rank_state> states(n, st);
  compare(l1, l2, 3, [&states](local& p, auto& ex, std::size_t w, bool count) {
    p.run_round(ex, nullptr, w, states[w], count);
  });
  BOOST_TEST(states[0].round == 3u);
  BOOST_TEST(l1.rounds() == 3u);
}

BOOST_AUTO_TEST_CASE(the_old_eager_entry_points_forward_to_the_partial_runner) {
  // Eager-SGD's late arrivals depend on the threads' timing, so the old and new paths are
  // compared by what holds on any run: every rank applies every round, the replicas agree,
  // and with the last round a flush every computed gradient was applied once.
  using eager = hs::eager_sgd<float, ho::sgd, integers>;
  for (int how = 0; how < 2; ++how) {
    eager e(n, x0, sgd(), integers{}, batches, {.average = false, .rounds = 12});
    BOOST_TEST(hr::eager_elements(e, {}) == x0.size());
    hs::worker_options votes;
    votes.stop = [](std::size_t) { return false; };
    BOOST_TEST(hr::eager_elements(e, votes) == x0.size() + 1);
    hc::inproc::spawn(static_cast<int>(n), [&](hc::inproc::communicator c) {
      const auto setup = e.partial_setup(false);
      hc::inproc::partial_allreduce<float> partial(c, setup.elements, setup.policy, setup.options);
      if (how == 0)
        hr::run_worker(e, partial, c.rank() == 0);
      else
        e.run_rank(partial, static_cast<std::size_t>(c.rank()), c.rank() == 0);
    });
    BOOST_TEST(e.rounds_fired() == 12u);
    for (std::size_t w = 0; w < n; ++w) {
      BOOST_TEST(e.rounds_applied(w) == 12u);
      BOOST_TEST(same(e.params(0), e.params(w)));
    }
    BOOST_TEST(e.applied_sum() == e.computed_sum());
  }
}

BOOST_AUTO_TEST_SUITE_END()
