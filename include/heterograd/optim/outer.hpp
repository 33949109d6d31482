#pragma once
// Outer optimizers of local SGD and federated learning. Workers start a round from the
// `anchor` parameters, train locally, and their results are averaged; the outer optimizer
// treats the pseudo-gradient  delta = anchor - average  as a gradient and updates the
// anchor with an ordinary transformation (Reddi et al. 2021, "Adaptive Federated
// Optimization", Alg. 2, whose Delta has the opposite sign and is added):
//   outer SGD, lr 1 (no momentum)            anchor <- average (FedAvg)
//   diloco_nesterov(lr 0.7, mu 0.9)          Nesterov momentum (Douillard et al. 2023, DiLoCo)
//   fedavgm(lr 1.0, mu 0.9)                  heavy-ball server momentum (Hsu et al. 2019)
//   fedadam(lr 1e-2, b1 0.9, b2 0.99, tau 1e-3)  Adam without bias correction, eps = tau
//                                            (Reddi et al. 2021)
// Bytes per element: the pseudo-gradient pass 3*sizeof(T), then the inner update.

#include <cstddef>
#include <string_view>
#include <type_traits>
#include <utility>

#include "heterograd/core/error.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/launch.hpp"
#include "heterograd/kernels/scratch.hpp"
#include "heterograd/optim/detail/base.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/optim/state.hpp"

namespace heterograd::optim {

template <class Inner>
class outer_optimizer {
 public:
  explicit outer_optimizer(Inner inner) : inner_(std::move(inner)) {}
  const Inner& inner() const { return inner_; }

  /// The outer state for an anchor like `anchor`.
  template <class Policy, class P>
  auto init(const Policy& policy, P&& anchor) const {
    return inner_.init(policy, std::forward<P>(anchor));
  }

  /// anchor <- inner step with gradient (anchor - average). Checks first; nothing is written
  /// when it throws. The pseudo-gradient goes to a scratch buffer (kernels::scratch).
  template <class Policy, class A, class T, class S, class P>
  void step(const Policy& policy, const A& average, state<T, S>& st, P&& anchor) const {
    auto avg = detail::as_span(average);
    auto x = detail::as_span(anchor);
    check(policy, avg, st, x);
    kernels::scratch<T, Policy> delta(policy, x.size());
    apply(policy, avg.data(), delta.data(), st, x);
  }
  /// The same with the pseudo-gradient written over `average` (average <- anchor - average),
  /// no scratch: for a caller that overwrites the average next, as local SGD's round does.
  /// Bitwise the same anchor and state as step().
  template <class Policy, class A, class T, class S, class P>
  void step_in_place(const Policy& policy, A&& average, state<T, S>& st, P&& anchor) const {
    auto avg = detail::as_span(average);
    auto x = detail::as_span(anchor);
    static_assert(!std::is_const_v<typename decltype(avg)::element_type>,
                  "step_in_place writes the pseudo-gradient over the average");
    check(policy, avg, st, x);
    apply(policy, avg.data(), avg.data(), st, x);
  }

 private:
  // The memory spaces (a mismatch throws, naming them), the sizes and the state.
  template <class Policy, class A, class T, class S, class X>
  void check(const Policy&, const A& avg, const state<T, S>& st, const X& x) const {
    using AS = typename A::memory_space;
    using XS = typename X::memory_space;
    if constexpr (!(std::is_same_v<AS, S> && std::is_same_v<XS, S> && exec::accessible_v<Policy, S>)) {
      throw std::invalid_argument(invalid_argument_message(
          "outer.memory spaces", std::string(AS::name) + "/" + S::name + "/" + XS::name,
          "average, state and anchor must share one memory space the policy can access"));
    } else {
      require_same_size("outer.average", avg.size(), "outer.anchor", x.size());
      inner_.check_state(st, x.size(), "outer");
    }
  }
  // delta <- anchor - average (element-wise: delta may be the average), then the inner step.
  template <class Policy, class T, class S, class X>
  void apply(const Policy& policy, const T* avg, T* delta, state<T, S>& st, const X& x) const {
    if constexpr (std::is_same_v<typename X::memory_space, S> && exec::accessible_v<Policy, S>) {
      const std::size_t n = x.size();
      kernels::launch(policy, n, detail::diff_body<T>{delta, x.data(), avg});
      inner_.apply_impl(policy, span<const T, S>(delta, n), st, span<T, S>(x.data(), n));
    }
  }

  Inner inner_;
};

/// DiLoCo's outer step: Nesterov momentum on the pseudo-gradient (Douillard et al. 2023:
/// outer lr 0.7, momentum 0.9).
inline outer_optimizer<nesterov> diloco_nesterov(double lr = 0.7, double momentum = 0.9) {
  return outer_optimizer<nesterov>(
      nesterov(momentum_config{.lr = lr, .momentum = momentum}));
}

/// FedAvgM: server heavy-ball momentum (Hsu et al. 2019: server lr 1, momentum 0.9).
inline outer_optimizer<optim::momentum> fedavgm(double lr = 1.0, double momentum = 0.9) {
  return outer_optimizer<optim::momentum>(
      optim::momentum(momentum_config{.lr = lr, .momentum = momentum}));
}

/// FedAdam: server Adam without bias correction, adaptivity tau as eps (Reddi et al. 2021).
inline outer_optimizer<optim::adam> fedadam(double lr = 1e-2, double beta1 = 0.9,
                                            double beta2 = 0.99, double tau = 1e-3) {
  return outer_optimizer<optim::adam>(optim::adam(adam_config{
      .lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = tau, .bias_correction = false}));
}

/// Plain outer SGD (lr 1 is FedAvg: the anchor becomes the average).
inline outer_optimizer<optim::sgd> outer_sgd(double lr = 1.0) {
  return outer_optimizer<optim::sgd>(optim::sgd(sgd_config{.lr = lr}));
}

}  // namespace heterograd::optim
