#pragma once
// The parameter server every asynchronous policy owns: the model (flat parameters and its
// version k = number of updates applied), the server-side optimizer and its state, and the
// checks every arriving gradient goes through.
//
// Every arriving gradient goes through policy_base::admit before a policy uses it: the arrival
// checks, then the server's non-finite policy (heterograd/algorithms/nonfinite.hpp: fail by
// default, skip or zero; model_server's third argument). A skipped gradient is reported to
// the runtime as discarded (the worker restarts at the current model) and counted in
// model_server::nonfinite_skipped(); no policy counts it as applied, buffered or collected.
//
// The update step lives in ONE place, model_server::apply: every policy, whatever its rule
// (delay-adaptive step, gradient table mean, buffered average), ends in
//     params <- optimizer.update(weight * direction),   k <- k + 1.
// The optimizer is any heterograd/optim optimizer (or anything with its concept's shape): a
// copyable value with `init(policy, params) -> state` and `update(policy, grads, state,
// params)`, its state a plain value (optim::state: copyable, comparable, serialisable). For
// plain SGD the weight is exactly a per-update step-size multiplier (gamma_k = gamma *
// weight); for adaptive optimizers it weights the gradient they see. The default is
// optim::sgd; plain_sgd(lr) builds it.
//
// Memory (kernels/memory.hpp): the server's parameters, its scratch buffers, and the buffers
// of every policy built on it (gradient tables, accumulators, backups) live in the memory the
// server is given, made there once: the host by default (kernels::host_memory: updates with
// the build's host policy, OpenMP when compiled with it, element-wise, so bitwise the same
// for any number of threads), or device buffers with the caller's allocator and policy
// (kernels::thrust_memory: a CUDA stream for thrust::cuda::par.on(s)). A step makes no
// host/device transfer beyond one scalar: the finiteness flag of the arriving gradient
// (screen). Gradients must be in the server's memory space: a buffer of another space is a
// compile-time error (kernels::buffer_view); under nvcc a raw pointer in a span of the wrong
// space is std::invalid_argument (kernels::check_pointer). The simulator, threads and MPI
// runtimes drive servers whose memory is host-reachable (their workers read params()); a
// device server is driven by the caller's loop (on_arrival with its own control).

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <thrust/system/cpp/execution_policy.h>

#include "heterograd/algorithms/async/detail/ops.hpp"
#include "heterograd/algorithms/nonfinite.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/memory.hpp"
#include "heterograd/kernels/reduce.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/sim/engine.hpp"

namespace heterograd::algorithms::async {

/// Worker index, as the runtimes number workers.
using sim::worker_id;

/// "Never" for thresholds: a Ringmaster threshold R = infinite_delay accepts every delay.
inline constexpr std::uint64_t infinite_delay = ~std::uint64_t{0};

using kernels::host_memory;

template <class O, class T, class M = host_memory>
using optimizer_state_t = decltype(std::declval<const O&>().init(
    std::declval<const typename M::policy_type&>(),
    std::declval<span<T, typename M::memory_space>>()));

/// An optimizer the server can apply its updates through (optim/'s concept, for element T in
/// memory M): init(policy, params) gives its state, update(policy, grads, state, params) steps.
template <class O, class T, class M = host_memory>
concept server_optimizer =
    std::copy_constructible<O> &&
    requires(const O& o, const typename M::policy_type& policy,
             span<T, typename M::memory_space> p, span<const T, typename M::memory_space> g,
             optimizer_state_t<O, T, M>& st) { o.update(policy, g, st, p); };

using algorithms::nonfinite_gradient_error;
using algorithms::nonfinite_policy;
using algorithms::nonfinite_policy_name;

/// The server-side optimizer used when none is given.
using default_optimizer = optim::sgd;

/// Plain SGD with learning rate `lr` (the step size gamma of the papers).
inline optim::sgd plain_sgd(double lr) {
  return optim::sgd(optim::sgd_config{.lr = lr});
}

/// Parameters, version and server-side optimizer of an asynchronous server, in memory M.
template <class T = double, class Optimizer = default_optimizer, class Memory = host_memory>
  requires kernels::algorithm_memory<Memory> && server_optimizer<Optimizer, T, Memory>
class model_server {
 public:
  using value_type = T;
  using optimizer_type = Optimizer;
  using memory_type = Memory;
  using memory_space = typename Memory::memory_space;
  using vector_type = typename Memory::template vector<T>;
  using state_type = optimizer_state_t<Optimizer, T, Memory>;

