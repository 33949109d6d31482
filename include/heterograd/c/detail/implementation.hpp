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
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <thrust/system/cpp/execution_policy.h>
#if defined(_OPENMP)
#include <thrust/system/omp/execution_policy.h>
#endif
#if defined(__CUDACC__)
#include <cuda_runtime_api.h>
#include <thrust/system/cuda/execution_policy.h>
#endif

#include "heterograd/algorithms/nonfinite.hpp"
#include "heterograd/c/heterograd.h"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/optim/state.hpp"
#include "heterograd/version.hpp"

// The MPI objects wrap the sync layer's local_sgd_worker and the runtime layer's serve /
// worker_client over comm::mpi.
#if defined(HG_HAS_MPI)
#include <mpi.h>

#include "heterograd/algorithms/async/asgd.hpp"
#include "heterograd/algorithms/sync/workers.hpp"
#include "heterograd/comm/mpi.hpp"
#include "heterograd/runtime/server.hpp"
#endif

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

/// Maps the exceptions of heterograd's layers to statuses.
template <class F>
hg_status guarded(const char* function, F&& body) noexcept {
  try {
    body();
    return HG_OK;
  } catch (const api_error& e) {
    return fail(e.status(), function, e.what());
  } catch (const std::invalid_argument& e) {
    return fail(HG_ERROR_INVALID_ARGUMENT, function, e.what());
  } catch (const algorithms::nonfinite_gradient_error& e) {
    return fail(HG_ERROR_INVALID_ARGUMENT, function, e.what());  // a NaN or an infinity given
  } catch (const comm::timeout_error& e) {
    return fail(HG_ERROR_TIMEOUT, function, e.what());
  } catch (const comm::comm_error& e) {
    return fail(HG_ERROR_COMMUNICATION, function, e.what());
  } catch (const std::bad_alloc&) {
    return fail(HG_ERROR_OUT_OF_MEMORY, function, "heterograd: out of memory");
  } catch (const std::exception& e) {
    return fail(HG_ERROR_INTERNAL, function, e.what());
  } catch (...) {
    return fail(HG_ERROR_INTERNAL, function, "heterograd: unknown exception");
  }
}

/// An address as the message shows it.
inline std::string address_of(const void* p) {
  char buf[2 + 2 * sizeof(std::uintptr_t) + 1];
  std::snprintf(buf, sizeof buf, "0x%llx",
                static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p)));
  return buf;
}

/// A pointer to T must be aligned to alignof(T): reading a misaligned float or struct is
/// undefined behaviour (and faults on some CPUs and on CUDA), whatever x86 tolerates.
inline void require_aligned(const void* p, std::size_t alignment, const char* parameter,
                            const char* type) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0)
    throw std::invalid_argument(invalid_argument_message(
        parameter, address_of(p),
        "must be aligned to " + std::to_string(alignment) + " bytes (alignof(" + type + "))"));
}

template <class T>
constexpr std::size_t alignment_of() {
  if constexpr (std::is_void_v<T>) return 1;
  else return alignof(T);
}

/// A required pointer: not null and aligned for what it points to.
template <class T>
void require_pointer(const T* p, const char* parameter) {
  if (p == nullptr)
    throw api_error(HG_ERROR_NULL_POINTER,
                    invalid_argument_message(parameter, nullptr, "must not be null"));
  require_aligned(p, alignment_of<T>(), parameter, "its type");
}

