#pragma once
// The implementation of heterograd's C API (heterograd/c/heterograd.h). Included by exactly
// one C++ translation unit, through `#define HG_C_API_IMPLEMENTATION` before the C header:
// it defines the extern "C" functions.
//
// Handles. A handle is a number (a registry id, never reused) dressed as an opaque pointer;
// the registry maps live ids to objects, so a NULL, forged, destroyed or wrong-kind handle is
// detected and reported instead of being dereferenced. The registry is the C API's only
// process-wide state: a C caller has no other place to keep it. Objects are reference-counted
// (std::shared_ptr), so destroying a handle while another thread is inside a call on it is
// safe; calls on one handle are serialised by the object's mutex.
//
// Errors. Each function runs its body in `guarded`: arguments are checked first (null
// pointers, sizes against the handle's, device flags), the library's own validation throws
// std::invalid_argument before it changes anything, and every exception becomes a status code
// plus a thread-local message. Nothing escapes into C, nothing aborts.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <thrust/system/cpp/execution_policy.h>
#if defined(_OPENMP)
#include <thrust/system/omp/execution_policy.h>
#endif
#if defined(__CUDACC__)
#include <cuda_runtime_api.h>
#include <thrust/system/cuda/execution_policy.h>
#endif

#include "heterograd/c/heterograd.h"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/optim/state.hpp"
#include "heterograd/version.hpp"

namespace heterograd::c_api::detail {

// ---- errors ---------------------------------------------------------------------------------

/// An error with its C status (the library's own errors are mapped in `guarded`).
class api_error : public std::runtime_error {
 public:
  api_error(hg_status s, const std::string& what) : std::runtime_error(what), status_(s) {}
  hg_status status() const { return status_; }

 private:
  hg_status status_;
};

inline std::string& last_error() {
  thread_local std::string message;
  return message;
}

inline hg_status fail(hg_status s, const char* function, const char* what) {
  std::string& m = last_error();
  m = function;
  m += ": ";
  m += what;
  return s;
}

/// Maps exceptions of heterograd's layers to statuses. A translator for another layer's
/// exception types (transports) is passed by the functions that use that layer.
template <class F>
hg_status guarded(const char* function, F&& body) noexcept {
  try {
    body();
    return HG_OK;
  } catch (const api_error& e) {
    return fail(e.status(), function, e.what());
  } catch (const std::invalid_argument& e) {
    return fail(HG_ERROR_INVALID_ARGUMENT, function, e.what());
  } catch (const std::bad_alloc&) {
    return fail(HG_ERROR_OUT_OF_MEMORY, function, "heterograd: out of memory");
  } catch (const std::exception& e) {
    return fail(HG_ERROR_INTERNAL, function, e.what());
  } catch (...) {
    return fail(HG_ERROR_INTERNAL, function, "heterograd: unknown exception");
  }
}

inline void require_pointer(const void* p, const char* parameter) {
  if (p == nullptr)
    throw api_error(HG_ERROR_NULL_POINTER,
                    invalid_argument_message(parameter, nullptr, "must not be null"));
}

inline void require_size(const char* parameter, std::size_t size, std::size_t expected) {
  if (size != expected)
    throw api_error(HG_ERROR_SIZE_MISMATCH,
                    invalid_argument_message(parameter, size,
                                             "must equal the handle's size (" +
                                                 std::to_string(expected) + " elements)"));
}

// ---- memory ---------------------------------------------------------------------------------

inline std::size_t dtype_bytes(std::int32_t dtype) { return dtype == HG_FLOAT64 ? 8 : 4; }

inline void require_dtype(std::int32_t dtype) {
  require(dtype == HG_FLOAT32 || dtype == HG_FLOAT64, "dtype", dtype,
          "must be HG_FLOAT32 (0) or HG_FLOAT64 (1)");
}

inline void require_device_supported(std::int32_t device) {
  require(device == HG_DEVICE_HOST || device == HG_DEVICE_CUDA, "device", device,
          "must be HG_DEVICE_HOST (0) or HG_DEVICE_CUDA (1)");
#if !defined(__CUDACC__)
  if (device == HG_DEVICE_CUDA)
    throw api_error(HG_ERROR_UNSUPPORTED,
                    "heterograd: HG_DEVICE_CUDA needs the C API implementation compiled by nvcc "
                    "(this one was compiled for the CPU only)");
#endif
}

/// Checks that `p` lies in the memory `device` names, where the CUDA runtime can tell.
inline void require_memory(const void* p, std::int32_t device, const char* parameter) {
#if defined(__CUDACC__)
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not a CUDA-known pointer: plain host memory
    if (device == HG_DEVICE_CUDA)
      throw std::invalid_argument(invalid_argument_message(
          parameter, "host pointer", "must be CUDA device memory (device = HG_DEVICE_CUDA)"));
    return;
  }
  const bool on_device = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  const bool on_host = a.type != cudaMemoryTypeDevice;
  if (device == HG_DEVICE_CUDA && !on_device)
    throw std::invalid_argument(invalid_argument_message(
        parameter, "host pointer", "must be CUDA device memory (device = HG_DEVICE_CUDA)"));
  if (device == HG_DEVICE_HOST && !on_host)
    throw std::invalid_argument(invalid_argument_message(
        parameter, "device pointer", "must be host memory (device = HG_DEVICE_HOST)"));
#else
  (void)p;
  (void)device;
  (void)parameter;
#endif
}

