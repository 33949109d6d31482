#pragma once
// membership on clock "real" (elastic.hpp): the section as runtime::run's where::threads
// leaves and joins and run_options::membership (runtime/run.hpp), and the run report's
// membership as summary.json's extra.membership. The library does the work: the leaves (the
// worker's compute replaced by runtime::leave_run), the joins (a new thread welcomed with the
// model and its hash), the learned deadlines, the refusals of late results.

#include <string>
#include <utility>

#include "drive.hpp"
#include "elastic.hpp"
#include "heterograd/runtime/run.hpp"

namespace hgrun {

/// where::threads for `placement` with the section's leaves and joins; sets o.membership.
inline heterograd::runtime::where::threads elastic_threads(const membership_settings& m,
                                                           heterograd::runtime::run_options& o,
                                                           heterograd::runtime::placement_config placement) {
  namespace hr = heterograd::runtime;
  hr::where::threads w{std::move(placement), "workers.placement"};
  o.membership = m.options;
  for (const auto& l : m.leaves) {
    hr::where::threads::leave_at x;
    x.worker = l.worker;
    if (l.after_jobs) x.after_jobs = *l.after_jobs;
    if (l.time) x.at_time = *l.time;
    w.leaves.push_back(x);
  }
  for (const auto& j : m.joins)
    w.joins.push_back({j.worker, j.after_updates.value_or(0), j.time.value_or(0.0)});
  return w;
}

/// summary.json's extra.membership of a real run: the server's changes in its order (leave,
/// gone with its silence and deadline, join with the version and the hash the joiner was
/// welcomed with), the jobs lost at leaves, the late results refused, the refused membership
/// messages, and each joiner's side (its jobs, the version and hash it checked).
inline json real_membership_record(const heterograd::runtime::run_report& r) {
  using kind = heterograd::runtime::membership_event::kind;
  json events = json::array();
  for (const auto& e : r.membership) {
    json x = {{"kind", e.what == kind::leave ? "leave" : e.what == kind::gone ? "gone" : "join"},
              {"worker", e.worker},
              {"time", e.time},
              {"version", e.version}};
    if (e.what == kind::gone) x.update({{"silent", e.silent}, {"deadline", e.deadline}});
    if (e.what == kind::join) x["params_hash"] = hex_of(e.params_hash);
    events.push_back(std::move(x));
  }
  json joiners = json::array();
  for (const auto& j : r.joiners)
    joiners.push_back({{"jobs", j.jobs},
                       {"joined_version", j.joined_version},
                       {"joined_hash", j.joined_hash ? json(hex_of(*j.joined_hash)) : json()}});
  return {{"events", events},
          {"lost", r.lost},
          {"refused_late", r.refused_late},
          {"refusals", r.membership_refusals},
          {"joiners", joiners}};
}

}  // namespace hgrun
