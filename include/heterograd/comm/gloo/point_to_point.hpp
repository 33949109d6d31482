#pragma once
// The gloo communicator's rendezvous (connect), split, and tagged point-to-point messages.

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/comm/gloo/communicator.hpp"

namespace heterograd::comm::gloo {

namespace detail {

/// The Gloo context of `s` under s.prefix: every rank publishes its address in the store and
/// waits for the others' within `timeout`.
inline void connect_context(group_state& s, seconds timeout, const std::string& hostname) {
  // A peer that dies closes its sockets; Gloo's next write to one must be an error, not a
  // SIGPIPE that ends this process. Only a default disposition is changed.
  struct sigaction old {};
  if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL)
    ::signal(SIGPIPE, SIG_IGN);
  ::gloo::transport::tcp::attr attr;
  attr.hostname = hostname;
  s.device = ::gloo::transport::tcp::CreateDevice(attr);
  s.ctx = std::make_shared<::gloo::rendezvous::Context>(s.rank, s.size);
  s.ctx->setTimeout(to_ms(timeout));
  ::gloo::rendezvous::PrefixStore prefixed(s.prefix, *s.store);
  s.ctx->connectFullMesh(prefixed, s.device);
  s.start_watcher();
}

/// What connect and split throw when the rendezvous fails: names the store, the prefix, the
/// rank and the deadline.
[[noreturn]] inline void throw_rendezvous(const group_state& s, seconds timeout,
                                          const std::string& why) {
  const std::string text = "heterograd: comm: gloo: rank " + std::to_string(s.rank) + " of " +
                           std::to_string(s.size) + " could not meet its peers in the " +
                           s.address.name() + " under prefix '" + s.prefix + "' within " +
                           std::to_string(timeout.count()) + " s: " + why;
  if (is_timeout(why) || why.find("imeout") != std::string::npos) throw timeout_error(text);
  throw comm_error(text);
}

}  // namespace detail

/// Collective over the `size` ranks that call it with the same store and prefix: the Gloo
/// context of one membership epoch. A new epoch (other members) connects under a new prefix.
inline communicator connect(const store_address& store, const std::string& prefix, int rank,
                            int size, const connect_options& o) {
  comm::detail::validate_timeout("connect_options.timeout", o.timeout);
  require(size >= 1, "gloo::connect.size", size, "must be >= 1");
  require_in_range_co("gloo::connect.rank", rank, 0, size);
  require(!prefix.empty(), "gloo::connect.prefix", "\"\"", "must name the epoch (non-empty)");
  require(o.max_message_bytes > 0, "connect_options.max_message_bytes", o.max_message_bytes,
          "must be > 0");
  auto s = std::make_shared<detail::group_state>();
  s->address = store;
  s->prefix = prefix;
  s->rank = rank;
  s->size = size;
  s->max_message_bytes = o.max_message_bytes;
  try {
    s->store = detail::open_store(store);
    detail::connect_context(*s, o.timeout, o.hostname);
  } catch (const ::gloo::Exception& e) {
    detail::throw_rendezvous(*s, o.timeout, e.what());
  } catch (const comm_error&) {
    throw;
  } catch (const std::exception& e) {
    detail::throw_rendezvous(*s, o.timeout, e.what());
  }
  return communicator(std::move(s));
}

