// The synchronous family's per-rank helpers (bsp_worker, local_sgd_worker, selsync_worker)
// over the memories of kernels/memory.hpp: Thrust device vectors of the build's device
// system (OpenMP on the CPU) and guarded memory (tests/support/guarded_memory.hpp: emulated
// device buffers, inaccessible outside the memory's kernels, every transfer counted), each
// against the same helper on host vectors (the default memory), over the inproc transport.
//   - a scripted training loop (gradients that depend on the parameters) gives bitwise the
//     same parameters, anchors and synchronisation decisions in every memory, for BSP (both
//     aggregations, averaged optimizer states), local SGD (DiLoCo's outer Nesterov, FedNova
//     with per-rank H_i and reset states, gossip, hierarchical groups, device sampling) and
//     SelSync;
//   - a step makes no upload and no download, and exactly the scalar reads each helper
//     documents: the gradient's finiteness flag, and SelSync's gradient norm;
//   - a non-finite gradient in device memory is zeroed, skipped or refused as on the host;
//   - over a transport of NCCL's shape (no split, no tags) the global rounds run and gossip
//     and groups are refused by name;
//   - eager_worker stages its rounds through host memory: flush rounds equal the host run,
//     solo rounds with late ranks conserve the gradients, one transfer each way per round.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <thread>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <thrust/execution_policy.h>

#include "guarded_memory.hpp"
#include "hg_test.hpp"
#include "messages.hpp"
#include "sync_support.hpp"
#include "heterograd/algorithms/sync.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/comm/inproc_partial.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/kernels/thrust_memory.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/optim/outer.hpp"

namespace {

namespace hg = heterograd;
using sync_test::bitwise_equal;
using sync_test::heavy_ball;
namespace hk = heterograd::kernels;
namespace ho = heterograd::optim;
namespace hs = heterograd::algorithms::sync;
namespace hc = heterograd::comm;
using nf = hs::nonfinite_policy;

/// The inproc transport as a device transport would be for guarded memory: it reaches the
/// buffers while its operations run (the guarded pages are open from the call until the
/// request is waited on), as NCCL reaches device memory. Everything else is inproc's.
class guarded_transport {
 public:
  struct request {
    hc::request r;
    std::shared_ptr<hg_test::guard_scope> open;
    void wait() {
      r.wait();
      open.reset();
    }
  };

  explicit guarded_transport(hc::inproc::communicator c) : c_(std::move(c)) {}
  int rank() const { return c_.rank(); }
  int size() const { return c_.size(); }

  template <class T>
  request allreduce(hg::span<T> x, const hc::allreduce_options& o) const {
    auto open = std::make_shared<hg_test::guard_scope>();
    return {c_.allreduce(x, o), std::move(open)};
  }
  template <class U>
  request send(hg::span<U> x, int peer, int tag, const hc::send_options& o) const {
    auto open = std::make_shared<hg_test::guard_scope>();
    return {c_.send(x, peer, tag, o), std::move(open)};
  }
  template <class T>
  request recv(hg::span<T> x, int peer, int tag, const hc::recv_options& o) const {
    auto open = std::make_shared<hg_test::guard_scope>();
    return {c_.recv(x, peer, tag, o), std::move(open)};
  }
  guarded_transport split(int color, int key, const hc::split_options& o) const {
    return guarded_transport(c_.split(color, key, o));
  }

 private:
  hc::inproc::communicator c_;
};

/// A transport with NCCL's shape: collectives, untagged point-to-point, no split (over
/// inproc). The helpers run their global rounds on it and refuse what it cannot carry.
class collectives_only_transport {
 public:
  explicit collectives_only_transport(hc::inproc::communicator c) : c_(std::move(c)) {}
  int rank() const { return c_.rank(); }
  int size() const { return c_.size(); }
  template <class T>
  hc::request allreduce(hg::span<T> x, const hc::allreduce_options& o) const {
    return c_.allreduce(x, o);
  }
  template <class U>
  hc::request send(hg::span<U> x, int peer, const hc::send_options& o) const {
    return c_.send(x, peer, 0, o);
  }
  template <class T>
  hc::request recv(hg::span<T> x, int peer, const hc::recv_options& o) const {
    return c_.recv(x, peer, 0, o);
  }