/// Params and grads may be the same buffer, or disjoint; a partial overlap would make the
/// fused kernels read values they already wrote.
inline void require_no_partial_overlap(const void* a, const void* b, std::size_t bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  const bool overlap = x < y + bytes && y < x + bytes;
  require(!overlap || x == y, "grads", "overlapping params",
          "must be the params buffer itself or not overlap it");
}

/// The CPU policy: the calling thread's OpenMP team when compiled with OpenMP.
inline const auto& host_policy() {
#if defined(_OPENMP)
  return thrust::omp::par;
#else
  return thrust::cpp::par;
#endif
}

// ---- handles --------------------------------------------------------------------------------

enum class handle_kind : std::uint8_t { optimizer, local_sgd, async_server, async_worker };

inline const char* kind_name(handle_kind k) {
  switch (k) {
    case handle_kind::optimizer: return "hg_optimizer";
    case handle_kind::local_sgd: return "hg_local_sgd";
    case handle_kind::async_server: return "hg_async_server";
    case handle_kind::async_worker: return "hg_async_worker";
  }
  return "handle";
}

struct object {
  explicit object(handle_kind k) : kind(k) {}
  object(const object&) = delete;
  object& operator=(const object&) = delete;
  virtual ~object() = default;
  const handle_kind kind;
  std::mutex mutex;  ///< serialises calls on this handle
};

class registry {
 public:
  std::uint64_t add(std::shared_ptr<object> o) {
    std::lock_guard lock(m_);
    const std::uint64_t id = next_++;
    live_.emplace(id, std::move(o));
    return id;
  }
  std::shared_ptr<object> find(std::uint64_t id, handle_kind k) const {
    std::lock_guard lock(m_);
    const auto it = live_.find(id);
    return it != live_.end() && it->second->kind == k ? it->second : nullptr;
  }
  bool remove(std::uint64_t id, handle_kind k) {
    std::lock_guard lock(m_);
    const auto it = live_.find(id);
    if (it == live_.end() || it->second->kind != k) return false;
    live_.erase(it);
    return true;
  }

 private:
  mutable std::mutex m_;
  std::unordered_map<std::uint64_t, std::shared_ptr<object>> live_;
  std::uint64_t next_ = 1;  // 0 is NULL
};

/// The process's handle registry, never destroyed (a handle may be used from an atexit
/// handler or another library's static destructor).
inline registry& handles() {
  static registry* r = new registry();
  return *r;
}

template <class H>
std::uint64_t id_of(H h) {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(h));
}