inline communicator communicator::split(int color, int key, const split_options& o) const {
  comm::detail::check_split(*this, o);
  std::vector<std::int64_t> mine = {color, key};
  std::vector<std::int64_t> all(2 * static_cast<std::size_t>(size()));
  allgather(span<const std::int64_t>(mine), span<std::int64_t>(all), allgather_options{o.timeout})
      .wait();
  std::uint32_t seq = 0;
  {
    std::lock_guard<std::mutex> l(s_->coll_m);
    seq = s_->split_seq++;
  }
  if (color < 0) return communicator();
  std::vector<int> members;
  for (int r = 0; r < size(); ++r)
    if (all[2 * r] == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  connect_options co;
  co.timeout = o.timeout;
  co.max_message_bytes = s_->max_message_bytes;
  const int sub_rank =
      static_cast<int>(std::find(members.begin(), members.end(), rank()) - members.begin());
  const std::string sub =
      s_->prefix + "/split" + std::to_string(seq) + "/color" + std::to_string(color);
  return connect(s_->address, sub, sub_rank, static_cast<int>(members.size()), co);
}

template <class U>
requires element<std::remove_const_t<U>> request communicator::send(span<U, host_space> data,
                                                                    int dest, int tag,
                                                                    const send_options& o)
const {
  using T = std::remove_const_t<U>;
  comm::detail::check_send(*this, dest, tag, max_tag, o);
  if (s_->failed.load()) return request::failed(s_->error());
  const std::string what =
      "send to rank " + std::to_string(dest) + " (tag " + std::to_string(tag) + ")";
  auto op = std::make_shared<detail::p2p_op>(s_, what);
  detail::wire_header& h = op->storage().header;
  h.type = static_cast<std::uint8_t>(dtype_of_v<T>);
  h.tag = tag;
  h.bytes = data.size() * sizeof(T);
  {
    std::lock_guard<std::mutex> l(s_->m);
    h.seq = s_->send_seq[{dest, tag}]++;
  }
  void* p = const_cast<T*>(data.data());
  op->start([p, dest, tag, timeout = o.timeout](detail::p2p_op& self) {
    detail::wire_header& h = self.storage().header;
    auto& hb = self.buffer(&h, sizeof h);
    hb.send(dest, detail::header_slot(tag));
    ::gloo::transport::UnboundBuffer* pb = nullptr;
    if (h.bytes > 0) {
      pb = &self.buffer(p, h.bytes);
      pb->send(dest, detail::payload_slot(tag, h.seq));
    }
    if (!self.wait_send(hb, timeout)) self.throw_woken();
    if (pb && !self.wait_send(*pb, timeout)) self.throw_woken();
  });
  return request(op);
}

template <element T>
request communicator::recv(span<T> data, int source, int tag, const recv_options& o) const {
  comm::detail::check_recv(*this, source, tag, max_tag, o);
  require(tag != any_tag, "recv.tag", "any_tag", "the gloo transport matches by tag: name one tag");
  if (s_->failed.load()) return request::failed(s_->error());
  std::vector<int> from;
  for (int r = 0; r < size(); ++r)
    if (source == any_source ? r != rank() : r == source) from.push_back(r);
  const std::string what =
      "recv from " +
      (source == any_source ? std::string("any rank") : "rank " + std::to_string(source)) +
      " (tag " + std::to_string(tag) + ")";
  auto op = std::make_shared<detail::p2p_op>(s_, what);
  const std::size_t limit = s_->max_message_bytes;
  op->start([from = std::move(from), data, tag, limit, up_to = o.up_to,
             timeout = o.timeout](detail::p2p_op& self) {
    detail::wire_header& h = self.storage().header;
    auto& hb = self.buffer(&h, sizeof h);
    hb.recv(from, detail::header_slot(tag));
    int src = -1;
    if (!self.wait_recv(hb, &src, timeout)) self.throw_woken();
    if (const std::string bad = detail::header_fault(h, tag, limit); !bad.empty())
      throw comm_error("heterograd: comm: gloo: refused the header of a message from rank " +
                       std::to_string(src) + " (tag " + std::to_string(tag) + "): " + bad +
                       "; nothing read, nothing written");
    const std::size_t want = data.size() * sizeof(T);
    const bool fits = static_cast<dtype>(h.type) == dtype_of_v<T> &&
                      comm::detail::size_accepted(want, h.bytes, up_to);
    std::vector<char>& drain = self.storage().scratch;
    drain.resize(fits ? 0 : h.bytes);
    if (h.bytes > 0) {
      auto& pb = self.buffer(fits ? static_cast<void*>(data.data()) : drain.data(), h.bytes);
      pb.recv(src, detail::payload_slot(tag, h.seq));
      if (!self.wait_recv(pb, nullptr, timeout)) self.throw_woken();
    }
    if (static_cast<dtype>(h.type) != dtype_of_v<T>)
      throw mismatch_error("heterograd: comm: gloo: message from rank " + std::to_string(src) +
                               " (tag " + std::to_string(tag) + ") holds " +
                               std::string(dtype_name(static_cast<dtype>(h.type))) +
                               ", the receive expects " + std::string(dtype_name(dtype_of_v<T>)) +
                               "; nothing written",
                           src);
    if (!fits)
      std::rethrow_exception(
          comm::detail::size_error_ptr(src, tag, want, h.bytes, dtype_of_v<T>, up_to));
    self.result = comm::status{src, tag, static_cast<std::size_t>(h.bytes)};
  });
  return request(op);
}

static_assert(transport<communicator>);

}  // namespace heterograd::comm::gloo
