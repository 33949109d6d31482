#pragma once
// The algorithms under test (issue 44): one list per family, which every property test
// iterates (Optax's habit of one suite over every optimizer). A new server policy of
// algorithms/async adds one row to `server_policies`; the memory paths
// (tests/async/memory_test.cpp) and the concepts (tests/runtime/concepts_test.cpp) then
// cover it, and `under_test_lists_every_policy` (cmake/check_under_test.py) fails while a
// policy class of include/heterograd/algorithms/async/ has no row here. A round method of
// algorithms/sync is one entry of `collective_round_methods` or `partial_round_methods`,
// which the same check asks of every class deriving from sync::detail::replicated.
//
// Each row builds its policy over any model server (any T, optimizer, memory), with
// constructor arguments that exercise the policy: a batch, buffer or threshold that is
// reached within a few arrivals, the adaptive variant of a policy that has one.

#include <cstddef>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "heterograd/algorithms/async.hpp"
#include "heterograd/algorithms/sync/bsp.hpp"
#include "heterograd/algorithms/sync/eager.hpp"
#include "heterograd/algorithms/sync/local_sgd.hpp"
#include "heterograd/algorithms/sync/selsync.hpp"

namespace hg_test {

namespace under_test_detail {

namespace async = heterograd::algorithms::async;

/// One row: the name tests print, and how to build the policy from (workers, server).
template <class Make>
struct policy_row {
  const char* name;
  Make make;
};
template <class Make>
policy_row(const char*, Make) -> policy_row<Make>;

/// Naive Optimal ASGD's per-worker times: 1, 2, 3, 5, 8, ... (distinct, so that m* < n).
inline std::vector<double> distinct_times(std::size_t n) {
  std::vector<double> tau;
  for (double a = 1.0, b = 2.0; tau.size() < n; b = a + b, a = b - a) tau.push_back(a);
  return tau;
}

/// The server policies of algorithms/async, one row each (two for DC-ASGD's variants).
/// Host compilers only: nvcc 12's host pass (cudafe++) leaves a closure type incomplete
/// where policy_row<closure> is instantiated, so tests/support/device_paths.cu keeps its own
/// list.
// clang-format off
inline const auto server_policies = std::tuple{
    policy_row{"asgd", [](std::size_t n, auto s) { return async::asgd(n, std::move(s)); }},
    policy_row{"delay-adaptive", [](std::size_t n, auto s) {
      return async::delay_adaptive_asgd(n, std::move(s)); }},
    policy_row{"staleness-scaled", [](std::size_t n, auto s) {
      return async::staleness_scaled_asgd(n, std::move(s)); }},
    policy_row{"ringmaster", [](std::size_t n, auto s) {
      return async::ringmaster_asgd(n, std::move(s), {.threshold = 2}); }},
    policy_row{"rennala", [](std::size_t n, auto s) {
      return async::rennala_sgd(n, std::move(s), {.batch = 3}); }},
    policy_row{"rescaled", [](std::size_t n, auto s) {
      return async::rescaled_asgd(n, std::move(s)); }},
    policy_row{"ia2sgd", [](std::size_t n, auto s) { return async::ia2sgd(n, std::move(s)); }},
    policy_row{"malenia", [](std::size_t n, auto s) {
      return async::malenia_sgd(n, std::move(s), {.threshold = 1.5}); }},
    policy_row{"ringleader", [](std::size_t n, auto s) {
      return async::ringleader_asgd(n, std::move(s)); }},
    policy_row{"ssp", [](std::size_t n, auto s) { return async::ssp_server(n, std::move(s)); }},
    policy_row{"dssp", [](std::size_t n, auto s) { return async::dssp_server(n, std::move(s)); }},
    policy_row{"dc-asgd", [](std::size_t n, auto s) { return async::dc_asgd(n, std::move(s)); }},
    policy_row{"dc-asgd-a", [](std::size_t n, auto s) {
      return async::dc_asgd(n, std::move(s), {.adaptive = true}); }},
    policy_row{"fedbuff", [](std::size_t n, auto s) {
      return async::fedbuff(n, std::move(s), {.buffer = 3}); }},
    policy_row{"naive optimal", [](std::size_t n, auto s) {
      return async::naive_optimal_asgd(n, std::move(s),
                                       {.tau = distinct_times(n), .active = n < 3 ? n : 3}); }},
    policy_row{"omnilearn asp", [](std::size_t n, auto s) {
      return async::omnilearn_asgd(n, std::move(s), std::vector<std::size_t>(n, 32),
                                   {.rebalance_every = 3}); }},
};
// clang-format on

}  // namespace under_test_detail

using under_test_detail::server_policies;

/// f(make, name) for each server policy under test, where make(server) builds the policy
/// over `n` workers and that model server (for a test that builds several per row).
template <class F>
void for_each_server_policy_maker(std::size_t n, F&& f) {
  std::apply(
      [&](const auto&... row) {
        (f([n, &row](auto server) { return row.make(n, std::move(server)); }, row.name), ...);
      },
      server_policies);
}

/// f(policy, name) for each server policy under test, over `n` workers and a fresh
/// `make_server()` each.
template <class MakeServer, class F>
void for_each_server_policy(std::size_t n, MakeServer&& make_server, F&& f) {
  for_each_server_policy_maker(n,
                               [&](auto make, const char* name) { f(make(make_server()), name); });
}

namespace under_test_detail {
template <class Server, class Rows>
struct policy_types_of;
template <class Server, class... Rows>
struct policy_types_of<Server, std::tuple<Rows...>> {
  using type = std::tuple<decltype(std::declval<const Rows&>().make(std::size_t{},
                                                                    std::declval<Server>()))...>;
};
}  // namespace under_test_detail

/// The types of the rows over a model server type `Server`, in the rows' order (the same
/// source as for_each_server_policy: a row cannot be in one and not the other).
template <class Server>
using server_policy_types = typename under_test_detail::policy_types_of<
    Server, std::remove_const_t<decltype(server_policies)>>::type;

/// The round methods of algorithms/sync that take a collective exchange (the one round
/// contract, docs/architecture.md), over element T, an optimizer and a gradient oracle.
template <class T, class Optimizer, class Grad>
using collective_round_methods =
    std::tuple<heterograd::algorithms::sync::bsp<T, Optimizer, Grad>,
               heterograd::algorithms::sync::local_sgd<T, Optimizer, Grad>,
               heterograd::algorithms::sync::selsync<T, Optimizer, Grad>>;
/// Those that take a partial exchange (a rank's job end is its arrival).
template <class T, class Optimizer, class Grad>
using partial_round_methods =
    std::tuple<heterograd::algorithms::sync::eager_sgd<T, Optimizer, Grad>>;

}  // namespace hg_test
