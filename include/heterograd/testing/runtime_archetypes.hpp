#pragma once
// Minimal archetypes for the runtime concepts (heterograd/runtime/concepts.hpp): copy
// server_policy_archetype to start an asynchronous policy, round_method_archetype to start a
// round method. The positive ones run under the drivers (tests/runtime); the negative ones
// each miss or mistype one requirement, and the concept must reject them.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "heterograd/core/span.hpp"
#include "heterograd/runtime/concepts.hpp"

namespace heterograd::testing {

// ---- asynchronous family ------------------------------------------------------------------

/// The least control handle an asynchronous policy may rely on (it steers nothing).
struct async_control_archetype {
  double now() const { return 0.0; }
  std::size_t workers() const { return 1; }
  bool busy(runtime::worker_id) const { return false; }
  bool waiting(runtime::worker_id) const { return false; }
  std::uint64_t version_of(runtime::worker_id) const { return 0; }
  void restart(runtime::worker_id) {}
  void hold(runtime::worker_id) {}
  void release(runtime::worker_id) {}
  void interrupt(runtime::worker_id) {}
  void applied(runtime::worker_id, std::uint64_t) {}
  void buffered(runtime::worker_id, std::uint64_t) {}
  void discarded(runtime::worker_id, std::uint64_t) {}
};

/// Not an asynchronous control: no interrupt (calculation stops could not be written). The
/// archetype with interrupt deleted, so that only it is missing.
struct not_an_async_control_no_interrupt : async_control_archetype {
  void interrupt(runtime::worker_id) = delete;
};

/// Not an asynchronous control: version_of answers a name, not a model version.
struct not_an_async_control_version_is_text : async_control_archetype {
  std::string version_of(runtime::worker_id) const { return "v0"; }
};

/// The least server policy: plain SGD with step 1 on a model of `dim` elements; every
/// arriving gradient is applied, its staleness reported.
template <class T = float>
struct server_policy_archetype {
  std::size_t n = 1;
  std::vector<T> x = std::vector<T>(1, T(0));
  std::uint64_t k = 0;

  std::uint64_t version() const { return k; }
  std::size_t workers() const { return n; }
  std::size_t dim() const { return x.size(); }
  span<const T> params() const { return span<const T>(x.data(), x.size()); }
  template <class Ctl, class G>
  void on_arrival(Ctl& ctl, const runtime::arrival& a, const G& g) {
    for (std::size_t j = 0; j < x.size(); ++j) x[j] -= g[j];
    ctl.applied(a.worker, k - a.version);
    ++k;
  }
};

/// Not an asynchronous policy: no version (the runtime could not stamp a job's model).
struct not_an_async_policy_no_version {
  template <class Ctl, class G>
  void on_arrival(Ctl&, const runtime::arrival&, const G&) {}
};

/// Not an asynchronous policy: on_arrival takes a worker index, not the arrival record.
struct not_an_async_policy_takes_a_worker {
  std::uint64_t version() const { return 0; }
  template <class Ctl, class G>
  void on_arrival(Ctl&, runtime::worker_id, const G&) {}
};

/// An asynchronous policy, but not a server policy: no params() (the server could not send a
/// job its model).
struct not_a_server_policy_no_params {
  std::uint64_t version() const { return 0; }
  std::size_t workers() const { return 1; }
  std::size_t dim() const { return 1; }
  template <class Ctl, class G>
  void on_arrival(Ctl&, const runtime::arrival&, const G&) {}
};

/// Not a server policy: its optional ready(t) answers nothing the server can test.
struct not_a_server_policy_ready_is_void : server_policy_archetype<float> {
  void ready(double) {}
};

// ---- round family -------------------------------------------------------------------------

/// The least control handle a round policy may rely on.
struct round_control_archetype {
  double now() const { return 0.0; }
  std::size_t workers() const { return 1; }
  std::uint64_t round() const { return 0; }
  void applied(runtime::worker_id, std::uint64_t) {}
  void buffered(runtime::worker_id, std::uint64_t) {}
  void discarded(runtime::worker_id, std::uint64_t) {}
};

/// Not a round control: no round() (a policy could not tell rounds apart). The archetype
/// with round() deleted, so that only it is missing.
struct not_a_round_control_no_round : round_control_archetype {
  std::uint64_t round() const = delete;
};

/// The least round method, with double contributions: each worker contributes its index + 1
/// and the round's end sums them into `total`; every contribution is applied (staleness 0).
struct round_method_archetype {
  double total = 0;
  std::uint64_t rounds_done = 0;
  std::uint64_t limit = 0;

