#pragma once
// The C API's optimizers (hg_optimizer_*): an hg_optimizer_config is read into the C++
// hyper-parameter struct of its kind (kernels::sgd_config, momentum_config, adam_config over
// optim::schedule), whose optimizer's constructor validates it; hg_optimizer_config_init
// fills it from a default-constructed C++ optimizer. So no default value or range is written
// here: the C layer only pairs each config field with its C++ member (`fields`).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__CUDACC__)
#include <cuda_runtime_api.h>
#include <thrust/system/cuda/execution_policy.h>
#endif

#include "heterograd/c/detail/checks.hpp"
#include "heterograd/c/detail/errors.hpp"
#include "heterograd/c/detail/handles.hpp"
#include "heterograd/c/detail/memory.hpp"
#include "heterograd/c/heterograd.h"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/optim/state.hpp"

namespace heterograd::c_api::detail {

/// The C++ optimizer of each hg_optimizer_kind, in the enumeration's order.
using optimizer_types =
    std::tuple<optim::sgd, optim::momentum, optim::nesterov, optim::adam, optim::adamw>;
template <std::int32_t Kind>
using optimizer_of = std::tuple_element_t<static_cast<std::size_t>(Kind), optimizer_types>;
static_assert(std::tuple_size_v<optimizer_types> == HG_OPTIMIZER_ADAMW + 1);
static_assert(optimizer_of<HG_OPTIMIZER_SGD>::name() == "sgd" &&
              optimizer_of<HG_OPTIMIZER_MOMENTUM>::name() == "momentum" &&
              optimizer_of<HG_OPTIMIZER_NESTEROV>::name() == "nesterov" &&
              optimizer_of<HG_OPTIMIZER_ADAM>::name() == "adam" &&
              optimizer_of<HG_OPTIMIZER_ADAMW>::name() == "adamw");

inline void require_kind(std::int32_t kind) {
  require(kind >= HG_OPTIMIZER_SGD && kind <= HG_OPTIMIZER_ADAMW, "config.kind", kind,
          "must be an hg_optimizer_kind (0 sgd .. 4 adamw)");
}

/// f(std::integral_constant<std::int32_t, Kind>{}) for the kind a runtime value names.
template <class F>
decltype(auto) with_kind(std::int32_t kind, F&& f) {
  require_kind(kind);
  switch (kind) {
    case HG_OPTIMIZER_SGD: return f(std::integral_constant<std::int32_t, HG_OPTIMIZER_SGD>{});
    case HG_OPTIMIZER_MOMENTUM:
      return f(std::integral_constant<std::int32_t, HG_OPTIMIZER_MOMENTUM>{});
    case HG_OPTIMIZER_NESTEROV:
      return f(std::integral_constant<std::int32_t, HG_OPTIMIZER_NESTEROV>{});
    case HG_OPTIMIZER_ADAM: return f(std::integral_constant<std::int32_t, HG_OPTIMIZER_ADAM>{});
    default: return f(std::integral_constant<std::int32_t, HG_OPTIMIZER_ADAMW>{});
  }
}

// Each hyper-parameter of a C++ params struct with the hg_optimizer_config field that carries
// it, as f(member, field): the one pairing, read in both directions (C++ -> C for the
// defaults, C -> C++ for an optimizer).
template <class Config, class F>
void fields(optim::sgd_config& p, Config& c, F&& f) {
  f(p.lr, c.lr);
  f(p.weight_decay, c.weight_decay);
}
template <class Config, class F>
void fields(optim::momentum_config& p, Config& c, F&& f) {
  f(p.lr, c.lr);
  f(p.momentum, c.momentum);
  f(p.dampening, c.dampening);
  f(p.weight_decay, c.weight_decay);
}
template <class Config, class F>
void fields(optim::adam_config& p, Config& c, F&& f) {
  f(p.lr, c.lr);
  f(p.beta1, c.beta1);
  f(p.beta2, c.beta2);
  f(p.eps, c.eps);
  f(p.weight_decay, c.weight_decay);
  f(p.bias_correction, c.bias_correction);
}

template <class Optimizer>
using params_of = std::remove_cvref_t<decltype(std::declval<const Optimizer&>().params())>;

/// The defaults of `Kind`: those of a default-constructed C++ optimizer (AdamW's weight
/// decay differs from Adam's there). Fields the kind does not use stay 0, but
/// bias_correction is 1, so that a config switched to Adam keeps Adam's usual correction.
template <std::int32_t Kind>
hg_optimizer_config default_config() {
  hg_optimizer_config c{};
  c.kind = Kind;
  c.bias_correction = 1;
  params_of<optimizer_of<Kind>> p = optimizer_of<Kind>().params();
  fields(p, c, [](const auto& member, auto& field) {
    using field_t = std::remove_cvref_t<decltype(field)>;
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(member)>, optim::schedule>)
      field = member(0);  // a C config holds a constant learning rate
    else
      field = static_cast<field_t>(member);
  });
  return c;
}

