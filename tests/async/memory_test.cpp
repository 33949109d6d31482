// Every asynchronous policy over the memories of kernels/memory.hpp: the host (the default),
// Thrust device vectors of the build's device system (OpenMP on the CPU), and guarded memory
// (tests/support/guarded_memory.hpp: emulated device buffers, inaccessible outside the
// memory's kernels, every transfer counted).
//   - the same scripted arrivals give bitwise the same parameters, versions and checkpoint
//     bytes in every memory; a checkpoint moves between memories;
//   - a step makes exactly one scalar transfer (the gradient's finiteness flag) and no
//     upload or download, and touches no buffer from host code (guarded pages);
//   - non-finite gradients (zero, skip, fail) and bad arrivals behave as on the host;
//   - under the simulator, a Thrust-memory policy's run equals the host policy's run;
//   - the threads runtime serves guarded policies through runtime::host_staged, and its
//     workers pull and push guarded buffers through worker_client's staging: the runs equal
//     the host runs bitwise, with one upload per arrival and one download per model version
//     sent.

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <thrust/execution_policy.h>

#include "guarded_memory.hpp"
#include "hg_test.hpp"
#include "heterograd/algorithms/async.hpp"
#include "heterograd/core/archive.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/kernels/thrust_memory.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/runtime/async_threads.hpp"
#include "heterograd/runtime/sim.hpp"
#include "heterograd/runtime/staging.hpp"
#include "heterograd/sim/worker_time.hpp"
#include "support.hpp"
#include "under_test.hpp"