/// A pointer that may be NULL; if it is not, aligned for what it points to.
template <class T>
void require_optional(const T* p, const char* parameter) {
  if (p != nullptr) require_aligned(p, alignment_of<T>(), parameter, "its type");
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

/// A buffer of `dtype` elements: not null, and aligned to alignof(float) or alignof(double).
inline void require_buffer(const void* p, std::int32_t dtype, const char* parameter) {
  require_pointer(p, parameter);
  require_aligned(p, dtype == HG_FLOAT64 ? alignof(double) : alignof(float), parameter,
                  dtype == HG_FLOAT64 ? "double" : "float");
}

/// The one check of the element count every handle is created with (optimizers of every
/// kind, the MPI objects): at least 1, and its byte count must fit in ptrdiff_t, the largest
/// object there can be. So SIZE_MAX, or a count whose bytes overflow size_t, is the same
/// HG_ERROR_INVALID_ARGUMENT for SGD (which allocates no state) as for Adam (which would
/// have failed in its allocation), and no later size * dtype_bytes can overflow.
inline void require_count(std::size_t size, std::int32_t dtype) {
  const std::size_t bytes = dtype_bytes(dtype);
  const std::size_t most = static_cast<std::size_t>(PTRDIFF_MAX) / bytes;
  require(size >= 1 && size <= most, "size", size,
          "must be in [1, " + std::to_string(most) + "]: its byte count (size x " +
              std::to_string(bytes) + ") must fit in ptrdiff_t");
}

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
  const bool overlap = x <= y ? y - x < bytes : x - y < bytes;  // no address + bytes overflow
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

// ---- MPI objects ----------------------------------------------------------------------------

inline void require_host_only(std::int32_t device, const char* what) {
  require(device == HG_DEVICE_HOST || device == HG_DEVICE_CUDA, "device", device,
          "must be HG_DEVICE_HOST (0) or HG_DEVICE_CUDA (1)");
  if (device != HG_DEVICE_HOST)
    throw api_error(HG_ERROR_UNSUPPORTED,
                    std::string("heterograd: ") + what +
                        " works on host buffers (the MPI transport moves host memory)");
}

[[noreturn]] inline void unsupported(const char* what) {
  throw api_error(HG_ERROR_UNSUPPORTED, std::string("heterograd: this build has no ") + what);
}

inline seconds timeout_of(double s, const char* field) {
  require(std::isfinite(s) && s > 0, field, s, "must be finite and > 0 seconds");
  return seconds(s);
}

#if defined(HG_HAS_MPI)
/// The communicator of a Fortran handle; MPI must be running.
inline MPI_Comm mpi_comm_of(std::int64_t f) {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (!up || down)
    throw api_error(HG_ERROR_INVALID_ARGUMENT,
                    "heterograd: MPI is not running: call MPI_Init_thread (or hg_mpi_init) "
                    "first, and nothing after MPI_Finalize");
  const MPI_Comm c = MPI_Comm_f2c(static_cast<MPI_Fint>(f));
  // OpenMPI answers an unknown handle with a null pointer, not MPI_COMM_NULL.
  require(c != MPI_COMM_NULL && c != MPI_Comm{}, "mpi_comm", f,
          "must be the Fortran handle of a live communicator");
  return c;
}

inline int mpi_rank(MPI_Comm c) {
  int r = 0;
  MPI_Comm_rank(c, &r);
  return r;
}

inline int mpi_size(MPI_Comm c) {
  int n = 0;
  MPI_Comm_size(c, &n);
  return n;
}

inline void require_server_rank(MPI_Comm c, const hg_async_config& cfg) {
  const int n = mpi_size(c);
  require(cfg.server_rank < n, "config.server_rank", cfg.server_rank,
          "must be < the communicator's size (" + std::to_string(n) + ")");
  require(n >= 2, "mpi_comm (size)", n, "must be >= 2 (a server and a worker)");
}

inline bool mpi_finalized() {
  int down = 0;
  MPI_Finalized(&down);
  return down != 0;
}

/// Owns a distributed helper; after MPI_Finalize its communicator can no longer be freed,
/// so it is then left to the process's end rather than freed into a dead MPI.
template <class H>
struct mpi_owned {
  std::unique_ptr<H> h;
  mpi_owned() = default;
  mpi_owned(const mpi_owned&) = delete;
  mpi_owned& operator=(const mpi_owned&) = delete;
  ~mpi_owned() {
    if (h && mpi_finalized()) (void)h.release();
  }
};

#if defined(_OPENMP)
/// One process per rank: each steps on its process's OpenMP team.
using mpi_exec = std::remove_cvref_t<decltype(thrust::omp::par)>;
#else
using mpi_exec = std::remove_cvref_t<decltype(thrust::cpp::par)>;
#endif
#endif

/// worker.step(params, grads) with the guarantee the C header gives every call: if it
/// throws, nothing has changed. A local SGD step can fail after it changed things: the
/// optimizer update may stop half-way (a kernel's error, a non-finite check) and the round's
/// collectives run on `params` and the optimizer state in place, after the local step and the
/// step counters moved on (a timeout, a peer's abort). So the step runs on a copy kept aside:
/// the worker is a value (its transport is a shared handle), and on failure the worker and
/// the caller's parameters are put back bitwise. Cost: a copy of the parameters, the
/// optimizer state and the anchor per step (host memory, a few n-element copies next to the
/// framework's forward and backward passes).
template <class Worker, class T>
bool step_or_nothing(Worker& worker, span<T> params, span<const T> grads) {
  const std::vector<T> params_before(params.begin(), params.end());
  Worker before = worker;
  try {
    return worker.step(params, grads);
  } catch (...) {
    std::copy(params_before.begin(), params_before.end(), params.begin());
    worker = std::move(before);
    throw;
  }
}

struct local_sgd_object : object {
  local_sgd_object(std::int32_t dt, std::size_t n)
      : object(handle_kind::local_sgd), dtype(dt), size(n) {}
  virtual bool step(void* params, const void* grads) = 0;
  virtual std::uint64_t rounds() const = 0;
  virtual std::uint64_t steps() const = 0;
  const std::int32_t dtype;
  const std::size_t size;
};

#if defined(HG_HAS_MPI)
namespace hs = heterograd::algorithms::sync;

inline hs::local_sgd_config local_sgd_config_of(const hg_local_sgd_config& c) {
  require(c.weighting == HG_AVERAGING_UNIFORM || c.weighting == HG_AVERAGING_SAMPLE_WEIGHTED,
          "config.weighting", c.weighting, "must be an hg_averaging (0 uniform, 1 sample-weighted)");
  require(c.state_policy >= HG_STATE_KEEP_LOCAL && c.state_policy <= HG_STATE_RESET,
          "config.state_policy", c.state_policy, "must be an hg_state_policy (0, 1 or 2)");
  hs::local_sgd_config s;
  s.period = static_cast<std::size_t>(c.period);
  s.warmup_steps = static_cast<std::size_t>(c.warmup_steps);
  s.weighting = c.weighting == HG_AVERAGING_UNIFORM ? hs::averaging::uniform
                                                    : hs::averaging::sample_weighted;
  s.states = c.state_policy == HG_STATE_KEEP_LOCAL ? hs::state_policy::keep_local
             : c.state_policy == HG_STATE_AVERAGE  ? hs::state_policy::average
                                                   : hs::state_policy::reset;
  return s;
}

template <std::int32_t Kind, class T>
class local_sgd_impl final : public local_sgd_object {
  using optimizer_t = decltype(make_optimizer<Kind>(std::declval<const hg_optimizer_config&>()));
  using worker_t = hs::local_sgd_worker<T, optimizer_t, comm::mpi::communicator, hs::no_outer,
                                        hs::identity_transform, mpi_exec>;

 public:
  local_sgd_impl(MPI_Comm c, const hg_optimizer_config& opt, const hg_local_sgd_config& cfg,
                 std::vector<std::size_t> batches, std::int32_t dtype, T* params, std::size_t n)
      : local_sgd_object(dtype, n) {
    auto s = local_sgd_config_of(cfg);  // validated before the collective below
    auto o = make_optimizer<Kind>(opt);
    hs::worker_options wo;
    wo.timeout = timeout_of(cfg.timeout_seconds, "config.timeout_seconds");
    if (batches.empty()) batches.assign(static_cast<std::size_t>(mpi_size(c)), 1);
    s.validate(batches.size());  // checked before the collective below
    for (std::size_t i = 0; i < batches.size(); ++i)
      require(batches[i] >= 1, "batches[" + std::to_string(i) + "]", batches[i], "must be >= 1");
    comm::mpi::communicator t(c);  // collective
    w_.h = std::make_unique<worker_t>(t, std::move(o), span<T>(params, n), std::move(batches),
                                      std::move(s), hs::no_outer{}, hs::identity_transform{}, wo);
  }
  bool step(void* params, const void* grads) override {
    return step_or_nothing(*w_.h, span<T>(static_cast<T*>(params), size),
                           span<const T>(static_cast<const T*>(grads), size));
  }
  std::uint64_t rounds() const override { return w_.h->round(); }
  std::uint64_t steps() const override { return w_.h->local_steps(); }

 private:
  mpi_owned<worker_t> w_;
};

template <class T>
std::shared_ptr<local_sgd_object> make_local_sgd(MPI_Comm c, const hg_optimizer_config& opt,
                                                 const hg_local_sgd_config& cfg,
                                                 std::vector<std::size_t> b, std::int32_t dtype,
                                                 const void* params, std::size_t n) {
  // The worker only reads the initial parameters (its anchor and its state's shape).
  T* p = const_cast<T*>(static_cast<const T*>(params));
  switch (opt.kind) {
    case HG_OPTIMIZER_SGD:
      return std::make_shared<local_sgd_impl<HG_OPTIMIZER_SGD, T>>(c, opt, cfg, std::move(b), dtype, p, n);
    case HG_OPTIMIZER_MOMENTUM:
      return std::make_shared<local_sgd_impl<HG_OPTIMIZER_MOMENTUM, T>>(c, opt, cfg, std::move(b), dtype, p, n);
    case HG_OPTIMIZER_NESTEROV:
      return std::make_shared<local_sgd_impl<HG_OPTIMIZER_NESTEROV, T>>(c, opt, cfg, std::move(b), dtype, p, n);
    case HG_OPTIMIZER_ADAM:
      return std::make_shared<local_sgd_impl<HG_OPTIMIZER_ADAM, T>>(c, opt, cfg, std::move(b), dtype, p, n);
    default:
      return std::make_shared<local_sgd_impl<HG_OPTIMIZER_ADAMW, T>>(c, opt, cfg, std::move(b), dtype, p, n);
  }
}
#endif

struct async_server_object : object {
  async_server_object(std::int32_t dt, std::size_t n)
      : object(handle_kind::async_server), dtype(dt), size(n) {}
  virtual void run(std::uint64_t* updates, std::uint64_t* dropped) = 0;
  virtual void params(void* out) const = 0;
  const std::int32_t dtype;
  const std::size_t size;
};

struct async_worker_object : object {
  async_worker_object(std::int32_t dt, std::size_t n)
      : object(handle_kind::async_worker), dtype(dt), size(n) {}
  virtual bool pull(void* params) = 0;
  virtual bool push(const void* grads) = 0;
  const std::int32_t dtype;
  const std::size_t size;
};

inline void require_async_config(const hg_async_config& c) {
  require(c.policy >= HG_ASYNC_ASGD && c.policy <= HG_ASYNC_STALENESS_SCALED, "config.policy",
          c.policy, "must be an hg_async_policy (0 asgd, 1 delay-adaptive, 2 staleness-scaled)");
  require(c.max_updates >= 1, "config.max_updates", c.max_updates, "must be >= 1");
  require(c.server_rank >= 0, "config.server_rank", c.server_rank, "must be >= 0");
  (void)timeout_of(c.timeout_seconds, "config.timeout_seconds");
}

#if defined(HG_HAS_MPI)
namespace ha = heterograd::algorithms::async;
namespace hr = heterograd::runtime;

inline hr::remote_options remote_options_of(const hg_async_config& c) {
  hr::remote_options o;
  o.server_rank = c.server_rank;
  o.tag_base = c.tag_base;
  o.timeout = seconds(c.timeout_seconds);
  o.max_updates = c.max_updates;
  o.validate();
  return o;
}

template <std::int32_t Kind, class T>
class async_server_impl final : public async_server_object {
  using optimizer_t = decltype(make_optimizer<Kind>(std::declval<const hg_optimizer_config&>()));
  using server_t = ha::model_server<T, optimizer_t>;

 public:
  async_server_impl(MPI_Comm c, const hg_optimizer_config& opt, const hg_async_config& cfg,
                    std::int32_t dtype, const T* params, std::size_t n)
      : async_server_object(dtype, n), cfg_(cfg), o_(remote_options_of(cfg)) {
    auto o = make_optimizer<Kind>(opt);
    std::vector<T> x(params, params + n);
    // Checked before the collective, so a misplaced server fails alone.
    require_server_rank(c, cfg);
    require(mpi_rank(c) == cfg.server_rank, "config.server_rank", cfg.server_rank,
            "must be this rank (" + std::to_string(mpi_rank(c)) +
                ") to create the server: other ranks create workers");
    comm_.h = std::make_unique<comm::mpi::communicator>(c);  // collective
    const auto& t = *comm_.h;
    const auto workers = static_cast<std::size_t>(t.size() - 1);
    server_t s(std::move(x), std::move(o));
    switch (cfg.policy) {
      case HG_ASYNC_ASGD: policy_.emplace(std::in_place_index<0>, workers, std::move(s)); break;
      case HG_ASYNC_DELAY_ADAPTIVE:
        policy_.emplace(std::in_place_index<1>, workers, std::move(s));
        break;
      default: policy_.emplace(std::in_place_index<2>, workers, std::move(s)); break;
    }
  }
  void run(std::uint64_t* updates, std::uint64_t* dropped) override {
    const auto& t = *comm_.h;
    const auto summary = std::visit([&](auto& p) { return hr::serve<T>(p, t, o_); }, *policy_);
    if (updates) *updates = std::visit([](const auto& p) { return p.version(); }, *policy_);
    if (dropped) *dropped = summary.dropped;
  }
  void params(void* out) const override {
    const auto x = std::visit([](const auto& p) { return p.params(); }, *policy_);
    std::memcpy(out, x.data(), x.size() * sizeof(T));
  }

 private:
  hg_async_config cfg_;
  hr::remote_options o_;
  mpi_owned<comm::mpi::communicator> comm_;
  std::optional<std::variant<ha::asgd<T, optimizer_t>, ha::delay_adaptive_asgd<T, optimizer_t>,
                             ha::staleness_scaled_asgd<T, optimizer_t>>>
      policy_;
};

template <class T>
class async_worker_impl final : public async_worker_object {
  using client_t = hr::worker_client<T, comm::mpi::communicator>;

 public:
  async_worker_impl(MPI_Comm c, const hg_async_config& cfg, std::int32_t dtype, std::size_t n)
      : async_worker_object(dtype, n) {
    const auto o = remote_options_of(cfg);
    require_server_rank(c, cfg);
    require(mpi_rank(c) != cfg.server_rank, "config.server_rank", cfg.server_rank,
            "is this rank: create the server here, workers elsewhere");
    comm::mpi::communicator t(c);  // collective
    client_.h = std::make_unique<client_t>(t, n, o);
  }
  bool pull(void* params) override {
    if (stopped_) return false;
    stopped_ = !client_.h->pull(span<T>(static_cast<T*>(params), size));
    return !stopped_;
  }
  bool push(const void* grads) override {
    require(!stopped_, "worker", "stopped", "the server has stopped this worker: nothing to push");
    return client_.h->push(span<const T>(static_cast<const T*>(grads), size));
  }

 private:
  mpi_owned<client_t> client_;
  bool stopped_ = false;
};

template <class T>
std::shared_ptr<async_server_object> make_async_server(MPI_Comm c, const hg_optimizer_config& opt,
                                                       const hg_async_config& cfg,
                                                       std::int32_t dtype, const void* params,
                                                       std::size_t n) {
  const T* p = static_cast<const T*>(params);
  switch (opt.kind) {
    case HG_OPTIMIZER_SGD:
      return std::make_shared<async_server_impl<HG_OPTIMIZER_SGD, T>>(c, opt, cfg, dtype, p, n);
    case HG_OPTIMIZER_MOMENTUM:
      return std::make_shared<async_server_impl<HG_OPTIMIZER_MOMENTUM, T>>(c, opt, cfg, dtype, p, n);
    case HG_OPTIMIZER_NESTEROV:
      return std::make_shared<async_server_impl<HG_OPTIMIZER_NESTEROV, T>>(c, opt, cfg, dtype, p, n);
    case HG_OPTIMIZER_ADAM:
      return std::make_shared<async_server_impl<HG_OPTIMIZER_ADAM, T>>(c, opt, cfg, dtype, p, n);
    default:
      return std::make_shared<async_server_impl<HG_OPTIMIZER_ADAMW, T>>(c, opt, cfg, dtype, p, n);
  }
}
#endif

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
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    d::require_optional(major, "major");
    d::require_optional(minor, "minor");
    d::require_optional(patch, "patch");
    if (major) *major = HG_VERSION_MAJOR;
    if (minor) *minor = HG_VERSION_MINOR;
    if (patch) *patch = HG_VERSION_PATCH;
  });
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
    d::require_count(size, dtype);
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
    d::require_buffer(params, o->dtype, "params");
    d::require_buffer(grads, o->dtype, "grads");
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

