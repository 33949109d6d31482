#pragma once
// DSSP's synchronisation controller (Zhao, An, Liu, Chen, "Dynamic Stale Synchronous
// Parallel Distributed Training for Deep Learning", ICDCS 2019, #17 in docs/references.md).
//
// A parameter server between SSP and ASP: instead of one staleness threshold s the user gives
// a range [s_L, s_U], r_max = s_U − s_L. The server counts pushes t_i per worker (its clock)
// and keeps each worker's last two push times. After worker p's push (t_p += 1), with
// gap_p = t_p − min_j t_j:
//   - p holds credits (r_p > 0) from an earlier grant and gap_p <= s_U: r_p −= 1, proceed;
//   - gap_p <= s_L: proceed (SSP's rule);
//   - p is the fastest worker (largest clock): the controller predicts the next pushes of p
//     and of the slowest worker s from their last intervals,
//         F_k = A_p + k·I_p   (k = 0..K),     S_j = A_s + (j+1)·I_s   (j >= 0),
//     and grants r* = argmin_k min_j |F_k − S_j| extra iterations: p runs on until the push
//     predicted to land closest to one of the slowest worker's pushes, so it waits least.
//     r* > 0: proceed with r* − 1 credits left; r* = 0: wait;
//   - otherwise p waits until gap_p <= s_L (can_proceed turns true as others push).
// K = min(r_max, s_U − gap_p + 1) keeps every proceed inside the range: a worker never
// starts an iteration with gap_p > s_U = s_L + r_max (tests check the bound). With r_max = 0
// this is SSP with s = s_L exactly.
//
// The controller holds no threads and no clock: runtimes call on_push with the time of each
// push (virtual time in sim, real time in threads/mpi) and obey the decision. Shared by the
// balance layer and the asynchronous servers (algorithms/async).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::balance {

/// Hyper-parameters of DSSP (defaults: the re-implementation's s_L = 3, r_max = 12).
struct dssp_config {
  std::size_t lower = 3;   ///< s_L: staleness always allowed
  std::size_t range = 12;  ///< r_max = s_U − s_L: extra staleness the controller may grant
  friend bool operator==(const dssp_config&, const dssp_config&) = default;

  static constexpr auto description() {
    return describe("dssp_config",
                    describe_field("lower", &dssp_config::lower, "s_L: staleness always allowed", at_least(0)),
                    describe_field("range", &dssp_config::range,
                                   "r_max = s_U - s_L: extra staleness the controller may grant", at_least(0)));
  }
};

/// What a worker does after its push.
enum class dssp_action { proceed, wait };

struct dssp_decision {
  dssp_action action = dssp_action::proceed;
  std::size_t granted = 0;  ///< extra iterations granted by this push (0: none)
  friend bool operator==(const dssp_decision&, const dssp_decision&) = default;
};

/// DSSP's server-side synchronisation controller.
class dssp_controller {
 public:
  dssp_controller(std::size_t workers, dssp_config config = {})
      : config_(config), workers_(validated_workers(workers)) {}

  const dssp_config& config() const { return config_; }
  std::size_t workers() const { return workers_.size(); }
  /// s_U = s_L + r_max: no worker ever proceeds with a larger gap.
  std::size_t staleness_bound() const { return config_.lower + config_.range; }

  /// Worker p pushed at `push_time` (seconds, non-decreasing per worker): counts the push
  /// and decides whether p may start its next iteration now.
  dssp_decision on_push(std::size_t p, double push_time) {
    require(p < workers_.size(), "worker", p, "must be < the number of workers");
    require(std::isfinite(push_time) && push_time >= 0, "push_time", push_time,
            "must be finite and >= 0");
    auto& w = workers_[p];
    require(w.pushes == 0 || push_time >= w.last, "push_time", push_time,
            "must not precede worker " + std::to_string(p) + "'s previous push (" +
                std::to_string(w.last) + ")");
    w.previous = w.last;
    w.last = push_time;
    ++w.pushes;
    const std::size_t g = gap(p);
    if (g <= config_.lower) {
      w.credits = 0;  // back inside SSP's bound: a later excursion gets a fresh prediction
      return {dssp_action::proceed, 0};
    }
    if (w.credits > 0 && g <= staleness_bound()) {
      --w.credits;
      return {dssp_action::proceed, 0};
    }
    w.credits = 0;
    if (clock(p) == max_clock()) {
      const std::size_t r = controller(p, g);
      if (r > 0) {
        w.credits = r - 1;  // this proceed uses the first granted iteration
        return {dssp_action::proceed, r};
      }
    }
    return {dssp_action::wait, 0};
  }

  /// Whether a waiting worker may start its next iteration now (SSP's rule gap <= s_L);
  /// runtimes re-check waiting workers after every push.
  bool can_proceed(std::size_t p) const {
    require(p < workers_.size(), "worker", p, "must be < the number of workers");
    return gap(p) <= config_.lower;
  }

