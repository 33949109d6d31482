#pragma once
// Tagged point-to-point messages over Gloo's unbound buffers: a 32-byte header on the tag's
// header slot, then the payload on a slot of the tag and the sender's sequence number. The
// receive takes the header from its source (or any rank: Gloo's receive from a set of ranks),
// checks it, then reads the payload from that sender only. Each operation waits on a thread of
// its own, so test() polls without blocking and a posted receive completes while its rank
// waits on a send.

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "heterograd/comm/gloo/detail/group_state.hpp"
#include "heterograd/comm/request.hpp"

namespace heterograd::comm::gloo::detail {

using comm::detail::real_clock;
using comm::detail::request_state;
using comm::detail::time_source;
using comm::detail::wait_policy;

inline std::chrono::milliseconds to_ms(seconds t) {
  return std::chrono::milliseconds(
      std::max<long long>(1, static_cast<long long>(t.count() * 1000.0)));
}

/// Whether a Gloo error is one of its timeouts.
inline bool is_timeout(const std::string& what) {
  return what.find("imed out") != std::string::npos;
}

/// What Gloo may touch while an operation is pending: its header, scratch, and buffers.
struct op_storage {
  wire_header header{};
  std::vector<char> scratch{};
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> bufs{};  // destroyed first
};

/// A send or a receive, completed by its thread; the request's progress() reads the outcome.
class p2p_op : public request_state, public waiter {
 public:
  p2p_op(std::shared_ptr<group_state> g, std::string what)
      : g_(std::move(g)), what_(std::move(what)) {
    set_deadline(time_source{}, seconds::max(), wait_policy{0, 2});
    std::lock_guard<std::mutex> l(g_->m);
    g_->waiters.insert(this);
  }
  ~p2p_op() override {
    wake();
    if (worker_.joinable()) worker_.join();
    std::lock_guard<std::mutex> l(g_->m);
    g_->waiters.erase(this);
    if (g_->failed.load()) g_->graveyard.push_back(store_);  // Gloo may still refer to it
  }

  /// An unbound buffer of this operation (kept until the operation goes).
  ::gloo::transport::UnboundBuffer& buffer(void* p, std::size_t bytes) {
    store_->bufs.push_back(g_->ctx->createUnboundBuffer(p, bytes));
    return *store_->bufs.back();
  }
  op_storage& storage() { return *store_; }

  template <class F>
  void start(F body) {
    worker_ = std::thread([this, body = std::move(body)]() mutable {
      try {
        body(*this);
      } catch (const ::gloo::Exception& e) {
        err_ = failure_of(e.what());
      } catch (...) {
        err_ = std::current_exception();
      }
      ready_.store(true, std::memory_order_release);
    });
  }

  /// Waits for `buf`'s receive (or send); false when woken by a failing group or a dropped
  /// request. Gloo's own timeout fails the whole context (its rule): the group fails with it.
  bool wait_recv(::gloo::transport::UnboundBuffer& buf, int* src, seconds timeout) {
    set_current(&buf);
    const bool ok = buf.waitRecv(src, to_ms(timeout));
    set_current(nullptr);
    return ok && !woken_.load();
  }
  bool wait_send(::gloo::transport::UnboundBuffer& buf, seconds timeout) {
    set_current(&buf);
    const bool ok = buf.waitSend(to_ms(timeout));
    set_current(nullptr);
    return ok && !woken_.load();
  }
  /// The outcome of a wait that returned false.
  [[noreturn]] void throw_woken() {
    if (g_->failed.load()) std::rethrow_exception(g_->error());
    throw comm_error("heterograd: comm: gloo: " + what_ + " was abandoned while pending");
  }

  void wake() noexcept override {
    std::lock_guard<std::mutex> l(cur_m_);
    woken_.store(true);
    if (cur_) {
      try {
        cur_->abortWaitRecv();
        cur_->abortWaitSend();
      } catch (...) {
      }
    }
  }

  group_state& group() { return *g_; }
  comm::status result{};

 protected:
  bool progress() override {
    if (!ready_.load(std::memory_order_acquire)) return false;
    if (worker_.joinable()) worker_.join();
    if (err_) std::rethrow_exception(err_);
    status_ = result;
    return true;
  }
  void idle(real_clock::time_point until) override {
    std::this_thread::sleep_until(
        std::min(until, real_clock::now() + std::chrono::microseconds(20)));
  }
  void on_timeout(const std::string& why) override {
    // A wait(timeout) shorter than the operation's: the operation cannot be withdrawn from
    // Gloo, so the group fails (every rank learns it) and this request ends with a timeout.
    g_->fail(g_->rank, "rank " + std::to_string(g_->rank) + ": " + what_ + ": " + why, true, true,
             false);
    wake();
    if (worker_.joinable()) worker_.join();
    fail(std::make_exception_ptr(
        timeout_error("heterograd: comm: gloo: " + what_ + " timed out: " + why)));
  }
  /// The last handle of a pending operation went. Gloo cannot withdraw a posted operation: it
  /// would later write into (or read from) memory that is gone. So the epoch fails first (its
  /// connections close, nothing more arrives), then the thread is woken and joined.
  void abandon_pending() noexcept override {
    if (!ready_.load(std::memory_order_acquire))
      g_->fail(g_->rank,
               "rank " + std::to_string(g_->rank) + ": " + what_ +
                   " was dropped while pending (Gloo cannot withdraw it): the epoch fails",
               false, true, false);
    wake();
    if (worker_.joinable()) worker_.join();
  }
  std::string describe() const override { return "gloo " + what_; }

 private:
  std::exception_ptr failure_of(const std::string& gloo_what) {
    const bool timeout = is_timeout(gloo_what);
    // A peer's notice may be on its way behind the closing socket: give the watcher 200 ms.
    for (int i = 0; i < (timeout ? 0 : 200) && !g_->failed.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    g_->fail(g_->rank,
             "rank " + std::to_string(g_->rank) + ": " + what_ +
                 (timeout ? " timed out: " : " failed: ") + gloo_what,
             timeout, true, false);
    return g_->error();
  }
  void set_current(::gloo::transport::UnboundBuffer* b) {
    std::lock_guard<std::mutex> l(cur_m_);
    cur_ = b;
    if (b && woken_.load()) {
      b->abortWaitRecv();
      b->abortWaitSend();
    }
  }

  std::shared_ptr<group_state> g_;
  std::string what_;
  std::thread worker_{};
  std::atomic<bool> ready_{false};
  std::atomic<bool> woken_{false};
  std::exception_ptr err_{};
  std::mutex cur_m_;
  ::gloo::transport::UnboundBuffer* cur_ = nullptr;
  std::shared_ptr<op_storage> store_ = std::make_shared<op_storage>();
};

/// What a receive refuses in a header, or an empty string.
inline std::string header_fault(const wire_header& h, int tag, std::size_t max_bytes) {
  if (h.magic != header_magic)
    return "magic " + std::to_string(h.magic) + " (expected " + std::to_string(header_magic) + ")";
  if (h.version != header_version) return "version " + std::to_string(h.version) + " (expected 1)";
  if (h.type > static_cast<std::uint8_t>(dtype::f64))
    return "element type code " + std::to_string(h.type) + " (at most 7)";
  if (h.tag != tag)
    return "tag " + std::to_string(h.tag) + " on the slot of tag " + std::to_string(tag);
  if (h.bytes > max_bytes)
    return "size " + std::to_string(h.bytes) + " bytes (max_message_bytes " +
           std::to_string(max_bytes) + ")";
  return {};
}

}  // namespace heterograd::comm::gloo::detail