 private:
  hc::inproc::communicator c_;
};

struct host_case {
  static constexpr const char* name = "host vectors";
  static auto make() { return hk::serial_host_memory{}; }
  using transport = hc::inproc::communicator;
};
struct thrust_case {
  static constexpr const char* name = "thrust device vectors";
  static auto make() { return hk::thrust_memory(thrust::device); }
  using transport = hc::inproc::communicator;
};
struct guarded_case {
  static constexpr const char* name = "guarded memory";
  static auto make() { return hg_test::guarded_memory{}; }
  using transport = guarded_transport;
};
using memories = std::tuple<thrust_case, guarded_case>;

constexpr std::size_t dim = 37;  // not a multiple of any vector width
constexpr std::uint64_t steps = 12;   // BSP and SelSync
constexpr std::uint64_t rounds = 6;   // local SGD

/// Rank r's gradient at step s for parameters x: a quadratic around a rank-own centre
/// (non-IID: the ranks pull apart between synchronisations) plus counter-RNG noise.
std::vector<float> gradient(const std::vector<float>& x, std::size_t r, std::uint64_t s) {
  const hg::counter_rng rng(0x5c + r, 0x9d + s);
  std::vector<float> g(x.size());
  for (std::size_t j = 0; j < x.size(); ++j) {
    const float centre = 0.1f * static_cast<float>((j + 3 * r) % 5) - 0.2f;
    g[j] = (1.0f + 0.25f * static_cast<float>(r)) * (x[j] - centre) +
           0.05f * static_cast<float>(rng.normal(j));
  }
  return g;
}

std::vector<float> initial() {
  std::vector<float> x(dim);
  for (std::size_t j = 0; j < dim; ++j) x[j] = 0.25f * static_cast<float>(j % 7) - 0.5f;
  return x;
}

/// The helpers under test: which one and its configuration.
enum class method {
  bsp_gradients,
  bsp_parameters_averaged_states,
  local_sgd_diloco,
  local_sgd_fednova_reset,
  local_sgd_gossip,
  local_sgd_hierarchical,
  local_sgd_sampled,
  selsync,
};
constexpr method methods[] = {method::bsp_gradients,          method::bsp_parameters_averaged_states,
                              method::local_sgd_diloco,       method::local_sgd_fednova_reset,
                              method::local_sgd_gossip,       method::local_sgd_hierarchical,
                              method::local_sgd_sampled,      method::selsync};
const char* name_of(method m) {
  switch (m) {
    case method::bsp_gradients: return "bsp (gradients)";
    case method::bsp_parameters_averaged_states: return "bsp (parameters, averaged states)";
    case method::local_sgd_diloco: return "local sgd (DiLoCo outer Nesterov)";
    case method::local_sgd_fednova_reset: return "local sgd (FedNova, H_i, reset states)";
    case method::local_sgd_gossip: return "local sgd (gossip ring)";
    case method::local_sgd_hierarchical: return "local sgd (hierarchical)";
    case method::local_sgd_sampled: return "local sgd (device sampling)";
    case method::selsync: return "selsync";
  }
  return "?";
}
std::size_t ranks_of(method m) { return m == method::local_sgd_hierarchical ? 4 : 3; }

/// What a rank ends with, and what its steps cost in transfers (guarded memory only).
struct rank_result {
  std::vector<float> params, anchor;
  std::vector<char> synced;  // per step: whether the step synchronised
  std::uint64_t skipped = 0;
  std::uint64_t late = 0;  // eager-SGD: late contributions folded into this rank's rounds
  std::size_t uploads = 0, downloads = 0, reads = 0, kernels = 0;
  std::size_t buffers_after_first_sync = 0;  // buffers made by steps after the first sync
  hg_test::transfer_counts window{};          // guarded memory: the counts at a window's start
  bool window_after_sync = false;
};

template <class M>
void count(const M&, rank_result&, bool) {}
void count(const hg_test::guarded_memory& m, rank_result& out, bool before) {
  const auto& c = m.counts();
  if (before) {  // the window opens: a snapshot, and whether a synchronisation came before it
    out.window = c;
    out.window_after_sync = std::find(out.synced.begin(), out.synced.end(), char{1}) != out.synced.end();
    return;
  }
  out.uploads += c.uploads - out.window.uploads;
  out.downloads += c.downloads - out.window.downloads;
  out.reads += c.scalar_reads - out.window.scalar_reads;
  out.kernels += c.kernels - out.window.kernels;
  if (out.window_after_sync) out.buffers_after_first_sync += c.buffers - out.window.buffers;
}

/// The scripted loop on one rank: each step the test downloads the parameters, computes the
/// gradient on the host (`poison`: rank 1's gradient of step 2 gets a NaN in element 3) and
/// uploads it (the test's own transfers, outside the counted window), then one helper step.
template <class Case>
rank_result run_rank(method m, typename Case::transport t, nf policy, bool poison) {
  const auto mem = Case::make();
  const std::size_t r = static_cast<std::size_t>(t.rank()), n = static_cast<std::size_t>(t.size());
  auto params = mem.template upload<float>(std::span<const float>(initial()));
  const auto p = hk::view(mem, params);
  rank_result out;
  const std::vector<std::size_t> batches = n == 4 ? std::vector<std::size_t>{2, 1, 3, 1}
                                                  : std::vector<std::size_t>{2, 1, 3};
  // `more(w, s)`: whether the loop goes on to step s (local SGD counts rounds: its ranks
  // take H_i steps a round, or none when not sampled, so a step count would let the ranks'
  // collectives disagree).
  auto loop = [&](auto& w, auto&& more, auto&& step) {
    for (std::uint64_t s = 0;; ++s) {
      count(mem, out, true);
      const bool go = more(w, s);  // may join synchronisations (skip_round): counted too
      count(mem, out, false);
      if (!go) break;
      auto g = gradient(mem.download(hk::cview(mem, params)), r, s);
      if (poison && r == 1 && s == 2) g[3] = std::numeric_limits<float>::quiet_NaN();
      auto grads = mem.template upload<float>(std::span<const float>(g));
      count(mem, out, true);
      out.synced.push_back(step(w, hk::view(mem, grads)) ? 1 : 0);
      count(mem, out, false);
    }
    out.skipped = w.nonfinite_skipped();
  };
  const auto by_steps = [](const auto&, std::uint64_t s) { return s < steps; };
  using M = std::remove_const_t<decltype(mem)>;
  using T = typename Case::transport;
  switch (m) {
    case method::bsp_gradients:
    case method::bsp_parameters_averaged_states: {
      const bool params_mode = m == method::bsp_parameters_averaged_states;
      hs::bsp_worker<float, ho::momentum, T, hs::identity_transform, M> w(
          t, heavy_ball(), p, batches,
          {.mode = params_mode ? hs::aggregation::parameters : hs::aggregation::gradients,
           .states = params_mode ? hs::state_policy::average : hs::state_policy::keep_local,
           .nonfinite = policy},
          {}, {}, mem);
      loop(w, by_steps, [&](auto& x, auto g) {
        x.step(p, g);
        return true;
      });
      break;
    }
    case method::selsync: {
      hs::selsync_worker<float, ho::momentum, T, hs::identity_transform, M> w(
          t, heavy_ball(), p, batches, {.threshold = 0.3, .window = 2, .nonfinite = policy}, {},
          {}, mem);
      loop(w, by_steps, [&](auto& x, auto g) { return x.step(p, g); });
      break;
    }
    default: {
      hs::local_sgd_config cfg;
      cfg.nonfinite = policy;
      cfg.period = 2;
      if (m == method::local_sgd_fednova_reset) {
        cfg.local_steps = {1, 2, 3};
        cfg.weighting = hs::averaging::fednova;
        cfg.states = hs::state_policy::reset;
      }
      if (m == method::local_sgd_gossip) cfg.gossip = hs::mixing_matrix::ring(3);
      if (m == method::local_sgd_hierarchical) {
        cfg.groups = {0, 0, 1, 1};
        cfg.global_period = 4;
      }
      if (m == method::local_sgd_sampled) {
        cfg.sampled = 2;
        cfg.seed = 11;
        cfg.period = 1;
      }
      auto local = [&](auto outer, auto opt) {
        using O = decltype(outer);
        hs::local_sgd_worker<float, decltype(opt), T, O, hs::identity_transform, M> w(
            t, opt, p, batches, cfg, outer, {}, {}, mem);
        auto by_rounds = [&](auto& x, std::uint64_t) {
          while (x.round() < rounds && x.steps_this_round() == 0) x.skip_round(p);  // not sampled
          return x.round() < rounds;
        };
        loop(w, by_rounds, [&](auto& x, auto g) {
          return x.step(p, hg::span<const float, typename M::memory_space>(g));
        });
        out.anchor = mem.download(hk::cview(mem, w.anchor()));
      };
      if (m == method::local_sgd_diloco)
        local(ho::diloco_nesterov(0.7, 0.9), ho::adam({.lr = 0.05}));
      else
        local(hs::no_outer{}, heavy_ball());
      break;
    }
  }
  out.params = mem.download(hk::cview(mem, params));
  return out;
}

/// Every rank's result of method m in memory Case (ranks in threads over inproc).
template <class Case>
std::vector<rank_result> run(method m, nf policy = nf::fail, bool poison = false) {
  std::vector<rank_result> out(ranks_of(m));
  hc::inproc::spawn(static_cast<int>(ranks_of(m)), [&](hc::inproc::communicator c) {
    const auto r = static_cast<std::size_t>(c.rank());
    out[r] = run_rank<Case>(m, typename Case::transport(c), policy, poison);
  });
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.empty() || b.empty()) return a.size() == b.size();  // memcmp takes no null pointer
  return bitwise_equal(hg::span<const float>(a), hg::span<const float>(b));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sync_helpers_in_any_memory)

