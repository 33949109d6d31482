#pragma once
// The C API's local SGD averager (hg_local_sgd_*): the sync layer's local_sgd_worker over
// comm::mpi, one per rank. The only C API header that reaches into algorithms/sync; its
// defaults are those of the sync layer's local_sgd_config and worker_options.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/algorithms/sync/workers.hpp"
#include "heterograd/c/detail/checks.hpp"
#include "heterograd/c/detail/errors.hpp"
#include "heterograd/c/detail/handles.hpp"
#include "heterograd/c/detail/memory.hpp"
#include "heterograd/c/detail/mpi.hpp"
#include "heterograd/c/detail/optimizer.hpp"
#include "heterograd/c/heterograd.h"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::c_api::detail {

namespace hs = heterograd::algorithms::sync;

/// The C++ value of each hg_averaging and hg_state_policy, in the enumerations' order.
inline constexpr hs::averaging averagings[] = {hs::averaging::uniform,
                                               hs::averaging::sample_weighted};
inline constexpr hs::state_policy state_policies[] = {
    hs::state_policy::keep_local, hs::state_policy::average, hs::state_policy::reset};

/// The C value of a C++ enumerator (its index in `table`).
template <class E, std::size_t N>
std::int32_t c_enum(const E (&table)[N], E value) {
  const auto it = std::find(table, table + N, value);
  if (it == table + N) throw std::logic_error("heterograd: a C++ default the C API cannot name");
  return static_cast<std::int32_t>(it - table);
}

/// The C++ enumerator of a C value; `rule` names the C enumeration.
template <class E, std::size_t N>
E cpp_enum(const E (&table)[N], std::int32_t value, const char* field, const char* rule) {
  require(value >= 0 && static_cast<std::size_t>(value) < N, field, value, rule);
  return table[value];
}

inline hg_local_sgd_config default_local_sgd_config() {
  const hs::local_sgd_config s;
  hg_local_sgd_config c{};
  c.period = s.period;
  c.warmup_steps = s.warmup_steps;
  c.weighting = c_enum(averagings, s.weighting);
  c.state_policy = c_enum(state_policies, s.states);
  c.timeout_seconds = hs::worker_options{}.timeout.count();
  return c;
}

/// The sync layer's config of a C config (its validate() checks the values).
inline hs::local_sgd_config local_sgd_config_of(const hg_local_sgd_config& c) {
  hs::local_sgd_config s;
  s.weighting = cpp_enum(averagings, c.weighting, "config.weighting",
                         "must be an hg_averaging (0 uniform, 1 sample-weighted)");
  s.states = cpp_enum(state_policies, c.state_policy, "config.state_policy",
                      "must be an hg_state_policy (0, 1 or 2)");
  s.period = static_cast<std::size_t>(c.period);
  s.warmup_steps = static_cast<std::size_t>(c.warmup_steps);
  return s;
}

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
  local_sgd_object(std::int32_t dt, std::size_t n) : object(handle_kind::local_sgd, dt, n) {}
  virtual bool step(void* params, const void* grads) = 0;
  virtual std::uint64_t rounds() const = 0;
  virtual std::uint64_t steps() const = 0;
};

#if defined(HG_HAS_MPI)
template <std::int32_t Kind, class T>
class local_sgd_impl final : public local_sgd_object {
  using worker_t = hs::local_sgd_worker<T, optimizer_of<Kind>, comm::mpi::communicator,
                                        hs::no_outer, hs::identity_transform, mpi_memory>;

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
  return with_kind(opt.kind, [&](auto kind) -> std::shared_ptr<local_sgd_object> {
    return std::make_shared<local_sgd_impl<kind, T>>(c, opt, cfg, std::move(b), dtype, p, n);
  });
}
#endif

// ---- the C functions (C linkage: see optimizer.hpp) -----------------------------------------

extern "C" {

HG_C_EXPORT hg_status hg_local_sgd_config_init(hg_local_sgd_config* config) {
  return guarded(__func__, [&] {
    require_pointer(config, "config");
    *config = default_local_sgd_config();
  });
}

HG_C_EXPORT hg_status hg_local_sgd_create_mpi(hg_local_sgd* out, int64_t mpi_comm,
                                              const hg_optimizer_config* local_optimizer,
                                              const hg_local_sgd_config* config,
                                              const uint64_t* batches, int32_t dtype,
                                              const void* params, size_t size, int32_t device) {
  return guarded(__func__, [&] {
    require_pointer(out, "out");
    require_pointer(local_optimizer, "local_optimizer");
    require_pointer(config, "config");
    require_buffer(params, dtype, "params");
    require_optional(batches, "batches");
    require_kind(local_optimizer->kind);
    require_dtype(dtype);
    require_host_only(device, "local SGD over MPI");
    require_count(size, dtype);
#if defined(HG_HAS_MPI)
    const MPI_Comm c = mpi_comm_of(mpi_comm);
    std::vector<std::size_t> b;
    if (batches != nullptr) b.assign(batches, batches + mpi_size(c));
    auto o = with_dtype(dtype, [&](auto t) {
      return make_local_sgd<typename decltype(t)::type>(c, *local_optimizer, *config,
                                                        std::move(b), dtype, params, size);
    });
    *out = make_handle<hg_local_sgd>(std::move(o));
#else
    (void)mpi_comm;
    (void)batches;
    mpi_unsupported();
#endif
  });
}

HG_C_EXPORT hg_status hg_local_sgd_step(hg_local_sgd avg, void* params, const void* grads,
                                        size_t size, int32_t device, int32_t* averaged) {
  return guarded(__func__, [&] {
    auto o = lookup<local_sgd_object>(avg, handle_kind::local_sgd, "avg");
    require_buffer(params, o->dtype, "params");
    require_buffer(grads, o->dtype, "grads");
    require_optional(averaged, "averaged");
    require_size("size", size, o->size);
    require_host_only(device, "local SGD over MPI");
    require_no_partial_overlap(params, grads, size * dtype_bytes(o->dtype));
    std::lock_guard lock(o->mutex);
    const bool a = o->step(params, grads);
    if (averaged) *averaged = a ? 1 : 0;
  });
}

HG_C_EXPORT hg_status hg_local_sgd_progress(hg_local_sgd avg, uint64_t* rounds, uint64_t* steps) {
  return guarded(__func__, [&] {
    auto o = lookup<local_sgd_object>(avg, handle_kind::local_sgd, "avg");
    require_optional(rounds, "rounds");
    require_optional(steps, "steps");
    std::lock_guard lock(o->mutex);
    if (rounds) *rounds = o->rounds();
    if (steps) *steps = o->steps();
  });
}

HG_C_EXPORT hg_status hg_local_sgd_destroy(hg_local_sgd avg) {
  return guarded(__func__, [&] { destroy(avg, handle_kind::local_sgd); });
}

}  // extern "C"

}  // namespace heterograd::c_api::detail
