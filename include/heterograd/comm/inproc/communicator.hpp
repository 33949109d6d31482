#pragma once
// The inproc transport's communicator handle (see heterograd/comm/inproc.hpp).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <exception>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "heterograd/comm/detail/frontend.hpp"
#include "heterograd/comm/executor.hpp"
#include "heterograd/comm/inproc/detail/collective.hpp"
#include "heterograd/comm/inproc/detail/group_state.hpp"
#include "heterograd/comm/inproc/detail/point_to_point.hpp"
#include "heterograd/comm/inproc/detail/world_state.hpp"
#include "heterograd/comm/inproc/limits.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/schedule.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::comm::inproc {

/// A rank's handle on an inproc group. Cheap to copy; copies share the group.
class communicator {
 public:
  communicator() = default;

  bool valid() const { return g_ != nullptr; }
  int rank() const { return rank_; }
  int size() const { return g_ ? g_->size : 0; }
  bool aborted() const { return g_ && g_->world->is_aborted(); }

  /// Aborts the whole world: every pending and future operation fails on every rank.
  void abort(std::string_view why) const {
    comm::detail::require_valid(valid());
    g_->world->abort(rank_, std::string(why));
  }
  /// Used by schedules: a collective that timed out, or was dropped while pending, leaves
  /// peers waiting, so abort (provisionally while this thread unwinds from an exception:
  /// the exception's message follows from the rank's handler; world_state::abort).
  void abort_after_timeout(const std::string& why) const {
    g_->world->abort(rank_, why, std::uncaught_exceptions() > 0);
  }

  template <element T>
  request allreduce(span<T> data, const allreduce_options& o = {}) const {
    comm::detail::check_allreduce<T>(*this, o);
    if (o.algo != algorithm::automatic && o.algo != algorithm::native) {
      if (g_->world->is_aborted()) return request::failed(std::make_exception_ptr(g_->world->error()));
      schedule s = make_allreduce_schedule(o.algo, rank_, size(), data.size(), sizeof(T), o.group_size);
      const auto so = comm::detail::schedule_options_for(
          o, schedule_options{}.segment_bytes, g_->locals[static_cast<std::size_t>(rank_)].sched_tags.take());
      return comm::detail::post_schedule(internal(), data, std::move(s), so, g_->world->clock,
                                         g_->world->policy);
    }
    return post_collective({.kind = detail::collective::allreduce,
                            .dt = dtype_of_v<T>,
                            .op = o.op,
                            .weighted = o.weight.has_value(),
                            .count = data.size(),
                            .weight = o.weight.value_or(1.0),
                            .out = data.data()},
                           o.timeout);
  }

  /// out[i] = reduction over ranks of in[rank*out.size() + i]; in.size() = size()*out.size().
  template <class U, element T>
    requires std::same_as<std::remove_const_t<U>, T>
  request reduce_scatter(span<U, host_space> in, span<T> out,
                         const reduce_scatter_options& o = {}) const {
    comm::detail::check_reduce_scatter(*this, in.size(), out.size(), o);
    return post_collective({.kind = detail::collective::reduce_scatter,
                            .dt = dtype_of_v<T>,
                            .op = o.op,
                            .count = in.size(),
                            .in = in.data(),
                            .out = out.data()},
                           o.timeout);
  }

  /// out = concatenation of every rank's `in` in rank order; out.size() = size()*in.size().
  template <class U, element T>
    requires std::same_as<std::remove_const_t<U>, T>
  request allgather(span<U, host_space> in, span<T> out, const allgather_options& o = {}) const {
    comm::detail::check_allgather(*this, in.size(), out.size(), o);
    return post_collective(
        {.kind = detail::collective::allgather, .dt = dtype_of_v<T>, .count = in.size(), .in = in.data(), .out = out.data()},
        o.timeout);
  }

