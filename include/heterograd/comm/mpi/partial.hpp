#pragma once
// The mpi partial allreduce (see heterograd/comm/mpi_partial.hpp).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "heterograd/comm/detail/frontend.hpp"
#include "heterograd/comm/mpi/communicator.hpp"
#include "heterograd/comm/mpi/detail/partial_engine.hpp"
#include "heterograd/comm/mpi/thread_level.hpp"
#include "heterograd/comm/partial.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/clock.hpp"
#include "heterograd/core/concepts.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::comm::mpi {

/// One rank's handle on a partial allreduce over MPI. Construction is collective.
template <element T>
class partial_allreduce {
 public:
  template <heterograd::clock Clock = steady_clock>
  partial_allreduce(const communicator& c, std::size_t count, partial_policy policy,
                    partial_options opt = {}, Clock clock = {}) {
    comm::detail::check_partial(c, policy, opt);
    if (c.threads() != thread_level::multiple)
      throw comm_error(std::string("heterograd: comm: a partial allreduce over MPI needs "
                                   "MPI_THREAD_MULTIPLE (its progress thread), MPI granted ") +
                       thread_level_name(c.threads()));
    comm::detail::check_partial_agreement(c, count, policy, opt, algorithm::native);
    e_ = std::make_shared<detail::partial_engine<T>>(c.native(), count, policy, opt,
                                                     comm::detail::time_source(clock));
    l_ = std::make_shared<local>();
  }

  int rank() const { return e_->rank(); }
  int size() const { return e_->size(); }
  std::size_t count() const { return e_->count(); }
  std::uint64_t round() const { return l_->round; }
  /// Rounds whose result this rank's progress thread holds.
  std::uint64_t fired_rounds() const {
    std::lock_guard<std::mutex> l(e_->m_);
    return static_cast<std::uint64_t>(e_->fired_);
  }
  const round_report& last_report() const { return l_->report; }

  request allreduce(span<T> data) { return post(data, false); }
  /// A round every rank joins fresh, folding in everything pending (see inproc's flush).
  request flush(span<T> data) { return post(data, true); }

 private:
  struct local {
    std::uint64_t round = 0;
    round_report report{};
  };

  class state final : public comm::detail::request_state {
   public:
    state(std::shared_ptr<detail::partial_engine<T>> e, std::shared_ptr<local> l, std::int64_t r)
        : e_(std::move(e)), l_(std::move(l)), r_(r) {}
    bool ok = false;

   protected:
    std::string describe() const override {
      return "partial allreduce round " + std::to_string(r_) + " on rank " + std::to_string(e_->rank());
    }
    bool progress() override {
      if (ok) return true;
      std::lock_guard<std::mutex> lk(e_->m_);
      ok = e_->poll(r_, l_->report);
      return ok;
    }
    void idle(comm::detail::real_clock::time_point until) override {
      std::unique_lock<std::mutex> lk(e_->m_);
      e_->cv_.wait_until(lk, std::min(until, comm::detail::real_clock::now() + std::chrono::milliseconds(1)));
    }
    void on_timeout(const std::string& what) override {
      e_->fail_user(std::make_exception_ptr(timeout_error(what)));
      fail(std::make_exception_ptr(timeout_error(what)));
    }

   private:
    std::shared_ptr<detail::partial_engine<T>> e_;
    std::shared_ptr<local> l_;
    std::int64_t r_;
  };

  request post(span<T> data, bool flush) {
    require_same_size("partial_allreduce.data", data.size(), "count", e_->count());
    const auto r = static_cast<std::int64_t>(l_->round++);
    auto st = std::make_shared<state>(e_, l_, r);
    st->set_deadline(comm::detail::time_source{}, e_->options().timeout, comm::detail::wait_policy{16, 4});
    try {
      st->ok = e_->arrive(r, data.data(), flush, l_->report);
    } catch (...) {
      return request::failed(std::current_exception());
    }
    return request(std::move(st));
  }

  std::shared_ptr<detail::partial_engine<T>> e_;
  std::shared_ptr<local> l_;
};

/// The communicator's partial allreduce of `count` elements of T, found by argument-dependent
/// lookup (make_partial_allreduce<T>(c, ...)): how a transport-generic runtime builds one
/// (runtime::run_worker of a partial round method). Collective (needs MPI_THREAD_MULTIPLE).
template <element T>
partial_allreduce<T> make_partial_allreduce(const communicator& c, std::size_t count,
                                            partial_policy policy, partial_options opt = {}) {
  return partial_allreduce<T>(c, count, policy, opt);
}

}  // namespace heterograd::comm::mpi