BOOST_AUTO_TEST_CASE_TEMPLATE(every_helper_equals_its_host_run_bitwise, Case, memories) {
  for (const method m : methods) {
    BOOST_TEST_CONTEXT(Case::name << ", " << name_of(m)) {
      const auto host = run<host_case>(m);
      const auto dev = run<Case>(m);
      std::size_t syncs = 0, local = 0;
      for (std::size_t r = 0; r < host.size(); ++r) {
        BOOST_TEST(same_bits(dev[r].params, host[r].params), "rank " << r << " parameters");
        BOOST_TEST(same_bits(dev[r].anchor, host[r].anchor), "rank " << r << " anchor");
        BOOST_TEST(dev[r].synced == host[r].synced, "rank " << r << " decisions");
        for (char s : host[r].synced) (s ? syncs : local) += 1;
      }
      // The runs are not trivial: the replicas moved, and SelSync took both kinds of step.
      BOOST_TEST(!same_bits(host[0].params, initial()));
      if (m == method::selsync) {
        BOOST_TEST(syncs > 0u);
        BOOST_TEST(local > 0u);
      }
      // Synchronous methods end with equal replicas (gossip and local steps need not).
      if (m == method::bsp_gradients || m == method::bsp_parameters_averaged_states)
        for (std::size_t r = 1; r < host.size(); ++r) BOOST_TEST(same_bits(host[r].params, host[0].params));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_step_makes_only_its_documented_scalar_transfers,
                     *boost::unit_test::timeout(120)) {
  // Guarded memory counts: no upload, no download; one read per step (the finiteness flag),
  // two under SelSync (the flag and ||g|| for the vote). Its pages are inaccessible outside
  // the memory's kernels and the transport's operations, so a host access would have
  // crashed the runs above.
  for (const method m : methods) {
    BOOST_TEST_CONTEXT(name_of(m)) {
      const auto dev = run<guarded_case>(m);
      const std::size_t per_step = m == method::selsync ? 2 : 1;
      for (std::size_t r = 0; r < dev.size(); ++r) {
        BOOST_TEST(dev[r].uploads == 0u);
        BOOST_TEST(dev[r].downloads == 0u);
        BOOST_TEST(dev[r].reads == per_step * dev[r].synced.size(), "rank " << r);
        BOOST_TEST(dev[r].kernels >= dev[r].synced.size(), "rank " << r);  // at least the updates
        // Buffers are made once: at construction, or in the first synchronisation (gossip's).
        BOOST_TEST(dev[r].buffers_after_first_sync == 0u, "rank " << r);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(nonfinite_gradients_are_screened_as_on_the_host, Case, memories) {
  // zero and skip give the host's bits (and skip is counted on rank 1 only); fail names rank
  // 1, step 2 and element 3 before anything moves on that rank.
  for (const method m : {method::bsp_gradients, method::local_sgd_diloco, method::selsync}) {
    BOOST_TEST_CONTEXT(Case::name << ", " << name_of(m)) {
      for (const nf policy : {nf::zero, nf::skip}) {
        const auto host = run<host_case>(m, policy, true);
        const auto dev = run<Case>(m, policy, true);
        for (std::size_t r = 0; r < host.size(); ++r) {
          BOOST_TEST(same_bits(dev[r].params, host[r].params), "rank " << r);
          BOOST_TEST(dev[r].skipped == host[r].skipped);
          BOOST_TEST(dev[r].skipped == (policy == nf::skip && r == 1 ? 1u : 0u));
        }
      }
      bool refused = false;
      try {
        (void)run<Case>(m, nf::fail, true);
      } catch (const hs::nonfinite_gradient_error& e) {
        refused = e.worker() == 1u && e.step() == 2u && e.index() == 3u;
      }
      BOOST_TEST(refused);
    }
  }
}

// Over a transport of NCCL's shape (no split, no tags), local SGD's global rounds run and
// equal inproc's bitwise; gossip and hierarchical groups are refused at construction naming
// the field, before any collective (every rank throws alone: nothing hangs).
BOOST_AUTO_TEST_CASE(a_transport_without_split_or_tags_runs_global_rounds_and_refuses_the_rest,
                     *boost::unit_test::timeout(60)) {
  using C = collectives_only_transport;
  using W = hs::local_sgd_worker<float, ho::momentum, C, hs::no_outer, hs::identity_transform,
                                 hk::serial_host_memory>;
  const auto host = run<host_case>(method::local_sgd_fednova_reset);
  std::vector<std::vector<float>> params(3);
  hc::inproc::spawn(3, [&](hc::inproc::communicator c) {
    const auto r = static_cast<std::size_t>(c.rank());
    std::vector<float> p = initial();
    hs::local_sgd_config cfg;
    cfg.period = 2;
    cfg.local_steps = {1, 2, 3};
    cfg.weighting = hs::averaging::fednova;
    cfg.states = hs::state_policy::reset;
    W w(C(c), heavy_ball(), hg::span<float>(p), {2, 1, 3}, cfg);
    for (std::uint64_t s = 0; w.round() < rounds; ++s) {
      const auto g = gradient(p, r, s);
      w.step(hg::span<float>(p), hg::span<const float>(g));
    }
    params[r] = p;
  });
  for (std::size_t r = 0; r < 3; ++r) BOOST_TEST(same_bits(params[r], host[r].params), "rank " << r);
  hc::inproc::spawn(4, [&](hc::inproc::communicator c) {
    std::vector<float> p = initial();
    const std::vector<std::size_t> batches{1, 1, 1, 1};
    hs::local_sgd_config gossip;
    gossip.gossip = hs::mixing_matrix::ring(4);
    hs::local_sgd_config groups;
    groups.period = 2;
    groups.groups = {0, 0, 1, 1};
    groups.global_period = 4;
    const auto g = hg_test::invalid_argument_message(
        [&] { W(C(c), heavy_ball(), hg::span<float>(p), batches, gossip); });
    const auto h = hg_test::invalid_argument_message(
        [&] { W(C(c), heavy_ball(), hg::span<float>(p), batches, groups); });
    BOOST_TEST(g.find("local_sgd.gossip") != std::string::npos, g);
    BOOST_TEST(g.find("tagged send") != std::string::npos, g);
    BOOST_TEST(h.find("local_sgd.groups") != std::string::npos, h);
    BOOST_TEST(h.find("split") != std::string::npos, h);
  });
}

namespace {

/// eager_worker on every rank (4 ranks over inproc's partial allreduce, plain sums, SGD with
/// step 1 from 0): each rank's parameters are minus the sum of the results it applied.
/// `flush_each`: every round is a flush (all ranks fresh: deterministic); else solo rounds
/// (who is late depends on timing) and the last round a flush. Gradients are small integers,
/// so every sum is exact whatever the order.
template <class Case>
std::vector<rank_result> run_eager(bool flush_each) {
  constexpr std::size_t ranks = 4;
  constexpr std::uint64_t eager_rounds = 8;
  std::vector<rank_result> out(ranks);
  hc::inproc::spawn(static_cast<int>(ranks), [&](hc::inproc::communicator c) {
    const auto r = static_cast<std::size_t>(c.rank());
    const auto mem = Case::make();
    using M = std::remove_const_t<decltype(mem)>;
    hs::eager_config cfg;
    cfg.mode = hs::partial_mode::solo;
    cfg.average = false;
    cfg.rounds = flush_each ? 0 : eager_rounds;
    hc::inproc::partial_allreduce<float> partial(c, dim, cfg.partial_policy(), cfg.partial_options());
    auto params = mem.template make<float>(dim, 0.0f);
    const auto p = hk::view(mem, params);
    hs::eager_worker<float, ho::sgd, hc::inproc::partial_allreduce<float>, M> w(
        partial, ho::sgd({.lr = 1.0}), p, cfg, mem);
    rank_result& res = out[r];
    for (std::uint64_t s = 0; s < eager_rounds; ++s) {
      std::vector<float> g(dim);
      for (std::size_t j = 0; j < dim; ++j) g[j] = static_cast<float>((j + 3 * r + 5 * s) % 7) - 3.0f;
      auto grads = mem.template upload<float>(std::span<const float>(g));
      // Solo rounds: rank r arrives r * 0.3 ms late, so rank 0 mostly fires alone and the
      // others' gradients are folded into later rounds.
      if (!flush_each) std::this_thread::sleep_for(std::chrono::microseconds(300 * r));
      count(mem, res, true);
      if (flush_each)
        w.final_step(p, hk::view(mem, grads));
      else
        w.step(p, hk::view(mem, grads));
      count(mem, res, false);
      res.synced.push_back(1);
      res.late += w.last_report().stale.size();
    }
    res.params = mem.download(hk::cview(mem, params));
  });
  return out;
}

/// Minus the sum of every rank's gradients over the rounds (what every replica must hold).
std::vector<float> minus_all_gradients() {
  std::vector<float> x(dim, 0.0f);
  for (std::size_t r = 0; r < 4; ++r)
    for (std::uint64_t s = 0; s < 8; ++s)
      for (std::size_t j = 0; j < dim; ++j) x[j] -= static_cast<float>((j + 3 * r + 5 * s) % 7) - 3.0f;
  return x;
}

}  // namespace

// eager_worker in device-like memories stages each round through one host buffer (the
// partial allreduces hold host buffers): flush rounds give the host run's bits; solo rounds
// (late contributions folded into later rounds) keep every replica equal and conserve the
// gradients, Σ applied = Σ computed, exactly; on guarded memory a round makes one download
// and one upload (the staging) and reads one scalar (the screen).
BOOST_AUTO_TEST_CASE_TEMPLATE(eager_worker_stages_its_rounds_through_host_memory, Case, memories) {
  const auto host = run_eager<host_case>(true);
  const auto dev = run_eager<Case>(true);
  const auto expected = minus_all_gradients();
  for (std::size_t r = 0; r < host.size(); ++r) {
    BOOST_TEST(same_bits(dev[r].params, host[r].params), "rank " << r);
    BOOST_TEST(same_bits(host[r].params, expected), "rank " << r);
  }
  const auto solo = run_eager<Case>(false);
  for (std::size_t r = 0; r < solo.size(); ++r) BOOST_TEST(same_bits(solo[r].params, expected), "rank " << r);
  BOOST_TEST(solo[0].late > 0u);  // some contributions were late (else the case is BSP's)
  for (std::size_t r = 0; r < host.size(); ++r) BOOST_TEST(host[r].late == 0u);
  if constexpr (std::is_same_v<Case, guarded_case>) {
    for (const auto* run : {&dev, &solo})
      for (std::size_t r = 0; r < run->size(); ++r) {
        const auto& x = (*run)[r];
        BOOST_TEST(x.uploads == x.synced.size(), "rank " << r);
        BOOST_TEST(x.downloads == x.synced.size(), "rank " << r);
        BOOST_TEST(x.reads == x.synced.size(), "rank " << r);
      }
  }
}

BOOST_AUTO_TEST_SUITE_END()
