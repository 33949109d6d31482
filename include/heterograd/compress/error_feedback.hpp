#pragma once
// Compressed allreduce with error feedback, and a transport wrapper that applies it to every
// float sum/avg allreduce of any allreduce-based algorithm (BSP, local SGD, DiLoCo's outer
// step...): the algorithm keeps calling allreduce; the wrapper compresses.
//
// Error feedback (Seide et al., "1-bit SGD", Interspeech 2014; Stich et al. NeurIPS 2018;
// Karimireddy et al. ICML 2019): each worker keeps the residual e of what its messages did not
// carry and adds it to the next input:
//     p_t = x_t + e_{t-1},   d_t = decode(encode(p_t)),   e_t = p_t - d_t,   e_0 = 0,
// so that sum_{t<=T} d_t = sum_{t<=T} x_t - e_T: nothing is lost, only delayed. The residual
// is kept in precision R (float by default; double or long double keeps the identity exact
// where float rounding would not, tests/sparse/compress_test.cpp checks it exactly).
// PowerSGD's "decoded message" is this rank's own part P Q_i^T of the aggregate.
//
// The state (codec state + residual) is a value: copy it to checkpoint, assign it to restore.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/comm/request.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/compress/codec.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::compress {

/// Bytes a rank sent through compressed exchanges and what dense allreduces would have sent
/// (ring volumes, see wire_plan::bytes_per_rank).
struct wire_stats {
  double wire_bytes = 0;
  double dense_bytes = 0;
  std::uint64_t rounds = 0;
  double ratio() const { return dense_bytes > 0 ? wire_bytes / dense_bytes : 0.0; }
  wire_stats& operator+=(const wire_stats& o) {
    wire_bytes += o.wire_bytes;
    dense_bytes += o.dense_bytes;
    rounds += o.rounds;
    return *this;
  }
  friend bool operator==(const wire_stats&, const wire_stats&) = default;
};

/// One worker's error-feedback state for one buffer: a value.
template <codec C, class R = float>
struct ef_state {
  typename C::state codec{};
  std::vector<R> residual;
  friend bool operator==(const ef_state&, const ef_state&) = default;
};

template <class R = float, codec C>
ef_state<C, R> init_error_feedback(const C& c, std::size_t n) {
  return {c.init(n), std::vector<R>(n, R(0))};
}

struct compress_options {
  bool error_feedback = true;
  seconds timeout = comm::default_timeout;
};

/// Runs the codec's exchange: own = this rank's reconstruction of p, sum = the sum of every
/// rank's reconstruction (rank order: the same bits on every rank).
template <codec C, class Transport>
void exchange(const Transport& t, const C& c, typename C::state& s, span<const float> p,
              span<float> own, span<float> sum, seconds timeout) {
  if constexpr (C::kind == exchange_kind::custom) {
    c.exchange(t, s, p, own, sum, timeout);
  } else {
    const std::size_t n = p.size(), w = c.message_words(n);
    const auto ranks = static_cast<std::size_t>(t.size());
    std::vector<std::uint32_t> mine(w), all(w * ranks);
    c.encode(p, s, span<std::uint32_t>(mine));
    t.allgather(span<const std::uint32_t>(mine), span<std::uint32_t>(all),
                comm::allgather_options{timeout})
        .wait();
    c.decode(span<const std::uint32_t>(mine), s, own);
    std::vector<float> tmp(n);
    std::fill(sum.begin(), sum.end(), 0.0f);
    // Decodes n floats per rank and adds them: (4 + 8) n bytes per rank.
    for (std::size_t q = 0; q < ranks; ++q) {
      c.decode(span<const std::uint32_t>(all.data() + q * w, w), s, span<float>(tmp));
      for (std::size_t i = 0; i < n; ++i) sum[i] += tmp[i];
    }
  }
}

/// Collective: data = sum (or average, op) over ranks of the codec's reconstructions of
/// data + residual; the residual becomes what this rank's message missed. `weight` scales
/// this rank's input (a weighted average divides by the sum of the weights). The state
/// changes only when the exchange succeeded.
template <codec C, class R, class Transport>
wire_stats compressed_allreduce(const Transport& t, const C& c, ef_state<C, R>& st, span<float> data,
                                comm::reduce_op op = comm::reduce_op::avg, const compress_options& o = {},
                                double weight = 1.0) {
  require(op == comm::reduce_op::sum || op == comm::reduce_op::avg, "compressed_allreduce.op",
          comm::reduce_op_name(op), "must be sum or avg (codecs approximate sums)");
  require(o.timeout.count() > 0, "compress_options.timeout", o.timeout.count(), "must be > 0");
  if (o.error_feedback)
    require_same_size("ef_state.residual", st.residual.size(), "data.size()", data.size());
  const std::size_t n = data.size();
  std::vector<R> pr(n);
  std::vector<float> p(n), own(n), sum(n);
  const auto w = static_cast<R>(weight);
  for (std::size_t i = 0; i < n; ++i) {
    pr[i] = w * static_cast<R>(data[i]) + (o.error_feedback ? st.residual[i] : R(0));
    p[i] = static_cast<float>(pr[i]);
  }
  typename C::state s = st.codec;  // committed only after the exchange succeeded
  exchange(t, c, s, span<const float>(p), span<float>(own), span<float>(sum), o.timeout);
  double divisor = static_cast<double>(t.size());
  if (weight != 1.0 && op == comm::reduce_op::avg) {
    double ws = weight;
    t.allreduce(span<double>(&ws, 1), comm::allreduce_options{.op = comm::reduce_op::sum, .timeout = o.timeout})
        .wait();
    divisor = ws;
  }
  st.codec = std::move(s);
  if (o.error_feedback)
    for (std::size_t i = 0; i < n; ++i) st.residual[i] = pr[i] - static_cast<R>(own[i]);
  const float d = static_cast<float>(divisor);
  for (std::size_t i = 0; i < n; ++i) data[i] = op == comm::reduce_op::avg ? sum[i] / d : sum[i];
  wire_stats ws;
  ws.wire_bytes = c.plan(n).bytes_per_rank(t.size());
  ws.dense_bytes = wire_plan{{{collective::allreduce, 4.0 * static_cast<double>(n)}}}.bytes_per_rank(t.size());
  ws.rounds = 1;
  return ws;
}

