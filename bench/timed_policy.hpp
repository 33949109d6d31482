#pragma once
// A server policy with its on_arrival timed: the server's own update work, which the async
// suite's round-trip benchmarks subtract (bench/async_bench.cpp and, under mpirun,
// bench/compare/async_mpi_roundtrip.cpp).
#include <chrono>
#include <cstddef>
#include <cstdint>

template <class P>
struct timed_policy {
  P& p;
  double seconds = 0;  ///< wall seconds inside p.on_arrival so far
  std::size_t workers() const { return p.workers(); }
  std::size_t dim() const { return p.dim(); }
  std::uint64_t version() const { return p.version(); }
  auto params() const { return p.params(); }
  template <class Ctl, class A, class G>
  void on_arrival(Ctl& c, const A& a, G& g) {
    const auto t = std::chrono::steady_clock::now();
    p.on_arrival(c, a, g);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }
};
