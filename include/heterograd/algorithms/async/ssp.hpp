#pragma once
// Stale synchronous parallel (SSP; Ho et al., "More Effective Distributed ML via a Stale
// Synchronous Parallel Parameter Server", NIPS 2013) and Dynamic SSP (DSSP; Zhao, An, Liu,
// Chen, "Dynamic Stale Synchronous Parallel Distributed Training for Deep Learning", ICDCS
// 2019, #17 in docs/references.md).
//
// Worker i's clock c_i counts its pushes. Every push is applied at once (x <- x - gamma g,
// as in ASGD); what SSP adds is when a worker may start its next iteration:
//   SSP(s):  worker i proceeds iff c_i - min_j c_j <= s, else it waits until the slowest
//            worker catches up. s = 0 is synchronous SGD in lock step; s = infinity is ASGD.
//   DSSP([s_L, s_U]):  SSP with s = s_L, except that the fastest worker may be granted up to
//            r_max = s_U - s_L extra iterations by the synchronisation controller, which
//            predicts from the last push intervals how many more iterations make its next
//            push land closest to the slowest worker's (so it waits least). No worker ever
//            proceeds more than s_L + r_max ahead of the slowest (tested).
// The DSSP controller is the balance layer's (heterograd/balance/dssp.hpp,
// balance::dssp_controller, written once there); dssp_server obeys its decisions. Any type
// with that API can stand in (template parameter Controller):
//     on_push(worker, time) -> decision{action (proceed | wait), granted};
//     can_proceed(worker); gap(worker); workers(); Defaults of the re-implementation the paper's numbers come from:
// s_L = 3, r_max = 12.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

#include "heterograd/algorithms/async/server.hpp"
#include "heterograd/balance/dssp.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::algorithms::async {

struct ssp_config {
  std::uint64_t staleness = 3;  ///< s: how many pushes a worker may run ahead of the slowest

  static constexpr auto description() {
    return describe("ssp_config",
                    describe_field("staleness", &ssp_config::staleness,
                                   "s: pushes a worker may run ahead of the slowest",
                                   at_least(0)));
  }
  void validate() const { validate_fields(*this); }
};

template <class T = double, class Optimizer = default_optimizer, class Memory = host_memory>
class ssp_server : public detail::policy_base<T, Optimizer, Memory> {
  using base = detail::policy_base<T, Optimizer, Memory>;

 public:
  ssp_server(std::size_t workers, model_server<T, Optimizer, Memory> server, ssp_config config = {})
      : base(workers, std::move(server)), config_(config), clock_(workers, 0) {}

  const ssp_config& config() const { return config_; }
  std::uint64_t clock(worker_id w) const { return clock_.at(w); }
  /// The slowest member's clock (docs/elastic.md: the bound is over the members).
  std::uint64_t min_clock() const {
    std::uint64_t m = ~std::uint64_t{0};
    for (std::size_t j = 0; j < this->workers_; ++j)
      if (this->live(static_cast<worker_id>(j))) m = std::min(m, clock_[j]);
    return m;
  }
  /// Largest c_i - min_j c_j with which any worker was let start an iteration (<= s).
  std::uint64_t max_gap_started() const { return max_gap_; }

  template <class Ctl, class Arrival, class G>
  void on_arrival(Ctl& ctl, const Arrival& a, const G& g) {
    const auto in = this->admit(ctl, a, g, "ssp_server");
    if (!in) return;
    const std::uint64_t delay = in->delay;
    this->server_.apply(in->gradient);
    ctl.applied(a.worker, delay);
    ++clock_[a.worker];
    const std::uint64_t lo = release_ready(ctl, a.worker);
    const std::uint64_t gap = clock_[a.worker] - lo;
    if (gap > config_.staleness) {
      ctl.hold(a.worker);
    } else {
      max_gap_ = std::max(max_gap_, gap);
    }
  }

  /// Membership (Ho et al. and the DSSP paper are silent; docs/elastic.md): the bound is
  /// over the members. A leaver's clock no longer counts, so workers blocked on it go on at
  /// once; a joiner, fresh or returning, takes the slowest member's clock (it holds nobody
  /// back and is not held itself).
  template <class Ctl>
  void on_leave(Ctl& ctl, worker_id w) {
    this->mark_leave(w);
    release_ready(ctl, w);
  }
  template <class Ctl>
  void on_join(Ctl&, worker_id w) {
    const std::uint64_t lo = min_clock();
    this->mark_join(w);
    clock_[w] = lo;
  }
  friend bool operator==(const ssp_server& a, const ssp_server& b) {
    return a.server_ == b.server_ && a.same_membership(b) && a.clock_ == b.clock_;
  }