  /// `nonfinite`: what an arriving gradient with an infinity or a NaN gets (fail by default).
  /// The initial parameters are copied into `memory` (once).
  model_server(std::vector<T> initial_params, Optimizer opt = Optimizer(),
               nonfinite_policy nonfinite = nonfinite_policy::fail, Memory memory = Memory())
      : memory_(std::move(memory)),
        params_((require(!initial_params.empty(), "params.size", initial_params.size(), "must be > 0"),
                 kernels::from_host(memory_, std::move(initial_params)))),
        scratch_(memory_.template make<T>(params_.size())), opt_(std::move(opt)),
        state_(memory_.run(params_.size(),
                           [&](const auto& p) { return opt_.init(p, kernels::view(memory_, params_)); })),
        nonfinite_(nonfinite),
        zeroed_(memory_.template make<T>(nonfinite == nonfinite_policy::zero ? params_.size() : 0)) {
    algorithms::validate_nonfinite_policy("model_server.nonfinite", nonfinite_);
  }

  std::size_t dim() const { return params_.size(); }
  /// k: updates applied so far.
  std::uint64_t version() const { return version_; }
  span<const T, memory_space> params() const { return kernels::cview(memory_, params_); }
  const Memory& memory() const { return memory_; }
  const Optimizer& optimizer() const { return opt_; }
  const state_type& optimizer_state() const { return state_; }
  nonfinite_policy nonfinite() const { return nonfinite_; }
  /// Gradients dropped by the skip policy so far.
  std::uint64_t nonfinite_skipped() const { return skipped_; }

  /// A buffer of n copies of `value` in the server's memory (the policies' tables and
  /// accumulators are made here, once).
  vector_type make(std::size_t n, T value = T(0)) const { return memory_.template make<T>(n, value); }
  span<T, memory_space> view(vector_type& v) const { return kernels::view(memory_, v); }
  span<const T, memory_space> view(const vector_type& v) const { return kernels::cview(memory_, v); }

  /// The non-finite policy on gradient g from `worker` (arriving at this version): g itself
  /// when it is finite; under zero, a copy with its non-finite entries set to 0 (valid until
  /// the next call); under skip, nothing (counted); under fail, nonfinite_gradient_error.
  /// Reads g once (sizeof(T) per element) and, off the host, reads back one flag (the step's
  /// one scalar transfer); zero writes the copy (+2 sizeof(T)). Only under fail is a gradient
  /// off the host copied to the host, to name its first bad entry in the error.
  std::optional<span<const T, memory_space>> screen(span<const T, memory_space> g, worker_id worker,
                                                    std::string_view method) {
    kernels::check_pointer(g, "gradient");
    constexpr bool on_host = std::is_same_v<vector_type, std::vector<T>>;
    std::size_t bad = g.size();
    if constexpr (on_host) {
      bad = algorithms::first_nonfinite(span<const T>(g.data(), g.size()));
      if (bad == g.size()) return g;
    } else {
      if (memory_.read(g.size(), [&](const auto& p) { return kernels::all_finite(p, g); })) return g;
    }
    switch (nonfinite_) {
      case nonfinite_policy::skip:
        ++skipped_;
        return std::nullopt;
      case nonfinite_policy::zero: {
        if (zeroed_.size() != g.size()) zeroed_ = memory_.template make<T>(g.size());
        const auto z = kernels::view(memory_, zeroed_);
        memory_.run(g.size(), [&](const auto& p) { kernels::finite_or_zero(p, g, z); });
        return span<const T, memory_space>(z);
      }
      case nonfinite_policy::fail: break;
    }
    T value{};
    if constexpr (on_host) {
      value = g[bad];
    } else {
      const auto h = memory_.download(g);
      bad = algorithms::first_nonfinite(span<const T>(h));
      if (bad < h.size()) value = h[bad];
    }
    throw nonfinite_gradient_error(method, worker, version_, "the server's version when it arrived",
                                   bad, static_cast<double>(value));
  }

