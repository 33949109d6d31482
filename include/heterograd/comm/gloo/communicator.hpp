#pragma once
// The gloo transport's communicator handle (see heterograd/comm/gloo.hpp).

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/math.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/comm/concepts.hpp"
#include "heterograd/comm/detail/frontend.hpp"
#include "heterograd/comm/gloo/detail/group_state.hpp"
#include "heterograd/comm/gloo/detail/p2p.hpp"
#include "heterograd/comm/reduce.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::comm::gloo {

using detail::store_address;

/// A directory on a filesystem every rank sees (NFS, or /tmp for one host).
inline store_address file_store(std::string path) {
  store_address a;
  a.what = store_address::kind::file;
  a.path = std::move(path);
  return a;
}
/// A Redis server (`redis-server --port P`), when this Gloo was built with Redis.
inline store_address redis_store(std::string host, int port = 6379) {
  store_address a;
  a.what = store_address::kind::redis;
  a.host = std::move(host);
  a.port = port;
  return a;
}

struct connect_options {
  /// Deadline of the rendezvous, and Gloo's default for its own waits.
  seconds timeout = default_timeout;
  /// The address this rank listens on ("" : the host's name resolved by Gloo).
  std::string hostname = "127.0.0.1";
  /// Largest point-to-point message a receive accepts (its header is refused beyond it).
  std::size_t max_message_bytes = std::size_t{1} << 31;
};

class communicator;
communicator connect(const store_address& store, const std::string& prefix, int rank, int size,
                     const connect_options& o = {});

/// A rank's handle on one membership epoch: a Gloo context over TCP among `size` ranks that
/// met under `prefix` in a store. Cheap to copy; copies share the context.
class communicator {
 public:
  static constexpr int max_tag = detail::max_tag;
  communicator() = default;

  bool valid() const { return s_ != nullptr; }
  int rank() const { return s_ ? s_->rank : 0; }
  int size() const { return s_ ? s_->size : 0; }
  /// The store prefix of this epoch (each epoch, and each split, has its own).
  const std::string& prefix() const { return s_->prefix; }
  const store_address& store() const { return s_->address; }
  bool failed() const { return s_ && s_->failed.load(); }
  /// The Gloo context of this epoch (for Gloo's own algorithms beside heterograd's).
  std::shared_ptr<::gloo::Context> native() const { return s_ ? s_->ctx : nullptr; }

  /// Fails the group: every peer's pending and later operations fail with
  /// aborted_error("aborted by rank r: why"), and so do this handle's.
  void abort(std::string_view why) const {
    comm::detail::require_valid(valid());
    s_->fail(rank(), std::string(why.substr(0, detail::notice_text_max)), false, true);
  }

  template <element T>
  request allreduce(span<T> data, const allreduce_options& o = {}) const {
    comm::detail::check_allreduce<T>(*this, o);
    return collective(shape_of<T>(comm::detail::collective::allreduce, data.size(),
                                  2 * static_cast<int>(o.op) + (o.weight ? 1 : 0)),
                      o.timeout, [&](const auto& ctx, std::uint32_t tag) {
                        reduce_in_place(ctx, tag, data, o.op, o.weight, o.timeout);
                      });
  }

  /// in.size() = size() * out.size(): an allreduce of a copy of `in`, then this rank's block.
  template <class U, element T>
  requires std::same_as<std::remove_const_t<U>, T> request
  reduce_scatter(span<U, host_space> in, span<T> out, const reduce_scatter_options& o = {})
  const {
    comm::detail::check_reduce_scatter(*this, in.size(), out.size(), o);
    return collective(
        shape_of<T>(comm::detail::collective::reduce_scatter, out.size(), static_cast<int>(o.op)),
        o.timeout, [&](const auto& ctx, std::uint32_t tag) {
          std::vector<T> all(in.begin(), in.end());
          reduce_in_place(ctx, tag, span<T>(all), o.op, std::nullopt, o.timeout);
          std::copy_n(all.begin() + static_cast<std::ptrdiff_t>(out.size() * rank()), out.size(),
                      out.data());
        });
  }

