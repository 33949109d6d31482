#pragma once
// Membership of a real asynchronous server run (runtime/server.hpp; docs/elastic.md, section
// "Membership on the real clock"): which workers may leave and join while the run goes on,
// and when a silent worker is declared gone.
//
// The deadline is learned from each worker's own job times, never from the others': a worker
// whose jobs take ten times the others' gets ten times their deadline, so a straggler is not
// evicted, while a worker that stops answering is declared gone within
//     deadline(w) = min(timeout, max(floor, factor x q-quantile of w's last `window` job times))
// seconds of silence (a job time: from the job's send to its result's arrival, wall seconds).
// Before a worker has finished min_jobs jobs of its current membership, its deadline is the
// outer bound, remote_options::timeout.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::runtime {

/// The rule that turns a worker's measured job times into its deadline (see the header).
struct deadline_rule {
  double floor = 0.5;         ///< seconds: no learned deadline is shorter
  double factor = 4.0;        ///< times the quantile
  double quantile = 0.9;      ///< of the worker's own job times
  std::size_t window = 64;    ///< its last jobs the quantile is over
  std::size_t min_jobs = 3;   ///< fewer finished jobs: the deadline is the timeout

  static constexpr auto description() {
    return describe(
        "deadline",
        describe_field("floor", &deadline_rule::floor, "seconds: no learned deadline is shorter",
                       finite_above(0)),
        describe_field("factor", &deadline_rule::factor, "times the quantile of the worker's job times",
                       finite_at_least(1)),
        describe_field("quantile", &deadline_rule::quantile,
                       "which quantile of the worker's own job times (0.9: the 90th percentile)",
                       open_closed(0, 1)),
        describe_field("window", &deadline_rule::window, "the worker's last jobs the quantile is over",
                       closed(1, 4096)),
        describe_field("min_jobs", &deadline_rule::min_jobs,
                       "jobs a worker finishes before its deadline is learned (before: the timeout)",
                       at_least(1)));
  }
  void validate() const {
    validate_fields(*this);
    require(static_cast<double>(min_jobs) <= static_cast<double>(window), "deadline.min_jobs", min_jobs,
            "must be <= deadline.window (" + std::to_string(window) + ")");
  }
};

/// Membership options of a server run (remote_options::membership).
struct membership_options {
  /// Accept leave and join messages and declare silent workers gone. Off: a leave or join
  /// is a header of an unknown kind (refused, its worker evicted), and no deadline applies.
  bool elastic = false;
  /// Slots absent when the run starts: they first take part by a join (spare ranks).
  std::vector<std::uint32_t> absent;
  deadline_rule deadline{};

  static constexpr auto description() {
    return describe("membership",
                    describe_field("elastic", &membership_options::elastic,
                                   "workers may leave and join while the run goes on; silent "
                                   "workers are declared gone at their learned deadline"),
                    describe_field("absent", &membership_options::absent,
                                   "worker slots absent at the start (they take part by a join)",
                                   at_least(0)));
  }
  void validate(std::size_t workers) const {
    validate_fields(*this);
    deadline.validate();
    require(absent.empty() || elastic, "membership.absent", absent.size(),
            "needs membership.elastic = true (an absent slot can only take part by a join)");
    std::vector<char> seen(workers, 0);
    for (std::size_t i = 0; i < absent.size(); ++i) {
      const std::string key = "membership.absent[" + std::to_string(i) + "]";
      require(absent[i] < workers, key, absent[i], "must be < the number of workers (" + std::to_string(workers) + ")");
      require(!seen[absent[i]], key, absent[i], "must not be named twice");
      seen[absent[i]] = 1;
    }
    require(absent.size() < workers || workers == 0, "membership.absent", absent.size(),
            "must leave at least one worker present at the start");
  }
  /// The order rule: an elastic run takes results as they arrive (real_time order), never in
  /// the simulator's order, which waits for every worker's result. `key` names the option
  /// (remote_options.membership.elastic, run_options.membership.elastic); `where` says what
  /// asked for the other order.
  void require_real_time(bool real_time, std::string_view key, std::string_view where = "") const {
    require(!elastic || real_time, key, "true",
            "needs real_time order (virtual_time order waits for every worker's result)" + std::string(where));
  }
};

/// Each worker's recent job times and the deadline the rule derives from them.
class deadline_tracker {
 public:
  deadline_tracker(std::size_t workers, deadline_rule r) : rule_(r), times_(workers), next_(workers, 0) {}

  /// A finished job of worker w took `seconds` (wall).
  void record(std::size_t w, double seconds) {
    auto& t = times_.at(w);
    if (t.size() < rule_.window) {
      t.push_back(seconds);
    } else {
      t[next_[w]] = seconds;
      next_[w] = (next_[w] + 1) % rule_.window;
    }
  }
  /// A new membership of slot w (a join): its past times describe another worker.
  void forget(std::size_t w) {
    times_.at(w).clear();
    next_[w] = 0;
  }
  std::size_t jobs(std::size_t w) const { return times_.at(w).size(); }
  /// The quantile of w's recorded times (nearest rank), 0 with none.
  double quantile(std::size_t w) const {
    std::vector<double> t = times_.at(w);
    if (t.empty()) return 0;
    const auto k = static_cast<std::size_t>(std::ceil(rule_.quantile * static_cast<double>(t.size()))) - 1;
    std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(k), t.end());
    return t[k];
  }
  /// Seconds of silence after which w is declared gone (outer: the timeout).
  double deadline(std::size_t w, double outer) const {
    if (jobs(w) < rule_.min_jobs) return outer;
    return std::min(outer, std::max(rule_.floor, rule_.factor * quantile(w)));
  }

 private:
  deadline_rule rule_;
  std::vector<std::vector<double>> times_;
  std::vector<std::size_t> next_;
};

/// A membership change the server made, in its order (remote_summary::membership).
struct membership_event {
  enum class kind : std::uint8_t { leave, gone, join };
  kind what = kind::leave;
  std::uint32_t worker = 0;
  double time = 0;        ///< the server's clock (real seconds, as arrivals)
  double silent = 0;      ///< gone: wall seconds the worker had been silent
  double deadline = 0;    ///< gone: its deadline then
  std::uint64_t version = 0;      ///< the model version at the change
  std::uint64_t params_hash = 0;  ///< join: FNV-1a of the model sent to the joiner
};

}  // namespace heterograd::runtime