  /// THE update of every policy: params <- optimizer step on (weight * direction); k <- k + 1.
  /// Checks first: nothing changes when it throws. Bytes: weight == 1 hands `direction` to
  /// the optimizer as is (SGD: 3 sizeof(T) per element); otherwise one more pass scales it
  /// into scratch (+2 sizeof(T)).
  void apply(span<const T, memory_space> direction, double weight = 1.0) {
    require_same_size("direction", direction.size(), "params", params_.size());
    require(std::isfinite(weight), "weight", weight, "must be finite");
    const auto p = kernels::view(memory_, params_);
    if (weight == 1.0) {
      memory_.run(p.size(), [&](const auto& policy) { opt_.update(policy, direction, state_, p); });
    } else {
      const auto s = kernels::view(memory_, scratch_);
      detail::ops::scale_into(memory_, static_cast<T>(weight), direction, s);
      memory_.run(p.size(), [&](const auto& policy) {
        opt_.update(policy, span<const T, memory_space>(s), state_, p);
      });
    }
    ++version_;
  }

  /// Bitwise equality of parameters, version and optimizer state (not the scratch buffers,
  /// the non-finite policy or its skip count).
  friend bool operator==(const model_server& a, const model_server& b) {
    return a.version_ == b.version_ && kernels::same_bits(a.memory_, a.params_, b.params_) &&
           a.state_ == b.state_;
  }

  /// Checkpointing (core/archive.hpp): the mutable state; the configuration is rebuilt. The
  /// parameters are written as a host std::vector<T>, whatever the memory, so a checkpoint of
  /// a device server reads back into a host one and the other way round.
  template <class Archive>
  void serialize(Archive& ar) {
    kernels::archive_buffer(ar, memory_, params_, "server.params", params_.size());
    ar(state_, version_, skipped_);
    if constexpr (!Archive::saving)
      if (scratch_.size() != params_.size()) scratch_ = memory_.template make<T>(params_.size());
  }

 private:
  Memory memory_;
  vector_type params_;
  vector_type scratch_;
  Optimizer opt_;
  state_type state_;
  std::uint64_t version_ = 0;
  nonfinite_policy nonfinite_ = nonfinite_policy::fail;
  std::uint64_t skipped_ = 0;
  vector_type zeroed_;  // zero policy: the screened copy of the last bad gradient (made once)
};

template <class T, class O>
model_server(std::vector<T>, O) -> model_server<T, O>;
template <class T, class O>
model_server(std::vector<T>, O, nonfinite_policy) -> model_server<T, O>;
template <class T, class O, class M>
model_server(std::vector<T>, O, nonfinite_policy, M) -> model_server<T, O, M>;

namespace detail {

/// A gradient buffer (std::vector, span, std::array, Thrust vector) as a span in memory space
/// S; a buffer of another space is a compile-time error.
template <class T, class S = host_space, class G>
span<const T, S> gradient_view(const G& g) {
  return kernels::buffer_view<T, S>(g);
}

/// Stops every busy worker (each restarts at the current model): the end of a round of
/// Rennala / Malenia, whose running computations are at a point no longer used.
template <class Ctl>
void stop_all_busy(Ctl& ctl, std::size_t workers) {
  for (std::size_t w = 0; w < workers; ++w) {
    const auto id = static_cast<worker_id>(w);
    if (ctl.busy(id)) ctl.interrupt(id);
  }
}

/// What every policy shares: n workers, the model server, and the arrival checks.
template <class T, class Optimizer, class Memory = host_memory>
class policy_base {
 public:
  using value_type = T;
  using server_type = model_server<T, Optimizer, Memory>;
  using memory_space = typename server_type::memory_space;

  std::uint64_t version() const { return server_.version(); }
  /// Worker ids: [0, workers()). The capacity is fixed at construction; membership says
  /// which of them take part now (docs/elastic.md).
  std::size_t workers() const { return workers_; }
  /// Whether worker w is a member now (every worker is, unless a runtime reported a leave).
  bool live(worker_id w) const { return static_cast<std::size_t>(w) < workers_ && !absent_[w]; }
  /// Members now: n_live, what the elastic rules count and average over.
  std::size_t live_workers() const { return live_; }
  /// Late results of workers that had left, dropped on arrival (never applied).
  std::uint64_t dropped_after_leave() const { return dropped_late_; }
  std::size_t dim() const { return server_.dim(); }
  span<const T, memory_space> params() const { return server_.params(); }
  const server_type& server() const { return server_; }