// ---- MPI ------------------------------------------------------------------------------------

HG_C_EXPORT hg_status hg_mpi_init(int* provided) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    d::require_optional(provided, "provided");
#if defined(HG_HAS_MPI)
    int up = 0, level = 0;
    MPI_Initialized(&up);
    if (!up && MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &level) != MPI_SUCCESS)
      throw d::api_error(HG_ERROR_COMMUNICATION, "heterograd: MPI_Init_thread failed");
    if (up) MPI_Query_thread(&level);
    if (provided) *provided = level;
#else
    (void)provided;
    d::unsupported("MPI (compile the implementation with the heterograd::mpi component)");
#endif
  });
}

HG_C_EXPORT hg_status hg_mpi_finalize(void) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
#if defined(HG_HAS_MPI)
    int up = 0;
    MPI_Initialized(&up);
    if (up && !d::mpi_finalized()) MPI_Finalize();
#else
    d::unsupported("MPI (compile the implementation with the heterograd::mpi component)");
#endif
  });
}

HG_C_EXPORT hg_status hg_mpi_world(int64_t* comm, int* rank, int* size) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    d::require_optional(comm, "comm");
    d::require_optional(rank, "rank");
    d::require_optional(size, "size");
#if defined(HG_HAS_MPI)
    const MPI_Comm w = d::mpi_comm_of(MPI_Comm_c2f(MPI_COMM_WORLD));
    if (comm) *comm = static_cast<int64_t>(MPI_Comm_c2f(w));
    if (rank) MPI_Comm_rank(w, rank);
    if (size) MPI_Comm_size(w, size);
