#pragma once
// The exchanges a per-rank step of the synchronous family is written against, and the
// coroutine type of that step. A round method's synchronisation is written once, per rank,
// as a C++20 coroutine that co_awaits its collectives (bsp, selsync, local_sgd: the
// per-rank steps in their headers); the same code runs in two ways:
//
//   transport_exchange    over a real transport (comm::inproc, comm::mpi, the user's; the
//                         subset of heterograd/comm/concepts.hpp it needs: weighted allreduce
//                         of T, sum allreduce of int64, send/recv for gossip). Each
//                         collective blocks in the call and the awaiter never suspends, so a
//                         step runs to its end in one resume (step_task::run): what the
//                         per-rank helpers (workers.hpp) and the threads / MPI runtimes use.
//   sequential_exchange   n ranks in one thread (the simulated policies). A rank's
//                         collective suspends it until every member of its group has posted;
//                         the last poster reduces, in RANK ORDER with kernels::weighted_sum
//                         (detail/blend.hpp: the simulated average's arithmetic, which is the
//                         inproc weighted allreduce's), and run_in_rank_order resumes the
//                         ranks' steps in rank order until all finish. A rank waiting on a
//                         collective that no other rank posts is reported as a deadlock
//                         (std::logic_error naming the ranks), and the first exception of a
//                         rank (in rank order) is rethrown with the other steps abandoned.
//
// eager-SGD's step posts to a partial allreduce instead (heterograd/comm/partial.hpp), the
// same two ways: transport_partial over a real transport's, and sequential_partial, whose
// rounds are comm::partial_rounds (inproc's own state) and whose ranks' steps suspend until
// their round fires, however many simulator events later.
//
// Awaiting a nested step_task transfers control symmetrically (no stack growth); a step's
// frame is one allocation per call.

#include <algorithm>
#include <concepts>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/algorithms/sync/detail/blend.hpp"
#include "heterograd/comm/partial.hpp"
#include "heterograd/comm/partial_rounds.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/clock.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/scratch.hpp"

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

namespace heterograd::algorithms::sync {

// ------------------------------------------------------------------------------------------
/// A per-rank step: a lazily started coroutine returning R (awaitable from another step).
template <class R = bool>
class step_task {
 public:
  struct promise_type {
    R value{};
    std::exception_ptr error;
    std::coroutine_handle<> continuation;

    step_task get_return_object() {
      return step_task(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    struct final_awaiter {
      bool await_ready() noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) noexcept {
        auto c = h.promise().continuation;
        return c ? c : std::noop_coroutine();
      }
      void await_resume() noexcept {}
    };
    final_awaiter final_suspend() noexcept { return {}; }
    void return_value(R v) { value = std::move(v); }
    void unhandled_exception() { error = std::current_exception(); }
  };

  step_task() = default;
  step_task(step_task&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  step_task& operator=(step_task&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  step_task(const step_task&) = delete;
  step_task& operator=(const step_task&) = delete;
  ~step_task() { reset(); }

  bool done() const { return h_ && h_.done(); }
  /// True when the step ended with an exception.
  bool failed() const { return done() && h_.promise().error != nullptr; }
  std::coroutine_handle<> handle() const { return h_; }
  /// The result (rethrows the step's exception); call once done.
  R result() {
    if (h_.promise().error) std::rethrow_exception(h_.promise().error);
    return std::move(h_.promise().value);
  }
  /// Runs the step over an exchange that never suspends (transport_exchange) and returns
  /// its result.
  R run() {
    h_.resume();
    if (!h_.done())
      throw std::logic_error("step_task::run: the step suspended (run it with run_in_rank_order)");
    return result();
  }

  // Awaiting a step from another: start it, and come back here when it ends.
  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> caller) noexcept {
    h_.promise().continuation = caller;
    return h_;
  }
  R await_resume() { return result(); }

 private:
  explicit step_task(std::coroutine_handle<promise_type> h) : h_(h) {}
  void reset() {
    if (h_) h_.destroy();
    h_ = nullptr;
  }
  std::coroutine_handle<promise_type> h_;
};

/// The settings of a per-rank step over a real transport (the helpers', the threads and MPI
/// runtimes').
struct worker_options {
  /// Deadline of each collective the helper posts (comm's default: 60 s).
  seconds timeout = comm::default_timeout;
  /// Tag of gossip's point-to-point messages.
  int gossip_tag = 0x5e7;
  /// Real-time pacing of the rounds (runtime/pacing.hpp; empty: none). The runtimes call
  /// begin(w) when worker w starts a round's compute and end(w) when the compute is over, at
  /// the round's first collective (or at its end, if it has none): a paced worker sleeps
  /// there for what its compute left of the round's model time, so that the wait at the
  /// barrier is not counted as its work.
  std::function<void(std::size_t)> begin_round, end_compute;
  /// Partial methods (eager-SGD) only. `stop(w)` (empty: the configured rounds): worker w's
  /// vote, read by run_rank_rounds before each round, to end the run. The partial allreduce
  /// then carries one more element, the votes; the round after the first fired round whose
  /// result holds a vote is a flush and the last, so every rank ends at the same round
  /// however late its vote arrived (eager_sgd::run_round). `round_end(w, report)`: worker w
  /// applied its round's result; `report` (who was fresh, whose late part was folded in,
  /// with its lag) is the same on every rank.
  std::function<bool(std::size_t)> stop;
  std::function<void(std::size_t, const comm::round_report&)> round_end;

