#pragma once
// The state of one inproc send or receive, and the delivery of a message into a
// receive.

#include <atomic>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "heterograd/comm/inproc/detail/group_state.hpp"
#include "heterograd/comm/inproc/detail/notifier.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/types.hpp"

namespace heterograd::comm::inproc {

namespace detail {

using comm::detail::real_clock;
using comm::detail::request_state;

class p2p_state : public request_state, public std::enable_shared_from_this<p2p_state> {
 public:
  enum class role { send, recv };
  p2p_state(std::shared_ptr<group_state> g, int ctx, int rank, role k, int peer, int tag,
            dtype dt, void* buf, std::size_t bytes, bool up_to = false)
      : g_(std::move(g)), ctx_(ctx), r_(rank), role_(k), peer_(peer), tag_(tag), dt_(dt),
        buf_(buf), bytes_(bytes), up_to_(up_to) {}

  // Set under the owning mailbox's lock; read by the waiting thread.
  std::atomic<int> outcome{0};  // 0 pending, 1 done, 2 failed
  std::exception_ptr err{};
  comm::status st{};

  role kind() const { return role_; }
  int peer() const { return peer_; }
  int tag() const { return tag_; }
  dtype dt() const { return dt_; }
  void* buffer() const { return buf_; }
  std::size_t bytes() const { return bytes_; }
  /// A receive that takes a message shorter than its buffer (recv_options::up_to).
  bool up_to() const { return up_to_; }

  /// Removes this operation from its mailbox if it is still unmatched.
  void cancel() override {
    if (outcome.load(std::memory_order_acquire) != 0) return;
    const int owner = role_ == role::recv ? r_ : peer_;
    mailbox& mb = g_->box(ctx_, owner);
    std::lock_guard<std::mutex> l(mb.m);
    if (role_ == role::recv) {
      mb.posted.remove_if([this](const std::shared_ptr<p2p_state>& p) { return p.get() == this; });
    } else {
      mb.unexpected.remove_if([this](const message& m) { return m.sender.get() == this; });
    }
  }

  /// The last request went while unmatched: withdraw the buffer (a delivery copies under the
  /// same mailbox lock, so once cancel() returns nobody reads or writes it). The operation
  /// fails alone, as a receive that times out does.
  void abandon_pending() noexcept override { cancel(); }

 protected:
  std::string describe() const override {
    return std::string(role_ == role::send ? "send to " : "receive from ") +
           (peer_ == any_source ? std::string("any rank") : "rank " + std::to_string(peer_)) +
           " (tag " + std::to_string(tag_) + ", " + std::to_string(bytes_) + " bytes) on rank " +
           std::to_string(r_);
  }
  bool progress() override {
    const int o = outcome.load(std::memory_order_acquire);
    if (o == 1) {
      status_ = st;
      return true;
    }
    if (o == 2) std::rethrow_exception(err);
    if (g_->world->is_aborted()) {
      cancel();
      if (outcome.load(std::memory_order_acquire) == 0) throw g_->world->error();
      return progress();
    }
    return false;
  }
  void idle(real_clock::time_point until) override {
    g_->world->note.block(
        [this] { return outcome.load(std::memory_order_acquire) != 0 || g_->world->is_aborted(); },
        until);
  }
  void on_timeout(const std::string& what) override {
    cancel();
    if (outcome.load(std::memory_order_acquire) == 0) {
      fail(std::make_exception_ptr(timeout_error(what)));
    } else {
      try {
        if (progress()) finish();
      } catch (...) {
        fail(std::current_exception());
      }
    }
  }

 private:
  std::shared_ptr<group_state> g_;
  int ctx_, r_;
  role role_;
  int peer_, tag_;
  dtype dt_;
  void* buf_;
  std::size_t bytes_;
  bool up_to_ = false;
};

inline bool matches(int want_src, int want_tag, int src, int tag) {
  return (want_src == any_source || want_src == src) && (want_tag == any_tag || want_tag == tag);
}

/// Delivers message `m` into receive `r` (under the receiver's mailbox lock). Both sides
/// learn about an element-type mismatch or a size the receive does not take (exactly its
/// buffer's, or at most that with recv_options::up_to); the message is consumed then and
/// nothing is written into the buffer.
inline void deliver(message& m, p2p_state& r, notifier& note) {
  // The sender (rendezvous) and the receiver each get their own exception object: one object
  // rethrown and released in two threads is legal, but its reference count lives in the
  // uninstrumented libstdc++, so ThreadSanitizer reported the release as a race.
  auto fail = [&]() -> std::exception_ptr {
    if (m.dt != r.dt())
      return std::make_exception_ptr(mismatch_error(
          "heterograd: comm: message from rank " + std::to_string(m.source) + " (tag " +
          std::to_string(m.tag) + ") holds " + std::string(dtype_name(m.dt)) +
          " elements, the receive expects " + std::string(dtype_name(r.dt())) +
          "; refused, nothing written", m.source));
    if (!comm::detail::size_accepted(r.bytes(), m.bytes, r.up_to()))
      return comm::detail::size_error_ptr(m.source, m.tag, r.bytes(), m.bytes, r.dt(), r.up_to());
    return {};
  };
  std::exception_ptr e = fail();
  if (!e) {
    if (m.bytes)
      std::memcpy(r.buffer(), m.data ? m.data : static_cast<const void*>(m.payload.data()),
                  m.bytes);
    r.st = comm::status{m.source, m.tag, m.bytes};
  }
  if (e) r.err = e;
  r.outcome.store(e ? 2 : 1, std::memory_order_release);
  if (m.sender) {
    if (e) m.sender->err = fail();
    m.sender->outcome.store(e ? 2 : 1, std::memory_order_release);
  }
  note.notify();
}

}  // namespace detail

}  // namespace heterograd::comm::inproc