#else
    (void)comm;
    (void)rank;
    (void)size;
    d::unsupported("MPI (compile the implementation with the heterograd::mpi component)");
#endif
  });
}

// ---- local SGD ------------------------------------------------------------------------------

HG_C_EXPORT hg_status hg_local_sgd_config_init(hg_local_sgd_config* config) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    d::require_pointer(config, "config");
    hg_local_sgd_config c{};
    c.period = 8;  // local_sgd_config's default H
    c.warmup_steps = 0;
    c.weighting = HG_AVERAGING_UNIFORM;
    c.state_policy = HG_STATE_KEEP_LOCAL;
    c.timeout_seconds = 60.0;  // comm's default deadline
    *config = c;
  });
}

HG_C_EXPORT hg_status hg_local_sgd_create_mpi(hg_local_sgd* out, int64_t mpi_comm,
                                              const hg_optimizer_config* local_optimizer,
                                              const hg_local_sgd_config* config,
                                              const uint64_t* batches, int32_t dtype,
                                              const void* params, size_t size, int32_t device) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    d::require_pointer(out, "out");
    d::require_pointer(local_optimizer, "local_optimizer");
    d::require_pointer(config, "config");
    d::require_buffer(params, dtype, "params");
    d::require_optional(batches, "batches");
    d::require_kind(local_optimizer->kind);
    d::require_dtype(dtype);
    d::require_host_only(device, "local SGD over MPI");
    d::require_count(size, dtype);