  void validate() const {
    require(timeout.count() > 0, "worker_options.timeout", timeout.count(), "must be > 0 seconds");
    require(gossip_tag >= 0 && gossip_tag < 32768, "worker_options.gossip_tag", gossip_tag,
            "must be in [0, 32767] (MPI guarantees these tags)");
  }
};

namespace detail {
/// x <- sum_r T(w) x_r over the transport's ranks in rank order (comm's weighted sum).
template <class Transport, class T, class S>
void weighted_allreduce(const Transport& t, span<T, S> x, double w, seconds timeout) {
  comm::allreduce_options o;
  o.op = comm::reduce_op::sum;
  o.weight = w;
  o.timeout = timeout;
  t.allreduce(x, o).wait();
}
}  // namespace detail

// ------------------------------------------------------------------------------------------
/// What a round's first collective does before it communicates (worker_options'
/// end_compute, armed by the runtime at the round's start; fired at most once a round, by
/// whichever exchange of the round comes first: local SGD's group or world).
struct compute_end_hook {
  std::function<void()> pending;
  void fire() {
    if (!pending) return;
    auto f = std::move(pending);
    pending = nullptr;
    f();
  }
};

/// What gossip needs of a transport (tagged send and receive of buffers of space S) and what
/// hierarchical groups need (split). NCCL's communicator has neither.
template <class Transport, class T, class S>
inline constexpr bool has_tagged_messages_v =
    requires(const Transport& t, span<const T, S> in, span<T, S> out) {
      t.send(in, 0, 0, comm::send_options{});
      t.recv(out, 0, 0, comm::recv_options{});
    };
template <class Transport>
inline constexpr bool has_split_v =
    requires(const Transport& t) { t.split(0, 0, comm::split_options{}); };

/// A real transport as an exchange: every collective blocks in the call (its deadline is
/// o.timeout; gossip's messages carry o.gossip_tag) and the step never suspends. Holds a
/// pointer to the transport (and to the round's compute_end_hook, when paced).
template <class Transport>
class transport_exchange {
 public:
  explicit transport_exchange(const Transport& t, worker_options o = {},
                              compute_end_hook* hook = nullptr)
      : t_(&t), timeout_((o.validate(), o.timeout)), tag_(o.gossip_tag), hook_(hook) {}

  std::size_t rank() const { return static_cast<std::size_t>(t_->rank()); }
  std::size_t size() const { return static_cast<std::size_t>(t_->size()); }