namespace {

namespace hg = heterograd;
namespace hk = heterograd::kernels;
namespace ho = heterograd::optim;
namespace async = heterograd::algorithms::async;
namespace sim = heterograd::sim;
namespace hr = heterograd::runtime;
using nf = async::nonfinite_policy;
using async_test::arrival;
using async_test::ctl;

struct thrust_case {
  static constexpr const char* name = "thrust device vectors";
  static auto make() { return hk::thrust_memory(thrust::device); }
};
struct guarded_case {
  static constexpr const char* name = "guarded memory";
  static auto make() { return hg_test::guarded_memory{}; }
};
using memories = std::tuple<thrust_case, guarded_case>;

constexpr std::size_t workers = 4;
constexpr std::size_t dim = 37;  // not a multiple of any vector width

std::vector<double> initial() {
  std::vector<double> x(dim);
  for (std::size_t j = 0; j < dim; ++j) x[j] = 0.25 * static_cast<double>(j % 7) - 0.5;
  return x;
}

/// The host gradient of the k-th scripted arrival (from worker w).
std::vector<double> gradient(std::uint64_t seed, std::size_t w, std::size_t k) {
  const hg::counter_rng rng(seed, 0x6e6d + k);
  std::vector<double> g(dim);
  for (std::size_t j = 0; j < dim; ++j) g[j] = rng.normal(j) + 0.1 * static_cast<double>(w);
  return g;
}

template <class M>
auto sgd_server(const M& m, double lr, nf policy = nf::fail) {
  return async::model_server<double, ho::sgd, M>(initial(), async::plain_sgd(lr), policy, m);
}
template <class M>
auto adam_server(const M& m, nf policy = nf::fail) {
  return async::model_server<double, ho::adam, M>(initial(), ho::adam({.lr = 1e-2}), policy, m);
}

/// Every policy of algorithms/async (tests/support/under_test.hpp), built over a given
/// memory, then ASGD over an Adam server: f(policy, name) for each.
template <class M, class F>
void for_each_policy(const M& m, F&& f, nf policy = nf::fail) {
  hg_test::for_each_server_policy(workers, [&] { return sgd_server(m, 0.05, policy); }, f);
  f(async::asgd(workers, adam_server(m, policy)), "asgd (adam server)");
}

/// The k-th scripted arrival at the policy's current version: workers in a skewed order,
/// delays 0..4, times increasing (start before finish, pushes in time order per worker).
hr::arrival scripted(std::size_t k, std::uint64_t version) {
  const auto w = static_cast<sim::worker_id>((k * 3 + k / 5) % workers);
  const std::uint64_t delay = std::min<std::uint64_t>(version, (k * 7) % 5);
  const double t = static_cast<double>(k + 1);
  return arrival(w, version - delay, t - 1.0 - static_cast<double>(w) * 0.25, t);
}

template <class P>
std::vector<std::byte> checkpoint(const P& p) {
  hg::archive_writer w;
  w(p);
  return w.bytes();
}
template <class P>
void restore(P& p, const std::vector<std::byte>& bytes) {
  hg::archive_reader r(bytes);
  r(p);
  BOOST_REQUIRE(r.done());
}

template <class M>
std::vector<double> host_params(const M& m, hg::span<const double, typename M::memory_space> x) {
  return m.download(x);
}
bool same(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

constexpr std::size_t arrivals = 60;

}  // namespace

BOOST_AUTO_TEST_SUITE(async_memory)

// Same arrivals, same bits: every policy on every memory against its host twin, arrival by
// arrival (params, version, the controls it asked for), then the checkpoint bytes.
BOOST_AUTO_TEST_CASE_TEMPLATE(every_policy_equals_its_host_run_bitwise, Case, memories) {
  const std::uint64_t seed = hg_test::seed();
  const auto m = Case::make();
  std::vector<std::string> names;
  std::vector<std::vector<std::byte>> host_ckpt, host_final;
  for_each_policy(hk::host_memory{}, [&](auto p, const char* name) {
    names.push_back(name);
    ctl c;
    for (std::size_t k = 0; k < arrivals; ++k) {
      const auto a = scripted(k, p.version());
      p.on_arrival(c, a, gradient(seed, a.worker, k));
      if (k == arrivals / 2) host_ckpt.push_back(checkpoint(p));
    }
    host_final.push_back(checkpoint(p));
  });
  std::size_t i = 0;
  for_each_policy(m, [&](auto p, const char* name) {
    BOOST_TEST_CONTEXT(Case::name << ", " << name) {
      ctl c;
      for (std::size_t k = 0; k < arrivals; ++k) {
        const auto a = scripted(k, p.version());
        const auto g = m.template upload<double>(gradient(seed, a.worker, k));
        p.on_arrival(c, a, g);
        if (k == arrivals / 2) {
          BOOST_TEST((checkpoint(p) == host_ckpt[i]));
          // The host checkpoint read into this memory continues identically.
          auto q = p;
          restore(q, host_ckpt[i]);
          BOOST_TEST((q == p));
        }
      }
      BOOST_TEST((checkpoint(p) == host_final[i]));
      BOOST_TEST(p.version() > 0u);
    }
    ++i;
  });
  BOOST_TEST(i == names.size());
}

// A step of every policy makes one scalar transfer (the finiteness flag) and no upload or
// download; its buffers are touched only by the memory's kernels (guarded pages fault).
BOOST_AUTO_TEST_CASE(a_step_transfers_one_scalar_and_nothing_else) {
  const std::uint64_t seed = hg_test::seed();
  const hg_test::guarded_memory m;
  for_each_policy(m, [&](auto p, const char* name) {
    BOOST_TEST_CONTEXT(name) {
      ctl c;
      for (std::size_t k = 0; k < arrivals; ++k) {
        const auto a = scripted(k, p.version());
        const auto g = m.template upload<double>(gradient(seed, a.worker, k));
        const hg_test::transfer_counts before = m.counts();
        p.on_arrival(c, a, g);
        const hg_test::transfer_counts after = m.counts();
        BOOST_TEST(after.uploads == before.uploads);
        BOOST_TEST(after.downloads == before.downloads);
        BOOST_TEST(after.scalar_reads == before.scalar_reads + 1);
        BOOST_TEST(after.kernels >= before.kernels);
      }
      BOOST_TEST(c.outcomes() == arrivals);
    }
  });
}

// The guard is real: reading a guarded server's parameters from host code, outside the
// memory's kernels, faults (in a forked child), and the same read through download() works.
BOOST_AUTO_TEST_CASE(host_code_cannot_touch_guarded_buffers) {
  const hg_test::guarded_memory m;
  const auto s = sgd_server(m, 0.1);
  BOOST_TEST(m.download(s.params())[1] == initial()[1]);
  std::fflush(nullptr);
  const pid_t child = ::fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGSEGV, SIG_DFL);  // not Boost.Test's handler
    std::signal(SIGBUS, SIG_DFL);
    volatile double x = s.params()[1];  // host access: must fault
    (void)x;
    std::_Exit(0);
  }
  int status = 0;
  BOOST_REQUIRE(::waitpid(child, &status, 0) == child);
  BOOST_TEST(WIFSIGNALED(status));
  if (WIFSIGNALED(status)) BOOST_TEST((WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS));
}

