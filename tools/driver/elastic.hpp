#pragma once
// membership: elastic runs of the asynchronous server methods (issue 46; docs/elastic.md,
// section "From heterograd-run"): slots absent at the start, workers that leave and join while
// the run goes on, and the real clock's deadline rule. One configuration runs both ways:
//   runtime "threads", clock "real": runtime::run's where::threads::leaves and ::joins
//     (runtime/run.hpp), run_options::membership (elastic_real.hpp);
//   runtime "sim": the simulator's churn schedule (sim/churn.hpp, async_runtime::set_churn),
//     timed events only (a leave's `time`, a join's `time`).
// The keys elastic, absent and deadline.* are made from the library's descriptions
// (runtime/membership.hpp: membership_options, deadline_rule), so no default or rule is
// restated here; the library validates them again when the run starts.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config.hpp"
#include "described.hpp"
#include "heterograd/runtime/membership.hpp"
#include "heterograd/sim/churn.hpp"
#include "schema.hpp"

namespace hgrun {

/// membership.leaves[i]: worker leaves after `after_jobs` of its jobs (clock real) or at model
/// time `time` (both runtimes): exactly one is given.
struct leave_settings {
  std::uint32_t worker = 0;
  std::optional<std::uint64_t> after_jobs;
  std::optional<double> time;
};
/// membership.joins[i]: the slot joins once the model has `after_updates` updates (clock real)
/// or at model time `time` (both runtimes): exactly one is given.
struct join_settings {
  std::uint32_t worker = 0;
  std::optional<std::uint64_t> after_updates;
  std::optional<double> time;
};

/// The membership section as typed values.
struct membership_settings {
  heterograd::runtime::membership_options options;  ///< elastic, absent, deadline
  std::vector<leave_settings> leaves;
  std::vector<join_settings> joins;
};

/// The schema node of the section (config.cpp's root).
inline schema::spec membership_spec() {
  using namespace schema;
  auto fields = described_fields(heterograd::runtime::membership_options{});
  fields.emplace_back("deadline", object("clock real: when a silent worker is declared gone (its own job times' "
                                         "quantile x factor, floored; before min_jobs: the timeout)",
                                         described_fields(heterograd::runtime::deadline_rule{})));
  auto change = [](const char* count_key, const char* count_doc) {
    return object("a change", {{"worker", required(integer("the worker's slot (< workers.count)", nullptr, 0))},
                               {count_key, optional(integer(count_doc, nullptr, 0))},
                               {"time", optional(number("model time it happens at (runtime sim: virtual "
                                                        "time; clock real: wall seconds / real_scale)",
                                                        nullptr, 0))}});
  };
  fields.emplace_back("leaves", array("workers that leave (needs elastic): their job in flight is lost",
                                      change("after_jobs", "clock real: leaves in place of its job of this "
                                                           "index (its jobs counted from 0 over the run)"),
                                      json::array()));
  fields.emplace_back("joins", array("slots that join (needs elastic): absent at the start, or left before",
                                     change("after_updates", "clock real: joins once the model has this "
                                                             "many updates"),
                                     json::array()));
  return object("elastic runs of the asynchronous server methods (docs/elastic.md): runtime threads with "
                "clock real, or runtime sim",
                std::move(fields));
}

/// Reads a resolved configuration's membership section.
inline membership_settings membership_of(const json& c) {
  membership_settings m;
  if (!c.contains("membership")) return m;
  const json& s = c["membership"];
  m.options = from_json(s, heterograd::runtime::membership_options{});
  m.options.deadline = from_json(s["deadline"], heterograd::runtime::deadline_rule{});
  for (const auto& l : s["leaves"]) {
    leave_settings x{l["worker"].get<std::uint32_t>(), std::nullopt, std::nullopt};
    if (l.contains("after_jobs")) x.after_jobs = l["after_jobs"].get<std::uint64_t>();
    if (l.contains("time")) x.time = l["time"].get<double>();
    m.leaves.push_back(x);
  }
  for (const auto& j : s["joins"]) {
    join_settings x{j["worker"].get<std::uint32_t>(), std::nullopt, std::nullopt};
    if (j.contains("after_updates")) x.after_updates = j["after_updates"].get<std::uint64_t>();
    if (j.contains("time")) x.time = j["time"].get<double>();
    m.joins.push_back(x);
  }
  return m;
}

/// The simulator's schedule of the timed leaves and joins, in time order (a leave before a
/// join at the same time), and each event's configuration key (membership.leaves[i], ...).
struct churn_with_keys {
  heterograd::sim::churn_schedule schedule;
  std::vector<std::string> keys;
};
inline churn_with_keys churn_of(const membership_settings& m) {
  namespace sim = heterograd::sim;
  struct item {
    sim::churn_event e;
    std::string key;
  };
  std::vector<item> all;
  for (std::size_t i = 0; i < m.leaves.size(); ++i)
    if (m.leaves[i].time)
      all.push_back({{sim::churn_kind::leave, m.leaves[i].worker, *m.leaves[i].time, 0},
                     "membership.leaves[" + std::to_string(i) + "]"});
  for (std::size_t i = 0; i < m.joins.size(); ++i)
    if (m.joins[i].time)
      all.push_back({{sim::churn_kind::join, m.joins[i].worker, *m.joins[i].time, 0},
                     "membership.joins[" + std::to_string(i) + "]"});
  std::stable_sort(all.begin(), all.end(), [](const item& a, const item& b) { return a.e.time < b.e.time; });
  churn_with_keys out;
  out.schedule.absent = m.options.absent;
  for (auto& x : all) {
    out.schedule.events.push_back(x.e);
    out.keys.push_back(std::move(x.key));
  }
  return out;
}

/// The simulated run's membership record (summary.json's extra.membership): the schedule's
/// leaves and joins in time order and the jobs lost at the leaves.
inline json sim_membership_record(const membership_settings& m, std::uint64_t lost) {
  json events = json::array();
  for (const auto& e : churn_of(m).schedule.events)
    events.push_back({{"kind", e.kind == heterograd::sim::churn_kind::leave ? "leave" : "join"},
                      {"worker", e.worker},
                      {"time", e.time}});
  return {{"events", events}, {"lost", lost}, {"refused_late", 0}, {"absent", m.options.absent}};
}

/// "" when every leave and join is timed, else the first one that is not, named (a real run's
/// change counted in jobs or updates: the simulator cannot predict it).
inline std::string untimed_change(const membership_settings& m) {
  for (std::size_t i = 0; i < m.leaves.size(); ++i)
    if (!m.leaves[i].time)
      return "membership.leaves[" + std::to_string(i) + "] is counted in jobs (the simulator's churn is timed)";
  for (std::size_t i = 0; i < m.joins.size(); ++i)
    if (!m.joins[i].time)
      return "membership.joins[" + std::to_string(i) + "] is counted in updates (the simulator's churn is timed)";
  return "";
}

/// The section's rules between keys: elastic_checks.hpp (config_checks.cpp's check_cross).

}  // namespace hgrun