  /// Checkpointing (core/archive.hpp): the mutable state; the configuration is rebuilt.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(this->server_, clock_, max_gap_);
    this->serialize_membership(ar);
  }

 private:
  // Workers blocked on the slowest member may go on now, starting at this very instant;
  // returns the slowest member's clock.
  template <class Ctl>
  std::uint64_t release_ready(Ctl& ctl, worker_id except) {
    const std::uint64_t lo = min_clock();
    for (std::size_t j = 0; j < this->workers_; ++j) {
      const auto w = static_cast<worker_id>(j);
      if (w != except && ctl.waiting(w) && clock_[j] - lo <= config_.staleness) {
        max_gap_ = std::max(max_gap_, clock_[j] - lo);
        ctl.release(w);
      }
    }
    return lo;
  }
  ssp_config config_;
  std::vector<std::uint64_t> clock_;
  std::uint64_t max_gap_ = 0;
};
template <class T, class O, class M>
ssp_server(std::size_t, model_server<T, O, M>) -> ssp_server<T, O, M>;
template <class T, class O, class M>
ssp_server(std::size_t, model_server<T, O, M>, ssp_config) -> ssp_server<T, O, M>;

/// DSSP: SSP with s = s_L whose fastest worker may run up to r_max further ahead when the
/// synchronisation controller (balance::dssp_controller) grants it.
template <class T = double, class Optimizer = default_optimizer,
          class Controller = balance::dssp_controller, class Memory = host_memory>
class dssp_server : public detail::policy_base<T, Optimizer, Memory> {
  using base = detail::policy_base<T, Optimizer, Memory>;

 public:
  /// DSSP with range [s_L, s_L + r_max] = [config.lower, config.lower + config.range]
  /// (defaults s_L = 3, r_max = 12).
  dssp_server(std::size_t workers, model_server<T, Optimizer, Memory> server,
              balance::dssp_config config = {})
    requires std::same_as<Controller, balance::dssp_controller>
      : dssp_server(workers, std::move(server), balance::dssp_controller(workers, config)) {}

  dssp_server(std::size_t workers, model_server<T, Optimizer, Memory> server, Controller controller)
      : base(workers, std::move(server)), controller_(std::move(controller)) {
    require_same_size("controller.workers", controller_.workers(), "workers", workers);
  }

  const Controller& controller() const { return controller_; }
  /// Largest c_i - min_j c_j with which any worker was let start an iteration (<= s_U).
  std::uint64_t max_gap_started() const { return max_gap_; }

  template <class Ctl, class Arrival, class G>
  void on_arrival(Ctl& ctl, const Arrival& a, const G& g) {
    // A skipped gradient is no push: the controller never sees it. The controller checks the
    // push time before it counts the push, and apply cannot fail after admit(): a throw
    // leaves everything as it was.
    const auto in = this->admit(ctl, a, g, "dssp_server");
    if (!in) return;
    const std::uint64_t delay = in->delay;
    const auto decision = controller_.on_push(a.worker, a.time);
    this->server_.apply(in->gradient);
    ctl.applied(a.worker, delay);
    release_ready(ctl, a.worker);
    if (decision.action == decltype(decision.action)::wait) {
      ctl.hold(a.worker);
    } else {
      max_gap_ = std::max<std::uint64_t>(max_gap_, controller_.gap(a.worker));
    }
  }

  /// Membership: as ssp_server, through the controller's leave / join when it has them
  /// (balance::dssp_controller does: a joiner starts at the slowest member's clock).
  template <class Ctl>
  void on_leave(Ctl& ctl, worker_id w)
    requires requires(Controller& c) { c.leave(std::size_t{0}); }
  {
    controller_.leave(w);  // checks first
    this->mark_leave(w);
    release_ready(ctl, w);
  }
  template <class Ctl>
  void on_join(Ctl&, worker_id w)
    requires requires(Controller& c) { c.join(std::size_t{0}); }
  {
    controller_.join(w);
    this->mark_join(w);
  }
  friend bool operator==(const dssp_server& a, const dssp_server& b) {
    return a.server_ == b.server_ && a.same_membership(b) && a.controller_ == b.controller_;
  }

  /// Checkpointing (core/archive.hpp): visits the mutable state in a fixed order; `ar(...)`
  /// writes or reads it. Configuration (optimizer, s_L, r_max) is rebuilt by the caller. Only
  /// with a controller that can be checkpointed itself (balance::dssp_controller can).
  template <class Archive>
    requires requires(Controller& c, Archive& a) { c.serialize(a); }
  void serialize(Archive& ar) {
    ar(this->server_, controller_, max_gap_);
    this->serialize_membership(ar);
  }

 private:
  template <class Ctl>
  void release_ready(Ctl& ctl, worker_id except) {
    for (std::size_t j = 0; j < this->workers_; ++j) {
      const auto w = static_cast<worker_id>(j);
      if (w != except && ctl.waiting(w) && controller_.can_proceed(j)) {
        max_gap_ = std::max<std::uint64_t>(max_gap_, controller_.gap(j));
        ctl.release(w);
      }
    }
  }
  Controller controller_;
  std::uint64_t max_gap_ = 0;
};
template <class T, class O, class M>
dssp_server(std::size_t, model_server<T, O, M>) -> dssp_server<T, O, balance::dssp_controller, M>;
template <class T, class O, class M>
dssp_server(std::size_t, model_server<T, O, M>, balance::dssp_config)
    -> dssp_server<T, O, balance::dssp_controller, M>;
template <class T, class O, class C, class M>
  requires(!std::same_as<C, balance::dssp_config>)
dssp_server(std::size_t, model_server<T, O, M>, C) -> dssp_server<T, O, C, M>;

}  // namespace heterograd::algorithms::async
