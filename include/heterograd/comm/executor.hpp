#pragma once
// Runs a schedule (heterograd/comm/schedule.hpp) over any transport's tagged send/recv.
//
// Pipelining: every transfer is cut into segments of `segment_bytes`; all segments of a step
// are posted at once and a received segment is combined as soon as it and every segment
// before it have arrived, so the reduction of segment j overlaps the transfer of j+1.
// Combination order is the listed order of the transfers (deterministic).

#include <algorithm>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/comm/reduce.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/schedule.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::comm {

/// How a schedule runs.
struct schedule_options {
  reduce_op op = reduce_op::sum;
  std::optional<double> weight{};
  std::size_t segment_bytes = 256 * 1024;
  seconds timeout = default_timeout;
  int tag = 0;  ///< messages use tags tag and (weighted) tag + 1
};

namespace detail {

template <class Transport>
concept abortable_on_timeout = requires(const Transport& t, const std::string& s) {
  t.abort_after_timeout(s);
};

template <class Transport, class T>
class schedule_state final : public request_state {
 public:
  schedule_state(Transport t, span<T> data, schedule s, const schedule_options& o)
      : t_(std::move(t)), data_(data), s_(std::move(s)), o_(o) {
    seg_ = std::max<std::size_t>(1, o_.segment_bytes / sizeof(T));
    tmp_.resize(s_.max_step_receive());
    if (o_.weight) {
      // The divisor of a weighted average is sum_i w_i: one more (tiny) allreduce first.
      weight_sum_[0] = *o_.weight;
      schedule ws = make_allreduce_schedule(algorithm::tree, s_.rank, s_.size, 1, sizeof(double));
      schedule_options wo;
      wo.timeout = o_.timeout;
      wo.tag = o_.tag + 1;
      wsum_ = std::make_unique<schedule_state<Transport, double>>(
          t_, span<double>(weight_sum_, 1), std::move(ws), wo);
      scale(data_.data(), *o_.weight, data_.size());
    }
  }

  void cancel() override {
    for (auto& r : reqs_)
      if (auto* st = request_access::state(r)) st->cancel();
    if (wsum_) wsum_->cancel();
  }

  /// Dropped while pending: withdraw every transfer still registered (no peer then touches
  /// data_ or the scratch), and abort the group where the transport can, since the peers'
  /// schedules wait for this rank's messages.
  void abandon_pending() noexcept override {
    cancel();
    if constexpr (abortable_on_timeout<Transport>) {
      try {
        t_.abort_after_timeout("heterograd: comm: " + describe() + " was abandoned while pending");
      } catch (...) {
      }
    }
  }

 protected:
  std::string describe() const override {
    return std::string(algorithm_name(s_.algo)) + " allreduce of " + std::to_string(s_.count) +
           " elements on rank " + std::to_string(s_.rank);
  }

  bool progress() override {
    if (wsum_ && !wsum_done_) {
      if (!wsum_->test()) return false;
      if (wsum_->error()) std::rethrow_exception(wsum_->error());
      wsum_done_ = true;
    }
    while (step_ < s_.steps.size()) {
      if (!posted_) post();
      if (!advance()) return false;
      ++step_;
      posted_ = false;
    }
    if (o_.op == reduce_op::avg) {
      const double d = average_divisor(o_.weight.has_value(), weight_sum_[0], s_.size);
      if (o_.weight && !(d > 0.0))
        throw comm_error("heterograd: comm: weighted average with a zero sum of weights");
      divide(data_.data(), d, data_.size());
    }
    return true;
  }

  void idle(real_clock::time_point until) override {
    if (wsum_ && !wsum_done_) return wsum_->block(until);
    for (std::size_t i = 0; i < reqs_.size(); ++i) {
      if (!ok_[i]) {
        if (auto* st = request_access::state(reqs_[i])) return st->block(until);
      }
    }
    request_state::idle(until);
  }

  void on_timeout(const std::string& what) override {
    cancel();
    if constexpr (abortable_on_timeout<Transport>) t_.abort_after_timeout(what);
    fail(std::make_exception_ptr(timeout_error(what)));
  }

 private:
  struct pending_reduce {
    std::size_t req;   // index in reqs_
    std::size_t dst;   // offset in data_
    std::size_t src;   // offset in tmp_
    std::size_t count;
  };

