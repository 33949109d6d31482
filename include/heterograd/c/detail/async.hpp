#pragma once
// The C API's asynchronous parameter server (hg_async_server_*, hg_async_worker_*): the
// runtime layer's serve and worker_client over comm::mpi, with ASGD, delay-adaptive or
// staleness-scaled ASGD as the server's policy. The only C API header that reaches into
// algorithms/async and runtime/server.hpp; its defaults are remote_options'.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "heterograd/algorithms/async/asgd.hpp"
#include "heterograd/c/detail/checks.hpp"
#include "heterograd/c/detail/errors.hpp"
#include "heterograd/c/detail/handles.hpp"
#include "heterograd/c/detail/memory.hpp"
#include "heterograd/c/detail/mpi.hpp"
#include "heterograd/c/detail/optimizer.hpp"
#include "heterograd/c/heterograd.h"
#include "heterograd/core/clock.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/runtime/server.hpp"

namespace heterograd::c_api::detail {

namespace ha = heterograd::algorithms::async;
namespace hr = heterograd::runtime;

/// remote_options' defaults, but for max_updates: a C run needs a stopping rule, and
/// remote_options stops on none by default.
inline hg_async_config default_async_config() {
  const hr::remote_options o;
  hg_async_config c{};
  c.policy = HG_ASYNC_ASGD;
  c.server_rank = o.server_rank;
  c.max_updates = 1000;
  c.timeout_seconds = o.timeout.count();
  c.tag_base = o.tag_base;
  return c;
}

/// The async layer's options of a C config (its validate() checks the values).
inline hr::remote_options remote_options_of(const hg_async_config& c) {
  hr::remote_options o;
  o.server_rank = c.server_rank;
  o.tag_base = c.tag_base;
  o.timeout = timeout_of(c.timeout_seconds, "config.timeout_seconds");
  o.max_updates = c.max_updates;
  o.validate();
  return o;
}

/// What the C layer adds to remote_options' checks: its policy enumeration, and a server
/// rank that can be one (the communicator's size is checked by require_server_rank).
inline void require_async_config(const hg_async_config& c) {
  require(c.policy >= HG_ASYNC_ASGD && c.policy <= HG_ASYNC_STALENESS_SCALED, "config.policy",
          c.policy, "must be an hg_async_policy (0 asgd, 1 delay-adaptive, 2 staleness-scaled)");
  require(c.server_rank >= 0, "config.server_rank", c.server_rank, "must be >= 0");
  (void)remote_options_of(c);
}

struct async_server_object : object {
  async_server_object(std::int32_t dt, std::size_t n) : object(handle_kind::async_server, dt, n) {}
  virtual void run(std::uint64_t* updates, std::uint64_t* dropped) = 0;
  virtual void params(void* out) const = 0;
};

struct async_worker_object : object {
  async_worker_object(std::int32_t dt, std::size_t n) : object(handle_kind::async_worker, dt, n) {}
  virtual bool pull(void* params) = 0;
  virtual bool push(const void* grads) = 0;
};

#if defined(HG_HAS_MPI)
inline void require_server_rank(MPI_Comm c, const hg_async_config& cfg) {
  const int n = mpi_size(c);
  require(cfg.server_rank < n, "config.server_rank", cfg.server_rank,
          "must be < the communicator's size (" + std::to_string(n) + ")");
  require(n >= 2, "mpi_comm (size)", n, "must be >= 2 (a server and a worker)");
}

template <std::int32_t Kind, class T>
class async_server_impl final : public async_server_object {
  using optimizer_t = optimizer_of<Kind>;
  using server_t = ha::model_server<T, optimizer_t>;