#if defined(HG_HAS_MPI)
    const MPI_Comm c = d::mpi_comm_of(mpi_comm);
    std::vector<std::size_t> b;
    if (batches != nullptr) b.assign(batches, batches + d::mpi_size(c));
    auto o = dtype == HG_FLOAT32
                 ? d::make_local_sgd<float>(c, *local_optimizer, *config, std::move(b), dtype, params, size)
                 : d::make_local_sgd<double>(c, *local_optimizer, *config, std::move(b), dtype, params, size);
    *out = d::make_handle<hg_local_sgd>(std::move(o));
#else
    (void)mpi_comm;
    (void)batches;
    d::unsupported("MPI (compile the implementation with the heterograd::mpi component)");
#endif
  });
}

HG_C_EXPORT hg_status hg_local_sgd_step(hg_local_sgd avg, void* params, const void* grads,
                                        size_t size, int32_t device, int32_t* averaged) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    auto o = d::lookup<d::local_sgd_object>(avg, d::handle_kind::local_sgd, "avg");
    d::require_buffer(params, o->dtype, "params");
    d::require_buffer(grads, o->dtype, "grads");
    d::require_optional(averaged, "averaged");
    d::require_size("size", size, o->size);
    d::require_host_only(device, "local SGD over MPI");
    d::require_no_partial_overlap(params, grads, size * d::dtype_bytes(o->dtype));
    std::lock_guard lock(o->mutex);
    const bool a = o->step(params, grads);
    if (averaged) *averaged = a ? 1 : 0;
  });
}