  /// out <- sum_r T(w_r) in_r, over buffers in memory space S (the transport's: a device
  /// transport such as NCCL takes device_space buffers). in and out may be the same buffer;
  /// off the host they must be (the per-rank steps reduce device buffers in place).
  template <class T, class S>
  std::suspend_never allreduce(span<const T, S> in, span<T, S> out, double w) const {
    compute_over();
    if (in.data() != out.data()) {
      if constexpr (std::is_same_v<S, host_space>)
        std::copy(in.begin(), in.end(), out.begin());
      else
        throw std::invalid_argument(
            "transport_exchange.allreduce: a device buffer is reduced in place (in == out)");
    }
    detail::weighted_allreduce(*t_, out, w, timeout_);
    return {};
  }
  /// x <- sum_r x_r (exact: integers; SelSync's votes). A transport that takes only device
  /// buffers (NCCL) gets them through a device copy: the vote's two scalar transfers, the
  /// device words from heterograd's stream-ordered pool (kernels/scratch.hpp), so a vote costs
  /// no cudaMalloc or cudaFree.
  std::suspend_never allreduce_sum(span<std::int64_t> x) const {
    compute_over();
    comm::allreduce_options o;
    o.op = comm::reduce_op::sum;
    o.timeout = timeout_;
    if constexpr (requires { t_->allreduce(x, o); }) {
      t_->allreduce(x, o).wait();
    } else {
#if defined(__CUDACC__)
      const auto check = [](cudaError_t e, const char* what) {
        if (e != cudaSuccess)
          throw std::runtime_error(std::string("heterograd: the vote allreduce's ") + what + ": " +
                                   cudaGetErrorString(e));
      };
      kernels::scratch<std::int64_t, thrust::cuda_cub::par_t> d(thrust::cuda::par, x.size());
      check(cudaMemcpyAsync(d.data(), x.data(), x.size_bytes(), cudaMemcpyHostToDevice, nullptr), "upload");
      check(cudaStreamSynchronize(nullptr), "upload");  // the transport may run on another stream
      t_->allreduce(span<std::int64_t, device_space>(d.data(), x.size()), o).wait();
      check(cudaMemcpy(x.data(), d.data(), x.size_bytes(), cudaMemcpyDeviceToHost), "download");
#else
      static_assert(requires { t_->allreduce(x, o); },
                    "the transport takes neither host nor (without nvcc) device buffers");
#endif
    }
    return {};
  }
  /// Sends `mine` to every rank of `to` and receives in[k] from from[k] (gossip; `mine`
  /// must stay intact until the call returns, which is when every message is through).
  template <class T, class S>
  std::suspend_never neighbours(span<const T, S> mine, const std::vector<std::size_t>& to,
                                const std::vector<std::size_t>& from,
                                std::vector<span<T, S>> in) const {
    if constexpr (!has_tagged_messages_v<Transport, T, S>) {
      // Refused when the helper is built (local_sgd.gossip); here for any other caller.
      throw std::invalid_argument(
          "transport_exchange.neighbours: gossip needs a transport with tagged send and receive");
    } else {
      compute_over();
      using send_request = decltype(t_->send(mine, 0, 0, comm::send_options{}));
      using recv_request = decltype(t_->recv(span<T, S>(), 0, 0, comm::recv_options{}));
      std::vector<send_request> sends;
      for (auto j : to)
        sends.push_back(t_->send(mine, static_cast<int>(j), tag_, comm::send_options{timeout_}));
      std::vector<recv_request> recvs;
      for (std::size_t k = 0; k < from.size(); ++k)
        recvs.push_back(
            t_->recv(in[k], static_cast<int>(from[k]), tag_, comm::recv_options{timeout_}));
      for (auto& q : recvs) q.wait();
      for (auto& q : sends) q.wait();
      return {};
    }
  }

 private:
  void compute_over() const {
    if (hook_) hook_->fire();
  }

  const Transport* t_;
  seconds timeout_;
  int tag_;
  compute_end_hook* hook_;
};

// ------------------------------------------------------------------------------------------
/// n ranks of element type T in one thread: collectives complete when every member of the
/// group has posted (see the file comment). Groups (split) partition the ranks; each has its
/// own sequence of collectives. Not thread-safe; views and the exchange must outlive the steps.
template <class T>
class sequential_exchange {
  enum class kind { none, reduce, reduce_int, neighbours };
  struct post {
    span<const T> in;
    span<T> out;
    double weight = 0;
    span<std::int64_t> ints;
    std::vector<std::size_t> from;
    std::vector<span<T>> into;
  };
  struct group {
    std::vector<std::size_t> members;  // world ranks, increasing
    kind k = kind::none;
    std::vector<post> posts;           // by group rank
    std::vector<char> posted;
    std::size_t count = 0;
    std::uint64_t completed = 0;       // collectives completed so far
    std::vector<T> sum;
  };
  struct waiter {
    std::coroutine_handle<> h;
    std::size_t g = 0;
    std::uint64_t gen = 0;
  };