  template <class U, element T>
  requires std::same_as<std::remove_const_t<U>, T> request
  allgather(span<U, host_space> in, span<T> out, const allgather_options& o = {})
  const {
    comm::detail::check_allgather(*this, in.size(), out.size(), o);
    return collective(shape_of<T>(comm::detail::collective::allgather, in.size(), 0), o.timeout,
                      [&](const auto& ctx, std::uint32_t tag) {
                        if (in.empty()) return;
                        ::gloo::AllgatherOptions g(ctx);
                        g.setInput(const_cast<T*>(in.data()), in.size());
                        g.setOutput(out.data(), out.size());
                        g.setTag(tag);
                        g.setTimeout(detail::to_ms(o.timeout));
                        ::gloo::allgather(g);
                      });
  }

  template <element T>
  request broadcast(span<T> data, int root, const broadcast_options& o = {}) const {
    comm::detail::check_broadcast(*this, root, o);
    return collective(shape_of<T>(comm::detail::collective::broadcast, data.size(), root),
                      o.timeout, [&](const auto& ctx, std::uint32_t tag) {
                        if (data.empty()) return;
                        ::gloo::BroadcastOptions g(ctx);
                        g.setOutput(data.data(), data.size());
                        g.setRoot(root);
                        g.setTag(tag);
                        g.setTimeout(detail::to_ms(o.timeout));
                        ::gloo::broadcast(g);
                      });
  }

  template <class U, element T>
  requires std::same_as<std::remove_const_t<U>, T> request gather(span<U, host_space> in,
                                                                  span<T> out, int root,
                                                                  const gather_options& o = {})
  const {
    comm::detail::check_gather(*this, in.size(), out.size(), root, o);
    return collective(shape_of<T>(comm::detail::collective::gather, in.size(), root), o.timeout,
                      [&](const auto& ctx, std::uint32_t tag) {
                        if (in.empty()) return;
                        ::gloo::GatherOptions g(ctx);
                        g.setInput(const_cast<T*>(in.data()), in.size());
                        if (rank() == root) g.setOutput(out.data(), out.size());
                        g.setRoot(root);
                        g.setTag(tag);
                        g.setTimeout(detail::to_ms(o.timeout));
                        ::gloo::gather(g);
                      });
  }

  request barrier(const barrier_options& o = {}) const {
    comm::detail::check_barrier(*this, o);
    return collective(
        detail::call_shape{static_cast<std::int64_t>(comm::detail::collective::barrier), 0, -1, 0},
        o.timeout, [&](const auto& ctx, std::uint32_t tag) {
          ::gloo::BarrierOptions g(ctx);
          g.setTag(tag);
          g.setTimeout(detail::to_ms(o.timeout));
          ::gloo::barrier(g);
        });
  }

  template <class U>
  requires element<std::remove_const_t<U>> request send(span<U, host_space> data, int dest, int tag,
                                                        const send_options& o = {})
  const;

  template <element T>
  request recv(span<T> data, int source, int tag, const recv_options& o = {}) const;

  /// Collective: the ranks of each color form a group ordered by (key, rank), connected under
  /// "<prefix>/split<n>/color<c>". A negative color gives an invalid communicator.
  communicator split(int color, int key, const split_options& o = {}) const;

 private:
  friend communicator connect(const store_address&, const std::string&, int, int,
                              const connect_options&);
  explicit communicator(std::shared_ptr<detail::group_state> s) : s_(std::move(s)) {}

  /// Runs `body` now (Gloo's collectives block) and returns its outcome as a finished request.
  /// A Gloo error fails the group on every rank (the epoch ends: reconnect under a new prefix).
  template <class T>
  static detail::call_shape shape_of(comm::detail::collective k, std::size_t count, int extra) {
    return {static_cast<std::int64_t>(k), static_cast<std::int64_t>(count),
            static_cast<std::int64_t>(dtype_of_v<T>), extra};
  }

  /// Runs `body` now (Gloo's collectives block) and returns its outcome as a finished request.
  /// A new shape is first compared across ranks (mismatch_error on every rank, the group stays
  /// usable). A Gloo error fails the group on every rank (the epoch ends: reconnect under a new
  /// prefix).
  template <class Body>
  request collective(const detail::call_shape& shape, seconds timeout, Body&& body) const {
    const char* what =
        comm::detail::collective_name(static_cast<comm::detail::collective>(shape[0]));
    std::lock_guard<std::mutex> l(s_->coll_m);
    if (s_->failed.load()) return request::failed(s_->error());
    const std::uint32_t tag = s_->coll_tag++;
    try {
      std::shared_ptr<::gloo::Context> ctx = s_->ctx;
      check_shape(ctx, tag, shape, timeout);
      body(ctx, tag);
      if (s_->failed.load()) return request::failed(s_->error());
      return request::completed();
    } catch (const ::gloo::Exception& e) {
      return request::failed(fail_with(std::string(what) + " (collective " + std::to_string(tag) +
                                           ", timeout " + std::to_string(timeout.count()) + " s)",
                                       e.what()));
    } catch (const comm_error&) {  // a shape mismatch, a zero weight sum: the group is fine
      return request::failed(std::current_exception());
    } catch (const std::exception& e) {  // Gloo's enforce failures are std::exceptions
      return request::failed(
          fail_with(std::string(what) + " (collective " + std::to_string(tag) + ")", e.what()));
    }
  }