  void compute(runtime::worker_id w, std::uint64_t, std::uint64_t, double& out) {
    out = static_cast<double>(w) + 1.0;
  }
  template <class Ctl>
  void on_round(Ctl& ctl, std::uint64_t, std::vector<double>& contributions) {
    for (std::size_t w = 0; w < contributions.size(); ++w) {
      total += contributions[w];
      ctl.applied(static_cast<runtime::worker_id>(w), 0);
    }
    ++rounds_done;
  }
  void limit_rounds(std::uint64_t r) { limit = r; }
};

/// Not a round policy: on_round takes one contribution, not the round's vector of them.
struct not_a_round_policy_one_contribution {
  template <class Ctl>
  void on_round(Ctl&, std::uint64_t, double&) {}
};

/// Not a round policy: its optional batch(w) answers text, not a batch size.
struct not_a_round_policy_batch_is_text : round_method_archetype {
  std::string batch(runtime::worker_id) const { return "32"; }
};

/// A round policy, but not a round method: no limit_rounds (run_rounds could not stop it).
struct not_a_round_method_no_limit {
  void compute(runtime::worker_id, std::uint64_t, std::uint64_t, double&) {}
  template <class Ctl>
  void on_round(Ctl&, std::uint64_t, std::vector<double>&) {}
};

static_assert(runtime::async_control<async_control_archetype>);
static_assert(!runtime::async_control<not_an_async_control_no_interrupt>);
static_assert(!runtime::async_control<not_an_async_control_version_is_text>);
static_assert(runtime::server_policy<server_policy_archetype<float>, float,
                                     async_control_archetype>);
static_assert(!runtime::async_policy<server_policy_archetype<float>, std::vector<float>,
                                     not_an_async_control_no_interrupt>);
static_assert(!runtime::async_policy<not_an_async_policy_no_version, std::vector<float>,
                                     async_control_archetype>);
static_assert(!runtime::async_policy<not_an_async_policy_takes_a_worker, std::vector<float>,
                                     async_control_archetype>);
static_assert(runtime::async_policy<not_a_server_policy_no_params, std::vector<float>,
                                    async_control_archetype>);
static_assert(!runtime::server_policy<not_a_server_policy_no_params, float,
                                      async_control_archetype>);
static_assert(!runtime::server_policy<not_a_server_policy_ready_is_void, float,
                                      async_control_archetype>);
static_assert(runtime::round_control<round_control_archetype>);
static_assert(!runtime::round_control<not_a_round_control_no_round>);
static_assert(runtime::round_method<round_method_archetype, double, round_control_archetype>);
static_assert(!runtime::round_policy<round_method_archetype, double,
                                     not_a_round_control_no_round>);
static_assert(!runtime::round_policy<not_a_round_policy_one_contribution, double,
                                     round_control_archetype>);
static_assert(!runtime::round_policy<not_a_round_policy_batch_is_text, double,
                                     round_control_archetype>);
static_assert(runtime::round_policy<not_a_round_method_no_limit, double,
                                    round_control_archetype>);
static_assert(!runtime::round_method<not_a_round_method_no_limit, double,
                                     round_control_archetype>);

}  // namespace heterograd::testing
