#pragma once
// Collectives with uneven counts over any transport's tagged send/recv: allgather_v (rank r
// contributes counts[r] elements; every rank receives all of them, rank after rank) and
// reduce_scatter_v (every rank contributes sum(counts) elements; rank r receives the reduction
// of elements [offset_r, offset_r + counts[r]) over all ranks). A count may be 0: a rank with
// nothing to contribute still takes part (Cephalo's uneven shards, a rank of fraction 0).
//
// Schedule: direct exchange. Rank r sends its piece (allgather_v) or the peer's slice
// (reduce_scatter_v) to r+1, r+2, ... (mod n) and receives from every peer at once; a transfer
// of 0 elements is not sent. Per rank and call, allgather_v sends (n-1)·counts[r] and receives
// S - counts[r] elements; reduce_scatter_v sends S - counts[r] and receives (n-1)·counts[r]:
// the volume of a ring, in one step of n-1 concurrent messages.
//
// Determinism. reduce_scatter_v combines the n contributions in rank order 0, 1, ..., n-1
// (acc = x_0; acc = acc op x_q), then divides by n for avg: the order and the division of the
// inproc transport's allreduce, so the owner's slice equals that allreduce's slice bitwise
// (tests/comm/uneven_test.cpp). Bytes per element of the combination: reads 2, writes 1.
//
// Counts must agree on every rank. By default (uneven_options::check_counts) each call first
// exchanges a 64-bit FNV-1a hash of (operation, element type, operator, counts) with every
// peer (n-1 messages of 8 bytes each way, one more latency); if any rank's hash differs, every
// rank throws mismatch_error before any data moves, naming the peer whose counts differ and
// this rank's counts. Unchecked, a mismatch ends in size_error or timeout_error, never a hang.
//
// One call in flight per tag: two calls that overlap use different `uneven_options::tag`s
// (messages of one sender and tag are matched in order, and a call posts its data after its
// check).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/comm/reduce.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::comm {

/// Per-call settings of allgather_v and reduce_scatter_v.
struct uneven_options {
  reduce_op op = reduce_op::sum;  ///< reduce_scatter_v only
  seconds timeout = default_timeout;
  int tag = 0x4e5;           ///< in [0, 32767] (MPI guarantees these tags)
  bool check_counts = true;  ///< exchange a hash of the counts first (see the header)
};

/// What allgather_v and reduce_scatter_v need of a transport: rank(), size() and tagged
/// send/recv of T.
template <class Transport, class T>
concept uneven_capable = requires(const Transport& t, span<const T> in, span<T> out) {
  { t.rank() } -> std::convertible_to<int>;
  { t.size() } -> std::convertible_to<int>;
  { t.send(in, 0, 0, send_options{}) } -> std::same_as<request>;
  { t.recv(out, 0, 0, recv_options{}) } -> std::same_as<request>;
};

namespace detail {

enum class uneven_kind : std::uint64_t { allgather_v = 1, reduce_scatter_v = 2 };

inline std::string_view uneven_name(uneven_kind k) {
  return k == uneven_kind::allgather_v ? "allgather_v" : "reduce_scatter_v";
}

/// FNV-1a over the words that must agree on every rank.
inline std::uint64_t uneven_hash(uneven_kind k, dtype d, reduce_op op,
                                 std::span<const std::size_t> counts) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  const auto mix = [&h](std::uint64_t w) {
    for (int b = 0; b < 8; ++b) {
      h ^= (w >> (8 * b)) & 0xffu;
      h *= 0x100000001b3ull;
    }
  };
  mix(static_cast<std::uint64_t>(k));
  mix(static_cast<std::uint64_t>(d));
  mix(k == uneven_kind::reduce_scatter_v ? static_cast<std::uint64_t>(op) : 0);
  mix(counts.size());
  for (auto c : counts) mix(c);
  return h;
}

