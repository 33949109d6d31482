#pragma once
// A plan is one optimizer step over a list of tensors (per-tensor mode) or over one flat buffer
// (flat mode), checked and not yet run: its arrays, the configuration and the step index. The
// Python optimizer makes the plans of every parameter group first and runs them only when all
// were made, so that a broken rule anywhere leaves every tensor as it was.
//
// Each plan runs the library's fused kernels (heterograd/kernels/updates.hpp and
// multi_tensor.hpp), the calls the C++ optimizers (optim/optimizers.hpp) make, so the numbers
// are the C++ optimizers' bit for bit. SGD, momentum and Adam run a list in one parallel region
// (multi-tensor apply; bitwise the same as one call per tensor); Adagrad and LAMB run one
// kernel per tensor. The GIL is released while a plan runs.

#include <nanobind/nanobind.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "arrays.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/multi_tensor.hpp"
#include "heterograd/kernels/updates.hpp"
#include "heterograd/optim/schedule.hpp"

namespace hgpy {

namespace hk = heterograd::kernels;
using heterograd::optim::schedule;

/// The execution policy of this build: every core through OpenMP, else one thread.
inline const auto& host_policy() {
#if defined(_OPENMP)
  return heterograd::exec::omp;
#else
  return heterograd::exec::cpp;
#endif
}

struct plan {
  std::string what;                   ///< e.g. "adam over 12 tensors (float32)"
  std::vector<array_ref> arrays;      ///< held until the plan is gone
  std::function<void()> launch;       ///< the kernel calls, on the checked pointers
  bool done = false;

