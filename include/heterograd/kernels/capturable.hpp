#pragma once
// Capturable updates: the step count and the step's coefficients (learning rate from its
// schedule, bias corrections) live in device memory, in a small buffer of
// capturable_words<W> elements that the caller keeps with the optimizer state. Each call
// launches a one-thread prologue that increments the count and computes the coefficients
// there (in double, rounded to W, exactly as the host path does), then the update body,
// which reads them from that buffer. Nothing is read back and nothing is allocated, so under
// a policy that does not wait (thrust::cuda::par_nosync.on(stream)) a whole step can be
// captured in a CUDA graph and replayed, as PyTorch's `capturable=True`. The multi-tensor
// version runs the prologue once, then its usual single launch per batch of tensors, whose
// task list travels in the kernel's parameters (no host-to-device copy).
//
// words[0] is the number of steps applied, as W: a float count is exact up to 2^24
// (16.7 million steps; PyTorch keeps its capturable step in float32 too); words[1..] the
// coefficients of the last step. Start it at zero (the state's init does).
//
// On the host backends the same two launches run; the results are bitwise those of the
// host-coefficient kernels (updates.hpp, mixed.hpp). On a GPU the prologue's pow/cos are the
// device's, which may differ from the host's in the last bit of a double before rounding to
// float.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "heterograd/core/config.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/detail/multi_launch.hpp"
#include "heterograd/kernels/hyperparameters.hpp"
#include "heterograd/kernels/launch.hpp"
#include "heterograd/kernels/mixed.hpp"
#include "heterograd/kernels/multi_tensor.hpp"
#include "heterograd/kernels/updates.hpp"

namespace heterograd::kernels {

/// Elements of a capturable update's device buffer of type W: the count, then room for the
/// largest optimizer's coefficients (Adam's).
template <class W>
inline constexpr std::size_t capturable_words =
    1 + (std::max({sizeof(detail::sgd_math<W, true>), sizeof(detail::momentum_math<W, true>),
                   sizeof(detail::adam_coeffs<W>), sizeof(detail::adagrad_math<W>)}) +
         sizeof(W) - 1) /
            sizeof(W);

namespace detail {

/// words[0] += 1; words[1..] = make(words[0]).
template <class W, class Maker>
struct prologue_body {
  W* words;
  Maker make;
  HG_HOST_DEVICE void operator()(std::size_t) const {
    const W t = words[0] + W(1);
    words[0] = t;
    *reinterpret_cast<made_t<Maker, W>*>(words + 1) = make(static_cast<std::int64_t>(t));
  }
};

/// Where the prologue writes the coefficients (after the count).
template <class Maker, class W, class Space>
const made_t<Maker, W>* coefficients_in(span<W, Space> words) {
  return reinterpret_cast<const made_t<Maker, W>*>(words.data() + 1);
}

template <class W, class Space>
void check_words(const char* kernel, span<W, Space> words) {
  require_same_size(std::string(kernel) + ".words", words.size(), "capturable_words",
                    capturable_words<W>);
}

/// The prologue, then the update body reading the coefficients it wrote. Checks first.
template <class Policy, class Maker, class P, class G, class W, class Space>
void run_capturable(const Policy& policy, const char* kernel, const Maker& make,
                    span<W, Space> words, span<P, Space> params, span<const G, Space> grads,
                    span<W, Space> w, span<W, Space> s0, span<W, Space> s1, W grad_scale) {
  static_assert(exec::accessible_v<Policy, Space>,
                "the execution policy cannot access this span's memory space");
  static_assert(std::is_trivially_copyable_v<Maker>,
                "a capturable update's configuration must be trivially copyable");
  using M = made_t<Maker, W>;
  check_words(kernel, words);
  check_update<M>(kernel, params, grads, w, s0, s1);
  launch_plain(policy, 1, prologue_body<W, Maker>{words.data(), make});
  launch_update(policy, coeffs_ref<M>{coefficients_in<Maker>(words)}, params, grads, w, s0, s1,
                grad_scale);
}

}  // namespace detail

// Full precision: params, grads, state and words of one type T. The options' `step` is not
// used: the step is the count in `words` plus one.

/// SGD, capturable. 12 B/element (float) plus the prologue.
template <class Policy, class T, class Space, class Lr = double>
void sgd_capturable(const Policy& policy, span<T, Space> params,
                    std::type_identity_t<span<const T, Space>> grads, span<T, Space> words,
                    const sgd_config<Lr>& a) {
  detail::with_sgd_maker<T>(a, [&](const auto& mk) {
    detail::run_capturable(policy, "sgd_capturable", mk, words, params, grads, params, {}, {},
                           T(1));
  });
}

/// Heavy-ball or Nesterov momentum, capturable. 20 B/element (float).
template <class Policy, class T, class Space, class Lr = double>
void momentum_capturable(const Policy& policy, span<T, Space> params,
                         std::type_identity_t<span<const T, Space>> grads,
                         span<T, Space> velocity, span<T, Space> words,
                         const momentum_config<Lr>& a, const momentum_options& o = {}) {
  detail::with_momentum_maker<T>(a, o.nesterov, [&](const auto& mk) {
    detail::run_capturable(policy, "momentum_capturable", mk, words, params, grads, params,
                           velocity, {}, T(1));
  });
}

/// Adam / AdamW, capturable: bias corrections computed on the device. 28 B/element (float).
template <class Policy, class T, class Space, class Lr = double>
void adam_capturable(const Policy& policy, span<T, Space> params,
                     std::type_identity_t<span<const T, Space>> grads, span<T, Space> m,
                     span<T, Space> v, span<T, Space> words, const adam_config<Lr>& a,
                     const adam_options& o = {}) {
  detail::run_capturable(policy, "adam_capturable",
                         detail::adam_maker<T, Lr>{a, o.decoupled_weight_decay}, words, params,
                         grads, params, m, v, T(1));
}

/// Adagrad, capturable. 20 B/element (float).
template <class Policy, class T, class Space, class Lr = double>
void adagrad_capturable(const Policy& policy, span<T, Space> params,
                        std::type_identity_t<span<const T, Space>> grads, span<T, Space> sum_sq,
                        span<T, Space> words, const adagrad_config<Lr>& a) {
  detail::run_capturable(policy, "adagrad_capturable", detail::adagrad_maker<T, Lr>{a}, words,
                         params, grads, params, sum_sq, {}, T(1));
}

/// Adam / AdamW over a list of tensors, capturable: one prologue, then one parallel region /
/// one launch per batch of tensors (multi_tensor.hpp), all reading the same coefficients.
template <class Policy, class T, class Space, class Lr = double>
void multi_tensor_adam_capturable(const Policy& policy,
                                  std::span<const adam_tensor<T, Space>> list,
                                  span<T, Space> words, const adam_config<Lr>& a,
                                  const adam_options& o = {}) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  using maker = detail::adam_maker<T, Lr>;
  using src = detail::coeffs_ref<detail::adam_coeffs<T>>;
  using body = detail::update_body<src, T, T, T>;
  detail::check_words("multi_tensor_adam_capturable", words);
  const src c{detail::coefficients_in<maker>(words)};
  std::vector<tensor_task<body>> tasks;
  tasks.reserve(list.size());
  for (std::size_t k = 0; k < list.size(); ++k) {
    const auto& t = list[k];
    const std::size_t n = t.params.size();
    require_same_size(detail::tensor_name("multi_tensor_adam_capturable", "grads", k),
                      t.grads.size(), "params", n);
    require_same_size(detail::tensor_name("multi_tensor_adam_capturable", "m", k), t.m.size(),
                      "params", n);
    require_same_size(detail::tensor_name("multi_tensor_adam_capturable", "v", k), t.v.size(),
                      "params", n);
    tasks.push_back({{t.params.data(), t.grads.data(), t.params.data(), t.m.data(), t.v.data(), c,
                      T(1)},
                     n,
                     detail::line_offset_of(t.params.data())});
  }
  launch_plain(policy, 1,
               detail::prologue_body<T, maker>{words.data(), maker{a, o.decoupled_weight_decay}});
  detail::launch_multi(policy, std::span<const tensor_task<body>>(tasks));
}