 public:
  explicit sequential_exchange(std::size_t ranks) : waiting_(ranks) {
    require_positive("sequential_exchange.ranks", ranks);
    group all;
    for (std::size_t r = 0; r < ranks; ++r) all.members.push_back(r);
    add(std::move(all));
  }
  sequential_exchange(const sequential_exchange&) = delete;
  sequential_exchange& operator=(const sequential_exchange&) = delete;

  std::size_t ranks() const { return waiting_.size(); }

  /// One rank's handle on a group (an exchange for the per-rank steps).
  class view {
   public:
    std::size_t rank() const { return me_; }
    std::size_t size() const { return ex_->groups_[g_].members.size(); }

    struct awaiter {
      sequential_exchange* ex;
      std::size_t world;
      std::size_t g;
      std::uint64_t gen;
      bool await_ready() const noexcept { return ex->groups_[g].completed > gen; }
      void await_suspend(std::coroutine_handle<> h) const noexcept {
        ex->waiting_[world] = waiter{h, g, gen};
      }
      void await_resume() const noexcept {}
    };

    awaiter allreduce(span<const T> in, span<T> out, double w) const {
      require_same_size("sequential_exchange.allreduce.out", out.size(), "in", in.size());
      post p;
      p.in = in;
      p.out = out;
      p.weight = w;
      return ex_->enter(g_, me_, world_, kind::reduce, std::move(p));
    }
    awaiter allreduce_sum(span<std::int64_t> x) const {
      post p;
      p.ints = x;
      return ex_->enter(g_, me_, world_, kind::reduce_int, std::move(p));
    }
    /// Gossip: every member posts its model; when all have, in[k] <- from[k]'s model (`to`
    /// is implied by the others' `from`).
    awaiter neighbours(span<const T> mine, const std::vector<std::size_t>&,
                       const std::vector<std::size_t>& from, std::vector<span<T>> in) const {
      post p;
      p.in = mine;
      p.from = from;
      p.into = std::move(in);
      return ex_->enter(g_, me_, world_, kind::neighbours, std::move(p));
    }

   private:
    friend class sequential_exchange;
    view(sequential_exchange* ex, std::size_t g, std::size_t me, std::size_t world)
        : ex_(ex), g_(g), me_(me), world_(world) {}
    sequential_exchange* ex_;
    std::size_t g_, me_, world_;
  };

  /// World rank r's view of all ranks.
  view rank(std::size_t r) {
    require(r < ranks(), "sequential_exchange.rank", r, "must be < ranks");
    return view(this, 0, r, r);
  }
  /// Splits the ranks by color (color[r]: rank r's group; members keep their order) and
  /// returns each rank's view of its group.
  std::vector<view> split(const std::vector<std::size_t>& color) {
    require_same_size("sequential_exchange.split.color", color.size(), "ranks", ranks());
    std::vector<std::pair<std::size_t, std::size_t>> made;  // (color, group index)
    std::vector<std::size_t> index(ranks());
    for (std::size_t r = 0; r < ranks(); ++r) {
      const auto it = std::find_if(made.begin(), made.end(),
                                   [&](const auto& cg) { return cg.first == color[r]; });
      index[r] = it != made.end() ? it->second : add(group{});
      if (it == made.end()) made.emplace_back(color[r], index[r]);
      groups_[index[r]].members.push_back(r);
    }
    for (const auto& cg : made) {
      auto& g = groups_[cg.second];
      g.posts.resize(g.members.size());
      g.posted.assign(g.members.size(), 0);
    }
    std::vector<view> out;
    for (std::size_t r = 0; r < ranks(); ++r) {
      const auto& m = groups_[index[r]].members;
      const auto me = static_cast<std::size_t>(std::find(m.begin(), m.end(), r) - m.begin());
      out.push_back(view(this, index[r], me, r));
    }
    return out;
  }