// zero and skip decide on the flag alone (no download); fail downloads the gradient once to
// name its first bad entry, as the host names it, and changes nothing.
BOOST_AUTO_TEST_CASE_TEMPLATE(nonfinite_gradients_are_screened_as_on_the_host, Case, memories) {
  const std::uint64_t seed = hg_test::seed();
  const auto m = Case::make();
  auto bad = [&](std::size_t k) {
    auto g = gradient(seed, 1, k);
    g[5] = std::numeric_limits<double>::quiet_NaN();
    g[11] = -std::numeric_limits<double>::infinity();
    return g;
  };
  for (const nf policy : {nf::zero, nf::skip}) {
    std::vector<std::vector<std::byte>> host;
    for_each_policy(hk::host_memory{}, [&](auto p, const char*) {
      ctl c;
      for (std::size_t k = 0; k < 20; ++k) {
        const auto a = scripted(k, p.version());
        p.on_arrival(c, a, k % 4 == 1 ? bad(k) : gradient(seed, a.worker, k));
      }
      host.push_back(checkpoint(p));
    }, policy);
    std::size_t i = 0;
    for_each_policy(m, [&](auto p, const char* name) {
      BOOST_TEST_CONTEXT(Case::name << ", " << name << ", " << async::nonfinite_policy_name(policy)) {
        ctl c;
        for (std::size_t k = 0; k < 20; ++k) {
          const auto a = scripted(k, p.version());
          const auto g = m.template upload<double>(k % 4 == 1 ? bad(k) : gradient(seed, a.worker, k));
          p.on_arrival(c, a, g);
        }
        BOOST_TEST((checkpoint(p) == host[i]));
        if (policy == nf::skip) BOOST_TEST(p.server().nonfinite_skipped() == 5u);
      }
      ++i;
    }, policy);
  }
  // fail: the same error as the host's, nothing changed.
  auto host_p = async::asgd(workers, sgd_server(hk::host_memory{}, 0.05));
  auto dev_p = async::asgd(workers, sgd_server(m, 0.05));
  ctl c;
  std::string host_what, dev_what;
  std::size_t dev_index = 0;
  try {
    host_p.on_arrival(c, arrival(1, 0), bad(3));
  } catch (const async::nonfinite_gradient_error& e) {
    host_what = e.what();
  }
  const auto before = dev_p;
  try {
    dev_p.on_arrival(c, arrival(1, 0), m.template upload<double>(bad(3)));
  } catch (const async::nonfinite_gradient_error& e) {
    dev_what = e.what();
    dev_index = e.index();
  }
  BOOST_TEST(!host_what.empty());
  BOOST_TEST(dev_what == host_what);
  BOOST_TEST(dev_index == 5u);
  BOOST_TEST((dev_p == before));
}

