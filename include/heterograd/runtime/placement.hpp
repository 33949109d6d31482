#pragma once
// Worker placement on CPU cores, for real-time runs: a worker's thread (or an MPI rank's
// process) is pinned to a set of cores, so that workers sharing a core are really slower.
// With 2 cores, one worker alone on core 0 and seven sharing core 1 is a 7x spread of speeds;
// the OmniLearn paper (Tyagi, Sharma, IEEE TPDS 2025; #7 of docs/references.md) made its
// heterogeneity levels this way, with shares of CPU cores.
//
// A core set is written in the Linux cpulist syntax: "3", "0-3", "0,2,4-6". Core numbers are
// decimal, below the kernel's CPU_SETSIZE (1024); a range a-b needs a <= b; no core may be
// listed twice; no spaces. parse_core_set refuses anything else with std::invalid_argument
// naming the key, the text and the rule. Pinning refuses a core this process may not run on
// (sched_getaffinity: the machine's cores, less what a launcher or cgroup took away), naming
// it and the available set, before it changes anything.
//
// Worth knowing (measured, tests/runtime/real_test.cpp): Linux's group scheduling (autogroup,
// cgroups) splits a process's weight over the cores by its load on each, so a worker thread
// alone on its core gets 1/n of its process's weight there; on a machine where another
// session is busy on that core, the lone thread loses most of the core and the placement's
// spread of speeds shrinks. Real runs with placement want a quiet machine, or workers as
// processes (MPI ranks) whose speeds then follow their core shares.

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "heterograd/core/error.hpp"

namespace heterograd::runtime {

/// A set of CPU cores: increasing, distinct core numbers.
struct core_set {
  std::vector<int> cores;

  bool empty() const { return cores.empty(); }
  std::size_t size() const { return cores.size(); }
  bool contains(int c) const { return std::binary_search(cores.begin(), cores.end(), c); }
  /// The cpulist form: runs of consecutive cores as a-b ("0-3,6").
  std::string str() const {
    std::string s;
    for (std::size_t i = 0; i < cores.size();) {
      std::size_t j = i;
      while (j + 1 < cores.size() && cores[j + 1] == cores[j] + 1) ++j;
      if (!s.empty()) s += ',';
      s += std::to_string(cores[i]);
      if (j > i) s += '-' + std::to_string(cores[j]);
      i = j + 1;
    }
    return s;
  }
  friend bool operator==(const core_set&, const core_set&) = default;
};

/// Core numbers are below this (the kernel's cpu_set_t size).
inline constexpr int max_cores = CPU_SETSIZE;

namespace detail {
inline core_set from_cpu_set(const cpu_set_t& set) {
  core_set out;
  for (int c = 0; c < max_cores; ++c)
    if (CPU_ISSET(c, &set)) out.cores.push_back(c);
  return out;
}

[[noreturn]] inline void bad_core_set(const std::string& key, std::string_view text,
                                      std::string_view rule) {
  throw std::invalid_argument(invalid_argument_message(key, "\"" + std::string(text) + "\"",
                                                       rule));
}
}  // namespace detail

/// Parses a cpulist ("0-3,6"); `key` names the setting in errors.
inline core_set parse_core_set(std::string_view text, const std::string& key) {
  constexpr std::string_view rule =
      "must be a list of cores and ranges like \"0\", \"0-3\" or \"0,2,4-6\" (decimal core "
      "numbers below 1024, ranges a-b with a <= b, no core twice, no spaces)";
  if (text.empty()) detail::bad_core_set(key, text, rule);
  std::vector<char> seen(static_cast<std::size_t>(max_cores), 0);
  core_set out;
  auto number = [&](std::string_view& s) {
    int v = -1;
    const auto* end = s.data() + s.size();
    const auto r = std::from_chars(s.data(), end, v);
    // Digits only (from_chars takes a leading '-'), and at most 4 of them (no overflow).
    if (r.ec != std::errc{} || r.ptr == s.data() || s.front() == '-' ||
        r.ptr - s.data() > 4 || v < 0 || v >= max_cores)
      detail::bad_core_set(key, text, rule);
    s.remove_prefix(static_cast<std::size_t>(r.ptr - s.data()));
    return v;
  };
  std::string_view s = text;
  for (;;) {
    const int a = number(s);
    int b = a;
    if (!s.empty() && s.front() == '-') {
      s.remove_prefix(1);
      if (s.empty()) detail::bad_core_set(key, text, rule);
      b = number(s);
      if (b < a) detail::bad_core_set(key, text, rule);
    }
    for (int c = a; c <= b; ++c) {
      if (seen[static_cast<std::size_t>(c)]) detail::bad_core_set(key, text, rule);
      seen[static_cast<std::size_t>(c)] = 1;
    }
    if (s.empty()) break;
    if (s.front() != ',') detail::bad_core_set(key, text, rule);
    s.remove_prefix(1);
    if (s.empty()) detail::bad_core_set(key, text, rule);
  }
  for (int c = 0; c < max_cores; ++c)
    if (seen[static_cast<std::size_t>(c)]) out.cores.push_back(c);
  return out;
}

/// The cores this process may run on: its main thread's affinity (what a launcher's binding,
/// taskset or a cgroup left it), not the calling thread's, so that a thread created by a
/// pinned one may still be placed on any of the process's cores.
inline core_set available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(::getpid(), sizeof(set), &set) != 0)
    throw std::system_error(errno, std::generic_category(), "heterograd: sched_getaffinity");
  return detail::from_cpu_set(set);
}