/// The C++ optimizer a config describes (its constructor validates the values, naming the
/// field as `adam.beta1`).
template <std::int32_t Kind>
optimizer_of<Kind> make_optimizer(const hg_optimizer_config& c) {
  params_of<optimizer_of<Kind>> p{};
  fields(p, c, [](auto& member, const auto& field) {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(member)>, bool>)
      member = field != 0;
    else
      member = field;
  });
  return optimizer_of<Kind>(p);
}

struct optimizer_object : object {
  optimizer_object(std::int32_t dt, std::int32_t dev, std::size_t n)
      : object(handle_kind::optimizer, dt, n), device(dev) {}
  virtual void step(void* params, const void* grads) = 0;
  virtual void set_lr(double lr) = 0;
  virtual std::int64_t count() const = 0;
  virtual std::vector<std::byte> save() const = 0;
  virtual void load(std::span<const std::byte> bytes) = 0;

  const std::int32_t device;
  void* stream = nullptr;  ///< cudaStream_t of device steps
};

template <std::int32_t Kind, class T, class Space>
class optimizer_impl final : public optimizer_object {
 public:
  optimizer_impl(const hg_optimizer_config& c, std::int32_t dtype, std::int32_t device,
                 std::size_t n)
      : optimizer_object(dtype, device, n), config_(c), opt_(make_optimizer<Kind>(c)),
        state_(opt_.template init_state<T, Space>(n)) {}

  void step(void* params, const void* grads) override {
    const span<T, Space> p(static_cast<T*>(params), size);
    const span<const T, Space> g(static_cast<const T*>(grads), size);
    if constexpr (std::is_same_v<Space, host_space>) {
      opt_.update(host_policy(), g, state_, p);
    } else {
#if defined(__CUDACC__)
      opt_.update(thrust::cuda::par.on(static_cast<cudaStream_t>(stream)), g, state_, p);
#endif
    }
  }
  void set_lr(double lr) override {
    hg_optimizer_config c = config_;
    c.lr = lr;
    opt_ = make_optimizer<Kind>(c);  // validates before anything changes
    config_ = c;
  }
  std::int64_t count() const override { return state_.count; }
  std::vector<std::byte> save() const override { return optim::serialize(state_); }
  void load(std::span<const std::byte> bytes) override {
    auto s = optim::deserialize<T, Space>(bytes);
    opt_.check_state(s, size, "state");
    state_ = std::move(s);
  }

 private:
  hg_optimizer_config config_;
  optimizer_of<Kind> opt_;
  optim::state<T, Space> state_;
};

template <class T>
std::shared_ptr<optimizer_object> make_optimizer_object(const hg_optimizer_config& c,
                                                        std::int32_t dtype, std::int32_t device,
                                                        std::size_t n) {
  return with_kind(c.kind, [&](auto kind) -> std::shared_ptr<optimizer_object> {
#if defined(__CUDACC__)
    if (device == HG_DEVICE_CUDA)
      return std::make_shared<optimizer_impl<kind, T, device_space>>(c, dtype, device, n);
#endif
    return std::make_shared<optimizer_impl<kind, T, host_space>>(c, dtype, device, n);
  });
}

// ---- the C functions ------------------------------------------------------------------------
// Defined in this namespace: a function with C language linkage is the same function in every
// namespace (the declaration in heterograd.h), and here the detail names need no prefix.