template <class H>
H make_handle(std::shared_ptr<object> o) {
  return reinterpret_cast<H>(static_cast<std::uintptr_t>(handles().add(std::move(o))));
}

/// The live object of handle `h`, of kind K's type; throws HG_ERROR_UNKNOWN_HANDLE else.
template <class Object, class H>
std::shared_ptr<Object> lookup(H h, handle_kind k, const char* parameter) {
  auto o = handles().find(id_of(h), k);
  if (!o) {
    std::string rule = "is not a live ";
    rule += kind_name(k);
    rule += h == nullptr ? " (null)" : " (never created, destroyed, or another kind of handle)";
    throw api_error(HG_ERROR_UNKNOWN_HANDLE,
                    invalid_argument_message(parameter, id_of(h), rule));
  }
  return std::static_pointer_cast<Object>(std::move(o));
}

template <class H>
void destroy(H h, handle_kind k) {
  if (h == nullptr) return;
  if (!handles().remove(id_of(h), k))
    throw api_error(HG_ERROR_UNKNOWN_HANDLE,
                    invalid_argument_message(kind_name(k), id_of(h),
                                             "is not a live handle (destroyed twice?)"));
}

// ---- optimizers -----------------------------------------------------------------------------

inline void require_kind(std::int32_t kind) {
  require(kind >= HG_OPTIMIZER_SGD && kind <= HG_OPTIMIZER_ADAMW, "config.kind", kind,
          "must be an hg_optimizer_kind (0 sgd .. 4 adamw)");
}

inline hg_optimizer_config default_config(std::int32_t kind) {
  require_kind(kind);
  hg_optimizer_config c{};
  c.kind = kind;
  c.bias_correction = 1;
  switch (kind) {
    case HG_OPTIMIZER_SGD: {
      const optim::sgd_params p;
      c.lr = p.lr(0);
      c.weight_decay = p.weight_decay;
      break;
    }
    case HG_OPTIMIZER_MOMENTUM:
    case HG_OPTIMIZER_NESTEROV: {
      const optim::momentum_params p;
      c.lr = p.lr(0);
      c.weight_decay = p.weight_decay;
      c.momentum = p.momentum;
      c.dampening = p.dampening;
      break;
    }
    default: {
      const optim::adam_params p;
      c.lr = p.lr(0);
      c.beta1 = p.beta1;
      c.beta2 = p.beta2;
      c.eps = p.eps;
      c.weight_decay = kind == HG_OPTIMIZER_ADAMW ? 0.01 : p.weight_decay;  // adamw's default
      c.bias_correction = p.bias_correction ? 1 : 0;
      break;
    }
  }
  return c;
}

/// The heterograd optimizer a config describes (its constructor validates the values).
template <std::int32_t Kind>
auto make_optimizer(const hg_optimizer_config& c) {
  if constexpr (Kind == HG_OPTIMIZER_SGD) {
    return optim::sgd({.lr = c.lr, .weight_decay = c.weight_decay});
  } else if constexpr (Kind == HG_OPTIMIZER_MOMENTUM || Kind == HG_OPTIMIZER_NESTEROV) {
    const optim::momentum_params p{.lr = c.lr, .momentum = c.momentum, .dampening = c.dampening,
                                   .weight_decay = c.weight_decay};
    if constexpr (Kind == HG_OPTIMIZER_MOMENTUM) return optim::momentum(p);
    else return optim::nesterov(p);
  } else {
    const optim::adam_params p{.lr = c.lr, .beta1 = c.beta1, .beta2 = c.beta2, .eps = c.eps,
                               .weight_decay = c.weight_decay,
                               .bias_correction = c.bias_correction != 0};
    if constexpr (Kind == HG_OPTIMIZER_ADAM) return optim::adam(p);
    else return optim::adamw(p);
  }
}

struct optimizer_object : object {
  optimizer_object(std::int32_t dt, std::int32_t dev, std::size_t n)
      : object(handle_kind::optimizer), dtype(dt), device(dev), size(n) {}
  virtual void step(void* params, const void* grads) = 0;
  virtual void set_lr(double lr) = 0;
  virtual std::int64_t count() const = 0;
  virtual std::vector<std::byte> save() const = 0;
  virtual void load(std::span<const std::byte> bytes) = 0;

