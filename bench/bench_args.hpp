#pragma once
// The benchmark suites' shared conventions for sizes and thread counts (header-only).
//
// Every argument of every benchmark has a name (Google Benchmark's ArgNames), so results read
// `BM_sgd/threads:2/...`, `BM_engine/workers:10000/...`, `BM_inproc_allreduce/ranks:2/
// floats:1024/variant:0/...`. bench/report.py and bench/targets/*.py look figures up by these
// names, not by position.
//
// The arguments that are sizes or thread counts form a suite's *dimensions*: each has a flag
// of the same name taking a comma-separated list, which replaces the default values of every
// benchmark of the suite that uses that dimension:
//
//   hg-bench-kernels --threads=1,2,8
//   hg-bench-comm --ranks=2 --floats=1k,16M
//
// A value is a decimal integer, optionally followed by k, M or G (times 2^10, 2^20, 2^30);
// each value must lie in the dimension's range (1 .. its max) and appear once. Anything else
// (a non-number, 0, a negative number, an overflow, an empty list or element, a repeated
// value) prints an error naming the flag, the value and the rule, and exits with status 2.
// `--help` lists the suite's own flags after Google Benchmark's.
//
// The default thread range, thread_counts(), is 1, 2, 4, ... up to the machine's cores
// (std::thread::hardware_concurrency), the core count itself included when it is not a power
// of two: {1, 2} on 2 cores, {1, 2, 4, 6} on 6, {1} on 1.
//
// Since the flags are only known in main(), the benchmarks that use a dimension are
// registered there, at run time (benchmark::RegisterBenchmark), once `flags` has read them:
//
//   int main(int argc, char** argv) {
//     const hg_bench::flags f(argc, argv, {hg_bench::threads_dimension()});
//     const auto threads = f.get("threads", hg_bench::thread_counts());
//     hg_bench::register_threads("BM_copy", BM_copy, threads)->UseRealTime();
//     return hg_bench::run(argc, argv);
//   }
//
// Each run's JSON records the values used in its context (`hg_bench_threads: "1,2"`, plus
// `hg_bench_hardware_concurrency`), which the peer comparisons read to measure the same
// thread counts.
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