// Mixed precision (mixed.hpp): 16-bit params, grads of their type or float, fp32 master,
// state and words.

template <class Policy, class P, class G, class Space, class Lr = double>
void sgd_capturable(const Policy& policy, span<P, Space> params, span<const G, Space> grads,
                    span<float, Space> master, span<float, Space> words, const sgd_config<Lr>& a,
                    const mixed_options& mo = {}) {
  detail::check_mixed_types<P, G>();
  detail::with_sgd_maker<float>(a, [&](const auto& mk) {
    detail::run_capturable(policy, "sgd_capturable", mk, words, params, grads, master, {}, {},
                           mo.grad_scale);
  });
}

template <class Policy, class P, class G, class Space, class Lr = double>
void momentum_capturable(const Policy& policy, span<P, Space> params, span<const G, Space> grads,
                         span<float, Space> master, span<float, Space> velocity,
                         span<float, Space> words, const momentum_config<Lr>& a,
                         const momentum_options& o = {}, const mixed_options& mo = {}) {
  detail::check_mixed_types<P, G>();
  detail::with_momentum_maker<float>(a, o.nesterov, [&](const auto& mk) {
    detail::run_capturable(policy, "momentum_capturable", mk, words, params, grads, master,
                           velocity, {}, mo.grad_scale);
  });
}

template <class Policy, class P, class G, class Space, class Lr = double>
void adam_capturable(const Policy& policy, span<P, Space> params, span<const G, Space> grads,
                     span<float, Space> master, span<float, Space> m, span<float, Space> v,
                     span<float, Space> words, const adam_config<Lr>& a,
                     const adam_options& o = {}, const mixed_options& mo = {}) {
  detail::check_mixed_types<P, G>();
  detail::run_capturable(policy, "adam_capturable",
                         detail::adam_maker<float, Lr>{a, o.decoupled_weight_decay}, words,
                         params, grads, master, m, v, mo.grad_scale);
}

template <class Policy, class P, class G, class Space, class Lr = double>
void adagrad_capturable(const Policy& policy, span<P, Space> params, span<const G, Space> grads,
                        span<float, Space> master, span<float, Space> sum_sq,
                        span<float, Space> words, const adagrad_config<Lr>& a,
                        const mixed_options& mo = {}) {
  detail::check_mixed_types<P, G>();
  detail::run_capturable(policy, "adagrad_capturable", detail::adagrad_maker<float, Lr>{a}, words,
                         params, grads, master, sum_sq, {}, mo.grad_scale);
}

}  // namespace heterograd::kernels