  /// Membership hooks every policy has (docs/elastic.md): the leaver's job is forgotten (a
  /// late result of it is dropped on arrival, never applied); a joiner is a member from now
  /// and starts at the current model. A policy with more bookkeeping hides these with its own.
  template <class Ctl>
  void on_leave(Ctl&, worker_id w) {
    mark_leave(w);
  }
  template <class Ctl>
  void on_join(Ctl&, worker_id w) {
    mark_join(w);
  }

 protected:
  policy_base(std::size_t workers, server_type server)
      : server_(std::move(server)), workers_(workers), absent_(workers, 0), live_(workers) {
    require(workers > 0, "workers", workers, "must be > 0");
  }

  /// Membership (docs/elastic.md). mark_leave: w, a member, leaves; mark_join: w, absent,
  /// joins. Both check first (key `worker`, the value, the rule) and change nothing when
  /// they throw; a policy's on_leave / on_join call them before their own bookkeeping.
  void mark_leave(worker_id w) {
    require(static_cast<std::size_t>(w) < workers_, "worker", w,
            "must be < the number of workers (" + std::to_string(workers_) + ")");
    require(!absent_[w], "worker", w, "must be a member to leave (it is absent)");
    require(live_ > 1, "worker", w, "must not be the last member to leave (no worker would remain)");
    absent_[w] = 1;
    --live_;
  }
  void mark_join(worker_id w) {
    require(static_cast<std::size_t>(w) < workers_, "worker", w,
            "must be < the number of workers (" + std::to_string(workers_) + ")");
    require(absent_[w], "worker", w, "must be absent to join (it is a member)");
    absent_[w] = 0;
    ++live_;
  }
  /// Membership in checkpoints: who is absent, and the late results dropped so far.
  template <class Archive>
  void serialize_membership(Archive& ar) {
    ar(absent_, live_, dropped_late_);
  }
  bool same_membership(const policy_base& o) const {
    return absent_ == o.absent_ && live_ == o.live_ && dropped_late_ == o.dropped_late_;
  }

  /// Checks an arrival before anything changes: a known worker, a gradient of the model's
  /// size, a version the server has reached. Returns its staleness (delay) k - v.
  template <class Arrival>
  std::uint64_t check(const Arrival& a, std::size_t gradient_size) const {
    require(static_cast<std::size_t>(a.worker) < workers_, "arrival.worker", a.worker,
            "must be < the number of workers (" + std::to_string(workers_) + ")");
    require_same_size("gradient", gradient_size, "params", server_.dim());
    require(a.version <= server_.version(), "arrival.version", a.version,
            "must be <= the server's version (" + std::to_string(server_.version()) + ")");
    return server_.version() - a.version;
  }

  /// What a policy's on_arrival starts with: check(), then the server's non-finite policy.
  /// Returns the delay and the gradient to use, or nothing when the gradient is skipped
  /// (then it is already reported as discarded: the runtime restarts the worker at the
  /// current model). Throws before anything changes (fail, bad arrivals).
  struct admitted {
    std::uint64_t delay;
    span<const T, memory_space> gradient;
  };
  template <class Ctl, class Arrival, class G>
  std::optional<admitted> admit(Ctl& ctl, const Arrival& a, const G& g, std::string_view method) {
    const std::uint64_t delay = check(a, std::size(g));
    if (absent_[a.worker]) {  // the result of a worker that left: forgotten, never applied
      ++dropped_late_;
      ctl.discarded(a.worker, delay);
      return std::nullopt;
    }
    const auto use = server_.screen(gradient_view<T, memory_space>(g), a.worker, method);
    if (!use) {
      ctl.discarded(a.worker, delay);
      return std::nullopt;
    }
    return admitted{delay, *use};
  }

  server_type server_;
  std::size_t workers_;
  std::vector<char> absent_;  // 1: worker w is not a member now
  std::size_t live_;
  std::uint64_t dropped_late_ = 0;
};

}  // namespace detail

}  // namespace heterograd::algorithms::async
