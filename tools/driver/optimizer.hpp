#pragma once
// The configured optimizer, chosen at run time: one type (any_optimizer) that every policy is
// instantiated with once, whichever of the seven optimizers a method names. Instantiating each
// policy per optimizer would multiply the driver's build time by seven (run_async.cpp alone
// took ~100 s with two). The erasure costs one virtual call per update, next to a pass over
// the whole parameter buffer.
//
// The state is the wrapped optimizer's own optim::state<float> (its kind, count and slots),
// so policies save and load it exactly as they do for the optimizer itself: checkpoints of
// sgd and momentum runs are the bytes they were before the erasure, and so are the updates
// (the same fused kernel on the same execution policy).
//
// The kinds and their hyper-parameter structs are listed once (optimizer_kinds); the schema
// (config.cpp) and the factory (make_optimizer) both read that list, and the fields, defaults
// and rules come from the structs' descriptions (kernels/hyperparameters.hpp).

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <thrust/system/cpp/execution_policy.h>
#if defined(_OPENMP)
#include <thrust/system/omp/execution_policy.h>
#endif

#include "described.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/optim/concepts.hpp"
#include "heterograd/optim/optimizers.hpp"

namespace hgrun {

/// Any optim:: optimizer over host buffers of T (float; double for data.precision float64),
/// with the sequential or (under OpenMP) the OpenMP policy: the two the policies of
/// algorithms/ call it with.
template <class T>
class any_optimizer_t {
  using seq_policy = std::remove_cvref_t<decltype(thrust::cpp::par)>;
#if defined(_OPENMP)
  using omp_policy = std::remove_cvref_t<decltype(thrust::omp::par)>;
#endif
  using state_type = heterograd::optim::state<T>;
  using grads = heterograd::span<const T>;
  using params = heterograd::span<T>;

  struct base {
    virtual ~base() = default;
    virtual std::string_view kind() const = 0;
    virtual state_type init(params p) const = 0;
    virtual void check_state(const state_type& st, std::size_t n, std::string_view where) const = 0;
    virtual void update_seq(grads g, state_type& st, params p) const = 0;
#if defined(_OPENMP)
    virtual void update_omp(grads g, state_type& st, params p) const = 0;
#endif
  };
  template <class O>
  struct model final : base {
    O o;
    explicit model(O x) : o(std::move(x)) {}
    std::string_view kind() const override { return O::name(); }
    state_type init(params p) const override { return o.init(thrust::cpp::par, p); }
    void check_state(const state_type& st, std::size_t n, std::string_view where) const override {
      o.check_state(st, n, where);
    }
    void update_seq(grads g, state_type& st, params p) const override {
      o.update(thrust::cpp::par, g, st, p);
    }
#if defined(_OPENMP)
    void update_omp(grads g, state_type& st, params p) const override {
      o.update(thrust::omp::par, g, st, p);
    }
#endif
  };

 public:
  template <heterograd::optim::optimizer O>
  explicit any_optimizer_t(O o) : impl_(std::make_shared<const model<O>>(std::move(o))) {}

  static constexpr std::string_view name() {
    return "any_optimizer";
  }
  /// The wrapped optimizer's name (sgd, momentum, ...).
  std::string_view kind() const {
    return impl_->kind();
  }

  template <class Policy>
  state_type init(const Policy&, params p) const {
    return impl_->init(p);
  }
  /// The wrapped optimizer's state check (kind, slots and their sizes for n parameters).
  void check_state(const state_type& st, std::size_t n, std::string_view where) const {
    impl_->check_state(st, n, where);
  }
  template <class Policy>
  void update(const Policy&, grads g, state_type& st, params p) const {
    using P = std::remove_cvref_t<Policy>;
    if constexpr (std::is_same_v<P, seq_policy>) {
      impl_->update_seq(g, st, p);
#if defined(_OPENMP)
    } else if constexpr (std::is_same_v<P, omp_policy>) {
      impl_->update_omp(g, st, p);
#endif
    } else {
      static_assert(std::is_same_v<P, seq_policy>,
                    "any_optimizer: a host policy (cpp or omp) only");
    }
  }

 private:
  // Shared, never mutated: copies (every replica of a round method holds one) are cheap.
  std::shared_ptr<const base> impl_;
};

/// The float32 optimizer every method runs with unless data.precision is float64.
using any_optimizer = any_optimizer_t<float>;

/// Calls f(name, type tag of the optimizer, its hyper-parameters' defaults as numbers) for
/// each optimizer the driver offers, in the order the schema lists them. The defaults are
/// each optimizer's own (adamw's weight decay is 0.01, its default value).
template <class F>
void for_each_optimizer_kind(F&& f) {
  namespace ho = heterograd::optim;
  namespace hk = heterograd::kernels;
  f(ho::sgd::name(), std::type_identity<ho::sgd>{}, hk::sgd_config<double>{});
  f(ho::momentum::name(), std::type_identity<ho::momentum>{}, hk::momentum_config<double>{});
  f(ho::nesterov::name(), std::type_identity<ho::nesterov>{}, hk::momentum_config<double>{});
  f(ho::adam::name(), std::type_identity<ho::adam>{}, hk::adam_config<double>{});
  hk::adam_config<double> adamw;
  adamw.lr = ho::adamw().params().lr.value;
  adamw.weight_decay = ho::adamw().params().weight_decay;
  f(ho::adamw::name(), std::type_identity<ho::adamw>{}, adamw);
  f(ho::adagrad::name(), std::type_identity<ho::adagrad>{}, hk::adagrad_config<double>{});
  f(ho::lamb::name(), std::type_identity<ho::lamb>{}, hk::lamb_config<double>{});
}

/// The resolved optimizer object of a method ({"kind": ..., its hyper-parameters}), over T.
template <class T = float>
any_optimizer_t<T> make_optimizer(const json& o) {
  const std::string kind = o.at("kind").get<std::string>();
  std::unique_ptr<any_optimizer_t<T>> made;
  for_each_optimizer_kind([&](std::string_view name, auto tag, auto defaults) {
    if (made || name != kind) return;
    using O = typename decltype(tag)::type;
    const auto numbers = from_json(o, defaults);
    // The same struct with a constant schedule for the learning rate: the fields pair up.
    auto p = O().params();
    copy_fields(numbers, p);
    made = std::make_unique<any_optimizer_t<T>>(O(std::move(p)));
  });
  if (!made)
    throw std::logic_error("make_optimizer: optimizer.kind \"" + kind + "\" has no factory");
  return *made;
}

}  // namespace hgrun