  /// Runs one step per rank (steps[r] is rank r's) to their ends: resumes them in rank order,
  /// each until it waits on a collective or finishes, until all have finished.
  template <class R>
  void run_in_rank_order(std::vector<step_task<R>>& steps) {
    require_same_size("run_in_rank_order.steps", steps.size(), "ranks", ranks());
    const std::size_t n = steps.size();
    std::vector<char> started(n, 0);
    for (;;) {
      bool progressed = false, all_done = true;
      for (std::size_t r = 0; r < n; ++r) {
        if (steps[r].done()) continue;
        auto& wt = waiting_[r];
        if (!started[r]) {
          started[r] = 1;
          progressed = true;
          steps[r].handle().resume();
        } else if (wt.h && groups_[wt.g].completed > wt.gen) {
          auto h = std::exchange(wt.h, nullptr);
          progressed = true;
          h.resume();
        }
        if (steps[r].done()) {
          if (steps[r].failed()) {
            abandon();
            (void)steps[r].result();  // the first error in rank order surfaces here
          }
        } else {
          all_done = false;
        }
      }
      if (all_done) break;
      if (!progressed) {
        std::string who;
        for (std::size_t r = 0; r < n; ++r)
          if (!steps[r].done()) who += (who.empty() ? "" : ", ") + std::to_string(r);
        abandon();
        throw std::logic_error("sequential_exchange: deadlock: ranks " + who +
                               " wait on collectives that the other members never post");
      }
    }
  }

 private:
  std::size_t add(group g) {
    g.posts.resize(g.members.size());
    g.posted.assign(g.members.size(), 0);
    groups_.push_back(std::move(g));
    return groups_.size() - 1;
  }

  // Everything posted but not completed is dropped (after a failure or a deadlock).
  void abandon() {
    for (auto& g : groups_) {
      g.k = kind::none;
      g.count = 0;
      std::fill(g.posted.begin(), g.posted.end(), 0);
    }
    for (auto& w : waiting_) w = waiter{};
  }

  typename view::awaiter enter(std::size_t gi, std::size_t me, std::size_t world, kind k, post p) {
    auto& g = groups_[gi];
    if (g.count == 0) g.k = k;
    if (g.k != k || g.posted[me]) {
      abandon();
      throw std::logic_error("sequential_exchange: rank " + std::to_string(world) +
                             " posted a different collective than the other members of its group");
    }
    g.posts[me] = std::move(p);
    g.posted[me] = 1;
    const std::uint64_t gen = g.completed;
    if (++g.count == g.members.size()) complete(g);
    return typename view::awaiter{this, world, gi, gen};
  }

  // The last poster's reduction, in rank order; every member's result written.
  void complete(group& g) {
    const std::size_t m = g.members.size();
    switch (g.k) {
      case kind::reduce: {
        const std::size_t d = g.posts[0].in.size();
        std::vector<span<const T>> xs;
        std::vector<double> ws;
        for (std::size_t q = 0; q < m; ++q) {
          require_same_size("sequential_exchange.allreduce.in", g.posts[q].in.size(),
                            "rank 0's", d);
          xs.push_back(g.posts[q].in);
          ws.push_back(g.posts[q].weight);
        }
        g.sum.resize(d);
        detail::weighted_sum(span<T>(g.sum), xs, ws);
        const T* last = nullptr;
        for (std::size_t q = 0; q < m; ++q) {
          if (g.posts[q].out.data() == last) continue;  // members sharing one result buffer
          std::copy(g.sum.begin(), g.sum.end(), g.posts[q].out.begin());
          last = g.posts[q].out.data();
        }
        break;
      }
      case kind::reduce_int: {
        const std::size_t d = g.posts[0].ints.size();
        std::vector<std::int64_t> s(d, 0);
        for (std::size_t q = 0; q < m; ++q)
          for (std::size_t i = 0; i < d; ++i) s[i] += g.posts[q].ints[i];
        for (std::size_t q = 0; q < m; ++q) std::copy(s.begin(), s.end(), g.posts[q].ints.begin());
        break;
      }
      case kind::neighbours: {
        for (std::size_t q = 0; q < m; ++q) {
          auto& p = g.posts[q];
          for (std::size_t k = 0; k < p.from.size(); ++k) {
            const auto& src = g.posts[p.from[k]].in;
            std::copy(src.begin(), src.end(), p.into[k].begin());
          }
        }
        break;
      }
      case kind::none: break;
    }
    g.k = kind::none;
    g.count = 0;
    std::fill(g.posted.begin(), g.posted.end(), 0);
    for (auto& p : g.posts) p = post{};
    ++g.completed;
  }