 public:
  async_server_impl(MPI_Comm c, const hg_optimizer_config& opt, const hg_async_config& cfg,
                    std::int32_t dtype, const T* params, std::size_t n)
      : async_server_object(dtype, n), o_(remote_options_of(cfg)) {
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
    switch (cfg.policy) {  // the alternatives in hg_async_policy's order
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
  return with_kind(opt.kind, [&](auto kind) -> std::shared_ptr<async_server_object> {
    return std::make_shared<async_server_impl<kind, T>>(c, opt, cfg, dtype, p, n);
  });
}
#endif

// ---- the C functions (C linkage: see optimizer.hpp) -----------------------------------------

extern "C" {

HG_C_EXPORT hg_status hg_async_config_init(hg_async_config* config) {
  return guarded(__func__, [&] {
    require_pointer(config, "config");
    *config = default_async_config();
  });
}

HG_C_EXPORT hg_status hg_async_server_create_mpi(hg_async_server* out, int64_t mpi_comm,
                                                 const hg_optimizer_config* server_optimizer,
                                                 const hg_async_config* config, int32_t dtype,
                                                 const void* initial_params, size_t size,
                                                 int32_t device) {
  return guarded(__func__, [&] {
    require_pointer(out, "out");
    require_pointer(server_optimizer, "server_optimizer");
    require_pointer(config, "config");
    require_buffer(initial_params, dtype, "initial_params");
    require_kind(server_optimizer->kind);
    require_dtype(dtype);
    require_host_only(device, "the asynchronous server over MPI");
    require_async_config(*config);
    require_count(size, dtype);
#if defined(HG_HAS_MPI)
    const MPI_Comm c = mpi_comm_of(mpi_comm);
    auto o = with_dtype(dtype, [&](auto t) {
      return make_async_server<typename decltype(t)::type>(c, *server_optimizer, *config, dtype,
                                                           initial_params, size);
    });
    *out = make_handle<hg_async_server>(std::move(o));
#else
    (void)mpi_comm;
    mpi_unsupported();
#endif
  });
}

HG_C_EXPORT hg_status hg_async_server_run(hg_async_server server, uint64_t* updates,
                                          uint64_t* dropped) {
  return guarded(__func__, [&] {
    auto o = lookup<async_server_object>(server, handle_kind::async_server, "server");
    require_optional(updates, "updates");
    require_optional(dropped, "dropped");
    std::lock_guard lock(o->mutex);
    o->run(updates, dropped);
  });
}

HG_C_EXPORT hg_status hg_async_server_params(hg_async_server server, void* params, size_t size,
                                             int32_t device) {
  return guarded(__func__, [&] {
    auto o = lookup<async_server_object>(server, handle_kind::async_server, "server");
    require_buffer(params, o->dtype, "params");
    require_size("size", size, o->size);
    require_host_only(device, "the asynchronous server over MPI");
    std::lock_guard lock(o->mutex);
    o->params(params);
  });
}

HG_C_EXPORT hg_status hg_async_server_destroy(hg_async_server server) {
  return guarded(__func__, [&] { destroy(server, handle_kind::async_server); });
}

HG_C_EXPORT hg_status hg_async_worker_create_mpi(hg_async_worker* out, int64_t mpi_comm,
                                                 const hg_async_config* config, int32_t dtype,
                                                 size_t size) {
  return guarded(__func__, [&] {
    require_pointer(out, "out");
    require_pointer(config, "config");
    require_dtype(dtype);
    require_async_config(*config);
    require_count(size, dtype);
#if defined(HG_HAS_MPI)
    const MPI_Comm c = mpi_comm_of(mpi_comm);
    auto o = with_dtype(dtype, [&](auto t) -> std::shared_ptr<async_worker_object> {
      return std::make_shared<async_worker_impl<typename decltype(t)::type>>(c, *config, dtype,
                                                                             size);
    });
    *out = make_handle<hg_async_worker>(std::move(o));
#else
    (void)mpi_comm;
    mpi_unsupported();
#endif
  });
}

HG_C_EXPORT hg_status hg_async_worker_pull(hg_async_worker worker, void* params, size_t size,
                                           int32_t device, int32_t* has_job) {
  return guarded(__func__, [&] {
    auto o = lookup<async_worker_object>(worker, handle_kind::async_worker, "worker");
    require_buffer(params, o->dtype, "params");
    require_pointer(has_job, "has_job");
    require_size("size", size, o->size);
    require_host_only(device, "an asynchronous worker over MPI");
    std::lock_guard lock(o->mutex);
    *has_job = o->pull(params) ? 1 : 0;
  });
}

HG_C_EXPORT hg_status hg_async_worker_push(hg_async_worker worker, const void* grads, size_t size,
                                           int32_t device, int32_t* accepted) {
  return guarded(__func__, [&] {
    auto o = lookup<async_worker_object>(worker, handle_kind::async_worker, "worker");
    require_buffer(grads, o->dtype, "grads");
    require_optional(accepted, "accepted");
    require_size("size", size, o->size);
    require_host_only(device, "an asynchronous worker over MPI");
    std::lock_guard lock(o->mutex);
    const bool ok = o->push(grads);
    if (accepted) *accepted = ok ? 1 : 0;
  });
}

HG_C_EXPORT hg_status hg_async_worker_destroy(hg_async_worker worker) {
  return guarded(__func__, [&] { destroy(worker, handle_kind::async_worker); });
}

}  // extern "C"

}  // namespace heterograd::c_api::detail
