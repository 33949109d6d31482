#pragma once
// A server policy written outside the library (no library header names it): the runtime
// tests run it under every runtime (tests/runtime/toy_policy_test.cpp), and the driver tests
// give it to heterograd-run as one registry row (tests/driver/toy_row_test.cpp).
#include <cstddef>
#include <cstdint>
#include <utility>

#include "heterograd/algorithms/async/server.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/runtime/concepts.hpp"

namespace hg_test {

// The toy: every gradient is applied at once, with step lr / (1 + delay) (lr: the server's
// optimizer's).
template <class T = double, class O = heterograd::algorithms::async::default_optimizer>
class damped_asgd {
 public:
  damped_asgd(std::size_t workers, heterograd::algorithms::async::model_server<T, O> server)
      : n_(workers), server_(std::move(server)) {}

  std::uint64_t version() const { return server_.version(); }
  std::size_t workers() const { return n_; }
  std::size_t dim() const { return server_.dim(); }
  heterograd::span<const T> params() const { return server_.params(); }

  template <class Ctl, class G>
  void on_arrival(Ctl& ctl, const heterograd::runtime::arrival& a, const G& g) {
    const std::uint64_t delay = server_.version() - a.version;
    server_.apply(heterograd::span<const T>(g.data(), g.size()), 1.0 / (1.0 + static_cast<double>(delay)));
    ctl.applied(a.worker, delay);
  }

 private:
  std::size_t n_;
  heterograd::algorithms::async::model_server<T, O> server_;
};

}  // namespace hg_test