inline std::string counts_text(std::span<const std::size_t> counts) {
  std::string s = "[";
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(counts[i]);
  }
  return s + "]";
}

/// Offsets of the pieces (exclusive prefix sums); throws when the sum overflows.
inline std::vector<std::size_t> uneven_offsets(std::span<const std::size_t> counts) {
  std::vector<std::size_t> off(counts.size() + 1, 0);
  for (std::size_t q = 0; q < counts.size(); ++q) {
    require(counts[q] <= std::numeric_limits<std::size_t>::max() / 2 - off[q], "counts (sum)",
            counts_text(counts), "must not overflow std::size_t");
    off[q + 1] = off[q] + counts[q];
  }
  return off;
}

template <class Transport, class T>
void check_uneven_call(const Transport& t, uneven_kind k, std::span<const std::size_t> counts,
                       std::size_t in, std::size_t out, const uneven_options& o) {
  const std::string name(uneven_name(k));
  require(static_cast<int>(counts.size()) == t.size(), name + ".counts (size)", counts.size(),
          "must equal the number of ranks (" + std::to_string(t.size()) + ")");
  const auto off = uneven_offsets(counts);
  const std::size_t mine = counts[static_cast<std::size_t>(t.rank())];
  const bool gather = k == uneven_kind::allgather_v;
  require_same_size(name + ".in", in, gather ? "counts[rank]" : "sum(counts)",
                    gather ? mine : off.back());
  require_same_size(name + ".out", out, gather ? "sum(counts)" : "counts[rank]",
                    gather ? off.back() : mine);
  validate_timeout(name + "_options.timeout", o.timeout);
  require(o.tag >= 0 && o.tag < 32768, name + "_options.tag", o.tag,
          "must be in [0, 32767] (MPI guarantees these tags)");
}

template <class Transport>
concept aborts_on_timeout = requires(const Transport& t, const std::string& s) {
  t.abort_after_timeout(s);
};

/// One call of allgather_v or reduce_scatter_v on one rank: the count check (optional), then
/// the data exchange, with the contributions of reduce_scatter_v combined in rank order.
template <class Transport, class T>
class uneven_state final : public request_state {
  static constexpr std::size_t check_words = 2;  // hash, the counts' sum
  static constexpr std::size_t check_elems = check_words * 8 / sizeof(T);

 public:
  uneven_state(Transport t, uneven_kind k, const T* in, T* out,
               std::span<const std::size_t> counts, const uneven_options& o)
      : t_(std::move(t)), kind_(k), in_(in), out_(out), counts_(counts.begin(), counts.end()),
        off_(uneven_offsets(counts)), o_(o), n_(t_.size()), me_(t_.rank()) {
    if (o_.check_counts && n_ > 1) {
      post_check();
    } else {
      post_data();
    }
  }

  void cancel() override {
    for (auto& r : reqs_)
      if (auto* st = request_access::state(r)) st->cancel();
  }

  void abandon_pending() noexcept override {
    cancel();
    if constexpr (aborts_on_timeout<Transport>) {
      try {
        t_.abort_after_timeout("heterograd: comm: " + describe() + " was abandoned while pending");
      } catch (...) {
      }
    }
  }

 protected:
  std::string describe() const override {
    return std::string(uneven_name(kind_)) + " of " + std::to_string(off_.back()) +
           " elements (counts " + counts_text(counts_) + ") on rank " + std::to_string(me_);
  }

  bool progress() override {
    if (checking_) {
      for (std::size_t i = 0; i < reqs_.size(); ++i)
        if (!done(i)) return false;
      verify_check();
      post_data();
    }
    if (kind_ == uneven_kind::reduce_scatter_v && !combine_ready()) return false;
    for (std::size_t i = 0; i < reqs_.size(); ++i)
      if (!done(i)) return false;
    if (kind_ == uneven_kind::reduce_scatter_v && o_.op == reduce_op::avg)
      divide(out_, static_cast<double>(n_), counts_[static_cast<std::size_t>(me_)]);
    return true;
  }