  const std::int32_t dtype, device;
  const std::size_t size;
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
  decltype(make_optimizer<Kind>(std::declval<const hg_optimizer_config&>())) opt_;
  optim::state<T, Space> state_;
};

template <std::int32_t Kind, class T>
std::shared_ptr<optimizer_object> make_optimizer_object(const hg_optimizer_config& c,
                                                        std::int32_t dtype, std::int32_t device,
                                                        std::size_t n) {
#if defined(__CUDACC__)
  if (device == HG_DEVICE_CUDA)
    return std::make_shared<optimizer_impl<Kind, T, device_space>>(c, dtype, device, n);
#endif
  return std::make_shared<optimizer_impl<Kind, T, host_space>>(c, dtype, device, n);
}

template <class T>
std::shared_ptr<optimizer_object> make_optimizer_object(const hg_optimizer_config& c,
                                                        std::int32_t dtype, std::int32_t device,
                                                        std::size_t n) {
  switch (c.kind) {
    case HG_OPTIMIZER_SGD: return make_optimizer_object<HG_OPTIMIZER_SGD, T>(c, dtype, device, n);
    case HG_OPTIMIZER_MOMENTUM:
      return make_optimizer_object<HG_OPTIMIZER_MOMENTUM, T>(c, dtype, device, n);
    case HG_OPTIMIZER_NESTEROV:
      return make_optimizer_object<HG_OPTIMIZER_NESTEROV, T>(c, dtype, device, n);
    case HG_OPTIMIZER_ADAM: return make_optimizer_object<HG_OPTIMIZER_ADAM, T>(c, dtype, device, n);
    default: return make_optimizer_object<HG_OPTIMIZER_ADAMW, T>(c, dtype, device, n);
  }
}

}  // namespace heterograd::c_api::detail

// ---- the C functions ------------------------------------------------------------------------

extern "C" {

HG_C_EXPORT const char* hg_last_error(void) {
  return heterograd::c_api::detail::last_error().c_str();
}

HG_C_EXPORT const char* hg_status_name(int status) {
  switch (status) {
    case HG_OK: return "HG_OK";
    case HG_ERROR_NULL_POINTER: return "HG_ERROR_NULL_POINTER";
    case HG_ERROR_SIZE_MISMATCH: return "HG_ERROR_SIZE_MISMATCH";
    case HG_ERROR_UNKNOWN_HANDLE: return "HG_ERROR_UNKNOWN_HANDLE";
    case HG_ERROR_INVALID_ARGUMENT: return "HG_ERROR_INVALID_ARGUMENT";
    case HG_ERROR_UNSUPPORTED: return "HG_ERROR_UNSUPPORTED";
    case HG_ERROR_COMMUNICATION: return "HG_ERROR_COMMUNICATION";
    case HG_ERROR_TIMEOUT: return "HG_ERROR_TIMEOUT";
    case HG_ERROR_OUT_OF_MEMORY: return "HG_ERROR_OUT_OF_MEMORY";
    case HG_ERROR_INTERNAL: return "HG_ERROR_INTERNAL";
  }
  return "unknown";
}

HG_C_EXPORT hg_status hg_version(int* major, int* minor, int* patch) {
  if (major) *major = HG_VERSION_MAJOR;
  if (minor) *minor = HG_VERSION_MINOR;
  if (patch) *patch = HG_VERSION_PATCH;
  return HG_OK;
}

HG_C_EXPORT int hg_has_cuda(void) {
#if defined(__CUDACC__)
  return 1;
#else
  return 0;
#endif
}

HG_C_EXPORT int hg_has_mpi(void) {
#if defined(HG_HAS_MPI)
  return 1;
#else
  return 0;
#endif
}

HG_C_EXPORT hg_status hg_optimizer_config_init(hg_optimizer_config* config, int32_t kind) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    d::require_pointer(config, "config");
    *config = d::default_config(kind);
  });
}