  template <element T>
  request broadcast(span<T> data, int root, const broadcast_options& o = {}) const {
    comm::detail::check_broadcast(*this, root, o);
    return post_collective({.kind = detail::collective::broadcast,
                            .dt = dtype_of_v<T>,
                            .root = root,
                            .count = data.size(),
                            .in = data.data(),
                            .out = data.data()},
                           o.timeout);
  }

  /// Gathers every rank's (small) `in` into `out` on `root` (out.size() = size()*in.size()
  /// there; ignored elsewhere).
  template <class U, element T>
    requires std::same_as<std::remove_const_t<U>, T>
  request gather(span<U, host_space> in, span<T> out, int root,
                 const gather_options& o = {}) const {
    comm::detail::check_gather(*this, in.size(), out.size(), root, o);
    return post_collective({.kind = detail::collective::gather,
                            .dt = dtype_of_v<T>,
                            .root = root,
                            .count = in.size(),
                            .in = in.data(),
                            .out = out.data()},
                           o.timeout);
  }

  request barrier(const barrier_options& o = {}) const {
    comm::detail::check_barrier(*this, o);
    return post_collective({.kind = detail::collective::barrier}, o.timeout);
  }

  /// Tagged send (tag >= 0). Completes at post up to eager_bytes, else when received.
  template <class U>
    requires element<std::remove_const_t<U>>
  request send(span<U, host_space> data, int dest, int tag, const send_options& o = {}) const {
    using T = std::remove_const_t<U>;
    comm::detail::check_send(*this, dest, tag, comm::detail::unbounded_tag, o);
    if (g_->world->is_aborted()) return request::failed(std::make_exception_ptr(g_->world->error()));
    const std::size_t bytes = data.size() * sizeof(T);
    detail::message msg;
    msg.source = rank_;
    msg.tag = tag;
    msg.dt = dtype_of_v<T>;
    msg.bytes = bytes;
    std::shared_ptr<detail::p2p_state> st;
    if (bytes > eager_bytes) {
      st = std::make_shared<detail::p2p_state>(g_, ctx_, rank_, detail::p2p_state::role::send,
                                               dest, tag, msg.dt, nullptr, bytes);
      st->set_deadline(g_->world->clock, o.timeout, g_->world->policy);
      msg.data = data.data();
      msg.sender = st;
    }
    detail::mailbox& mb = g_->box(ctx_, dest);
    {
      std::lock_guard<std::mutex> l(mb.m);
      if (g_->world->is_aborted()) return request::failed(std::make_exception_ptr(g_->world->error()));
      for (auto it = mb.posted.begin(); it != mb.posted.end(); ++it) {
        if (detail::matches((*it)->peer(), (*it)->tag(), rank_, tag)) {
          auto r = *it;
          mb.posted.erase(it);
          if (!st) msg.data = data.data();  // delivered straight from the caller's buffer
          detail::deliver(msg, *r, g_->world->note);
          return request(st);
        }
      }
      if (!st) {
        msg.payload.resize(bytes);
        if (bytes) std::memcpy(msg.payload.data(), data.data(), bytes);
      }
      mb.unexpected.push_back(std::move(msg));
    }
    g_->world->note.notify();
    if (!st) return request::completed();
    return request(st);
  }

  /// Tagged receive; source may be any_source and tag any_tag. The request's status() says
  /// who sent the message, its tag and its size. The message must have the buffer's element
  /// type and size (at most that size with o.up_to): else a mismatch_error or size_error,
  /// the message consumed and nothing written.
  template <element T>
  request recv(span<T> data, int source, int tag, const recv_options& o = {}) const {
    comm::detail::check_recv(*this, source, tag, comm::detail::unbounded_tag, o);
    if (g_->world->is_aborted()) return request::failed(std::make_exception_ptr(g_->world->error()));
    auto st = std::make_shared<detail::p2p_state>(g_, ctx_, rank_, detail::p2p_state::role::recv,
                                                  source, tag, dtype_of_v<T>, data.data(),
                                                  data.size() * sizeof(T), o.up_to);
    st->set_deadline(g_->world->clock, o.timeout, g_->world->policy);
    detail::mailbox& mb = g_->box(ctx_, rank_);
    {
      std::lock_guard<std::mutex> l(mb.m);
      if (g_->world->is_aborted()) return request::failed(std::make_exception_ptr(g_->world->error()));
      for (auto it = mb.unexpected.begin(); it != mb.unexpected.end(); ++it) {
        if (detail::matches(source, tag, it->source, it->tag)) {
          detail::deliver(*it, *st, g_->world->note);
          mb.unexpected.erase(it);
          return request(st);
        }
      }
      mb.posted.push_back(st);
    }
    return request(st);
  }