  void idle(real_clock::time_point until) override {
    for (std::size_t i = 0; i < reqs_.size(); ++i) {
      if (!ok_[i]) {
        if (auto* st = request_access::state(reqs_[i])) return st->block(until);
      }
    }
    request_state::idle(until);
  }

  void on_timeout(const std::string& what) override {
    cancel();
    if constexpr (aborts_on_timeout<Transport>) t_.abort_after_timeout(what);
    fail(std::make_exception_ptr(timeout_error(what)));
  }

 private:
  bool done(std::size_t i) {
    if (!ok_[i]) {
      if (!reqs_[i].test()) return false;
      if (auto e = reqs_[i].error()) std::rethrow_exception(e);
      ok_[i] = true;
    }
    return true;
  }

  int peer(int k) const { return (me_ + k) % n_; }

  void post_check() {
    checking_ = true;
    const std::uint64_t words[check_words] = {
        uneven_hash(kind_, dtype_of_v<T>, o_.op, counts_), off_.back()};
    std::memcpy(mine_, words, sizeof words);
    peers_.assign(static_cast<std::size_t>(n_) * check_elems, T{});
    for (int k = 1; k < n_; ++k)  // receives first, so a peer's send finds them posted
      add(t_.recv(span<T>(peers_.data() + static_cast<std::size_t>(peer(k)) * check_elems,
                          check_elems),
                  peer(k), o_.tag, recv_options{o_.timeout}));
    for (int k = 1; k < n_; ++k)
      add(t_.send(span<const T>(mine_, check_elems), peer(k), o_.tag, send_options{o_.timeout}));
  }

  void verify_check() {
    checking_ = false;
    for (int k = 1; k < n_; ++k) {
      const int q = peer(k);
      std::uint64_t theirs[check_words], own[check_words];
      std::memcpy(theirs, peers_.data() + static_cast<std::size_t>(q) * check_elems, sizeof theirs);
      std::memcpy(own, mine_, sizeof own);
      if (theirs[0] == own[0]) continue;
      throw mismatch_error(
          "heterograd: comm: " + std::string(uneven_name(kind_)) + ": rank " + std::to_string(q) +
              " called it with other counts, element type or operator than rank " +
              std::to_string(me_) + " (counts " + counts_text(counts_) + ", sum " +
              std::to_string(own[1]) + ", " + std::string(dtype_name(dtype_of_v<T>)) +
              "; rank " + std::to_string(q) + "'s counts sum to " + std::to_string(theirs[1]) +
              "): counts must be the same on every rank",
          q);
    }
    reqs_.clear();
    ok_.clear();
  }

  void add(request r) {
    reqs_.push_back(std::move(r));
    ok_.push_back(false);
  }

  void post_data() {
    const auto me = static_cast<std::size_t>(me_);
    const std::size_t c = counts_[me];
    if (kind_ == uneven_kind::allgather_v) {
      if (c > 0 && out_ + off_[me] != in_) std::memmove(out_ + off_[me], in_, c * sizeof(T));
      for (int k = 1; k < n_; ++k) {
        const auto q = static_cast<std::size_t>(peer(k));
        if (counts_[q] > 0)
          add(t_.recv(span<T>(out_ + off_[q], counts_[q]), peer(k), o_.tag,
                      recv_options{o_.timeout}));
      }
      for (int k = 1; k < n_ && c > 0; ++k)
        add(t_.send(span<const T>(out_ + off_[me], c), peer(k), o_.tag, send_options{o_.timeout}));
      return;
    }
    // reduce_scatter_v: peer q's contribution lands in tmp_[slot(q)], combined in rank order.
    tmp_.resize(c * static_cast<std::size_t>(n_ - 1));
    from_.assign(static_cast<std::size_t>(n_), npos);
    for (int k = 1; k < n_ && c > 0; ++k) {
      const auto q = static_cast<std::size_t>(peer(k));
      from_[q] = reqs_.size();
      add(t_.recv(span<T>(tmp_.data() + slot(q) * c, c), peer(k), o_.tag, recv_options{o_.timeout}));
    }
    for (int k = 1; k < n_; ++k) {
      const auto q = static_cast<std::size_t>(peer(k));
      if (counts_[q] > 0)
        add(t_.send(span<const T>(in_ + off_[q], counts_[q]), peer(k), o_.tag,
                    send_options{o_.timeout}));
    }
    next_ = 0;
  }