HG_C_EXPORT hg_status hg_local_sgd_progress(hg_local_sgd avg, uint64_t* rounds, uint64_t* steps) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    auto o = d::lookup<d::local_sgd_object>(avg, d::handle_kind::local_sgd, "avg");
    d::require_optional(rounds, "rounds");
    d::require_optional(steps, "steps");
    std::lock_guard lock(o->mutex);
    if (rounds) *rounds = o->rounds();
    if (steps) *steps = o->steps();
  });
}

HG_C_EXPORT hg_status hg_local_sgd_destroy(hg_local_sgd avg) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] { d::destroy(avg, d::handle_kind::local_sgd); });
}

// ---- asynchronous server ------------------------------------------------------------------

HG_C_EXPORT hg_status hg_async_config_init(hg_async_config* config) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    d::require_pointer(config, "config");
    hg_async_config c{};
    c.policy = HG_ASYNC_ASGD;
    c.server_rank = 0;
    c.max_updates = 1000;
    c.timeout_seconds = 120.0;  // remote_options' default
    c.tag_base = 30000;
    *config = c;
  });
}

HG_C_EXPORT hg_status hg_async_server_create_mpi(hg_async_server* out, int64_t mpi_comm,
                                                 const hg_optimizer_config* server_optimizer,
                                                 const hg_async_config* config, int32_t dtype,
                                                 const void* initial_params, size_t size,
                                                 int32_t device) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    d::require_pointer(out, "out");
    d::require_pointer(server_optimizer, "server_optimizer");
    d::require_pointer(config, "config");
    d::require_buffer(initial_params, dtype, "initial_params");
    d::require_kind(server_optimizer->kind);
    d::require_dtype(dtype);
    d::require_host_only(device, "the asynchronous server over MPI");
    d::require_async_config(*config);
    d::require_count(size, dtype);
