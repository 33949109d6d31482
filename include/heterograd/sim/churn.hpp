#pragma once
// Churn: workers that leave, join and stall while a run goes on (issue 46; docs/elastic.md).
//
// A churn_schedule is configuration: the workers absent when the run starts, then events in
// time order, each `{kind, worker, time, duration}`:
//   leave  the worker stops being a member at `time`: its job in flight is lost (never
//          handed over, never applied), and it starts nothing until it joins again;
//   join   the worker becomes a member at `time`: it pulls the current model and starts a job
//          (unless its policy holds it);
//   stall  the worker makes no progress during [time, time + duration): a job in flight, or
//          one started inside the window, finishes later by exactly the stalled time (work
//          is kept, as windowed's outages).
// Worker ids are the run's slots [0, workers): a join of an id absent from the start is a
// fresh worker, a join of an id that left is the same worker returning; both start from the
// current model, and a policy keeps nothing of a returning worker's past (docs/elastic.md).
//
// validate(workers) refuses a hostile schedule by name before anything runs: the key
// (`churn.events[3].worker`), the value and the rule (a leave of an absent worker, a join of
// a present one, a stall of an absent one, a schedule that leaves no worker, times out of
// order, negative or NaN times, overlapping stalls of one worker).
//
// runtime::async_runtime::set_churn applies a schedule (leaves and joins through the policy's
// on_leave / on_join, stalls in the job times); with_stalls(model, schedule) puts the stalls
// into a worker-time model for drivers that only take a model.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/sim/engine.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace heterograd::sim {

enum class churn_kind : std::uint8_t { leave, join, stall };

inline constexpr choice<churn_kind> churn_kinds[] = {
    {"leave", churn_kind::leave}, {"join", churn_kind::join}, {"stall", churn_kind::stall}};

/// One membership change, or a stall.
struct churn_event {
  churn_kind kind = churn_kind::leave;
  worker_id worker = 0;
  double time = 0;      ///< virtual seconds
  double duration = 0;  ///< stall only: how long the worker makes no progress

  static constexpr auto description() {
    return describe(
        "churn_event",
        describe_field("kind", &churn_event::kind, "leave, join or stall", churn_kinds),
        describe_field("worker", &churn_event::worker, "the worker's id (a slot of the run)",
                       at_least(0)),
        describe_field("time", &churn_event::time, "when it happens (virtual seconds)",
                       finite_at_least(0)),
        describe_field("duration", &churn_event::duration,
                       "stall only: seconds without progress (> 0 for a stall)",
                       finite_at_least(0)));
  }
};

/// Who is absent at the start, and the events in time order.
struct churn_schedule {
  std::vector<std::uint32_t> absent;  ///< workers that first appear by a join
  std::vector<churn_event> events;    ///< in non-decreasing time

  static constexpr auto description() {
    return describe("churn",
                    describe_field("absent", &churn_schedule::absent,
                                   "workers absent at the start (they first appear by a join)",
                                   at_least(0)),
                    describe_field("events", &churn_schedule::events,
                                   "leave / join / stall events in non-decreasing time"));
  }

  bool empty() const { return absent.empty() && events.empty(); }

  /// Throws std::invalid_argument naming the key, the value and the rule of the first
  /// broken rule for a run of `workers` workers; changes nothing.
  void validate(std::size_t workers) const {
    validate_fields(*this);
    std::vector<char> out(workers, 0);
    std::size_t present = workers;
    for (std::size_t i = 0; i < absent.size(); ++i) {
      const std::string key = "churn.absent[" + std::to_string(i) + "]";
      require(absent[i] < workers, key, absent[i], "must be < the number of workers (" + std::to_string(workers) + ")");
      require(!out[absent[i]], key, absent[i], "must not name a worker twice");
      out[absent[i]] = 1;
      --present;
    }
    require(present > 0, "churn.absent", absent.size(), "must leave at least one worker present at the start");
    std::vector<double> stall_end(workers, 0.0);
    for (std::size_t i = 0; i < events.size(); ++i)
      check_event(i, workers, out, present, stall_end);
  }

 private:
  void check_event(std::size_t i, std::size_t workers, std::vector<char>& out,
                   std::size_t& present, std::vector<double>& stall_end) const {
    const churn_event& e = events[i];
    const std::string key = "churn.events[" + std::to_string(i) + "]";
    validate_fields(e, key);
    require(e.worker < workers, key + ".worker", e.worker,
            "must be < the number of workers (" + std::to_string(workers) + ")");
    if (i > 0)
      require(e.time >= events[i - 1].time, key + ".time", e.time,
              "must be >= the previous event's time (" + std::to_string(events[i - 1].time) + ")");
    const std::string at = " at t = " + std::to_string(e.time) + ")";
    switch (e.kind) {
      case churn_kind::leave:
        require(!out[e.worker], key + ".worker", e.worker, "must be present to leave (it is absent" + at);
        require(present > 1, key + ".worker", e.worker, "must not be the last present worker to leave (none would remain" + at);
        out[e.worker] = 1;
        --present;
        break;
      case churn_kind::join:
        require(out[e.worker], key + ".worker", e.worker, "must be absent to join (it is present" + at);
        out[e.worker] = 0;
        ++present;
        break;
      case churn_kind::stall:
        require(!out[e.worker], key + ".worker", e.worker, "must be present to stall (it is absent" + at);
        require(e.duration > 0, key + ".duration", e.duration, "must be > 0 for a stall");
        require(std::isfinite(e.time + e.duration), key + ".duration", e.duration, "must end at a finite time");
        require(e.time >= stall_end[e.worker], key + ".time", e.time,
                "must not begin before the worker's previous stall ends (" + std::to_string(stall_end[e.worker]) + ")");
        stall_end[e.worker] = e.time + e.duration;
        break;
    }
  }
};

/// The schedule's stalls as outage windows (slowdown infinity: no progress, work kept).
inline std::vector<time_window> stall_windows(const churn_schedule& s) {
  std::vector<time_window> w;
  for (const auto& e : s.events)
    if (e.kind == churn_kind::stall)
      w.push_back(time_window{e.worker, e.time, e.time + e.duration,
                              std::numeric_limits<double>::infinity()});
  return w;
}

/// `model` with the schedule's stalls (validate the schedule first). For drivers that take
/// only a worker-time model; async_runtime::set_churn applies the stalls itself (do not
/// apply them twice).
template <worker_time_model Base>
windowed<Base> with_stalls(Base model, const churn_schedule& s) {
  return windowed<Base>(std::move(model), stall_windows(s));
}

}  // namespace heterograd::sim