  std::size_t slot(std::size_t q) const {
    return q < static_cast<std::size_t>(me_) ? q : q - 1;
  }

  /// Folds in the contributions that arrived, in rank order: out = x_0, then out op= x_q.
  /// Reads 2, writes 1 element per element and contribution.
  bool combine_ready() {
    const auto me = static_cast<std::size_t>(me_);
    const std::size_t c = counts_[me];
    while (next_ < static_cast<std::size_t>(n_)) {
      const T* x = nullptr;
      if (next_ == me) {
        x = in_ + off_[me];
      } else if (c > 0) {
        if (!done(from_[next_])) return false;
        x = tmp_.data() + slot(next_) * c;
      }
      if (c > 0) {
        if (next_ == 0)
          std::memmove(out_, x, c * sizeof(T));
        else
          combine(o_.op, out_, x, c);
      }
      ++next_;
    }
    return true;
  }

  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  Transport t_;
  uneven_kind kind_;
  const T* in_;
  T* out_;
  std::vector<std::size_t> counts_, off_;
  uneven_options o_;
  int n_, me_;
  bool checking_ = false;
  T mine_[check_elems]{};
  std::vector<T> peers_, tmp_;
  std::vector<request> reqs_;
  std::vector<bool> ok_;
  std::vector<std::size_t> from_;
  std::size_t next_ = 0;
};

template <class Transport, class T>
request post_uneven(const Transport& t, uneven_kind k, const T* in, std::size_t in_size, T* out,
                    std::size_t out_size, std::span<const std::size_t> counts,
                    const uneven_options& o) {
  check_uneven_call<Transport, T>(t, k, counts, in_size, out_size, o);
  auto st = std::make_shared<uneven_state<Transport, T>>(t, k, in, out, counts, o);
  st->set_deadline(time_source{}, o.timeout, wait_policy{});
  return request(std::move(st));
}

}  // namespace detail

/// Every rank contributes `in` (counts[rank] elements); `out` (sum(counts) elements) receives
/// rank 0's piece, then rank 1's, ... on every rank. `in` may be `out`'s own piece (in place).
/// Collective: every rank calls it with the same counts (checked, see the header).
template <class Transport, element T>
  requires uneven_capable<Transport, T>
request allgather_v(const Transport& t, std::type_identity_t<span<const T>> in, span<T> out,
                    std::span<const std::size_t> counts, const uneven_options& o = {}) {
  return detail::post_uneven(t, detail::uneven_kind::allgather_v, in.data(), in.size(),
                             out.data(), out.size(), counts, o);
}

/// Every rank contributes `in` (sum(counts) elements); `out` (counts[rank] elements) receives
/// the reduction (o.op, rank order 0..n-1; avg divides the sum by n) of elements
/// [counts[0] + ... + counts[rank-1], + counts[rank]) over the ranks. `in` and `out` must not
/// overlap. Collective: every rank calls it with the same counts and operator (checked).
template <class Transport, element T>
  requires uneven_capable<Transport, T>
request reduce_scatter_v(const Transport& t, std::type_identity_t<span<const T>> in, span<T> out,
                         std::span<const std::size_t> counts, const uneven_options& o = {}) {
  return detail::post_uneven(t, detail::uneven_kind::reduce_scatter_v, in.data(), in.size(),
                             out.data(), out.size(), counts, o);
}

}  // namespace heterograd::comm