  /// The first call of each shape: an allgather of every rank's shape (on the call's tag with
  /// bit 30 set). A shape enters the cache only when every rank called it, so the caches stay
  /// equal on every rank.
  void check_shape(const std::shared_ptr<::gloo::Context>& ctx, std::uint32_t tag,
                   const detail::call_shape& mine, seconds timeout) const {
    if (size() < 2 || s_->shapes.count(mine)) return;
    std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(size()));
    ::gloo::AllgatherOptions g(ctx);
    g.setInput(const_cast<std::int64_t*>(mine.data()), mine.size());
    g.setOutput(all.data(), all.size());
    g.setTag(tag | 0x40000000u);
    g.setTimeout(detail::to_ms(timeout));
    ::gloo::allgather(g);
    for (int r = 1; r < size(); ++r) {
      const detail::call_shape theirs{all[4 * r], all[4 * r + 1], all[4 * r + 2], all[4 * r + 3]};
      const detail::call_shape first{all[0], all[1], all[2], all[3]};
      if (theirs != first)
        throw mismatch_error("heterograd: comm: gloo: ranks called different collectives: rank 0 " +
                                 detail::describe(first) + ", rank " + std::to_string(r) + " " +
                                 detail::describe(theirs) +
                                 "; nothing was reduced, the group stays usable",
                             -1);
    }
    s_->shapes.insert(mine);
  }

  std::exception_ptr fail_with(const std::string& what, const std::string& gloo_what) const {
    const bool timeout = detail::is_timeout(gloo_what);
    // A peer's notice may be on its way behind the closing socket: give the watcher 200 ms.
    for (int i = 0; i < (timeout ? 0 : 200) && !s_->failed.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    s_->fail(rank(),
             "rank " + std::to_string(rank()) + ": " + what +
                 (timeout ? " timed out: " : " failed: ") + gloo_what,
             timeout, true, false);
    return s_->error();
  }

  template <element T>
  void reduce_in_place(const std::shared_ptr<::gloo::Context>& ctx, std::uint32_t tag, span<T> data,
                       reduce_op op, std::optional<double> weight, seconds timeout) const {
    if (weight)
      for (auto& x : data) x = static_cast<T>(x * static_cast<T>(*weight));
    if (!data.empty()) run_allreduce(ctx, tag, data.data(), data.size(), op, timeout);
    if (op != reduce_op::avg) return;
    double wsum = weight.value_or(1.0);
    // The weight sum rides on a tag of its own: the top bit (never reached by coll_tag).
    if (weight) run_allreduce(ctx, tag | 0x80000000u, &wsum, 1, reduce_op::sum, timeout);
    const double d = comm::detail::average_divisor(weight.has_value(), wsum, size());
    if (weight && !(d > 0.0))
      throw comm_error("heterograd: comm: weighted average with a zero sum of weights");
    comm::detail::divide(data.data(), d, data.size());
  }

  template <class T>
  static void run_allreduce(const std::shared_ptr<::gloo::Context>& ctx, std::uint32_t tag, T* p,
                            std::size_t n, reduce_op op, seconds timeout) {
    using fn = void (*)(void*, const void*, const void*, std::size_t);
    ::gloo::AllreduceOptions g(ctx);
    g.setOutput(p, n);
    g.setReduceFunction(op == reduce_op::min   ? static_cast<fn>(&::gloo::min<T>)
                        : op == reduce_op::max ? static_cast<fn>(&::gloo::max<T>)
                                               : static_cast<fn>(&::gloo::sum<T>));
    g.setTag(tag);
    g.setTimeout(detail::to_ms(timeout));
    ::gloo::allreduce(g);
  }

  std::shared_ptr<detail::group_state> s_{};
};

}  // namespace heterograd::comm::gloo
