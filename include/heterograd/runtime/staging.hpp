#pragma once
// Host staging for the remote server (runtime/server.hpp) and its workers, for a policy whose
// parameters live in device memory and a transport that carries host buffers (MPI without
// CUDA support, inproc): chosen explicitly, by wrapping the policy.
//
//     async::ringleader_asgd p(n, async::model_server<float, optim::adam, M>(x0, opt, nf, mem));
//     runtime::host_staged staged(p);                 // p.server().memory(), or host_staged(p, mem)
//     runtime::serve<float>(staged, mpi_comm, options);
//
// The adapter is a server policy with host parameters: params() is a host copy of the
// policy's parameters, downloaded when the version a job carries is not the one copied last
// (at most one download of d values per model version sent, however many workers get it:
// a policy changes its parameters only by an update, which moves its version; build one
// adapter per run); on_arrival uploads the arriving gradient (d values) into one buffer of
// the policy's memory, made once, and hands that buffer to the policy, whose step then makes
// only its own documented scalar transfer. Transfers per arrival: one upload; per update
// sent: one download. Everything else is the policy's: version, workers, dim, on_start and
// ready when it has them.
//
// The worker side: worker_client::pull(memory, params) and push(memory, grads) (server.hpp)
// stage a device worker's buffers through one host buffer the same way.
//
// NCCL cannot carry the server's protocol itself: it has no tags and no receive from any
// source, which the parameter-server pattern needs (results arrive in any order).

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/memory.hpp"
#include "heterograd/runtime/concepts.hpp"

namespace heterograd::runtime {

/// A server policy over host buffers for a policy whose parameters live in `Memory` (see the
/// top of this header). Holds the policy by reference: it must outlive the adapter.
template <class Policy, class Memory>
class host_staged {
 public:
  using value_type = typename Policy::value_type;
  using T = value_type;

  host_staged(Policy& policy, Memory memory)
      : p_(&policy), m_(std::move(memory)), grad_(m_.template make<T>(policy.dim())),
        mirror_(policy.dim()) {}

  /// Staging through the policy's own memory (every policy of algorithms/async).
  explicit host_staged(Policy& policy)
    requires requires(Policy& q) { q.server().memory(); }
      : host_staged(policy, policy.server().memory()) {}

  std::uint64_t version() const { return p_->version(); }
  std::size_t workers() const { return p_->workers(); }
  std::size_t dim() const { return p_->dim(); }

  /// The policy's parameters as a host copy (downloaded when its version moved since the
  /// last copy).
  span<const T> params() const {
    if (!copied_ || copied_version_ != p_->version()) {
      m_.download(p_->params(), std::span<T>(mirror_));
      copied_version_ = p_->version();
      copied_ = true;
    }
    return span<const T>(mirror_);
  }

  template <class Ctl>
    requires requires(Policy& p, Ctl& c) { p.on_start(c); }
  void on_start(Ctl& ctl) {
    p_->on_start(ctl);
  }
  template <class Ctl, class Arrival>
  void on_arrival(Ctl& ctl, const Arrival& a, const std::vector<T>& gradient) {
    require_same_size("gradient", gradient.size(), "params", p_->dim());
    const auto g = kernels::view(m_, grad_);
    m_.upload(std::span<const T>(gradient), g);
    p_->on_arrival(ctl, a, span<const T, typename Memory::memory_space>(g));
  }
  bool ready(double t)
    requires requires(Policy& p) { p.ready(t); }
  {
    return p_->ready(t);
  }

  Policy& policy() { return *p_; }
  const Policy& policy() const { return *p_; }
  const Memory& memory() const { return m_; }

 private:
  Policy* p_;
  Memory m_;
  typename Memory::template vector<T> grad_;
  mutable std::vector<T> mirror_;
  mutable std::uint64_t copied_version_ = 0;
  mutable bool copied_ = false;
};

/// Staging through the policy's own memory (policy.server().memory(): every policy of
/// algorithms/async).
template <class Policy>
host_staged(Policy&)
    -> host_staged<Policy, std::remove_cvref_t<decltype(std::declval<Policy&>().server().memory())>>;

}  // namespace heterograd::runtime