  void post() {
    const auto& st = s_.steps[step_];
    reqs_.clear();
    ok_.clear();
    reduces_.clear();
    next_reduce_ = 0;
    std::size_t toff = 0;
    send_options so;
    so.timeout = o_.timeout;
    recv_options ro;
    ro.timeout = o_.timeout;
    // Receives first, so a peer's send finds them posted.
    for (const auto& tr : st.transfers) {
      if (tr.what == transfer::kind::send) continue;
      for (std::size_t k = 0; k < tr.count; k += seg_) {
        const std::size_t n = std::min(seg_, tr.count - k);
        if (tr.what == transfer::kind::recv_copy) {
          reqs_.push_back(t_.recv(span<T>(data_.data() + tr.offset + k, n), tr.peer, o_.tag, ro));
        } else {
          reduces_.push_back({reqs_.size(), tr.offset + k, toff, n});
          reqs_.push_back(t_.recv(span<T>(tmp_.data() + toff, n), tr.peer, o_.tag, ro));
          toff += n;
        }
      }
    }
    first_send_ = reqs_.size();
    for (const auto& tr : st.transfers) {
      if (tr.what != transfer::kind::send) continue;
      for (std::size_t k = 0; k < tr.count; k += seg_) {
        const std::size_t n = std::min(seg_, tr.count - k);
        reqs_.push_back(
            t_.send(span<const T>(data_.data() + tr.offset + k, n), tr.peer, o_.tag, so));
      }
    }
    ok_.assign(reqs_.size(), false);
    // Combining in place is safe during the step only if no send of the step reads the
    // ranges being combined (true of every schedule here; checked, not assumed).
    reduce_early_ = true;
    for (const auto& a : st.transfers) {
      if (a.what != transfer::kind::recv_reduce) continue;
      for (const auto& b : st.transfers) {
        if (b.what == transfer::kind::send && a.offset < b.offset + b.count &&
            b.offset < a.offset + a.count)
          reduce_early_ = false;
      }
    }
    posted_ = true;
  }

  bool done(std::size_t i) {
    if (!ok_[i]) {
      if (!reqs_[i].test()) return false;
      if (auto e = reqs_[i].error()) std::rethrow_exception(e);
      ok_[i] = true;
    }
    return true;
  }

  bool advance() {
    bool sends_done = true;
    for (std::size_t i = first_send_; i < reqs_.size(); ++i) sends_done = done(i) && sends_done;
    if (reduce_early_ || sends_done) {
      // Combine in order; each combine reads 2n and writes n elements.
      while (next_reduce_ < reduces_.size() && done(reduces_[next_reduce_].req)) {
        const auto& pr = reduces_[next_reduce_];
        combine(o_.op, data_.data() + pr.dst, tmp_.data() + pr.src, pr.count);
        ++next_reduce_;
      }
    }
    bool all = sends_done && next_reduce_ == reduces_.size();
    for (std::size_t i = 0; i < first_send_ && all; ++i) all = done(i);
    return all;
  }

  Transport t_;
  span<T> data_;
  schedule s_;
  schedule_options o_;
  std::size_t seg_ = 1;
  std::vector<T> tmp_;
  std::size_t step_ = 0;
  bool posted_ = false;
  bool reduce_early_ = true;
  std::vector<request> reqs_;
  std::vector<bool> ok_;
  std::vector<pending_reduce> reduces_;
  std::size_t next_reduce_ = 0;
  std::size_t first_send_ = 0;
  double weight_sum_[1] = {0.0};
  std::unique_ptr<schedule_state<Transport, double>> wsum_;
  bool wsum_done_ = false;
};

}  // namespace detail

namespace detail {
template <class Transport, class T>
request post_schedule(const Transport& t, span<T> data, schedule s, const schedule_options& o,
                      const time_source& clock, wait_policy policy) {
  require(s.size == t.size() && s.rank == t.rank(), "schedule.rank", s.rank,
          "must be the transport's rank, with the transport's size");
  require(s.count == data.size(), "data.size", data.size(), "must equal the schedule's count");
  require(!o.weight || std::is_floating_point_v<T>, "schedule_options.weight",
          o.weight.value_or(0.0), "weights need a floating-point element type");
  validate_timeout("schedule_options.timeout", o.timeout);
  auto st = std::make_shared<schedule_state<Transport, T>>(t, data, std::move(s), o);
  st->set_deadline(clock, o.timeout, policy);
  return request(std::move(st));
}
}  // namespace detail

/// Posts `s` (this rank's schedule) over `t`'s send/recv and returns its request. Every rank
/// of `t` must post its own schedule of the same algorithm, count and tag.
template <class Transport, class T>
request run_schedule(const Transport& t, span<T> data, schedule s, const schedule_options& o) {
  return detail::post_schedule(t, data, std::move(s), o, detail::time_source{},
                               detail::wait_policy{});
}

}  // namespace heterograd::comm