// Bad arrivals are refused before anything changes, as on the host; a checkpoint of another
// shape is refused by name.
BOOST_AUTO_TEST_CASE_TEMPLATE(bad_input_changes_nothing, Case, memories) {
  const std::uint64_t seed = hg_test::seed();
  const auto m = Case::make();
  for_each_policy(m, [&](auto p, const char* name) {
    BOOST_TEST_CONTEXT(Case::name << ", " << name) {
      ctl c;
      for (std::size_t k = 0; k < 6; ++k) {
        const auto a = scripted(k, p.version());
        p.on_arrival(c, a, m.template upload<double>(gradient(seed, a.worker, k)));
      }
      const auto before = p;
      const auto good = m.template upload<double>(gradient(seed, 0, 99));
      auto short_host = gradient(seed, 0, 99);
      short_host.pop_back();
      const auto short_g = m.template upload<double>(short_host);
      BOOST_CHECK_THROW(p.on_arrival(c, arrival(0, p.version()), short_g), std::invalid_argument);
      BOOST_CHECK_THROW(p.on_arrival(c, arrival(workers, p.version()), good), std::invalid_argument);
      BOOST_CHECK_THROW(p.on_arrival(c, arrival(1, p.version() + 1), good), std::invalid_argument);
      BOOST_TEST((p == before));
    }
  });
  // A checkpoint of a 36-parameter server does not load into a 37-parameter one.
  auto small = async::model_server<double, ho::sgd, hk::host_memory>(std::vector<double>(dim - 1, 1.0),
                                                                     async::plain_sgd(0.1));
  auto p = async::rennala_sgd(workers, sgd_server(m, 0.1));
  auto q = async::rennala_sgd(workers, std::move(small));
  const auto before = p;
  try {
    restore(p, checkpoint(q));
    BOOST_FAIL("a checkpoint of another dimension was read");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("server.params") != std::string::npos, e.what());
  }
  // A gradient table of 3 workers does not load into one of 4 (same model): refused by name.
  auto table4 = async::ia2sgd(workers, sgd_server(m, 0.1));
  const auto table3 = async::ia2sgd(workers - 1, sgd_server(hk::host_memory{}, 0.1));
  try {
    restore(table4, checkpoint(table3));
    BOOST_FAIL("a table of another shape was read");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("table.means") != std::string::npos, e.what());
  }
}

// Under the simulator (which reads params() to start each job), a policy on Thrust device
// vectors runs exactly as the host policy: same trace, same outcomes, same parameters.
BOOST_AUTO_TEST_CASE(sim_runs_on_thrust_memory_equal_host_runs) {
  const std::uint64_t seed = hg_test::seed();
  const auto m = hk::thrust_memory(thrust::device);
  const auto model = sim::plus(sim::sqrt_times(workers, seed), sim::half_normal_noise(seed));
  std::vector<std::uint64_t> hashes;
  std::vector<std::vector<double>> params;
  auto run = [&](auto& p) {
    hr::async_runtime<std::vector<double>, std::remove_const_t<decltype(model)>> rt(workers, model);
    hr::run_options opt;
    opt.horizon = 60;
    const std::vector<double> centre = gradient(seed, 0, 1000);
    auto grad = [&](sim::worker_id w, std::uint64_t, std::uint64_t k, std::vector<double>& g) {
      const auto x = p.params();
      g.resize(dim);
      const hg::counter_rng rng(seed, 0x5eed + w);
      for (std::size_t j = 0; j < dim; ++j) g[j] = x[j] - centre[j] + 0.3 * rng.normal(k * dim + j);
    };
    rt.run(p, grad, opt);
    return rt.recorder().trace_hash();
  };
  for_each_policy(hk::host_memory{}, [&](auto p, const char*) {
    hashes.push_back(run(p));
    params.push_back(std::vector<double>(p.params().begin(), p.params().end()));
  });
  std::size_t i = 0;
  for_each_policy(m, [&](auto p, const char* name) {
    BOOST_TEST_CONTEXT(name) {
      BOOST_TEST(run(p) == hashes[i]);
      BOOST_TEST(same(host_params(m, p.params()), params[i]));
      BOOST_TEST(p.version() > 0u);
    }
    ++i;
  });
}

