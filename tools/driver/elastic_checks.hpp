#pragma once
// The membership section's rules between keys (elastic.hpp; config_checks.cpp's check_cross
// calls check_membership). Each error names the key, the value and the rule.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "config.hpp"
#include "config_detail.hpp"
#include "elastic.hpp"
#include "registry.hpp"

namespace hgrun {

namespace elastic_detail {

// The library's error for the simulator's schedule (sim/churn.hpp names churn.events[k], in
// time order, or churn.absent) as the configuration's key.
inline config_error schedule_error(const std::invalid_argument& e, const std::vector<std::string>& keys) {
  std::string msg = e.what(), key = "membership.absent";
  const std::string tag = "churn.events[";
  if (const auto at = msg.find(tag); at != std::string::npos) {
    const auto close = msg.find(']', at);
    const std::size_t k = std::stoul(msg.substr(at + tag.size(), close - at - tag.size()));
    const auto end = msg.find('\'', close);
    key = keys.at(k) + msg.substr(close + 1, end - close - 1);
    msg.replace(at, end - at, key);
  } else if (const auto a = msg.find("churn.absent"); a != std::string::npos) {
    msg.replace(a, 12, "membership.absent");
  }
  return config_error(key, msg);
}

// Each change: a slot of the run, exactly one trigger, a time on runtime sim; a join only of a
// slot absent at the start or that left before (counted), a leave only of one taking part.
inline void check_changes(const json& c, const membership_settings& m, std::size_t n) {
  const bool sim = c["runtime"] == "sim";
  auto check = [&](const std::string& key, std::uint32_t w, bool counted, bool timed, const std::string& count_key) {
    if (w >= n)
      throw config_error(key + ".worker", "expected a worker index < workers.count = " + std::to_string(n) +
                                              ", got " + std::to_string(w));
    if (counted == timed)
      throw config_error(key, "expected exactly one of " + count_key + ", time; got " + (timed ? "both" : "neither"));
    if (sim && counted)
      throw config_error(key + "." + count_key, "expected time with runtime \"sim\": the simulator's churn is "
                                                "timed (sim/churn.hpp); " + count_key + " counts a real run's " +
                                                (count_key == "after_jobs" ? "jobs" : "updates"));
  };
  // A slot alternates: present (unless absent at the start), leave, join, leave, ... so its
  // k-th join needs k - (1 if a spare) leaves, and its k-th leave k - (0 if a spare) joins.
  std::vector<std::size_t> leaves(n, 0), joins(n, 0);
  std::vector<char> spare(n, 0);
  for (const auto w : m.options.absent) spare.at(w) = 1;  // validated: each < n
  for (std::size_t i = 0; i < m.leaves.size(); ++i) {
    const auto& l = m.leaves[i];
    check("membership.leaves[" + std::to_string(i) + "]", l.worker, l.after_jobs.has_value(), l.time.has_value(),
          "after_jobs");
    ++leaves[l.worker];
  }
  for (std::size_t i = 0; i < m.joins.size(); ++i) {
    const auto& j = m.joins[i];
    const std::string key = "membership.joins[" + std::to_string(i) + "]";
    check(key, j.worker, j.after_updates.has_value(), j.time.has_value(), "after_updates");
    const std::size_t w = j.worker, k = ++joins[w];
    if (k > leaves[w] + static_cast<std::size_t>(spare[w]))
      throw config_error(key + ".worker",
                         "expected a slot absent at the start (membership.absent) or that leaves before "
                         "(membership.leaves), got " + std::to_string(w) + ": " +
                             (leaves[w] == 0 && !spare[w] ? std::string("it never left and is not a spare")
                                                          : "join " + std::to_string(k) + " of the slot, which leaves " +
                                                                std::to_string(leaves[w]) + " times" +
                                                                (spare[w] ? " (a spare)" : "")));
  }
  std::vector<std::size_t> seen(n, 0);
  for (std::size_t i = 0; i < m.leaves.size(); ++i) {
    const std::size_t w = m.leaves[i].worker, k = ++seen[w];
    if (k > joins[w] + (spare[w] ? 0u : 1u))
      throw config_error("membership.leaves[" + std::to_string(i) + "].worker",
                         "expected a slot that takes part when it leaves, got " + std::to_string(w) + ": leave " +
                             std::to_string(k) + " of the slot, which joins " + std::to_string(joins[w]) + " times" +
                             (spare[w] ? " (absent at the start)" : ""));
  }
}

// Every slot the section names, as the configuration gives it (the schema allows integers up
// to 1e15): < workers.count, so that reading it as a worker id (32 bits) changes nothing.
inline void check_slots(const json& s, std::size_t n) {
  auto check = [n](const std::string& key, const json& v) {
    if (v.get<std::uint64_t>() >= n)
      throw config_error(key, "expected a worker index < workers.count = " + std::to_string(n) + ", got " + v.dump());
  };
  for (std::size_t i = 0; i < s["absent"].size(); ++i)
    check("membership.absent[" + std::to_string(i) + "]", s["absent"][i]);
  for (const char* list : {"leaves", "joins"})
    for (std::size_t i = 0; i < s[list].size(); ++i)
      check(std::string("membership.") + list + "[" + std::to_string(i) + "].worker", s[list][i]["worker"]);
}

}  // namespace elastic_detail

/// The section's rules between keys (config_checks.cpp's check_cross calls it): leaves, joins
/// and absent slots need membership.elastic; elastic runs are the asynchronous server methods
/// on runtime "sim" or "threads" with clock "real" (MPI without ULFM ends the job when a rank
/// dies; the replayed order waits for every worker; round methods' quorums are not built), and
/// without checkpoints (a cut does not record the membership); the absent slots obey the
/// library's rules, the changes check_changes' and, on runtime sim, the schedule's.
inline void check_membership(const json& c) {
  const std::size_t n = c["workers"]["count"].get<std::size_t>();
  elastic_detail::check_slots(c["membership"], n);  // before the slots are read as 32-bit ids
  const membership_settings m = membership_of(c);
  const bool changes = !m.leaves.empty() || !m.joins.empty() || !m.options.absent.empty();
  if (!m.options.elastic) {
    if (changes)
      throw config_error("membership.elastic", "expected true with membership.leaves, joins or absent given (a "
                                               "worker set that changes), got false");
    return;
  }
  const std::string why = "expected false with ";
  if (c["runtime"] == "mpi")
    throw config_error("membership.elastic", why + "runtime \"mpi\": processes that leave and join need a transport "
                                                    "that survives them (Open MPI without ULFM ends the job when a rank "
                                                    "dies); runtime \"threads\" with clock \"real\", or runtime "
                                                    "\"sim\", run it (docs/elastic.md)");
  if (c["runtime"] == "threads" && c["clock"] != "real")
    throw config_error("membership.elastic", why + "runtime \"threads\" and clock \"virtual\": the replayed order "
                                                    "waits for every worker's result; clock \"real\" runs it");
  for (std::size_t i = 0; i < c["methods"].size(); ++i) {
    const std::string a = c["methods"][i]["algorithm"];
    const auto* r = config_detail::row_of(a);
    if (!r || r->kind != family::server)
      throw config_error("methods[" + std::to_string(i) + "].algorithm",
                         "expected an asynchronous server method with membership.elastic, got \"" + a +
                             "\": round methods' quorums and local learning's membership are not built "
                             "(docs/elastic.md)");
  }
  if (c["checkpoint_every"].get<std::uint64_t>() > 0)
    throw config_error("checkpoint_every", "expected 0 with membership.elastic: a cut does not record the "
                                           "membership (docs/elastic.md)");
  try {
    m.options.validate(n);
  } catch (const std::invalid_argument& e) {
    throw config_error("membership.absent", e.what());
  }
  elastic_detail::check_changes(c, m, n);
  if (c["runtime"] != "sim") return;
  const auto s = churn_of(m);
  try {
    s.schedule.validate(n);
  } catch (const std::invalid_argument& e) {
    throw elastic_detail::schedule_error(e, s.keys);
  }
}

}  // namespace hgrun