  std::vector<group> groups_;
  std::vector<waiter> waiting_;
};

// ------------------------------------------------------------------------------------------
// Partial allreduces (eager-SGD's per-rank step, eager.hpp), the same two ways.

/// A real transport's partial allreduce (comm::inproc or comm::mpi partial_allreduce, or the
/// user's with allreduce(span) and flush(span) returning a waitable request) as an exchange:
/// each round blocks in the call (until the partial allreduce's deadline) and the step never
/// suspends. Holds a pointer to it.
template <class Partial>
class transport_partial {
 public:
  explicit transport_partial(Partial& p, compute_end_hook* hook = nullptr) : p_(&p), hook_(hook) {}
  template <class T>
  std::suspend_never allreduce(span<T> data) const {
    if (hook_) hook_->fire();
    p_->allreduce(data).wait();
    return {};
  }
  template <class T>
  std::suspend_never flush(span<T> data) const {
    if (hook_) hook_->fire();
    p_->flush(data).wait();
    return {};
  }
  /// Who was fresh in this rank's last round, whose late part was folded in (the same on
  /// every rank for that round).
  const comm::round_report& last_report() const { return p_->last_report(); }

 private:
  Partial* p_;
  compute_end_hook* hook_;
};

/// n ranks' partial allreduce in one thread (the simulated eager-SGD): its rounds are
/// comm::partial_rounds, the state inproc's partial allreduce fires, so a round fires and sums
/// as inproc's does with the same arrivals (the simulator's clock is not read: solo and
/// majority need none). A rank's post of a round that already fired completes at once (late);
/// otherwise the rank's step suspends until the round fires, and the step's owner resumes it
/// once rounds.complete(rank, round). A post of a round the rank is registered in already (a
/// step re-created after a restore) only waits. Not thread-safe.
template <class T>
class sequential_partial {
 public:
  sequential_partial(int ranks, std::size_t count, comm::partial_policy policy,
                     comm::partial_options opt)
      : rounds(ranks, count, policy, opt) {}

  comm::partial_rounds<T> rounds;

