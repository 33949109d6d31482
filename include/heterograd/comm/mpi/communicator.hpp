#pragma once
// The mpi transport's communicator handle (see heterograd/comm/mpi.hpp).

#include <mpi.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/comm/concepts.hpp"
#include "heterograd/comm/executor.hpp"
#include "heterograd/comm/mpi/detail/comm_state.hpp"
#include "heterograd/comm/mpi/detail/error.hpp"
#include "heterograd/comm/mpi/detail/matched_receive.hpp"
#include "heterograd/comm/mpi/detail/node.hpp"
#include "heterograd/comm/mpi/detail/op_state.hpp"
#include "heterograd/comm/mpi/detail/p2p_allreduce.hpp"
#include "heterograd/comm/mpi/detail/shape_check.hpp"
#include "heterograd/comm/mpi/thread_level.hpp"
#include "heterograd/comm/mpi/tuning.hpp"
#include "heterograd/comm/reduce.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/schedule.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::comm::mpi {

/// A rank's handle on an MPI communicator. Cheap to copy; copies share the duplicates.
class communicator {
 public:
  communicator() = default;

  /// Collective over `parent`: duplicates it (twice) for heterograd's use.
  explicit communicator(MPI_Comm parent, const split_options& o = {}) {
    (void)o;
    int init = 0;
    MPI_Initialized(&init);
    require(init != 0, "mpi::communicator", "MPI not initialised", "call MPI_Init_thread first");
    auto s = std::make_shared<detail::comm_state>();
    detail::check(MPI_Comm_dup(parent, &s->comm), "MPI_Comm_dup");
    detail::check(MPI_Comm_dup(parent, &s->coll), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(s->coll, MPI_ERRORS_RETURN);
    MPI_Comm_rank(s->comm, &s->rank);
    MPI_Comm_size(s->comm, &s->size);
    MPI_Comm local;
    int local_size = 1;
    if (MPI_Comm_split_type(s->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
      MPI_Comm_size(local, &local_size);
      MPI_Comm_free(&local);
    }
    const bool crowded = detail::oversubscribed(local_size);
    // A node with more ranks than cores needs waits that give the core away between polls,
    // unless MPI already does inside every poll (OpenMPI under --oversubscribe): yielding
    // twice per poll cost 10-20% at 4 ranks on 2 cores here (docs/performance.md).
    s->mpi_yields = detail::library_yields_when_idle();
    s->polite = crowded && !s->mpi_yields;
    // The allreduce algorithm depends on it, and every rank must pick the same one: the
    // choice uses whether any node of the group is oversubscribed.
    int any = crowded ? 1 : 0;
    detail::check(MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, s->comm), "MPI_Allreduce");
    s->group_crowded = any != 0;
    // MPI progresses only inside MPI calls, so waits keep polling; past a short spin they
    // yield between polls (a loaded or oversubscribed node then still runs the peer). On a
    // crowded node the spin is short either way: with OpenMPI yielding inside each poll, the
    // adaptive spin of up to 1024 polls was 1024 yields before the wait could back off to
    // sleeping (op_state::crowded_idle), and under load each yield can last a time slice
    // (e9_real's servers under mpirun -np 9 on 2 cores: 643 of 4892 updates in one run).
    s->policy = s->polite      ? comm::detail::wait_policy{8, 2}
                : s->mpi_yields ? comm::detail::wait_policy{8, 0}
                                : comm::detail::wait_policy{256, 0};
    s->inner = std::make_shared<detail::comm_state>();
    s->inner->comm = s->coll;
    s->inner->owns = false;
    s->inner->outer = s.get();
    s->inner->rank = s->rank;
    s->inner->size = s->size;
    s->inner->polite = s->polite;
    s->inner->mpi_yields = s->mpi_yields;
    s->inner->group_crowded = s->group_crowded;
    s->inner->policy = s->policy;
    s_ = std::move(s);
  }

  bool valid() const { return s_ != nullptr; }
  int rank() const { return s_ ? s_->rank : 0; }
  int size() const { return s_ ? s_->size : 0; }
  /// The duplicate carrying this handle's user traffic.
  MPI_Comm native() const { return s_ ? s_->comm : MPI_COMM_NULL; }
  /// The thread level MPI granted this process.
  thread_level threads() const { return query_thread_level(); }
  /// True once an operation failed in a way that leaves the communicator unusable.
  bool failed() const { return s_ && s_->is_failed(); }

  /// Aborts the group without ending the job: tells every peer (their pending and later
  /// operations fail with "aborted by rank r: why") and marks this handle failed.
  void abort(std::string_view why) const {
    comm::detail::require_valid(valid());
    s_->send_abort_notices(why);
    std::lock_guard<std::mutex> l(s_->m);
    if (!s_->failed.load()) {
      s_->failure = "aborted by rank " + std::to_string(rank()) + ": " + std::string(why.substr(0, 200));
      s_->abort_rank = rank();
    }
    s_->failed.store(true);
  }
  /// Ends every process of the job (MPI_Abort).
  [[noreturn]] void abort_job(int code = 1) const {
    MPI_Abort(s_ ? s_->comm : MPI_COMM_WORLD, code);
    std::abort();
  }
  /// Used by schedules run over this handle: a collective that timed out leaves the peers
  /// waiting, so they are told.
  void abort_after_timeout(const std::string& why) const { s_->fail_and_tell_peers(why); }

  template <element T>
  request allreduce(span<T> data, const allreduce_options& o = {}) const {
    comm::detail::check_allreduce<T>(*this, o);
    if (s_->is_failed_cheap()) return request::failed(std::make_exception_ptr(s_->error()));
    const std::size_t bytes = data.size() * sizeof(T);
    const detail::call_shape shape{detail::collective::allreduce, data.size(), dtype_of_v<T>,
                                   detail::allreduce_extra(o.op, o.weight.has_value())};
    if (blocking_requested(o)) return blocking_allreduce(data, o, shape);
    const algorithm a = choose(o.algo, bytes);
    if (a != algorithm::native && !o.weight) {
      // The deadline-honouring default: a schedule straight over MPI_Isend/MPI_Irecv.
      const bool doubling = o.algo == algorithm::automatic && use_doubling(bytes);
      // The internal state carries the traffic (an internal() handle is its own).
      detail::comm_state* home = s_->inner ? s_->inner.get() : s_.get();
      auto& spare = home->spare[static_cast<int>(dtype_of_v<T>)];
      std::shared_ptr<detail::p2p_state<T>> st;
      if (detail::p2p_state<T>::reusable(spare)) {
        st = std::static_pointer_cast<detail::p2p_state<T>>(spare);
      } else {
        st = std::make_shared<detail::p2p_state<T>>();
        spare = st;
      }
      const auto so = comm::detail::schedule_options_for(o, tuning.segment_bytes, s_->sched_tags.take());
      st->arm(std::shared_ptr<detail::comm_state>(s_, home), s_.get(), data,
              cached_schedule(doubling ? -1 : static_cast<int>(a), data.size(), o.group_size), so.op, so.tag,
              so.segment_bytes / sizeof(T), doubling);
      if (s_->shapes.note(shape)) st->check_shape_first(shape);
      // No pause-spin phase before idle(): idle() polls MPI itself.
      st->set_deadline(comm::detail::time_source{}, o.timeout, comm::detail::wait_policy{0, 0});
      st->start();  // posts the first step now
      return request(std::move(st));
    }
    auto st = make_state("allreduce", data.size(), -1, true, o.timeout);
    add_shape_check(*st, shape);
    if (a != algorithm::native) {
      // A schedule over the internal communicator's point-to-point messages.
      const auto so = comm::detail::schedule_options_for(o, tuning.segment_bytes, s_->sched_tags.take());
      schedule sch = make_allreduce_schedule(a, rank(), size(), data.size(), sizeof(T), o.group_size);
      if (st->stages_.empty()) {
        return comm::detail::post_schedule(internal(), data, std::move(sch), so, comm::detail::time_source{}, s_->policy);
      }
      // Shape check first, then the schedule (run to completion inside the request).
      auto inner = std::make_shared<request>();
      communicator in = internal();
      auto policy = s_->policy;
      st->stages_.push_back([inner, in, data, sch = std::move(sch), so, policy](detail::op_state&) mutable {
        *inner = comm::detail::post_schedule(in, data, std::move(sch), so, comm::detail::time_source{}, policy);
      });
      return chain(std::move(st), inner);
    }
    const double w = o.weight.value_or(1.0);
    auto wsum = std::make_shared<double>(w);
    auto c = s_;
    st->stages_.push_back([c, data, o, w, wsum](detail::op_state& s) {
      if (o.weight) detail_scale(data, w);
      detail::check(MPI_Iallreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()),
                                   detail::datatype<T>(), detail::mpi_op(o.op), c->comm, s.add_request()),
                    "MPI_Iallreduce");
      if (o.weight && o.op == reduce_op::avg) {
        detail::check(MPI_Iallreduce(MPI_IN_PLACE, wsum.get(), 1, MPI_DOUBLE, MPI_SUM, c->comm, s.add_request()),
                      "MPI_Iallreduce");
      }
    });
    if (o.op == reduce_op::avg) {
      const int n = size();
      const bool weighted = o.weight.has_value();
      st->done_ = [data, wsum, n, weighted] {
        const double d = comm::detail::average_divisor(weighted, *wsum, n);
        if (weighted && !(d > 0.0))
          throw comm_error("heterograd: comm: weighted average with a zero sum of weights");
        comm::detail::divide(data.data(), d, data.size());
      };
    }
    return start(std::move(st));
  }

  template <class U, element T>
    requires std::same_as<std::remove_const_t<U>, T>
  request reduce_scatter(span<U, host_space> in, span<T> out, const reduce_scatter_options& o = {}) const {
    comm::detail::check_reduce_scatter(*this, in.size(), out.size(), o);
    if (s_->is_failed_cheap()) return request::failed(std::make_exception_ptr(s_->error()));
    auto st = make_state("reduce_scatter", in.size(), -1, true, o.timeout);
    add_shape_check(*st, {detail::collective::reduce_scatter, in.size(), dtype_of_v<T>, static_cast<int>(o.op)});
    auto c = s_;
    st->stages_.push_back([c, in, out, o](detail::op_state& s) {
      detail::check(MPI_Ireduce_scatter_block(in.data(), out.data(), static_cast<int>(out.size()),
                                              detail::datatype<T>(), detail::mpi_op(o.op), c->comm,
                                              s.add_request()),
                    "MPI_Ireduce_scatter_block");
    });
    if (o.op == reduce_op::avg) {
      const int n = size();
      st->done_ = [out, n] { comm::detail::divide(out.data(), n, out.size()); };
    }
    return start(std::move(st));
  }

  template <class U, element T>
    requires std::same_as<std::remove_const_t<U>, T>
  request allgather(span<U, host_space> in, span<T> out, const allgather_options& o = {}) const {
    comm::detail::check_allgather(*this, in.size(), out.size(), o);
    if (s_->is_failed_cheap()) return request::failed(std::make_exception_ptr(s_->error()));
    auto st = make_state("allgather", in.size(), -1, true, o.timeout);
    add_shape_check(*st, {detail::collective::allgather, in.size(), dtype_of_v<T>, 0});
    auto c = s_;
    st->stages_.push_back([c, in, out](detail::op_state& s) {
      detail::check(MPI_Iallgather(in.data(), static_cast<int>(in.size()), detail::datatype<T>(),
                                   out.data(), static_cast<int>(in.size()), detail::datatype<T>(),
                                   c->comm, s.add_request()),
                    "MPI_Iallgather");
    });
    return start(std::move(st));
  }

  template <element T>
  request broadcast(span<T> data, int root, const broadcast_options& o = {}) const {
    comm::detail::check_broadcast(*this, root, o);
    if (s_->is_failed_cheap()) return request::failed(std::make_exception_ptr(s_->error()));
    auto st = make_state("broadcast", data.size(), root, true, o.timeout);
    add_shape_check(*st, {detail::collective::broadcast, data.size(), dtype_of_v<T>, root});
    auto c = s_;
    st->stages_.push_back([c, data, root](detail::op_state& s) {
      detail::check(MPI_Ibcast(data.data(), static_cast<int>(data.size()), detail::datatype<T>(),
                               root, c->comm, s.add_request()),
                    "MPI_Ibcast");
    });
    return start(std::move(st));
  }

  template <class U, element T>
    requires std::same_as<std::remove_const_t<U>, T>
  request gather(span<U, host_space> in, span<T> out, int root, const gather_options& o = {}) const {
    comm::detail::check_gather(*this, in.size(), out.size(), root, o);
    if (s_->is_failed_cheap()) return request::failed(std::make_exception_ptr(s_->error()));
    auto st = make_state("gather", in.size(), root, true, o.timeout);
    add_shape_check(*st, {detail::collective::gather, in.size(), dtype_of_v<T>, root});
    auto c = s_;
    st->stages_.push_back([c, in, out, root](detail::op_state& s) {
      detail::check(MPI_Igather(in.data(), static_cast<int>(in.size()), detail::datatype<T>(),
                                out.data(), static_cast<int>(in.size()), detail::datatype<T>(),
                                root, c->comm, s.add_request()),
                    "MPI_Igather");
    });
    return start(std::move(st));
  }

  request barrier(const barrier_options& o = {}) const {
    comm::detail::check_barrier(*this, o);
    if (s_->is_failed_cheap()) return request::failed(std::make_exception_ptr(s_->error()));
    auto st = make_state("barrier", 0, -1, true, o.timeout);
    auto c = s_;
    st->stages_.push_back([c](detail::op_state& s) {
      detail::check(MPI_Ibarrier(c->comm, s.add_request()), "MPI_Ibarrier");
    });
    return start(std::move(st));
  }

  template <class U>
    requires element<std::remove_const_t<U>>
  request send(span<U, host_space> data, int dest, int tag, const send_options& o = {}) const {
    using T = std::remove_const_t<U>;
    comm::detail::check_send(*this, dest, tag, max_tag, o);
    if (s_->is_failed_cheap()) return request::failed(std::make_exception_ptr(s_->error()));
    auto st = make_state("send", data.size(), dest, false, o.timeout);
    st->stats_.resize(1);
    detail::check(MPI_Isend(data.data(), static_cast<int>(data.size()), detail::datatype<T>(), dest,
                            tag, s_->comm, st->add_request()),
                  "MPI_Isend");
    return request(std::move(st));
  }

  /// Tagged receive (source may be any_source, tag any_tag). The message must have the
  /// buffer's size in bytes (at most that with o.up_to): else a size_error, nothing written.
  /// MPI does not carry element types: a message of another type with the same byte count is
  /// taken (inproc refuses it with a mismatch_error).
  template <element T>
  request recv(span<T> data, int source, int tag, const recv_options& o = {}) const {
    comm::detail::check_recv(*this, source, tag, max_tag, o);
    if (s_->is_failed_cheap()) return request::failed(std::make_exception_ptr(s_->error()));
    auto st = make_state("receive", data.size(), source, false, o.timeout);
    st->is_recv_ = true;
    // Matched, never posted blind (detail/matched_receive.hpp): nothing is written unless the
    // message has the size this receive takes.
    const detail::receive_target to{data.data(), data.size() * sizeof(T), detail::datatype<T>(),
                                    sizeof(T), dtype_of_v<T>, o.up_to};
    const int src = source == any_source ? MPI_ANY_SOURCE : source;
    const int tg = tag == any_tag ? MPI_ANY_TAG : tag;
    st->set_gate(
        [comm = s_->comm, to](detail::op_state& s, int from, int with_tag) {
          return detail::poll_matched_receive(comm, from, with_tag, to, [&s] { return s.add_request(); });
        },
        src, tg);
    return request(std::move(st));
  }

  /// Collective: MPI_Comm_split (blocking). A negative color gives an invalid communicator.
  communicator split(int color, int key, const split_options& o = {}) const {
    comm::detail::require_valid(valid());
    if (s_->is_failed()) throw s_->error();
    MPI_Comm sub = MPI_COMM_NULL;
    detail::check(MPI_Comm_split(s_->comm, color < 0 ? MPI_UNDEFINED : color, key, &sub),
                  "MPI_Comm_split");
    if (sub == MPI_COMM_NULL) return {};
    communicator c(sub, o);
    MPI_Comm_free(&sub);
    return c;
  }

  /// The same group on the internal communicator (schedules' point-to-point traffic).
  communicator internal() const {
    communicator c;
    c.s_ = std::shared_ptr<detail::comm_state>(s_, s_->inner.get());  // keeps the owner alive
    return c;
  }

  /// The allreduce algorithm used for `bytes` per rank (automatic: a schedule over
  /// point-to-point messages; recursive doubling, when use_doubling(bytes), reports
  /// recursive_halving_doubling).
  algorithm choose(algorithm requested, std::size_t bytes) const {
    if (requested != algorithm::automatic) return requested;
    if (size() <= 1) return algorithm::native;
    if (use_doubling(bytes)) return algorithm::recursive_halving_doubling;
    if (oversubscribed()) {
      if (bytes <= tuning.oversubscribed_native_max_bytes) return algorithm::native;
      if (bytes <= tuning.oversubscribed_tree_max_bytes) return algorithm::tree;
    } else if (bytes <= tuning.native_max_bytes) {
      return algorithm::native;
    }
    if (size() == 2 || bytes <= tuning.rhd_max_bytes) return algorithm::recursive_halving_doubling;
    return algorithm::ring;
  }
  /// Whether the automatic allreduce of `bytes` per rank runs recursive doubling.
  bool use_doubling(std::size_t bytes) const {
    const int n = size();
    if (n <= 1 || (n & (n - 1)) != 0) return false;
    if (oversubscribed()) return bytes <= tuning.oversubscribed_doubling_max_bytes;
    return bytes <= tuning.doubling_max_bytes && bytes > tuning.native_max_bytes;
  }
  /// Whether this rank's waits yield the core between polls: its node runs more ranks than it
  /// has cores and MPI does not yield inside its own polls (library_yields_when_idle()).
  bool yields_between_polls() const { return s_ && s_->polite; }
  /// Whether some node of the group runs more of its ranks than it has cores (the same on
  /// every rank, so that every rank picks the same algorithm).
  bool oversubscribed() const { return s_ && s_->group_crowded; }
  /// Whether options ask for the blocking MPI_Allreduce: an infinite timeout
  /// (comm::no_wait_limit), unweighted, automatic or native algorithm. That mode cannot honour
  /// a deadline: a rank that never arrives blocks the others for good.
  static bool blocking_requested(const allreduce_options& o) {
    return (o.timeout == no_wait_limit || std::isinf(o.timeout.count())) && !o.weight &&
           (o.algo == algorithm::automatic || o.algo == algorithm::native);
  }

  mpi_allreduce_tuning tuning{};
  /// The largest tag of send and recv: 32767, the least MPI_TAG_UB an MPI library may have.
  static constexpr int max_tag = 32767;

 private:
  template <class T>
  static void detail_scale(span<T> data, double w) {
    comm::detail::scale(data.data(), w, data.size());
  }

  std::shared_ptr<detail::op_state> make_state(const char* what, std::size_t count, int peer,
                                               bool collective, seconds timeout) const {
    auto st = std::make_shared<detail::op_state>(s_, what, count, peer, collective);
    st->set_deadline(comm::detail::time_source{}, timeout, s_->policy);
    return st;
  }

  /// The schedule of (algo, count) on this group (algo -1: recursive doubling), cached.
  const std::shared_ptr<const schedule>& cached_schedule(int algo, std::size_t count, int group_size) const {
    auto& cache = (s_->inner ? s_->inner : s_)->schedules;
    if (!cache.empty() && cache[0].algo == algo && cache[0].count == count && (group_size == 0 || algo < 0))
      return cache[0].s;
    for (std::size_t i = 1; i < cache.size(); ++i) {
      if (cache[i].algo == algo && cache[i].count == count && (group_size == 0 || algo < 0)) {
        std::swap(cache[i], cache[0]);  // most recent first
        return cache[0].s;
      }
    }
    auto sch = std::make_shared<const schedule>(
        algo < 0 ? detail::recursive_doubling_allreduce(rank(), size(), count)
                 : make_allreduce_schedule(static_cast<algorithm>(algo), rank(), size(), count,
                                           sizeof(float), group_size));
    if (group_size != 0 && algo >= 0) {  // a non-default grouping: not cached
      auto& home = s_->inner ? s_->inner : s_;
      home->uncached = std::move(sch);
      return home->uncached;
    }
    if (cache.size() >= 8) cache.pop_back();
    cache.insert(cache.begin(), {algo, count, std::move(sch)});
    return cache[0].s;
  }

  /// The blocking mode (blocking_requested): MPI_Allreduce, completed on return.
  template <class T>
  request blocking_allreduce(span<T> data, const allreduce_options& o, const detail::call_shape& shape) const {
    if (s_->shapes.note(shape)) {
      std::int64_t b[8];
      shape.pairs(b);
      const int rc = MPI_Allreduce(MPI_IN_PLACE, b, 8, MPI_INT64_T, MPI_MAX, s_->coll);
      if (rc != MPI_SUCCESS) {
        s_->fail("blocking allreduce (shape check) failed");
        return request::failed(std::make_exception_ptr(comm_error(detail::error_string(rc))));
      }
      const std::string why = detail::shape_mismatch(b, rank());
      if (!why.empty()) {
        s_->shapes.forget(shape.kind);
        return request::failed(std::make_exception_ptr(mismatch_error(why)));
      }
    }
    const int rc = MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), detail::datatype<T>(),
                                 detail::mpi_op(o.op), s_->comm);
    if (rc != MPI_SUCCESS) {
      s_->fail("blocking allreduce failed");
      return request::failed(std::make_exception_ptr(
          comm_error("heterograd: comm: MPI_Allreduce: " + detail::error_string(rc))));
    }
    if (o.op == reduce_op::avg) comm::detail::divide(data.data(), size(), data.size());
    return request::completed();
  }

  /// Compares `shape` across ranks before the operation when this rank sees a new shape
  /// (every time in debug builds).
  void add_shape_check(detail::op_state& st, const detail::call_shape& shape) const {
    if (!s_->shapes.note(shape)) return;
    auto buf = std::make_shared<std::array<std::int64_t, 8>>();
    shape.pairs(buf->data());
    auto c = s_;
    st.stages_.push_back([c, buf](detail::op_state& s) {
      detail::check(MPI_Iallreduce(MPI_IN_PLACE, buf->data(), 8, MPI_INT64_T, MPI_MAX, c->coll, s.add_request()),
                    "MPI_Iallreduce (shape check)");
    });
    st.stages_.push_back([c, buf, kind = shape.kind](detail::op_state&) {
      const std::string why = detail::shape_mismatch(buf->data(), c->rank);
      if (why.empty()) return;
      c->shapes.forget(kind);
      throw mismatch_error(why);
    });
  }

  request start(std::shared_ptr<detail::op_state> st) const {
    st->test();  // posts the first MPI call now; an error is stored in the request
    return request(std::move(st));
  }

  /// A request whose final stage is another request (a schedule after a shape check).
  request chain(std::shared_ptr<detail::op_state> st, std::shared_ptr<request> inner) const {
    struct chained final : comm::detail::request_state {
      std::shared_ptr<detail::op_state> first;
      std::shared_ptr<request> second;
      bool first_done = false;
      std::string describe() const override { return "allreduce"; }
      bool progress() override {
        if (!first_done) {
          if (!first->test()) return false;
          if (first->error()) std::rethrow_exception(first->error());
          first_done = true;
        }
        if (!second->test()) return false;
        if (second->error()) std::rethrow_exception(second->error());
        return true;
      }
      void idle(comm::detail::real_clock::time_point until) override {
        if (!first_done) return first->block(until);
        if (auto* s = comm::detail::request_access::state(*second)) return s->block(until);
      }
    };
    auto c = std::make_shared<chained>();
    c->first = std::move(st);
    c->second = std::move(inner);
    c->set_deadline(comm::detail::time_source{}, seconds{c->first->deadline().count() -
                                           comm::detail::time_source{}.now().count()},
                    s_->policy);
    return request(std::move(c));
  }

  std::shared_ptr<detail::comm_state> s_{};
};

static_assert(transport<communicator>);

/// Runs fn(); if it throws, aborts the group first (peers' operations fail with "aborted by
/// rank r" instead of waiting for this rank), then rethrows. The MPI counterpart of spawn.
template <class Fn>
void run_or_abort(const communicator& c, Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    c.abort(e.what());
    throw;
  } catch (...) {
    c.abort("unknown exception");
    throw;
  }
}

}  // namespace heterograd::comm::mpi