#if defined(HG_HAS_MPI)
    const MPI_Comm c = d::mpi_comm_of(mpi_comm);
    auto o = dtype == HG_FLOAT32
                 ? d::make_async_server<float>(c, *server_optimizer, *config, dtype, initial_params, size)
                 : d::make_async_server<double>(c, *server_optimizer, *config, dtype, initial_params, size);
    *out = d::make_handle<hg_async_server>(std::move(o));
#else
    (void)mpi_comm;
    d::unsupported("MPI (compile the implementation with the heterograd::mpi component)");
#endif
  });
}

HG_C_EXPORT hg_status hg_async_server_run(hg_async_server server, uint64_t* updates,
                                          uint64_t* dropped) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    auto o = d::lookup<d::async_server_object>(server, d::handle_kind::async_server, "server");
    d::require_optional(updates, "updates");
    d::require_optional(dropped, "dropped");
    std::lock_guard lock(o->mutex);
    o->run(updates, dropped);
  });
}

HG_C_EXPORT hg_status hg_async_server_params(hg_async_server server, void* params, size_t size,
                                             int32_t device) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    auto o = d::lookup<d::async_server_object>(server, d::handle_kind::async_server, "server");
    d::require_buffer(params, o->dtype, "params");
    d::require_size("size", size, o->size);
    d::require_host_only(device, "the asynchronous server over MPI");
    std::lock_guard lock(o->mutex);
    o->params(params);
  });
}

