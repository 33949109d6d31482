// The C API's MPI objects under mpirun: the local SGD averager equals the sync layer's
// local_sgd_worker bitwise, the asynchronous server with one worker contracts a quadratic
// exactly like gradient descent, and bad input fails on every rank without a collective.
// It calls libheterograd_c where the examples are built, else it is the implementation TU.
#ifndef HG_CAPI_TEST_LINKS_LIBRARY
#define HG_C_API_IMPLEMENTATION
#endif
#include "heterograd/c/heterograd.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/algorithms/sync/local_sgd.hpp"
#include "heterograd/algorithms/sync/workers.hpp"
#include "heterograd/comm/mpi.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "hg_mpi.hpp"
#include "hg_test.hpp"

using mpi_test::mpi_session;
BOOST_TEST_GLOBAL_FIXTURE(mpi_session);

namespace hg = heterograd;
namespace ho = heterograd::optim;

namespace {

int rank() { return mpi_test::world().rank(); }
int ranks() { return mpi_test::world().size(); }
std::int64_t world_f() { return static_cast<std::int64_t>(MPI_Comm_c2f(MPI_COMM_WORLD)); }

/// One seed for every rank (rank 0's), so that the ranks draw consistent inputs.
std::uint64_t shared_seed() {
  std::uint64_t s = hg_test::seed();
  MPI_Bcast(&s, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  return s;
}

template <class T>
std::vector<T> draw(std::size_t n, std::uint64_t seed, std::uint64_t stream) {
  const hg::counter_rng rng(seed, stream);
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(rng.normal(i));
  return v;
}

template <class T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

std::string message() { return hg_last_error(); }

}  // namespace

BOOST_AUTO_TEST_SUITE(c_api_mpi)

BOOST_AUTO_TEST_CASE(mpi_world_reports_this_process) {
  std::int64_t f = -1;
  int r = -1, n = -1, provided = -1;
  BOOST_TEST(hg_mpi_init(&provided) == HG_OK);  // already running: reports the level
  BOOST_TEST(provided == MPI_THREAD_MULTIPLE);
  BOOST_TEST(hg_mpi_world(&f, &r, &n) == HG_OK);
  BOOST_TEST(f == world_f());
  BOOST_TEST(r == rank());
  BOOST_TEST(n == ranks());
  BOOST_TEST(hg_has_mpi() == 1);
}

BOOST_AUTO_TEST_CASE(bad_input_to_the_mpi_objects_returns_errors_on_every_rank) {
  constexpr std::size_t n = 16;
  std::vector<float> p(n, 1.0f), g(n, 1.0f);
  hg_optimizer_config oc;
  hg_optimizer_config_init(&oc, HG_OPTIMIZER_SGD);
  hg_local_sgd_config lc;
  BOOST_REQUIRE_EQUAL(hg_local_sgd_config_init(&lc), HG_OK);
  hg_async_config ac;
  BOOST_REQUIRE_EQUAL(hg_async_config_init(&ac), HG_OK);
  hg_local_sgd avg = nullptr;
  hg_async_server srv = nullptr;
  hg_async_worker wk = nullptr;

  // Unknown handles, including a live handle of another kind.
  hg_optimizer opt = nullptr;
  BOOST_REQUIRE_EQUAL(hg_optimizer_create(&opt, &oc, HG_FLOAT32, n, HG_DEVICE_HOST), HG_OK);
  BOOST_TEST(hg_local_sgd_step(reinterpret_cast<hg_local_sgd>(opt), p.data(), g.data(), n,
                               HG_DEVICE_HOST, nullptr) == HG_ERROR_UNKNOWN_HANDLE);
  BOOST_TEST(message().find("is not a live hg_local_sgd") != std::string::npos);
  BOOST_TEST(hg_async_server_run(reinterpret_cast<hg_async_server>(opt), nullptr, nullptr) ==
             HG_ERROR_UNKNOWN_HANDLE);
  std::int32_t job = -1;
  BOOST_TEST(hg_async_worker_pull(nullptr, p.data(), n, HG_DEVICE_HOST, &job) ==
             HG_ERROR_UNKNOWN_HANDLE);
  BOOST_TEST(job == -1);
  BOOST_TEST(hg_local_sgd_destroy(reinterpret_cast<hg_local_sgd>(opt)) == HG_ERROR_UNKNOWN_HANDLE);
  BOOST_TEST(hg_optimizer_destroy(opt) == HG_OK);

  // Null pointers, device buffers, a communicator handle that does not exist: all fail
  // before the collective, so every rank returns.
  BOOST_TEST(hg_local_sgd_create_mpi(nullptr, world_f(), &oc, &lc, nullptr, HG_FLOAT32, p.data(),
                                     n, HG_DEVICE_HOST) == HG_ERROR_NULL_POINTER);
  BOOST_TEST(hg_local_sgd_create_mpi(&avg, world_f(), &oc, &lc, nullptr, HG_FLOAT32, nullptr, n,
                                     HG_DEVICE_HOST) == HG_ERROR_NULL_POINTER);
  BOOST_TEST(hg_local_sgd_create_mpi(&avg, world_f(), &oc, &lc, nullptr, HG_FLOAT32, p.data(), n,
                                     HG_DEVICE_CUDA) == HG_ERROR_UNSUPPORTED);
  BOOST_TEST(hg_async_server_create_mpi(&srv, world_f(), &oc, &ac, HG_FLOAT32, p.data(), n,
                                        HG_DEVICE_CUDA) == HG_ERROR_UNSUPPORTED);
  BOOST_TEST(hg_async_server_create_mpi(&srv, world_f(), &oc, nullptr, HG_FLOAT32, p.data(), n,
                                        HG_DEVICE_HOST) == HG_ERROR_NULL_POINTER);
  BOOST_TEST(hg_async_worker_create_mpi(&wk, world_f(), &ac, HG_FLOAT32, 0) ==
             HG_ERROR_INVALID_ARGUMENT);
  BOOST_TEST(hg_local_sgd_create_mpi(&avg, 987654, &oc, &lc, nullptr, HG_FLOAT32, p.data(), n,
                                     HG_DEVICE_HOST) == HG_ERROR_INVALID_ARGUMENT);
  BOOST_TEST(message().find("'mpi_comm' = 987654") != std::string::npos);
  lc.period = 0;
  BOOST_TEST(hg_local_sgd_create_mpi(&avg, world_f(), &oc, &lc, nullptr, HG_FLOAT32, p.data(), n,
                                     HG_DEVICE_HOST) == HG_ERROR_INVALID_ARGUMENT);
  BOOST_TEST(message().find("local_sgd.period") != std::string::npos);
  hg_local_sgd_config_init(&lc);
  const std::vector<std::uint64_t> zero_batches(static_cast<std::size_t>(ranks()), 0);
  BOOST_TEST(hg_local_sgd_create_mpi(&avg, world_f(), &oc, &lc, zero_batches.data(), HG_FLOAT32,
                                     p.data(), n, HG_DEVICE_HOST) == HG_ERROR_INVALID_ARGUMENT);
  ac.server_rank = ranks();  // no such rank
  BOOST_TEST(hg_async_worker_create_mpi(&wk, world_f(), &ac, HG_FLOAT32, n) ==
             HG_ERROR_INVALID_ARGUMENT);
  BOOST_TEST(message().find("config.server_rank") != std::string::npos);
  ac.server_rank = 0;
  if (rank() != 0) {  // a server on a worker's rank, a worker on the server's: refused alone
    BOOST_TEST(hg_async_server_create_mpi(&srv, world_f(), &oc, &ac, HG_FLOAT32, p.data(), n,
                                          HG_DEVICE_HOST) == HG_ERROR_INVALID_ARGUMENT);
  } else {
    BOOST_TEST(hg_async_worker_create_mpi(&wk, world_f(), &ac, HG_FLOAT32, n) ==
               HG_ERROR_INVALID_ARGUMENT);
  }
  // SIZE_MAX, and a misaligned buffer, fail alike on every rank before the collective.
  ac.server_rank = 0;
  constexpr std::size_t huge = std::numeric_limits<std::size_t>::max();
  BOOST_TEST(hg_local_sgd_create_mpi(&avg, world_f(), &oc, &lc, nullptr, HG_FLOAT32, p.data(),
                                     huge, HG_DEVICE_HOST) == HG_ERROR_INVALID_ARGUMENT);
  BOOST_TEST(message().find("its byte count (size x 4) must fit in ptrdiff_t") != std::string::npos,
             message());
  if (rank() != 0)
    BOOST_TEST(hg_async_worker_create_mpi(&wk, world_f(), &ac, HG_FLOAT64, huge / 2) ==
               HG_ERROR_INVALID_ARGUMENT);
  else
    BOOST_TEST(hg_async_server_create_mpi(&srv, world_f(), &oc, &ac, HG_FLOAT64, p.data(), huge,
                                          HG_DEVICE_HOST) == HG_ERROR_INVALID_ARGUMENT);
  auto* odd = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(p.data()) + 2);
  BOOST_TEST(hg_local_sgd_create_mpi(&avg, world_f(), &oc, &lc, nullptr, HG_FLOAT32, odd, n - 1,
                                     HG_DEVICE_HOST) == HG_ERROR_INVALID_ARGUMENT);
  BOOST_TEST(message().find("alignof(float)") != std::string::npos, message());
  BOOST_TEST(avg == nullptr);
  BOOST_TEST(srv == nullptr);
  BOOST_TEST(wk == nullptr);
}