extern "C" {

HG_C_EXPORT hg_status hg_optimizer_config_init(hg_optimizer_config* config, int32_t kind) {
  return guarded(__func__, [&] {
    require_pointer(config, "config");
    *config = with_kind(kind, [](auto k) { return default_config<k>(); });
  });
}

HG_C_EXPORT hg_status hg_optimizer_create(hg_optimizer* out, const hg_optimizer_config* config,
                                          int32_t dtype, size_t size, int32_t device) {
  return guarded(__func__, [&] {
    require_pointer(out, "out");
    require_pointer(config, "config");
    require_kind(config->kind);
    require_dtype(dtype);
    require_device_supported(device);
    require_count(size, dtype);
    auto o = with_dtype(dtype, [&](auto t) {
      return make_optimizer_object<typename decltype(t)::type>(*config, dtype, device, size);
    });
    *out = make_handle<hg_optimizer>(std::move(o));
  });
}

HG_C_EXPORT hg_status hg_optimizer_step(hg_optimizer opt, void* params, const void* grads,
                                        size_t size, int32_t device) {
  return guarded(__func__, [&] {
    auto o = lookup<optimizer_object>(opt, handle_kind::optimizer, "opt");
    require_buffer(params, o->dtype, "params");
    require_buffer(grads, o->dtype, "grads");
    require_size("size", size, o->size);
    require(device == o->device, "device", device,
            "must equal the optimizer's device (" + std::to_string(o->device) + ")");
    require_no_partial_overlap(params, grads, size * dtype_bytes(o->dtype));
    require_memory(params, device, "params");
    require_memory(grads, device, "grads");
    std::lock_guard lock(o->mutex);
    o->step(params, grads);
  });
}

HG_C_EXPORT hg_status hg_optimizer_set_lr(hg_optimizer opt, double lr) {
  return guarded(__func__, [&] {
    auto o = lookup<optimizer_object>(opt, handle_kind::optimizer, "opt");
    std::lock_guard lock(o->mutex);
    o->set_lr(lr);
  });
}

HG_C_EXPORT hg_status hg_optimizer_step_count(hg_optimizer opt, int64_t* count) {
  return guarded(__func__, [&] {
    auto o = lookup<optimizer_object>(opt, handle_kind::optimizer, "opt");
    require_pointer(count, "count");
    std::lock_guard lock(o->mutex);
    *count = o->count();
  });
}

HG_C_EXPORT hg_status hg_optimizer_set_stream(hg_optimizer opt, void* cuda_stream) {
  return guarded(__func__, [&] {
    auto o = lookup<optimizer_object>(opt, handle_kind::optimizer, "opt");
    require(o->device == HG_DEVICE_CUDA, "opt (device)", o->device,
            "must be HG_DEVICE_CUDA to take a CUDA stream");
    std::lock_guard lock(o->mutex);
    o->stream = cuda_stream;
  });
}

HG_C_EXPORT hg_status hg_optimizer_save_state(hg_optimizer opt, void* buffer, size_t capacity,
                                              size_t* size) {
  return guarded(__func__, [&] {
    auto o = lookup<optimizer_object>(opt, handle_kind::optimizer, "opt");
    require_pointer(size, "size");
    std::lock_guard lock(o->mutex);
    const auto bytes = o->save();
    if (buffer != nullptr) {
      require(capacity >= bytes.size(), "capacity", capacity,
              "must be at least the state's size (" + std::to_string(bytes.size()) + " bytes)");
      std::memcpy(buffer, bytes.data(), bytes.size());
    }
    *size = bytes.size();
  });
}

HG_C_EXPORT hg_status hg_optimizer_load_state(hg_optimizer opt, const void* buffer, size_t size) {
  return guarded(__func__, [&] {
    auto o = lookup<optimizer_object>(opt, handle_kind::optimizer, "opt");
    require_pointer(buffer, "buffer");
    std::lock_guard lock(o->mutex);
    o->load(std::span<const std::byte>(static_cast<const std::byte*>(buffer), size));
  });
}

HG_C_EXPORT hg_status hg_optimizer_destroy(hg_optimizer opt) {
  return guarded(__func__, [&] { destroy(opt, handle_kind::optimizer); });
}

}  // extern "C"

}  // namespace heterograd::c_api::detail
