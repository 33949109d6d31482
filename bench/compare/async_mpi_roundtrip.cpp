// The MPI runtime's push/pull round trip (issue 6) and its server's update rate (issue 19),
// run under mpirun by bench/compare/async_peers.sh.
//
//   (no argument), -np 2: rank 0 serves vanilla ASGD on m floats, rank 1 pushes a constant
//     gradient and pulls the model back, through runtime::worker_client over heterograd's mpi
//     transport. One round trip = push (header + m floats) + the server's update (the policy's
//     on_arrival: finite screen + SGD, timed around the call) + pull (header + m floats).
//     Reference: a raw MPI_Send / MPI_Recv ping-pong of m floats each way, same process pair.
//     Prints {"name", "floats", "seconds"} lines (seconds per round trip) from rank 0:
//     hg_async, hg_async_update (the on_arrival part of hg_async), raw_pingpong.
//   server, -np N+1: the parameter server of vanilla ASGD on 1M floats with N workers
//     (runtime::run_remote, real-time order, gradients made once and reused), and the bare
//     update (model_server::apply cycling over 16 gradients, as BM_server_apply) on rank 0
//     beforehand while the workers wait in heterograd's barrier (which sleeps between polls).
//     Prints {"name": "hg_mpi_server", "workers", "floats", "updates_per_second",
//     "bare_updates_per_second", "bytes_per_update"}.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "heterograd/algorithms/async.hpp"
#include "heterograd/comm/mpi.hpp"
#include "heterograd/runtime/server.hpp"
#include "../timed_policy.hpp"

namespace async = heterograd::algorithms::async;
namespace hr = heterograd::runtime;

namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

auto asgd_on(std::size_t workers, std::size_t m) {
  return async::asgd(workers, async::model_server<float>(std::vector<float>(m, 0.0f), async::plain_sgd(1e-6)));
}

void roundtrip(const heterograd::comm::mpi::communicator& c) {
  for (std::size_t m : {std::size_t{1} << 10, std::size_t{1} << 16, std::size_t{1} << 20}) {
    const std::uint64_t updates = m >= (std::size_t{1} << 20) ? 200 : 2000;
    // heterograd: server + worker helper.
    auto inner = asgd_on(1, m);
    timed_policy<decltype(inner)> p{inner};
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = clock_type::now();
    if (c.rank() == 0) {
      hr::serve<float>(p, c, {.max_updates = updates});
    } else {
      hr::worker_client<float, heterograd::comm::mpi::communicator> w(c, m);
      std::vector<float> x(m), g(m, 1.0f);
      while (w.pull(heterograd::span<float>(x.data(), m))) w.push(heterograd::span<const float>(g.data(), m));
    }
    const double hg = since(t0);
    // Raw ping-pong of the same payloads, each side receiving into one buffer and sending
    // from another (gradient in and model out on the server, the reverse on the worker).
    std::vector<float> in(m, 1.0f), out(m, 1.0f);
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t1 = clock_type::now();
    for (std::uint64_t i = 0; i < updates; ++i) {
      if (c.rank() == 0) {
        MPI_Recv(in.data(), static_cast<int>(m), MPI_FLOAT, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(out.data(), static_cast<int>(m), MPI_FLOAT, 1, 8, MPI_COMM_WORLD);
      } else if (c.rank() == 1) {
        MPI_Send(out.data(), static_cast<int>(m), MPI_FLOAT, 0, 7, MPI_COMM_WORLD);
        MPI_Recv(in.data(), static_cast<int>(m), MPI_FLOAT, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
    }
    const double raw = since(t1);
    if (c.rank() == 0) {
      const double n = static_cast<double>(updates);
      std::printf("{\"name\": \"hg_async\", \"floats\": %zu, \"seconds\": %.9g}\n", m, hg / n);
      std::printf("{\"name\": \"hg_async_update\", \"floats\": %zu, \"seconds\": %.9g}\n", m, p.seconds / n);
      std::printf("{\"name\": \"raw_pingpong\", \"floats\": %zu, \"seconds\": %.9g}\n", m, raw / n);
      std::fflush(stdout);
    }
  }
}

void server(const heterograd::comm::mpi::communicator& c) {
  constexpr std::size_t m = std::size_t{1} << 20;
  constexpr std::uint64_t updates = 1024;
  const auto workers = static_cast<std::size_t>(c.size() - 1);
  double bare = 0;
  if (c.rank() == 0) {
    async::model_server<float> s(std::vector<float>(m, 0.5f), async::plain_sgd(1e-6));
    std::vector<std::vector<float>> g;
    for (std::size_t w = 0; w < 16; ++w) g.emplace_back(m, 1e-3f * static_cast<float>(w + 1));
    for (std::size_t i = 0; i < 16; ++i) s.apply(heterograd::span<const float>(g[i]));  // warm
    constexpr int n = 256;
    const auto t = clock_type::now();
    for (int i = 0; i < n; ++i) s.apply(heterograd::span<const float>(g[static_cast<std::size_t>(i) % 16]));
    bare = n / since(t);
  }
  c.barrier().wait();
  auto p = asgd_on(workers, m);
  auto compute = [](async::worker_id w, std::uint64_t, std::uint64_t, heterograd::span<const float>,
                    std::vector<float>& g) {
    if (g.size() != m) g.assign(m, 1e-3f * static_cast<float>(w + 1));
  };
  c.barrier().wait();
  const auto t = clock_type::now();
  hr::run_remote<float>(p, c, compute, {.max_updates = updates});
  const double wall = since(t);
  if (c.rank() == 0) {
    std::printf("{\"name\": \"hg_mpi_server\", \"workers\": %zu, \"floats\": %zu, "
                "\"updates_per_second\": %.9g, \"bare_updates_per_second\": %.9g, "
                "\"bytes_per_update\": %.9g}\n",
                workers, m, static_cast<double>(p.version()) / wall, bare, 32.0 * m);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  {
    heterograd::comm::mpi::communicator c(MPI_COMM_WORLD);
    if (argc > 1 && std::strcmp(argv[1], "server") == 0)
      server(c);
    else
      roundtrip(c);
  }
  MPI_Finalize();
}
