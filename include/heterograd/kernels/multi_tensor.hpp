#pragma once
// Multi-tensor apply: one call updates a list of (params, grads, state) spans, as frameworks
// with many tensors need. It costs one parallel region on the CPU and one launch on a GPU
// (plus one small host-to-device copy of the tensor list), not one per tensor; see
// detail/multi_launch.hpp. The per-element arithmetic is the single-buffer kernels' own
// bodies, so a list gives bitwise the same result as one call per tensor.
// Bytes per element: as the single-buffer kernels (sgd 12, momentum 20, adam 28 for float).

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/detail/multi_launch.hpp"
#include "heterograd/kernels/updates.hpp"

namespace heterograd::kernels {

/// A body applied to elements [0, size) of one tensor (see launch.hpp for bodies).
template <class Body>
using tensor_task = detail::tensor_task<Body>;

/// Runs every task of the list in one parallel region / one launch.
template <class Policy, class Body>
void multi_tensor_apply(const Policy& policy, std::span<const tensor_task<Body>> tasks) {
  detail::launch_multi(policy, tasks);
}

template <class T, class Space = host_space>
struct sgd_tensor {
  span<T, Space> params;
  span<const T, Space> grads;
};

template <class T, class Space = host_space>
struct momentum_tensor {
  span<T, Space> params;
  span<const T, Space> grads;
  span<T, Space> velocity;
};

template <class T, class Space = host_space>
struct adam_tensor {
  span<T, Space> params;
  span<const T, Space> grads;
  span<T, Space> m;
  span<T, Space> v;
};

namespace detail {
inline std::string tensor_name(const char* kernel, const char* field, std::size_t k) {
  return std::string(kernel) + "[" + std::to_string(k) + "]." + field;
}
}  // namespace detail

/// SGD over a list of tensors.
template <class Policy, class T, class Space, class Lr = double>
void multi_tensor_sgd(const Policy& policy, std::span<const sgd_tensor<T, Space>> list,
                      const sgd_config<Lr>& a, const sgd_options& o = {}) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  // The single kernel's bodies (without decay when it is 0), so that the results agree bitwise.
  detail::with_sgd_maker<T>(a, [&](const auto& make) {
    const auto f = make(o.step);
    using body = detail::sgd_body<T, decltype(f)::decay>;
    std::vector<tensor_task<body>> tasks;
    tasks.reserve(list.size());
    for (std::size_t k = 0; k < list.size(); ++k) {
      const auto& t = list[k];
      require_same_size(detail::tensor_name("multi_tensor_sgd", "grads", k), t.grads.size(),
                        "params", t.params.size());
      tasks.push_back({{t.params.data(), t.grads.data(), f},
                       t.params.size(),
                       detail::line_offset_of(t.params.data())});
    }
    detail::launch_multi(policy, std::span<const tensor_task<body>>(tasks));
  });
}

/// Heavy-ball or Nesterov momentum over a list of tensors.
template <class Policy, class T, class Space, class Lr = double>
void multi_tensor_momentum(const Policy& policy, std::span<const momentum_tensor<T, Space>> list,
                           const momentum_config<Lr>& a, const momentum_options& o = {}) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  detail::with_momentum_maker<T>(a, o.nesterov, [&](const auto& make) {
    const auto f = make(o.step);
    using body = detail::momentum_body<T, decltype(f)::nesterov>;
    std::vector<tensor_task<body>> tasks;
    tasks.reserve(list.size());
    for (std::size_t k = 0; k < list.size(); ++k) {
      const auto& t = list[k];
      require_same_size(detail::tensor_name("multi_tensor_momentum", "grads", k), t.grads.size(),
                        "params", t.params.size());
      require_same_size(detail::tensor_name("multi_tensor_momentum", "velocity", k),
                        t.velocity.size(), "params", t.params.size());
      tasks.push_back({{t.params.data(), t.grads.data(), t.velocity.data(), f},
                       t.params.size(),
                       detail::line_offset_of(t.params.data())});
    }
    detail::launch_multi(policy, std::span<const tensor_task<body>>(tasks));
  });
}

/// Adam / AdamW over a list of tensors (bias correction computed once for the whole list).
template <class Policy, class T, class Space, class Lr = double>
void multi_tensor_adam(const Policy& policy, std::span<const adam_tensor<T, Space>> list,
                       const adam_config<Lr>& a, const adam_options& o = {}) {
  static_assert(exec::accessible_v<Policy, Space>, "policy cannot access the span's memory");
  require(o.step >= 1, "multi_tensor_adam.step", o.step, "must be >= 1");
  const auto c = detail::make_adam_coeffs<T>(a, o);
  std::vector<tensor_task<detail::adam_body<T>>> tasks;
  tasks.reserve(list.size());
  for (std::size_t k = 0; k < list.size(); ++k) {
    const auto& t = list[k];
    const std::size_t n = t.params.size();
    require_same_size(detail::tensor_name("multi_tensor_adam", "grads", k), t.grads.size(),
                      "params", n);
    require_same_size(detail::tensor_name("multi_tensor_adam", "m", k), t.m.size(), "params", n);
    require_same_size(detail::tensor_name("multi_tensor_adam", "v", k), t.v.size(), "params", n);
    tasks.push_back({{t.params.data(), t.grads.data(), t.m.data(), t.v.data(), c},
                     n,
                     detail::line_offset_of(t.params.data())});
  }
  detail::launch_multi(policy, std::span<const tensor_task<detail::adam_body<T>>>(tasks));
}

}  // namespace heterograd::kernels