namespace {

/// The worker's job of the runtime tests: a noisy quadratic around `centre` (host code).
struct quadratic_job {
  std::uint64_t seed;
  std::vector<double> centre;
  void operator()(sim::worker_id w, std::uint64_t k, hg::span<const double> x,
                  std::vector<double>& g) const {
    g.resize(dim);
    const hg::counter_rng rng(seed, 0x5eed + w);
    for (std::size_t j = 0; j < dim; ++j) g[j] = x[j] - centre[j] + 0.3 * rng.normal(k * dim + j);
  }
};

hr::remote_options virtual_order(std::uint64_t arrivals) {
  hr::remote_options o;
  o.order = hr::arrival_order::virtual_time;
  o.max_arrivals = arrivals;
  o.timeout = hg::seconds{60.0};
  return o;
}

}  // namespace

/// The policies the staging is run with: one per way a policy moves its version (every
/// arrival an update; a batch of arrivals one update; gradient tables; discarded stale
/// arrivals; per-worker batches from the policy, set_batch). The adapter is the same for all.
template <class M, class F>
void for_each_staged_policy(const M& m, F&& f) {
  const std::size_t n = workers;
  f(async::asgd(n, adam_server(m)), "asgd (adam server)");
  f(async::rennala_sgd(n, sgd_server(m, 0.05), {.batch = 3}), "rennala");
  f(async::ringleader_asgd(n, sgd_server(m, 0.05)), "ringleader");
  f(async::ringmaster_asgd(n, sgd_server(m, 0.05), {.threshold = 2}), "ringmaster");
  f(async::omnilearn_asgd(n, sgd_server(m, 0.05), {32, 32, 32, 32}, {.rebalance_every = 3}),
    "omnilearn asp");
}

// The threads runtime serves policies in guarded memory through runtime::host_staged. In the
// simulator's order (virtual time) each run equals the host policy's simulated run bitwise
// (threads = sim in virtual order: async_runtime_test); the staging uploads each arriving
// gradient once and downloads the model once per version it sends (never more than the
// updates + 1; ASGD, whose every arrival is an update sent out again, exactly arrivals + 1);
// the policy's own steps make their one scalar read each.
BOOST_AUTO_TEST_CASE(the_threads_runtime_serves_a_guarded_policy_through_host_staging,
                     *boost::unit_test::timeout(300)) {
  const std::uint64_t seed = hg_test::seed();
  const hg_test::guarded_memory m;
  const auto model = sim::plus(sim::sqrt_times(workers, seed), sim::half_normal_noise(seed));
  const quadratic_job job{seed, gradient(seed, 0, 1000)};
  constexpr std::uint64_t n = 48;
  std::vector<std::vector<double>> params;
  std::vector<std::uint64_t> versions, applied;
  for_each_staged_policy(hk::host_memory{}, [&](auto p, const char*) {
    hr::async_runtime<std::vector<double>, std::remove_const_t<decltype(model)>> rt(workers, model);
    hr::run_options opt;
    opt.max_events = n;
    rt.run(p, [&](sim::worker_id w, std::uint64_t, std::uint64_t k, std::vector<double>& g) {
      job(w, k, p.params(), g);
    }, opt);
    params.push_back(std::vector<double>(p.params().begin(), p.params().end()));
    versions.push_back(p.version());
    applied.push_back(rt.recorder().count(sim::update_outcome::applied));
  });
  std::size_t i = 0;
  for_each_staged_policy(m, [&](auto p, const char* name) {
    BOOST_TEST_CONTEXT(name) {
      hr::host_staged staged(p);
      const hg_test::transfer_counts before = m.counts();
      const auto s = hr::run_threads<double>(
          staged,
          [&](sim::worker_id w, std::uint64_t, std::uint64_t k, hg::span<const double> x,
              std::vector<double>& g) { job(w, k, x, g); },
          virtual_order(n), model);
      const hg_test::transfer_counts after = m.counts();
      BOOST_TEST(s.arrivals == n);
      BOOST_TEST(p.version() == versions[i]);
      BOOST_TEST(s.log.count(sim::update_outcome::applied) == applied[i]);
      BOOST_TEST(same(host_params(m, p.params()), params[i]));
      const std::size_t ups = after.uploads - before.uploads;
      const std::size_t downs = after.downloads - before.downloads;
      BOOST_TEST(ups == n);
      BOOST_TEST(downs >= 1u);
      BOOST_TEST(downs <= p.version() + 1);
      if (std::string(name) == "asgd (adam server)") BOOST_TEST(downs == n + 1);
      BOOST_TEST(after.upload_bytes - before.upload_bytes == n * dim * sizeof(double));
      BOOST_TEST(after.scalar_reads - before.scalar_reads == n);
      BOOST_TEST(p.version() > 0u);
    }
    ++i;
  });
  BOOST_TEST(i == params.size());
}