  void run() {
    if (done) throw std::logic_error("heterograd: this plan ran already (a plan is one step)");
    {
      nb::gil_scoped_release unlocked;
      launch();
    }
    done = true;
  }
};

template <class T>
T* ptr(const array_ref& a) {
  return static_cast<T*>(a.data);
}
template <class T>
heterograd::span<T> whole(const array_ref& a) {
  return {ptr<T>(a), a.size};
}

/// Calls f(T{}) with T the element type of `e`.
template <class F>
decltype(auto) by_type(element e, F&& f) {
  if (e == element::f32) return f(float{});
  return f(double{});
}

/// What every plan checks first: the configuration's rules (named `where.field`) and the step.
template <class C>
void check_common(const C& c, std::int64_t step, const std::string& where) {
  heterograd::validate_fields(c, where.empty() ? std::string(C::description().name) : where);
  heterograd::require(step >= 1, (where.empty() ? std::string("step") : where + ".step"), step,
                      "must be >= 1 (the 1-based index of this step)");
}

/// The checked arrays: params (written), grads (read) and the state slots (written), all of
/// params[k]'s size and type.
struct lists {
  std::vector<array_ref> params, grads;
  std::vector<std::vector<array_ref>> slots;
  element type() const { return params.empty() ? element::f32 : params.front().type; }
  std::size_t size() const { return params.size(); }
};

inline lists take_lists(nb::handle params, nb::handle grads,
                        std::initializer_list<std::pair<nb::handle, const char*>> slots,
                        const namer& name) {
  lists l;
  l.params = take_list(params, "params", name, true, nullptr, "");
  l.grads = take_list(grads, "grads", name, false, &l.params, "params");
  for (const auto& [h, what] : slots) l.slots.push_back(take_list(h, what, name, true, &l.params, "params"));
  return l;
}

inline std::string describe_plan(const char* kernel, const lists& l) {
  return std::string(kernel) + " over " + std::to_string(l.size()) + " array(s) (" +
         element_name(l.type()) + ")";
}

/// Moves the arrays into the plan (they are its to hold) and names it.
inline plan make_plan(const char* kernel, lists&& l, std::function<void()> launch) {
  plan p;
  p.what = describe_plan(kernel, l);
  p.launch = std::move(launch);
  for (auto& a : l.params) p.arrays.push_back(std::move(a));
  for (auto& a : l.grads) p.arrays.push_back(std::move(a));
  for (auto& s : l.slots)
    for (auto& a : s) p.arrays.push_back(std::move(a));
  return p;
}

inline plan plan_sgd(nb::sequence params, nb::sequence grads, const hk::sgd_config<schedule>& c,
                     std::int64_t step, const std::string& where, nb::object index) {
  check_common(c, step, where);
  lists l = take_lists(params, grads, {}, namer{where, std::move(index)});
  auto launch = by_type(l.type(), [&](auto t) -> std::function<void()> {
    using T = decltype(t);
    std::vector<hk::sgd_tensor<T>> list;
    for (std::size_t k = 0; k < l.size(); ++k)
      list.push_back({whole<T>(l.params[k]), whole<T>(l.grads[k])});
    return [list = std::move(list), c, step] {
      hk::multi_tensor_sgd(host_policy(), std::span<const hk::sgd_tensor<T>>(list), c,
                           {.step = step});
    };
  });
  return make_plan("sgd", std::move(l), std::move(launch));
}

inline plan plan_momentum(nb::sequence params, nb::sequence grads, nb::sequence velocity,
                          const hk::momentum_config<schedule>& c, std::int64_t step,
                          bool nesterov, const std::string& where, nb::object index) {
  check_common(c, step, where);
  lists l = take_lists(params, grads, {{velocity, "velocity"}}, namer{where, std::move(index)});
  auto launch = by_type(l.type(), [&](auto t) -> std::function<void()> {
    using T = decltype(t);
    std::vector<hk::momentum_tensor<T>> list;
    for (std::size_t k = 0; k < l.size(); ++k)
      list.push_back({whole<T>(l.params[k]), whole<T>(l.grads[k]), whole<T>(l.slots[0][k])});
    return [list = std::move(list), c, step, nesterov] {
      hk::multi_tensor_momentum(host_policy(), std::span<const hk::momentum_tensor<T>>(list), c,
                                {.step = step, .nesterov = nesterov});
    };
  });
  return make_plan(nesterov ? "nesterov" : "momentum", std::move(l), std::move(launch));
}

inline plan plan_adam(nb::sequence params, nb::sequence grads, nb::sequence m, nb::sequence v,
                      const hk::adam_config<schedule>& c, std::int64_t step, bool decoupled,
                      const std::string& where, nb::object index) {
  check_common(c, step, where);
  lists l = take_lists(params, grads, {{m, "m"}, {v, "v"}}, namer{where, std::move(index)});
  auto launch = by_type(l.type(), [&](auto t) -> std::function<void()> {
    using T = decltype(t);
    std::vector<hk::adam_tensor<T>> list;
    for (std::size_t k = 0; k < l.size(); ++k)
      list.push_back({whole<T>(l.params[k]), whole<T>(l.grads[k]), whole<T>(l.slots[0][k]),
                      whole<T>(l.slots[1][k])});
    return [list = std::move(list), c, step, decoupled] {
      hk::multi_tensor_adam(host_policy(), std::span<const hk::adam_tensor<T>>(list), c,
                            {.step = step, .decoupled_weight_decay = decoupled});
    };
  });
  return make_plan(decoupled ? "adamw" : "adam", std::move(l), std::move(launch));
}

inline plan plan_adagrad(nb::sequence params, nb::sequence grads, nb::sequence sum_sq,
                         const hk::adagrad_config<schedule>& c, std::int64_t step,
                         const std::string& where, nb::object index) {
  check_common(c, step, where);
  lists l = take_lists(params, grads, {{sum_sq, "sum_sq"}}, namer{where, std::move(index)});
  auto launch = by_type(l.type(), [&](auto t) -> std::function<void()> {
    using T = decltype(t);
    std::vector<std::array<T*, 3>> list;
    std::vector<std::size_t> sizes;
    for (std::size_t k = 0; k < l.size(); ++k) {
      list.push_back({ptr<T>(l.params[k]), ptr<T>(l.grads[k]), ptr<T>(l.slots[0][k])});
      sizes.push_back(l.params[k].size);
    }
    return [list = std::move(list), sizes = std::move(sizes), c, step] {
      for (std::size_t k = 0; k < list.size(); ++k)
        hk::adagrad(host_policy(), heterograd::span<T>(list[k][0], sizes[k]),
                    heterograd::span<const T>(list[k][1], sizes[k]),
                    heterograd::span<T>(list[k][2], sizes[k]), c, {.step = step});
    };
  });
  return make_plan("adagrad", std::move(l), std::move(launch));
}

/// LAMB: each array is one tensor with its own trust ratio, or one flat array holding the
/// tensors of config.tensor_sizes (which must then tile it; with several arrays it is empty).
inline void check_lamb_sizes(const hk::lamb_config<schedule>& c, const lists& l,
                             const std::string& where) {
  const std::string name = (where.empty() ? std::string("lamb") : where) + ".tensor_sizes";
  if (c.tensor_sizes.empty()) return;
  heterograd::require(l.size() == 1, name + " (count)", c.tensor_sizes.size(),
                      "must be empty when the plan has several arrays (each is one tensor); "
                      "tensor_sizes tiles one flat array");
  std::size_t total = 0;
  for (std::size_t s : c.tensor_sizes) total += s;
  heterograd::require_same_size(name + " (sum)", total, "params[0]", l.params[0].size);
}

inline plan plan_lamb(nb::sequence params, nb::sequence grads, nb::sequence m, nb::sequence v,
                      const hk::lamb_config<schedule>& c, std::int64_t step,
                      const std::string& where, nb::object index) {
  check_common(c, step, where);
  lists l = take_lists(params, grads, {{m, "m"}, {v, "v"}}, namer{where, std::move(index)});
  check_lamb_sizes(c, l, where);
  auto launch = by_type(l.type(), [&](auto t) -> std::function<void()> {
    using T = decltype(t);
    std::vector<std::array<T*, 4>> list;
    std::vector<std::size_t> sizes;
    for (std::size_t k = 0; k < l.size(); ++k) {
      list.push_back({ptr<T>(l.params[k]), ptr<T>(l.grads[k]), ptr<T>(l.slots[0][k]),
                      ptr<T>(l.slots[1][k])});
      sizes.push_back(l.params[k].size);
    }
    return [list = std::move(list), sizes = std::move(sizes), c, step] {
      for (std::size_t k = 0; k < list.size(); ++k) {
        const std::size_t n = sizes[k];
        hk::lamb(host_policy(), heterograd::span<T>(list[k][0], n),
                 heterograd::span<const T>(list[k][1], n), heterograd::span<T>(list[k][2], n),
                 heterograd::span<T>(list[k][3], n), c, {.step = step});
      }
    };
  });
  return make_plan("lamb", std::move(l), std::move(launch));
}

}  // namespace hgpy