HG_C_EXPORT hg_status hg_optimizer_create(hg_optimizer* out, const hg_optimizer_config* config,
                                          int32_t dtype, size_t size, int32_t device) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    d::require_pointer(out, "out");
    d::require_pointer(config, "config");
    d::require_kind(config->kind);
    d::require_dtype(dtype);
    d::require_device_supported(device);
    heterograd::require(size > 0, "size", size, "must be > 0");
    auto o = dtype == HG_FLOAT32 ? d::make_optimizer_object<float>(*config, dtype, device, size)
                                 : d::make_optimizer_object<double>(*config, dtype, device, size);
    *out = d::make_handle<hg_optimizer>(std::move(o));
  });
}

HG_C_EXPORT hg_status hg_optimizer_step(hg_optimizer opt, void* params, const void* grads,
                                        size_t size, int32_t device) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    auto o = d::lookup<d::optimizer_object>(opt, d::handle_kind::optimizer, "opt");
    d::require_pointer(params, "params");
    d::require_pointer(grads, "grads");
    d::require_size("size", size, o->size);
    heterograd::require(device == o->device, "device", device,
                        "must equal the optimizer's device (" + std::to_string(o->device) + ")");
    d::require_no_partial_overlap(params, grads, size * d::dtype_bytes(o->dtype));
    d::require_memory(params, device, "params");
    d::require_memory(grads, device, "grads");
    std::lock_guard lock(o->mutex);
    o->step(params, grads);
  });
}

HG_C_EXPORT hg_status hg_optimizer_set_lr(hg_optimizer opt, double lr) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    auto o = d::lookup<d::optimizer_object>(opt, d::handle_kind::optimizer, "opt");
    std::lock_guard lock(o->mutex);
    o->set_lr(lr);
  });
}

HG_C_EXPORT hg_status hg_optimizer_step_count(hg_optimizer opt, int64_t* count) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    auto o = d::lookup<d::optimizer_object>(opt, d::handle_kind::optimizer, "opt");
    d::require_pointer(count, "count");
    std::lock_guard lock(o->mutex);
    *count = o->count();
  });
}

HG_C_EXPORT hg_status hg_optimizer_set_stream(hg_optimizer opt, void* cuda_stream) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    auto o = d::lookup<d::optimizer_object>(opt, d::handle_kind::optimizer, "opt");
    heterograd::require(o->device == HG_DEVICE_CUDA, "opt (device)", o->device,
                        "must be HG_DEVICE_CUDA to take a CUDA stream");
    std::lock_guard lock(o->mutex);
    o->stream = cuda_stream;
  });
}

HG_C_EXPORT hg_status hg_optimizer_save_state(hg_optimizer opt, void* buffer, size_t capacity,
                                              size_t* size) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    auto o = d::lookup<d::optimizer_object>(opt, d::handle_kind::optimizer, "opt");
    d::require_pointer(size, "size");
    std::lock_guard lock(o->mutex);
    const auto bytes = o->save();
    if (buffer != nullptr) {
      heterograd::require(capacity >= bytes.size(), "capacity", capacity,
                          "must be at least the state's size (" + std::to_string(bytes.size()) +
                              " bytes)");
      std::memcpy(buffer, bytes.data(), bytes.size());
    }
    *size = bytes.size();
  });
}

HG_C_EXPORT hg_status hg_optimizer_load_state(hg_optimizer opt, const void* buffer, size_t size) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    auto o = d::lookup<d::optimizer_object>(opt, d::handle_kind::optimizer, "opt");
    d::require_pointer(buffer, "buffer");
    std::lock_guard lock(o->mutex);
    o->load(std::span<const std::byte>(static_cast<const std::byte*>(buffer), size));
  });
}

HG_C_EXPORT hg_status hg_optimizer_destroy(hg_optimizer opt) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] { d::destroy(opt, d::handle_kind::optimizer); });
}

}  // extern "C"