BOOST_AUTO_TEST_CASE(local_sgd_through_the_c_api_equals_the_sync_layers_worker_bitwise) {
  namespace hs = heterograd::algorithms::sync;
  constexpr std::size_t n = 3001, period = 3, steps = 8;
  const std::uint64_t seed = shared_seed();
  const auto p0 = draw<float>(n, seed, 1);  // equal on every rank
  std::vector<std::uint64_t> batches;
  for (int r = 0; r < ranks(); ++r) batches.push_back(static_cast<std::uint64_t>(8 * (r + 1)));
  for (std::int32_t weighting : {HG_AVERAGING_UNIFORM, HG_AVERAGING_SAMPLE_WEIGHTED}) {
    BOOST_TEST_CONTEXT("weighting " << weighting) {
      hg_optimizer_config oc;
      hg_optimizer_config_init(&oc, HG_OPTIMIZER_ADAM);
      hg_local_sgd_config lc;
      hg_local_sgd_config_init(&lc);
      lc.period = period;
      lc.weighting = weighting;
      lc.timeout_seconds = 30;
      auto p_c = p0, p_cpp = p0;
      hg_local_sgd avg = nullptr;
      BOOST_REQUIRE_EQUAL(hg_local_sgd_create_mpi(&avg, world_f(), &oc, &lc, batches.data(),
                                                  HG_FLOAT32, p_c.data(), n, HG_DEVICE_HOST),
                          HG_OK);
      hs::local_sgd_config cfg;
      cfg.period = period;
      cfg.weighting = weighting == HG_AVERAGING_UNIFORM ? hs::averaging::uniform
                                                        : hs::averaging::sample_weighted;
      hs::local_sgd_worker<float, ho::adam, hg::comm::mpi::communicator> ref(
          mpi_test::world(), ho::adam(), hg::span<float>(p_cpp),
          std::vector<std::size_t>(batches.begin(), batches.end()), cfg);
      std::vector<float> shifted(n + 1);
      auto* odd = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(shifted.data()) + 1);
      for (std::size_t s = 0; s < steps; ++s) {
        const auto g = draw<float>(n, seed, 100 + s * 64 + static_cast<std::uint64_t>(rank()));
        // Failing calls before every step (on this rank alone: they fail before any
        // collective) change nothing: p_c now, and the trajectory (optimizer state, round and
        // step counters) checked bitwise against the C++ worker below.
        const auto p_before = p_c;
        std::uint64_t r0 = 0, l0 = 0, r1 = 0, l1 = 0;
        BOOST_REQUIRE_EQUAL(hg_local_sgd_progress(avg, &r0, &l0), HG_OK);
        BOOST_TEST(hg_local_sgd_step(avg, odd, g.data(), n, HG_DEVICE_HOST, nullptr) ==
                   HG_ERROR_INVALID_ARGUMENT);
        BOOST_TEST(hg_local_sgd_step(avg, p_c.data(), odd, n, HG_DEVICE_HOST, nullptr) ==
                   HG_ERROR_INVALID_ARGUMENT);
        BOOST_TEST(hg_local_sgd_step(avg, p_c.data(), g.data(), n + 1, HG_DEVICE_HOST, nullptr) ==
                   HG_ERROR_SIZE_MISMATCH);
        BOOST_TEST(hg_local_sgd_step(avg, p_c.data(), nullptr, n, HG_DEVICE_HOST, nullptr) ==
                   HG_ERROR_NULL_POINTER);
        BOOST_TEST(hg_local_sgd_step(avg, p_c.data(), g.data(), n, HG_DEVICE_CUDA, nullptr) ==
                   HG_ERROR_UNSUPPORTED);
        // A NaN or an infinity in the gradient: the local SGD policy's default, fail, refuses it
        // before the update.
        for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
          auto g_bad = g;
          g_bad[(s * 131) % n] = bad;
          BOOST_TEST(hg_local_sgd_step(avg, p_c.data(), g_bad.data(), n, HG_DEVICE_HOST, nullptr) ==
                     HG_ERROR_INVALID_ARGUMENT);
          BOOST_TEST(std::string(hg_last_error()).find("non-finite gradient") != std::string::npos);
        }
        BOOST_TEST(bitwise_equal(p_c, p_before));
        BOOST_REQUIRE_EQUAL(hg_local_sgd_progress(avg, &r1, &l1), HG_OK);
        BOOST_TEST((r1 == r0 && l1 == l0));
        std::int32_t averaged = -1;
        BOOST_REQUIRE_EQUAL(
            hg_local_sgd_step(avg, p_c.data(), g.data(), n, HG_DEVICE_HOST, &averaged), HG_OK);
        BOOST_TEST(averaged == ((s + 1) % period == 0 ? 1 : 0));
        ref.step(hg::span<float>(p_cpp), hg::span<const float>(g));
      }
      BOOST_TEST(bitwise_equal(p_c, p_cpp));
      std::uint64_t rounds = 0, local = 0;
      BOOST_REQUIRE_EQUAL(hg_local_sgd_progress(avg, &rounds, &local), HG_OK);
      BOOST_TEST(rounds == steps / period);
      BOOST_TEST(local == steps);
      // A wrong size fails on this rank alone, before any collective.
      BOOST_TEST(hg_local_sgd_step(avg, p_c.data(), p_c.data(), n - 1, HG_DEVICE_HOST, nullptr) ==
                 HG_ERROR_SIZE_MISMATCH);
      BOOST_REQUIRE_EQUAL(hg_local_sgd_destroy(avg), HG_OK);
      BOOST_TEST(hg_local_sgd_step(avg, p_c.data(), p_c.data(), n, HG_DEVICE_HOST, nullptr) ==
                 HG_ERROR_UNKNOWN_HANDLE);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_local_sgd_step_whose_average_times_out_changes_nothing_on_that_rank) {
  // Rank 0 steps into the round's average; the others never join it: its step times out and
  // must leave params and the progress counters as they were (the optimizer state too:
  // hg_local_sgd_step puts the whole worker back, tested bitwise in capi_test).
  constexpr std::size_t n = 64;
  const std::uint64_t seed = shared_seed();
  const auto p0 = draw<float>(n, seed, 3);
  const auto g = draw<float>(n, seed, 4);
  hg_optimizer_config oc;
  hg_optimizer_config_init(&oc, HG_OPTIMIZER_MOMENTUM);
  hg_local_sgd_config lc;
  hg_local_sgd_config_init(&lc);
  lc.period = 1;
  lc.timeout_seconds = 0.5;
  auto p = p0;
  hg_local_sgd avg = nullptr;
  BOOST_REQUIRE_EQUAL(hg_local_sgd_create_mpi(&avg, world_f(), &oc, &lc, nullptr, HG_FLOAT32,
                                              p.data(), n, HG_DEVICE_HOST),
                      HG_OK);
  if (rank() == 0) {
    std::int32_t averaged = -1;
    const hg_status st = hg_local_sgd_step(avg, p.data(), g.data(), n, HG_DEVICE_HOST, &averaged);
    BOOST_TEST((st == HG_ERROR_TIMEOUT || st == HG_ERROR_COMMUNICATION), hg_status_name(st));
    BOOST_TEST(averaged == -1);
    BOOST_TEST(bitwise_equal(p, p0));
    std::uint64_t rounds = 9, steps = 9;
    BOOST_REQUIRE_EQUAL(hg_local_sgd_progress(avg, &rounds, &steps), HG_OK);
    BOOST_TEST(rounds == 0u);
    BOOST_TEST(steps == 0u);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // the others wait here, outside the averager's communicator
  BOOST_REQUIRE_EQUAL(hg_local_sgd_destroy(avg), HG_OK);
}

BOOST_AUTO_TEST_CASE(the_async_server_converges_on_a_quadratic_and_stops_every_worker) {
  // f(x) = |x - a|^2 / 2, gradient x - a. With one worker no gradient is stale and ASGD with
  // SGD(gamma) is gradient descent: x_K - a = (1 - gamma)^K (x_0 - a) exactly up to rounding.
  // With more workers gradients are stale; gamma = 0.1 keeps the delayed iteration stable.
  constexpr std::size_t n = 257;
  constexpr std::uint64_t updates = 60;
  const std::uint64_t seed = shared_seed();
  const auto a = draw<double>(n, seed, 7), x0 = draw<double>(n, seed, 8);
  const double gamma = ranks() == 2 ? 0.25 : 0.1;
  hg_async_config ac;
  hg_async_config_init(&ac);
  ac.max_updates = updates;
  ac.timeout_seconds = 60;
  if (rank() == 0) {
    hg_optimizer_config oc;
    hg_optimizer_config_init(&oc, HG_OPTIMIZER_SGD);
    oc.lr = gamma;
    hg_async_server srv = nullptr;
    BOOST_REQUIRE_EQUAL(hg_async_server_create_mpi(&srv, world_f(), &oc, &ac, HG_FLOAT64,
                                                   x0.data(), n, HG_DEVICE_HOST),
                        HG_OK);
    std::uint64_t applied = 0, dropped = 0;
    BOOST_REQUIRE_EQUAL(hg_async_server_run(srv, &applied, &dropped), HG_OK);
    BOOST_TEST(applied == updates);
    std::vector<double> x(n);
    BOOST_TEST(hg_async_server_params(srv, x.data(), n - 1, HG_DEVICE_HOST) ==
               HG_ERROR_SIZE_MISMATCH);
    BOOST_REQUIRE_EQUAL(hg_async_server_params(srv, x.data(), n, HG_DEVICE_HOST), HG_OK);
    double e0 = 0, e = 0, worst = 0;
    const double contraction = std::pow(1 - gamma, static_cast<double>(updates));
    for (std::size_t i = 0; i < n; ++i) {
      e0 += (x0[i] - a[i]) * (x0[i] - a[i]);
      e += (x[i] - a[i]) * (x[i] - a[i]);
      worst = std::max(worst, std::abs((x[i] - a[i]) - contraction * (x0[i] - a[i])));
    }
    if (ranks() == 2) BOOST_TEST(worst <= 1e-12);
    else BOOST_TEST(std::sqrt(e) < 0.1 * std::sqrt(e0));
    BOOST_REQUIRE_EQUAL(hg_async_server_destroy(srv), HG_OK);
  } else {
    hg_async_worker wk = nullptr;
    BOOST_REQUIRE_EQUAL(hg_async_worker_create_mpi(&wk, world_f(), &ac, HG_FLOAT64, n), HG_OK);
    std::vector<double> x(n), g(n);
    std::int32_t job = 0;
    std::size_t jobs = 0;
    for (;;) {
      BOOST_REQUIRE_EQUAL(hg_async_worker_pull(wk, x.data(), n, HG_DEVICE_HOST, &job), HG_OK);
      if (!job) break;
      ++jobs;
      for (std::size_t i = 0; i < n; ++i) g[i] = x[i] - a[i];
      BOOST_REQUIRE_EQUAL(hg_async_worker_push(wk, g.data(), n, HG_DEVICE_HOST, nullptr), HG_OK);
    }
    BOOST_TEST(jobs >= 1u);
    // One worker: a job per update, and perhaps one more sent before the stop.
    if (ranks() == 2) BOOST_TEST((jobs == updates || jobs == updates + 1));
    BOOST_TEST(hg_async_worker_push(wk, g.data(), n, HG_DEVICE_HOST, nullptr) ==
               HG_ERROR_INVALID_ARGUMENT);  // stopped
    BOOST_REQUIRE_EQUAL(hg_async_worker_destroy(wk), HG_OK);
  }
}

// Issue 43: a worker of 2,000 floats against a server of 4,000, either way round. Before, the
// larger message was written past the smaller buffer (heap corruption on the server, or in
// the worker's pull). Now each worker's pull refuses the job payload naming both sizes and
// tells the server, whose run fails naming the worker and both dims; nothing is applied.
BOOST_AUTO_TEST_CASE(a_worker_and_a_server_of_different_sizes_fail_on_every_rank_naming_both) {
  for (auto [server_n, worker_n] : {std::pair<std::size_t, std::size_t>{4000, 2000}, {2000, 4000}}) {
    hg_async_config ac;
    hg_async_config_init(&ac);
    ac.max_updates = 5;
    ac.timeout_seconds = 30;
    if (rank() == 0) {
      hg_optimizer_config oc;
      hg_optimizer_config_init(&oc, HG_OPTIMIZER_SGD);
      const std::vector<float> x0(server_n, 0.0f);
      hg_async_server srv = nullptr;
      BOOST_REQUIRE_EQUAL(hg_async_server_create_mpi(&srv, world_f(), &oc, &ac, HG_FLOAT32, x0.data(),
                                                     server_n, HG_DEVICE_HOST),
                          HG_OK);
      std::uint64_t applied = 7;
      BOOST_TEST(hg_async_server_run(srv, &applied, nullptr) == HG_ERROR_COMMUNICATION);
      const std::string m = message();
      BOOST_TEST(m.find("refused its job: it holds " + std::to_string(worker_n) + " parameters, the server sends " +
                        std::to_string(server_n)) != std::string::npos, m);
      std::vector<float> x(server_n, 1.0f);
      BOOST_REQUIRE_EQUAL(hg_async_server_params(srv, x.data(), server_n, HG_DEVICE_HOST), HG_OK);
      BOOST_TEST(std::count(x.begin(), x.end(), 0.0f) == static_cast<long>(server_n));  // nothing applied
      BOOST_REQUIRE_EQUAL(hg_async_server_destroy(srv), HG_OK);
    } else {
      hg_async_worker wk = nullptr;
      BOOST_REQUIRE_EQUAL(hg_async_worker_create_mpi(&wk, world_f(), &ac, HG_FLOAT32, worker_n), HG_OK);
      std::vector<float> x(worker_n + 64, -3.0f);  // the pull writes the first worker_n at most
      std::int32_t job = 0;
      BOOST_TEST(hg_async_worker_pull(wk, x.data(), worker_n, HG_DEVICE_HOST, &job) == HG_ERROR_COMMUNICATION);
      const std::string m = message();
      BOOST_TEST(m.find("job payload: heterograd: comm: message from rank 0") != std::string::npos, m);
      BOOST_TEST(m.find("has " + std::to_string(4 * server_n) + " bytes (" + std::to_string(server_n) +
                        " f32), the receive expects exactly " + std::to_string(4 * worker_n) + " bytes") !=
                     std::string::npos, m);
      BOOST_TEST(std::count(x.begin(), x.end(), -3.0f) == static_cast<long>(x.size()));
      BOOST_REQUIRE_EQUAL(hg_async_worker_destroy(wk), HG_OK);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

BOOST_AUTO_TEST_SUITE_END()
