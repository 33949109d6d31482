#pragma once
// The shared state of a gloo communicator: the store, the Gloo context of one membership epoch,
// the group's failure (the first one wins: a local error, a timeout, or a peer's abort notice),
// the abort-notice watcher, and the point-to-point operations in flight (woken on failure).

#include <gloo/common/error.h>
#include <gloo/config.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
// Debian's libgloo-dev has the Redis store (GLOO_USE_REDIS) but its header needs hiredis.h
// (libhiredis-dev): the component defines HG_GLOO_HAS_REDIS when both are there.
#if defined(HG_GLOO_HAS_REDIS) && GLOO_USE_REDIS
#include <gloo/rendezvous/redis_store.h>
#define HG_GLOO_REDIS 1
#else
#define HG_GLOO_REDIS 0
#endif

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "heterograd/comm/types.hpp"

namespace heterograd::comm::gloo::detail {

// --- the wire ---------------------------------------------------------------------------------
// Slots of heterograd's own traffic: top byte 0x70.. (Gloo's collectives use small prefixes).
inline constexpr int max_tag = (1 << 24) - 1;
inline constexpr std::uint64_t header_slot_base = 0x70ull << 56;
inline constexpr std::uint64_t payload_slot_base = 0x71ull << 56;
inline constexpr std::uint64_t notice_slot = 0x72ull << 56;
inline constexpr std::uint32_t header_magic = 0x4f4c4748u;  // "HGLO"
inline constexpr std::uint16_t header_version = 1;

inline std::uint64_t header_slot(int tag) {
  return header_slot_base | static_cast<std::uint64_t>(tag);
}
inline std::uint64_t payload_slot(int tag, std::uint32_t seq) {
  return payload_slot_base | (static_cast<std::uint64_t>(tag) << 32) | seq;
}

/// What precedes every point-to-point payload: the receiver checks it before it reads a byte
/// of the payload (magic, version, element type, tag and a size within the receiver's limit).
struct wire_header {
  std::uint32_t magic = header_magic;
  std::uint16_t version = header_version;
  std::uint8_t type = 0;  // dtype
  std::uint8_t reserved = 0;
  std::int32_t tag = 0;
  std::uint32_t seq = 0;
  std::uint64_t bytes = 0;
  std::uint64_t spare = 0;
};
static_assert(sizeof(wire_header) == 32);

/// An abort notice: who started the abort and why (at most 240 bytes of text).
struct notice {
  std::int32_t origin = -1;
  std::uint32_t length = 0;
  std::array<char, 240> text{};
};
inline constexpr std::uint32_t notice_text_max = 240;

// --- shapes -------------------------------------------------------------------------------------

/// A collective as ranks compare it: kind (comm::detail::collective), count, element type (-1:
/// none), and its operator, weight flag or root.
using call_shape = std::array<std::int64_t, 4>;

inline std::string describe(const call_shape& c) {
  const char* names[] = {"barrier",   "allreduce", "reduce_scatter", "allgather",
                         "broadcast", "gather",    "split"};
  const std::string kind =
      c[0] >= 0 && c[0] < 7 ? names[c[0]] : "collective " + std::to_string(c[0]);
  const std::string type =
      c[2] >= 0 && c[2] <= 7 ? std::string(dtype_name(static_cast<dtype>(c[2]))) : "no data";
  return kind + " of " + std::to_string(c[1]) + " " + type + " (operator/root " +
         std::to_string(c[3]) + ")";
}

// --- stores -------------------------------------------------------------------------------------

/// Where the ranks of a group meet: a directory on a filesystem every rank sees, or a Redis
/// server. `name()` is how errors name it.
struct store_address {
  enum class kind { file, redis } what = kind::file;
  std::string path{};
  std::string host{};
  int port = 6379;
  std::string name() const {
    return what == kind::file ? "file store '" + path + "'"
                              : "redis store " + host + ":" + std::to_string(port);
  }
};

inline std::shared_ptr<::gloo::rendezvous::Store> open_store(const store_address& a) {
  if (a.what == store_address::kind::file)
    return std::make_shared<::gloo::rendezvous::FileStore>(a.path);
#if HG_GLOO_REDIS
  return std::make_shared<::gloo::rendezvous::RedisStore>(a.host, a.port);
#else
  throw comm_error("heterograd: comm: gloo: " + a.name() + ": this Gloo was built without Redis");
#endif
}

// Gloo fails a whole context after one of its timeouts (tcp::Context::signalException: every
// pair gets the error, every wait on a pair wakes with it, every socket closes, so the peers
// wake too). A failing group needs the same, but Debian's libgloo-dev cannot compile
// gloo/transport/tcp/context.h (it includes gloo/common/memory.h, which the package lacks).
// So, on the GNU C++ ABI, the member is called by its exported symbol (the object is the tcp
// context, whose first base is transport::Context); elsewhere the connections are only closed.
#if defined(__GNUC__) && defined(__linux__) && defined(_GLIBCXX_USE_CXX11_ABI) && \
    _GLIBCXX_USE_CXX11_ABI && defined(__x86_64__)
#define HG_GLOO_SIGNAL_ABI 1
void tcp_context_signal_exception(void* tcp_context, const std::string& why) __asm__(
    "_ZN4gloo9transport3tcp7Context15signalExceptionERKNSt7__cxx1112basic_stringIcSt11char_"
    "traitsIcESaIcEEE");
#else
#define HG_GLOO_SIGNAL_ABI 0
#endif

struct context_access : ::gloo::Context {
  static constexpr auto transport = &context_access::transportContext_;
};

/// Fails every connection of `ctx` with `why`, as Gloo does after a timeout.
inline void signal_pairs(::gloo::Context& ctx, const std::string& why) noexcept {
  try {
#if HG_GLOO_SIGNAL_ABI
    auto& t = ctx.*(context_access::transport);
    if (t) {
      tcp_context_signal_exception(static_cast<void*>(t.get()), why);
      return;
    }
#endif
    ctx.closeConnections();
  } catch (...) {
  }
}

// --- the group --------------------------------------------------------------------------------

/// A point-to-point operation's waits, which a failing group aborts.
struct waiter {
  virtual ~waiter() = default;
  virtual void wake() noexcept = 0;
};

struct group_state {
  store_address address{};
  std::string prefix{};
  std::shared_ptr<::gloo::rendezvous::Store> store{};
  std::shared_ptr<::gloo::transport::Device> device{};
  // Buffers of operations that ended with the epoch failing: Gloo's connections may still
  // refer to them, so they go after the context (members are destroyed in reverse order).
  std::vector<std::shared_ptr<void>> graveyard{};
  notice inbox{};
  std::unique_ptr<::gloo::transport::UnboundBuffer> inbox_buf{};
  std::shared_ptr<::gloo::rendezvous::Context> ctx{};
  int rank = 0, size = 0;
  std::size_t max_message_bytes = 0;