HG_C_EXPORT hg_status hg_async_server_destroy(hg_async_server server) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] { d::destroy(server, d::handle_kind::async_server); });
}

HG_C_EXPORT hg_status hg_async_worker_create_mpi(hg_async_worker* out, int64_t mpi_comm,
                                                 const hg_async_config* config, int32_t dtype,
                                                 size_t size) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    d::require_pointer(out, "out");
    d::require_pointer(config, "config");
    d::require_dtype(dtype);
    d::require_async_config(*config);
    d::require_count(size, dtype);
#if defined(HG_HAS_MPI)
    const MPI_Comm c = d::mpi_comm_of(mpi_comm);
    std::shared_ptr<d::async_worker_object> o;
    if (dtype == HG_FLOAT32) o = std::make_shared<d::async_worker_impl<float>>(c, *config, dtype, size);
    else o = std::make_shared<d::async_worker_impl<double>>(c, *config, dtype, size);
    *out = d::make_handle<hg_async_worker>(std::move(o));
#else
    (void)mpi_comm;
    d::unsupported("MPI (compile the implementation with the heterograd::mpi component)");
#endif
  });
}

HG_C_EXPORT hg_status hg_async_worker_pull(hg_async_worker worker, void* params, size_t size,
                                           int32_t device, int32_t* has_job) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    auto o = d::lookup<d::async_worker_object>(worker, d::handle_kind::async_worker, "worker");
    d::require_buffer(params, o->dtype, "params");
    d::require_pointer(has_job, "has_job");
    d::require_size("size", size, o->size);
    d::require_host_only(device, "an asynchronous worker over MPI");
    std::lock_guard lock(o->mutex);
    *has_job = o->pull(params) ? 1 : 0;
  });
}

HG_C_EXPORT hg_status hg_async_worker_push(hg_async_worker worker, const void* grads, size_t size,
                                           int32_t device, int32_t* accepted) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] {
    auto o = d::lookup<d::async_worker_object>(worker, d::handle_kind::async_worker, "worker");
    d::require_buffer(grads, o->dtype, "grads");
    d::require_optional(accepted, "accepted");
    d::require_size("size", size, o->size);
    d::require_host_only(device, "an asynchronous worker over MPI");
    std::lock_guard lock(o->mutex);
    const bool ok = o->push(grads);
    if (accepted) *accepted = ok ? 1 : 0;
  });
}

HG_C_EXPORT hg_status hg_async_worker_destroy(hg_async_worker worker) {
  namespace d = heterograd::c_api::detail;
  return d::guarded(__func__, [&] { d::destroy(worker, d::handle_kind::async_worker); });
}

}  // extern "C"