  /// The largest gap at which p may still proceed without a new grant: s_L + its credits.
  std::size_t allowed_staleness(std::size_t p) const {
    require(p < workers_.size(), "worker", p, "must be < the number of workers");
    const std::size_t c = workers_[p].credits;
    if (c == 0) return config_.lower;
    return std::max(config_.lower, std::min(gap(p) + c, staleness_bound()));
  }

  std::size_t clock(std::size_t p) const { return workers_.at(p).pushes; }
  std::size_t credits(std::size_t p) const { return workers_.at(p).credits; }
  std::size_t gap(std::size_t p) const { return workers_.at(p).pushes - min_clock(); }
  /// The smallest and largest clock over the members (docs/elastic.md).
  std::size_t min_clock() const {
    std::size_t m = std::numeric_limits<std::size_t>::max();
    for (std::size_t i = 0; i < workers_.size(); ++i)
      if (member(i)) m = std::min(m, workers_[i].pushes);
    return m;
  }
  std::size_t max_clock() const {
    std::size_t m = 0;
    for (std::size_t i = 0; i < workers_.size(); ++i)
      if (member(i)) m = std::max(m, workers_[i].pushes);
    return m;
  }

  /// Membership (docs/elastic.md; the papers are silent). A leaver no longer counts in the
  /// clocks' minimum (so nobody waits for it); a joiner, fresh or returning, starts at the
  /// slowest member's clock with no credits and no push times: until it has pushed twice
  /// the controller grants it nothing, as for any worker without two pushes.
  bool member(std::size_t p) const { return absent_.empty() || !absent_[p]; }
  void leave(std::size_t p) {
    require(p < workers_.size(), "worker", p, "must be < the number of workers");
    require(member(p), "worker", p, "must be a member to leave (it is absent)");
    std::size_t members = 0;
    for (std::size_t i = 0; i < workers_.size(); ++i) members += member(i) ? 1 : 0;
    require(members > 1, "worker", p, "must not be the last member to leave");
    if (absent_.empty()) absent_.assign(workers_.size(), 0);
    absent_[p] = 1;
  }
  void join(std::size_t p) {
    require(p < workers_.size(), "worker", p, "must be < the number of workers");
    require(!member(p), "worker", p, "must be absent to join (it is a member)");
    const std::size_t lo = min_clock();
    absent_[p] = 0;
    workers_[p] = worker_state{};
    workers_[p].pushes = lo;
  }

  friend bool operator==(const dssp_controller&, const dssp_controller&) = default;

  /// Checkpointing (core/archive.hpp): every worker's clock, credits and last two push times;
  /// `ar(...)` writes or reads them. The configuration is rebuilt by the caller.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(workers_, absent_);
  }

 private:
  struct worker_state {
    std::size_t pushes = 0;
    std::size_t credits = 0;
    double last = 0;      // A_i[0]
    double previous = 0;  // A_i[1]
    friend bool operator==(const worker_state&, const worker_state&) = default;
  };

  static std::vector<worker_state> validated_workers(std::size_t n) {
    require(n > 0, "workers", n, "must be > 0");
    return std::vector<worker_state>(n);
  }

  /// r* = argmin_k min_j |F_k − S_j| over k = 0..K (ties to the smaller k: less staleness).
  std::size_t controller(std::size_t p, std::size_t g) const {
    // The slowest worker: the smallest clock, ties to the lower index.
    std::size_t s = 0;
    while (!member(s)) ++s;
    for (std::size_t i = s + 1; i < workers_.size(); ++i) {
      if (member(i) && workers_[i].pushes < workers_[s].pushes) s = i;
    }
    const auto& f = workers_[p];
    const auto& sl = workers_[s];
    // Two pushes each are needed to know an interval; without them, behave as SSP.
    if (f.pushes < 2 || sl.pushes < 2 || s == p) return 0;
    if (g > staleness_bound()) return 0;  // cannot happen (proceeds keep g <= s_U + 1)
    const std::size_t k_max = std::min(config_.range, staleness_bound() + 1 - g);
    const double i_f = f.last - f.previous;
    const double i_s = sl.last - sl.previous;
    std::size_t best_k = 0;
    double best = std::numeric_limits<double>::infinity();
    for (std::size_t k = 0; k <= k_max; ++k) {
      const double fk = f.last + static_cast<double>(k) * i_f;
      double d;
      if (i_s <= 0) {
        d = std::abs(fk - sl.last);
      } else {
        // Nearest S_j = A_s + (j+1)·I_s to fk over integers j >= 0.
        const double j_real = (fk - sl.last) / i_s - 1.0;
        const double j_lo = std::max(0.0, std::floor(j_real));
        d = std::abs(fk - (sl.last + (j_lo + 1.0) * i_s));
        d = std::min(d, std::abs(fk - (sl.last + (j_lo + 2.0) * i_s)));
      }
      if (d < best) {
        best = d;
        best_k = k;
      }
    }
    return best_k;
  }

  dssp_config config_;
  std::vector<worker_state> workers_;
  std::vector<char> absent_;  // empty until the first leave: 1 = not a member
};

}  // namespace heterograd::balance