namespace hg_bench {

using values = std::vector<std::int64_t>;

/// One overridable dimension: flag `--<name>=LIST`, argument name `<name>`.
struct dimension {
  std::string name;  ///< flag and argument name
  std::string help;  ///< what the values are, for --help
  std::int64_t max;  ///< largest accepted value (the smallest is 1)
};

/// The machine's core count as the standard library reports it (at least 1).
inline unsigned cores() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

/// The default thread range: powers of two below the core count, then the core count.
inline values thread_counts() {
  const auto n = static_cast<std::int64_t>(cores());
  values v;
  for (std::int64_t t = 1; t < n; t *= 2) v.push_back(t);
  v.push_back(n);
  return v;
}

/// The dimensions the suites share (a suite may declare its own with dimension{...}).
inline dimension threads_dimension() {
  return {"threads", "OpenMP / BLAS threads per benchmark (default 1, 2, 4, ... up to the cores)",
          1024};
}
inline dimension floats_dimension(std::string help = "buffer sizes, in floats") {
  return {"floats", std::move(help), std::int64_t{1} << 28};
}

/// "1,2,4": a list as the flags take it.
inline std::string join(const values& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

namespace detail {

// Concatenation by appends (GCC 12's -Wrestrict misfires on `"literal" + std::string`).
inline std::string cat(std::initializer_list<std::string_view> parts) {
  std::string s;
  for (std::string_view p : parts) s.append(p);
  return s;
}

inline std::string& program() {
  static std::string p = "hg-bench";
  return p;
}

inline std::vector<dimension>& declared() {
  static std::vector<dimension> d;
  return d;
}

// The values each dimension ran with (the union over the suite's benchmarks, in order of
// first use), recorded in the run's context by run().
inline std::vector<std::pair<std::string, values>>& used() {
  static std::vector<std::pair<std::string, values>> u;
  return u;
}

inline void record(const std::string& name, const values& v) {
  auto& u = used();
  auto it = u.begin();
  while (it != u.end() && it->first != name) ++it;
  if (it == u.end()) it = u.insert(u.end(), {name, {}});
  for (std::int64_t x : v) {
    bool seen = false;
    for (std::int64_t y : it->second) seen = seen || y == x;
    if (!seen) it->second.push_back(x);
  }
}

inline std::string rule(const dimension& d) {
  return cat({"--", d.name, " takes a comma-separated list of integers from 1 to ",
              std::to_string(d.max), ", each once (k, M, G multiply by 2^10, 2^20, 2^30)"});
}

// Google Benchmark's --help, then this suite's flags.
inline void print_help() {
  benchmark::PrintDefaultHelp();
  if (declared().empty()) return;
  std::fprintf(stdout, "\n%s's own flags (values replace every benchmark's defaults):\n",
               program().c_str());
  for (const auto& d : declared())
    std::fprintf(stdout,
                 "  [--%s=LIST]\n      %s;\n      integers 1 .. %lld, comma-separated"
                 " (k, M, G: times 2^10, 2^20, 2^30)\n",
                 d.name.c_str(), d.help.c_str(), static_cast<long long>(d.max));
}

// Parses one element of a list; "" on success, else what is wrong with it.
inline std::string parse_value(std::string_view s, std::int64_t max, std::int64_t& out) {
  if (s.empty()) return "an empty element";
  if (s.front() == '-') return "a negative number";
  std::int64_t mult = 1;
  switch (s.back()) {
    case 'k':
    case 'K':
      mult = std::int64_t{1} << 10;
      break;
    case 'm':
    case 'M':
      mult = std::int64_t{1} << 20;
      break;
    case 'g':
    case 'G':
      mult = std::int64_t{1} << 30;
      break;
    default:
      break;
  }
  if (mult != 1) s.remove_suffix(1);
  if (s.empty() || s.find_first_not_of("0123456789") != std::string_view::npos)
    return "not a number";
  std::uint64_t v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec == std::errc::result_out_of_range) return "too large (an overflow)";
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) return "not a number";
  if (v == 0) return "zero (the smallest value is 1)";
  if (v > static_cast<std::uint64_t>(max) / static_cast<std::uint64_t>(mult))
    return cat({"too large (the largest value is ", std::to_string(max), ")"});
  out = static_cast<std::int64_t>(v) * mult;
  return "";
}

}  // namespace detail

/// Prints `<program>: error: --<flag>=<value>: <what>; <rule>` and exits with status 2: the
/// suites' one way to refuse a command line (also for rules across flags, e.g. comm's sizes
/// that must split evenly over the ranks).
[[noreturn]] inline void usage_error(const std::string& flag, const std::string& value,
                                     const std::string& what, const std::string& rule) {
  std::fprintf(stderr, "%s: error: --%s=%s: %s; %s\n", detail::program().c_str(), flag.c_str(),
               value.c_str(), what.c_str(), rule.c_str());
  std::exit(2);
}