/// A transport whose float sum/avg allreduces are compressed with error feedback; every other
/// operation (other element types, min/max, point to point, ...) passes through. One
/// error-feedback slot per distinct buffer (address and size), in the order buffers are first
/// reduced. Copies of the handle share the slots, as transport handles share their group.
/// The compressed allreduce runs when called; its request is already complete.
template <class Transport, codec C, class R = float>
class compressed_transport {
 public:
  using state_type = std::vector<ef_state<C, R>>;

  compressed_transport(Transport t, C c, compress_options o = {})
      : t_(std::move(t)), s_(std::make_shared<shared>(std::move(c), o)) {
    require(o.timeout.count() > 0, "compress_options.timeout", o.timeout.count(), "must be > 0");
  }

  int rank() const { return t_.rank(); }
  int size() const { return t_.size(); }
  const Transport& inner() const { return t_; }
  const C& codec() const { return s_->codec; }

  template <class T>
  comm::request allreduce(span<T> data, const comm::allreduce_options& o = {}) const {
    if constexpr (std::is_same_v<T, float>) {
      if (o.op == comm::reduce_op::sum || o.op == comm::reduce_op::avg) {
        comm::detail::validate(o);
        std::lock_guard<std::mutex> l(s_->m);
        auto& slot = s_->slot_for(data.data(), data.size());
        if (slot.st.residual.size() != data.size()) slot.st = init_error_feedback<R>(s_->codec, data.size());
        try {
          compress_options co = s_->options;
          co.timeout = o.timeout;
          s_->stats += compressed_allreduce(t_, s_->codec, slot.st, data, o.op, co, o.weight.value_or(1.0));
        } catch (const std::invalid_argument&) {
          throw;
        } catch (...) {
          return comm::request::failed(std::current_exception());
        }
        return comm::request::completed();
      }
    }
    return t_.allreduce(data, o);
  }
  template <class U, class T>
  comm::request reduce_scatter(span<U> in, span<T> out, const comm::reduce_scatter_options& o = {}) const {
    return t_.reduce_scatter(in, out, o);
  }
  template <class U, class T>
  comm::request allgather(span<U> in, span<T> out, const comm::allgather_options& o = {}) const {
    return t_.allgather(in, out, o);
  }
  template <class T>
  comm::request broadcast(span<T> data, int root, const comm::broadcast_options& o = {}) const {
    return t_.broadcast(data, root, o);
  }
  template <class U, class T>
  comm::request gather(span<U> in, span<T> out, int root, const comm::gather_options& o = {}) const {
    return t_.gather(in, out, root, o);
  }
  template <class U>
  comm::request send(span<U> data, int dest, int tag, const comm::send_options& o = {}) const {
    return t_.send(data, dest, tag, o);
  }
  template <class T>
  comm::request recv(span<T> data, int source, int tag, const comm::recv_options& o = {}) const {
    return t_.recv(data, source, tag, o);
  }
  comm::request barrier(const comm::barrier_options& o = {}) const { return t_.barrier(o); }
  /// The sub-group, compressed with the same codec and fresh state.
  compressed_transport split(int color, int key, const comm::split_options& o = {}) const {
    return compressed_transport(t_.split(color, key, o), s_->codec, s_->options);
  }

  /// Bytes sent so far, against dense allreduces of the same buffers.
  wire_stats stats() const {
    std::lock_guard<std::mutex> l(s_->m);
    return s_->stats;
  }
  /// The error-feedback state of every slot, in slot order (a checkpoint).
  state_type state() const {
    std::lock_guard<std::mutex> l(s_->m);
    state_type out;
    for (const auto& sl : s_->slots) out.push_back(sl.st);
    return out;
  }
  /// Restores a checkpoint: slot i serves the i-th distinct buffer reduced from now on.
  void restore(state_type st) const {
    std::lock_guard<std::mutex> l(s_->m);
    s_->slots.clear();
    for (auto& e : st) s_->slots.push_back(slot{nullptr, e.residual.size(), false, std::move(e)});
  }

 private:
  struct slot {
    const void* key = nullptr;
    std::size_t n = 0;
    bool bound = false;
    ef_state<C, R> st{};
  };
  struct shared {
    shared(C c, compress_options o) : codec(std::move(c)), options(o) {}
    C codec;
    compress_options options;
    std::vector<slot> slots;
    wire_stats stats{};
    mutable std::mutex m;
    slot& slot_for(const void* key, std::size_t n) {
      for (auto& s : slots)
        if (s.bound && s.key == key && s.n == n) return s;
      for (auto& s : slots)
        if (!s.bound && s.n == n) {
          s.key = key;
          s.bound = true;
          return s;
        }
      slots.push_back(slot{key, n, true, {}});
      return slots.back();
    }
  };
  Transport t_;
  std::shared_ptr<shared> s_;
};

}  // namespace heterograd::compress