  struct awaiter {
    comm::partial_rounds<T>* s;
    int rank;
    std::int64_t round;
    T* data;
    bool flush;
    bool await_ready() const {
      return !s->waiting(rank, round) && s->arrive(rank, round, data, flush, seconds{0});
    }
    void await_suspend(std::coroutine_handle<>) const noexcept {}
    void await_resume() const noexcept {}
  };
  /// Rank r's exchange for its round t.
  struct view {
    comm::partial_rounds<T>* s;
    int rank;
    std::int64_t round;
    awaiter allreduce(span<T> data) const { return post(data, false); }
    awaiter flush(span<T> data) const { return post(data, true); }
    awaiter post(span<T> data, bool flush) const {
      require_same_size("sequential_partial.data", data.size(), "count", s->count);
      return awaiter{s, rank, round, data.data(), flush};
    }
  };
  view rank(std::size_t r, std::uint64_t round) {
    require(r < static_cast<std::size_t>(rounds.n), "sequential_partial.rank", r,
            "must be < ranks");
    return view{&rounds, static_cast<int>(r), static_cast<std::int64_t>(round)};
  }
};

// ------------------------------------------------------------------------------------------
// The one round contract. Every round method (bsp, selsync, local_sgd, eager_sgd and the
// user's) runs a rank's round with one signature,
//
//     round_outcome run_round(rank_round<Exchange>& r, rank_state& s);
//
// whatever runs it: runtime::run_worker over a transport (the threads and MPI runtimes),
// run_rank_rounds below over any exchange. The method says which exchange it takes
// (exchange_kind): a collective one (exchange<E, T>: every rank of the group in every
// collective, in the same order) or a partial allreduce (partial_exchange<E, T>: eager-SGD's
// rounds, which fire without the late ranks). The runtimes' concept is
// runtime::rank_round_method (runtime/concepts.hpp); archetypes are in
// heterograd/testing/exchange_archetypes.hpp.

/// What a per-rank step may co_await: an exchange's collective.
template <class A>
concept awaitable = requires(A& a, std::coroutine_handle<> h) {
  { a.await_ready() } -> std::convertible_to<bool>;
  a.await_suspend(h);
  a.await_resume();
};

/// A collective exchange of element type T (transport_exchange, sequential_exchange's view):
/// out <- sum_r w_r in_r over the ranks, and the exact sum of int64 votes. Gossip's
/// neighbours() is optional (local SGD refuses gossip over an exchange without it).
template <class E, class T>
concept exchange = requires(const E& e, span<const T> in, span<T> out, span<std::int64_t> v,
                            double w) {
  { e.rank() } -> std::convertible_to<std::size_t>;
  { e.size() } -> std::convertible_to<std::size_t>;
  { e.allreduce(in, out, w) } -> awaitable;
  { e.allreduce_sum(v) } -> awaitable;
};

/// A partial allreduce of element type T as a rank's round sees it (transport_partial): its
/// next round, a flush round (every rank fresh, everything pending folded in), and the report
/// of the rank's last round (who was fresh; the same on every rank).
template <class E, class T>
concept partial_exchange = requires(const E& e, span<T> x) {
  { e.allreduce(x) } -> awaitable;
  { e.flush(x) } -> awaitable;
  { e.last_report() } -> std::convertible_to<const comm::round_report&>;
};

/// A round method's exchange_kind: it takes an exchange, or a partial_exchange.
struct collective_exchange_tag {};
struct partial_exchange_tag {};

/// One rank's round: its exchanges, its worker and what the runtime asks of it.
template <class Exchange>
struct rank_round {
  Exchange& world;                 ///< every rank
  Exchange* group = nullptr;       ///< the rank's group (hierarchical rounds, groups()), or none
  std::size_t worker = 0;          ///< this rank's worker (its replica)
  bool count = true;               ///< this rank advances the method's shared counters
  bool votes = false;              ///< partial: the message carries the ranks' stop votes
  bool vote_stop = false;          ///< partial: this rank's vote this round
};

/// What a rank's round did.
struct round_outcome {
  std::size_t steps = 0;      ///< local steps (gradient computations) of the rank
  double loss = 0;            ///< their mean loss
  bool synchronised = true;   ///< the round ended with a synchronisation (SelSync: its vote)
  bool last = false;          ///< the method ends after this round (partial: the flush)
};

/// How a partial method's allreduce is built (partial_setup(votes)): its firing policy,
/// options and element count (the parameters, plus one when the ranks vote).
struct partial_allreduce_setup {
  comm::partial_policy policy;
  comm::partial_options options;
  std::size_t elements = 0;
};

/// Runs rank r.worker of `method` from its state `s` for `rounds` rounds, or until a round's
/// outcome is the last (a partial method's flush): the loop of runtime::run_worker. Around
/// each round, worker_options' pacing: begin_round(w) now, end_compute(w) at the round's
/// first collective (through `hook`, which r's exchanges fire). A partial method's rank votes
/// o.stop(w) before each round (when r.votes) and reports o.round_end(w, report) after it.
template <class Method, class Ex>
void run_rank_rounds(Method& method, rank_round<Ex>& r, typename Method::rank_state& s,
                     std::uint64_t rounds, const worker_options& o, compute_end_hook& hook) {
  constexpr bool partial = std::is_same_v<typename Method::exchange_kind, partial_exchange_tag>;
  const std::size_t w = r.worker;
  for (std::uint64_t k = 0; k < rounds; ++k) {
    if constexpr (partial) r.vote_stop = r.votes && o.stop(w);
    if (o.begin_round) o.begin_round(w);
    if (o.end_compute) hook.pending = [&o, w] { o.end_compute(w); };
    const round_outcome out = method.run_round(r, s);
    hook.fire();
    if constexpr (partial) {
      if (o.round_end) o.round_end(w, r.world.last_report());
    }
    if (out.last) return;
  }
}

}  // namespace heterograd::algorithms::sync