  /// Collective: ranks with the same color form a new communicator, ordered by (key, rank).
  /// A negative color leaves the rank out (it gets an invalid communicator).
  communicator split(int color, int key, const split_options& o = {}) const {
    comm::detail::check_split(*this, o);
    detail::coll_meta m;
    m.kind = detail::collective::split;
    m.color = color;
    m.key = key;
    auto st = std::make_shared<detail::coll_state>(g_, rank_, m);
    st->set_deadline(g_->world->clock, o.timeout, g_->world->policy);
    if (g_->world->is_aborted()) throw g_->world->error();
    st->post(st);
    request(st).wait();
    ++g_->locals[static_cast<std::size_t>(rank_)].splits;
    if (st->split_result) return communicator(st->split_result, st->split_rank);
    return communicator();
  }

  /// Internal: the world's clock, notifier and abort flag (for objects built on the group).
  const std::shared_ptr<detail::world_state>& detail_world() const { return g_->world; }

  /// Internal: the k-th shared object of this rank's calls: the first rank to ask creates it
  /// with make(); every rank of the group gets the same object.
  template <class Make>
  std::shared_ptr<void> detail_shared(Make&& make) const {
    comm::detail::require_valid(valid());
    const std::uint64_t id = g_->locals[static_cast<std::size_t>(rank_)].shared++;
    std::lock_guard<std::mutex> l(g_->shared_m);
    auto& e = g_->shared[id];
    if (!e.first) {
      e.first = make();
      e.second = g_->size;
    }
    std::shared_ptr<void> obj = e.first;
    if (--e.second == 0) g_->shared.erase(id);
    return obj;
  }

  /// The same group on a separate message space: the schedules' traffic never meets user
  /// messages.
  communicator internal() const {
    communicator c = *this;
    c.ctx_ = 1;
    return c;
  }

 private:
  friend class world;
  // Each rank's handle owns the group through a control block of its own: the states of its
  // calls copy and release it on every call, and a block shared by all ranks would be a
  // cache line that every rank writes on every call.
  communicator(std::shared_ptr<detail::group_state> g, int rank) : rank_(rank) {
    detail::group_state* p = g.get();
    g_ = std::shared_ptr<detail::group_state>(p, [keep = std::move(g)](detail::group_state*) {});
  }

  request post_collective(const detail::coll_meta& m, seconds timeout) const {
    if (g_->world->is_aborted()) return request::failed(std::make_exception_ptr(g_->world->error()));
    // A pooled state that only the pool holds is over (it left the FIFO, and the caller
    // dropped its request): reuse it instead of allocating (~20 ns of a 0.4 us call).
    auto& pool = g_->locals[static_cast<std::size_t>(rank_)].pool;
    std::shared_ptr<detail::coll_state> st;
    for (auto& p : pool) {
      if (p.use_count() == 1) {
        st = p;
        st->reuse(g_, m);
        break;
      }
    }
    if (!st) {
      const bool pooled = pool.size() < 2 * window;
      st = std::make_shared<detail::coll_state>(g_, rank_, m, pooled);
      if (pooled) pool.push_back(st);
    }
    st->set_deadline(g_->world->clock, timeout, g_->world->policy);
    st->post(st);
    return request(std::move(st));
  }

  std::shared_ptr<detail::group_state> g_{};
  int rank_ = 0;
  int ctx_ = 0;
};

}  // namespace heterograd::comm::inproc