// Workers whose buffers are guarded pull into them and push from them through worker_client's
// staging (one upload per job pulled, one download per result pushed): the server, ASGD on the
// host in virtual-time order, ends bitwise where run_threads with host workers ends.
BOOST_AUTO_TEST_CASE(workers_pull_and_push_guarded_buffers_through_the_client_staging,
                     *boost::unit_test::timeout(120)) {
  const std::uint64_t seed = hg_test::seed();
  const auto model = sim::plus(sim::sqrt_times(workers, seed), sim::half_normal_noise(seed));
  const quadratic_job job{seed, gradient(seed, 0, 1000)};
  constexpr std::uint64_t n = 40;
  auto host = async::asgd(workers, sgd_server(hk::host_memory{}, 0.05));
  auto staged_run = host;
  hr::run_threads<double>(
      host,
      [&](sim::worker_id w, std::uint64_t, std::uint64_t k, hg::span<const double> x,
          std::vector<double>& g) { job(w, k, x, g); },
      virtual_order(n), model);
  // Per worker (Boost.Test is not thread-safe: the workers only record).
  std::vector<std::uint64_t> pulled(workers), pushed(workers), pull_uploads(workers),
      push_downloads(workers);
  hr::remote_summary s;
  const auto o = virtual_order(n);
  hg::comm::inproc::spawn(static_cast<int>(workers) + 1, [&](hg::comm::inproc::communicator c) {
    if (c.rank() == 0) {
      s = hr::serve<double>(staged_run, c, o, model);
      return;
    }
    const hg_test::guarded_memory mem;
    hr::worker_client<double, hg::comm::inproc::communicator> client(c, dim, o);
    auto params = mem.make<double>(dim);
    auto grads = mem.make<double>(dim);
    const auto w = client.worker();
    std::vector<double> g;
    for (;;) {
      const hg_test::transfer_counts b0 = mem.counts();
      const bool more = client.pull(mem, hk::view(mem, params));
      pull_uploads[w] += mem.counts().uploads - b0.uploads;
      if (!more) break;
      ++pulled[w];
      // The job is the test's own host code: its download and upload are not the client's.
      job(w, client.job_index(), hg::span<const double>(mem.download(hk::cview(mem, params))), g);
      grads = mem.upload<double>(std::span<const double>(g));
      const hg_test::transfer_counts b1 = mem.counts();
      if (client.push(mem, hk::cview(mem, grads))) ++pushed[w];
      push_downloads[w] += mem.counts().downloads - b1.downloads;
    }
  });
  BOOST_TEST(s.arrivals == n);
  BOOST_TEST(staged_run.version() == host.version());
  BOOST_TEST(same(std::vector<double>(staged_run.params().begin(), staged_run.params().end()),
                  std::vector<double>(host.params().begin(), host.params().end())));
  std::uint64_t all = 0;
  for (std::size_t w = 0; w < workers; ++w) {
    BOOST_TEST(pull_uploads[w] == pulled[w], "worker " << w);    // one per job pulled
    BOOST_TEST(push_downloads[w] == pushed[w], "worker " << w);  // one per result pushed
    all += pushed[w];
  }
  BOOST_TEST(all >= n);  // every arrival was pushed (results of stopped jobs are dropped)
}

BOOST_AUTO_TEST_SUITE_END()