/// Parses a list for dimension d; exits through usage_error() when it breaks the rule.
inline values parse_list(const dimension& d, std::string_view list) {
  values out;
  if (list.empty()) usage_error(d.name, "", "an empty list", detail::rule(d));
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = list.find(',', start);
    const std::string_view item = list.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    std::int64_t v = 0;
    const std::string what = detail::parse_value(item, d.max, v);
    if (!what.empty())
      usage_error(d.name, std::string(list),
                  item.empty() ? what : detail::cat({"'", item, "' is ", what}), detail::rule(d));
    for (std::int64_t seen : out)
      if (seen == v)
        usage_error(d.name, std::string(list), detail::cat({"'", item, "' appears twice"}),
                    detail::rule(d));
    out.push_back(v);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

/// The suite's dimensions as given on the command line. The constructor takes `--<name>=LIST`
/// (the last one wins when a flag repeats) out of argv before Google Benchmark sees it.
class flags {
 public:
  flags(int& argc, char** argv, std::vector<dimension> dims) : dims_(std::move(dims)) {
    if (argc > 0 && argv[0]) {
      const char* slash = std::strrchr(argv[0], '/');
      detail::program() = slash ? slash + 1 : argv[0];
    }
    detail::declared() = dims_;
    given_.resize(dims_.size());
    int kept = argc > 0 ? 1 : 0;
    for (int i = kept; i < argc; ++i) {
      const std::string_view a(argv[i]);
      bool ours = false;
      for (std::size_t k = 0; k < dims_.size(); ++k) {
        const std::string flag = detail::cat({"--", dims_[k].name});
        if (a == flag) {
          std::fprintf(stderr, "%s: error: %s: the flag needs '=' and its list (%s=1,2); %s\n",
                       detail::program().c_str(), flag.c_str(), flag.c_str(),
                       detail::rule(dims_[k]).c_str());
          std::exit(2);
        }
        if (a.starts_with(flag) && a.substr(flag.size()).starts_with('=')) {
          given_[k] = {true, parse_list(dims_[k], a.substr(flag.size() + 1))};
          ours = true;
        }
      }
      if (!ours) argv[kept++] = argv[i];
    }
    argc = kept;
    argv[kept] = nullptr;  // argv[argc] stays the terminator, as the C runtime leaves it
  }

  /// The values given for `name`, or `fallback` (this benchmark's default) without the flag.
  /// run() records them in the run's context (hg_bench_<name>: "1,2").
  values get(const std::string& name, values fallback) const {
    const auto k = index(name);
    values v = given_[k].first ? given_[k].second : std::move(fallback);
    detail::record(name, v);
    return v;
  }

  /// Whether `--<name>=` was on the command line.
  bool given(const std::string& name) const { return given_[index(name)].first; }

 private:
  std::size_t index(const std::string& name) const {
    for (std::size_t k = 0; k < dims_.size(); ++k)
      if (dims_[k].name == name) return k;
    std::fprintf(stderr, "%s: internal error: no dimension '%s' declared\n",
                 detail::program().c_str(), name.c_str());
    std::abort();
  }

  std::vector<dimension> dims_;
  std::vector<std::pair<bool, values>> given_;
};

/// Registers `fn` as `name` with one run per argument tuple of `cases`, named `arg_names`
/// (e.g. {"ranks", "floats"}), and returns the family for further settings (Unit, MinTime,
/// UseRealTime, ...).
template <class Fn>
benchmark::internal::Benchmark* register_cases(const std::string& name, Fn&& fn,
                                               const std::vector<std::string>& arg_names,
                                               const std::vector<values>& cases) {
  auto* b = benchmark::RegisterBenchmark(name.c_str(), std::forward<Fn>(fn));
  b->ArgNames(arg_names);
  for (const auto& c : cases) b->Args(c);
  return b;
}

/// The Cartesian product of `ranges` (the first range outermost, the last varying fastest),
/// one range per name of `arg_names`, registered as register_cases() does.
template <class Fn>
benchmark::internal::Benchmark* register_product(const std::string& name, Fn&& fn,
                                                 const std::vector<std::string>& arg_names,
                                                 const std::vector<values>& ranges) {
  std::vector<values> cases{{}};
  for (const auto& r : ranges) {
    std::vector<values> next;
    for (const auto& c : cases)
      for (std::int64_t v : r) {
        next.push_back(c);
        next.back().push_back(v);
      }
    cases = std::move(next);
  }
  return register_cases(name, std::forward<Fn>(fn), arg_names, cases);
}

/// One run per thread count, argument `threads`.
template <class Fn>
benchmark::internal::Benchmark* register_threads(const std::string& name, Fn&& fn,
                                                 const values& threads) {
  return register_product(name, std::forward<Fn>(fn), {"threads"}, {threads});
}

/// Google Benchmark's main after the suite's registrations: Initialize (its --help followed
/// by the suite's flags), refuses unknown flags (status 2), runs, shuts down.
inline int run(int& argc, char** argv) {
  benchmark::AddCustomContext("hg_bench_hardware_concurrency", std::to_string(cores()));
  for (const auto& [name, v] : detail::used())
    benchmark::AddCustomContext(detail::cat({"hg_bench_", name}), join(v));
  benchmark::Initialize(&argc, argv, &detail::print_help);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    std::string own;
    for (const auto& d : detail::declared()) {
      if (!own.empty()) own += ", ";
      own += detail::cat({"--", d.name, "=LIST"});
    }
    if (!own.empty())
      std::fprintf(stderr, "%s: its own flags: %s (see --help)\n", detail::program().c_str(),
                   own.c_str());
    return 2;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace hg_bench