/// Throws std::invalid_argument naming `key`, the set and the available cores unless every
/// core of s is available to this process.
inline void require_available(const core_set& s, const std::string& key) {
  require(!s.empty(), key, "\"\"", "must name at least one core");
  const core_set have = available_cores();
  for (int c : s.cores)
    if (!have.contains(c))
      throw std::invalid_argument(invalid_argument_message(
          key, "\"" + s.str() + "\"",
          "core " + std::to_string(c) + " is not available to this process (available: " +
              have.str() + ")"));
}

/// Pins the calling thread to s (every core available, else std::invalid_argument naming
/// `key`); std::system_error if the system refuses.
inline void pin_this_thread(const core_set& s, const std::string& key) {
  require_available(s, key);
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : s.cores) CPU_SET(c, &set);
  if (const int e = pthread_setaffinity_np(pthread_self(), sizeof(set), &set); e != 0)
    throw std::system_error(e, std::generic_category(),
                            "heterograd: pinning a thread to cores " + s.str() + " (" + key + ")");
}

/// The cores the calling thread may run on now.
inline core_set this_thread_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (const int e = pthread_getaffinity_np(pthread_self(), sizeof(set), &set); e != 0)
    throw std::system_error(e, std::generic_category(), "heterograd: pthread_getaffinity_np");
  return detail::from_cpu_set(set);
}

/// One core set per worker (empty: workers are not pinned), and the server's (empty: not
/// pinned). A server method on threads (runtime::run with where::threads) pins its server
/// thread to `server`; a server that shares a worker's core takes from that worker's share
/// (sharing_server() names them). Round methods have no server thread and refuse a server
/// set; under MPI rank 0's process is the server's, which a launcher binds. (With a placement
/// the server copies each job's model, remote_options::copy_jobs: docs/runtime.md.)
struct placement_config {
  std::vector<core_set> workers;
  core_set server;
  /// The server set's name in errors; empty: the placement's key + ".server".
  std::string server_key;

  /// From one cpulist per worker; errors name `key`[w].
  static placement_config parse(const std::vector<std::string>& sets, const std::string& key) {
    placement_config p;
    for (std::size_t w = 0; w < sets.size(); ++w)
      p.workers.push_back(parse_core_set(sets[w], key + "[" + std::to_string(w) + "]"));
    return p;
  }
  /// Empty, or one available core set for each of n workers.
  void validate(std::size_t n, const std::string& key) const {
    if (workers.empty()) return;
    require(workers.size() == n, key, workers.size(),
            "must list one core set per worker (" + std::to_string(n) + ")");
    for (std::size_t w = 0; w < n; ++w)
      require_available(workers[w], key + "[" + std::to_string(w) + "]");
  }
  /// The key errors about the server set name.
  std::string server_name(const std::string& key) const {
    return server_key.empty() ? key + ".server" : server_key;
  }
  /// The server set: empty, or available to this process.
  void validate_server(const std::string& key) const {
    if (!server.empty()) require_available(server, server_name(key));
  }
  /// Refuses a server set where this runner cannot pin a server thread (`rule`: why).
  void refuse_server(const std::string& key, const std::string& rule) const {
    require(server.empty(), server_name(key), "\"" + server.str() + "\"", rule);
  }
  /// Pins the calling thread as the server's (nothing when the server set is empty).
  void pin_server(const std::string& key) const {
    if (!server.empty()) pin_this_thread(server, server_name(key));
  }
  /// The workers whose cores overlap the server's (none when the server is not pinned): the
  /// server shares a core with them, and takes from their share of it.
  std::vector<std::size_t> sharing_server() const {
    std::vector<std::size_t> out;
    for (std::size_t w = 0; w < workers.size(); ++w)
      if (std::any_of(workers[w].cores.begin(), workers[w].cores.end(),
                      [&](int c) { return server.contains(c); }))
        out.push_back(w);
    return out;
  }
  /// Pins the calling thread as worker w's (nothing when empty).
  void pin(std::size_t w, const std::string& key) const {
    if (workers.empty()) return;
    require(w < workers.size(), key, w, "worker index must be < the placement's size");
    pin_this_thread(workers[w], key + "[" + std::to_string(w) + "]");
  }
  /// pin(w, key) once per thread for the same run and worker: a thread that computes job after
  /// job of one worker pins on its first (`run`: the run's identity, e.g. its driver object).
  void pin_once(const void* run, std::size_t w, const std::string& key) const {
    static thread_local const void* pinned_for = nullptr;
    static thread_local std::size_t pinned = ~std::size_t{0};
    if (workers.empty() || (pinned_for == run && pinned == w)) return;
    pin(w, key);
    pinned_for = run;
    pinned = w;
  }
  /// How many workers share each worker's cores (a worker's share of a core set is 1/this
  /// when they all run: the expected slow-down of an evenly loaded core).
  std::vector<std::size_t> sharing() const {
    std::vector<std::size_t> out(workers.size(), 0);
    for (std::size_t w = 0; w < workers.size(); ++w)
      for (const auto& o : workers)
        out[w] += std::any_of(o.cores.begin(), o.cores.end(),
                              [&](int c) { return workers[w].contains(c); })
                      ? 1
                      : 0;
    return out;
  }
};

}  // namespace heterograd::runtime