  std::mutex coll_m;              // one collective at a time (posting order = tag order)
  std::uint32_t coll_tag = 0;     // under coll_m
  std::uint32_t split_seq = 0;    // under coll_m
  std::set<call_shape> shapes{};  // under coll_m: shapes every rank has called
  std::mutex m;                   // guards what follows
  std::map<std::pair<int, int>, std::uint32_t> send_seq{};
  std::set<waiter*> waiters{};
  std::atomic<bool> failed{false};
  std::string failure{};
  int abort_rank = -1;
  bool timed_out = false;

  std::thread watcher{};

  group_state() = default;
  group_state(const group_state&) = delete;
  group_state& operator=(const group_state&) = delete;
  ~group_state() { stop_watcher(); }

  /// The error every operation of a failed group ends with.
  std::exception_ptr error() {
    std::lock_guard<std::mutex> l(m);
    if (abort_rank >= 0) return std::make_exception_ptr(aborted_error(abort_rank, failure));
    if (timed_out)
      return std::make_exception_ptr(timeout_error("heterograd: comm: gloo: " + failure));
    return std::make_exception_ptr(comm_error("heterograd: comm: gloo: " + failure));
  }

  /// Records the group's first failure; true if this call recorded it.
  bool record(int origin, const std::string& why, bool timeout) {
    std::lock_guard<std::mutex> l(m);
    if (failed.load()) return false;
    failure = why;
    abort_rank = origin;
    timed_out = timeout;
    failed.store(true);
    return true;
  }

  /// Fails the group: tells the peers (best effort, 1 s) that `origin` failed it, wakes every
  /// local wait, closes the connections. `blame`: this rank's own operations end with
  /// aborted_error naming `origin` (an abort or a peer's notice), else with a comm_error or
  /// timeout_error (this rank's own failure).
  void fail(int origin, const std::string& why, bool timeout, bool tell, bool blame = true) {
    if (!record(blame ? origin : -1, why, timeout)) return;
    if (tell) send_notices(origin, why);
    wake_all();
    if (ctx) signal_pairs(*ctx, "heterograd: comm: gloo: group failed: " + why);
  }

  void wake_all() {
    std::lock_guard<std::mutex> l(m);
    for (waiter* w : waiters) w->wake();
  }

  void send_notices(int origin, const std::string& why) noexcept {
    notice n;
    n.origin = origin;
    n.length = static_cast<std::uint32_t>(std::min<std::size_t>(why.size(), notice_text_max));
    std::memcpy(n.text.data(), why.data(), n.length);
    try {
      auto buf = ctx->createUnboundBuffer(&n, sizeof n);
      int sent = 0;
      for (int r = 0; r < size; ++r)
        if (r != rank) buf->send(r, notice_slot), ++sent;
      for (int i = 0; i < sent; ++i)
        if (!buf->waitSend(std::chrono::milliseconds(1000))) break;
    } catch (...) {
    }
  }

  /// Posts the any-source receive of abort notices and the thread that waits on it.
  void start_watcher() {
    if (size < 2) return;
    inbox_buf = ctx->createUnboundBuffer(&inbox, sizeof inbox);
    std::vector<int> peers;
    for (int r = 0; r < size; ++r)
      if (r != rank) peers.push_back(r);
    inbox_buf->recv(peers, notice_slot);
    watcher = std::thread([this] { watch(); });
  }

  void watch() noexcept {
    int src = -1;
    bool got = false;
    try {
      got = inbox_buf->waitRecv(&src, std::chrono::hours(24 * 365));
    } catch (...) {
      return;  // the pairs failed: whoever failed them recorded why
    }
    if (!got) return;  // stop_watcher
    const bool ok = inbox.origin >= 0 && inbox.origin < size && inbox.length <= notice_text_max;
    if (!ok) {
      fail(src,
           "malformed abort notice from rank " + std::to_string(src) + " (origin " +
               std::to_string(inbox.origin) + ", length " + std::to_string(inbox.length) +
               "): refused, the group fails",
           false, false);
      return;
    }
    fail(inbox.origin, std::string(inbox.text.data(), inbox.length), false, false);
  }

  void stop_watcher() noexcept {
    if (!watcher.joinable()) return;
    try {
      inbox_buf->abortWaitRecv();
    } catch (...) {
    }
    watcher.join();
  }
};

}  // namespace heterograd::comm::gloo::detail
