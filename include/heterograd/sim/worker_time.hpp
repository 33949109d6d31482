#pragma once
// Worker-time models: how long job k of worker w takes when it starts at virtual time t with
// batch b. A model is a copyable value with
//     double duration(worker_id w, std::uint64_t k, double t, std::size_t b) const;
// Random models draw from heterograd::counter_rng at coordinates (seed, model salt, w, k), so
// the time of (worker, job k) depends only on the seed and those coordinates, never on the
// order in which jobs were started or on other workers.
//
// Models and the papers they come from:
// - fixed_times, sqrt_times (tau_i = 1 + sqrt(i)), linear_times (tau_i = 1 + i) with a random
//   permutation: Ringmaster ASGD (Maranjyan, Tyurin, Richtarik, ICML 2025) and Ringleader
//   ASGD (Maranjyan, Richtarik, ICLR 2026) simulators;
// - half_normal_noise |N(0, i+1)| added to every job: the same simulators;
// - lognormal_times, exponential_times: the usual straggler models;
// - speed_classes: Biased Local SGD (Lim et al., arXiv 2508.08540), CPU and GPU workers;
// - core_share_times with omnilearn_cores presets HL1..HL8 and epoch schedules: OmniLearn
//   (Tyagi, Sharma, IEEE TPDS 2025), t_i = c * b_i / cores_i;
// - batch_affine_times: time = fixed + per-sample * b (OmniLearn, Cephalo);
// - windowed (outages and slow-downs over time windows), trace_replay (measured traces).
// Combinators plus(), times() and scaled() compose them; any_time_model erases the type.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <istream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/sim/engine.hpp"

namespace heterograd::sim {

/// A worker-time model.
template <class M>
concept worker_time_model = std::copyable<M> && requires(const M& m, worker_id w,
                                                         std::uint64_t k, double t,
                                                         std::size_t b) {
  { m.duration(w, k, t, b) } -> std::convertible_to<double>;
};

namespace detail {

/// Stream salts: two models built from the same seed draw independent numbers.
enum model_salt : std::uint64_t {
  salt_permutation = 0x5045524d,  // "PERM"
  salt_half_normal = 0x48414c46,  // "HALF"
  salt_lognormal = 0x4c4f474e,    // "LOGN"
  salt_exponential = 0x45585030,  // "EXP0"
};

inline std::string indexed(const char* name, std::size_t i) {
  std::string s = name;
  s += '[';
  s += std::to_string(i);
  s += ']';
  return s;
}

inline void require_times(const char* name, const std::vector<double>& v, bool allow_zero) {
  require(!v.empty(), name, v.size(), "must not be empty (an empty worker list)");
  for (std::size_t i = 0; i < v.size(); ++i) {
    const bool ok = std::isfinite(v[i]) && (allow_zero ? v[i] >= 0 : v[i] > 0);
    require(ok, indexed(name, i), v[i],
            allow_zero ? "must be finite and >= 0 (a negative time)"
                       : "must be finite and > 0");
  }
}

/// A per-worker parameter; a single value applies to every worker.
inline double per_worker(const std::vector<double>& v, worker_id w, const char* name) {
  if (v.size() == 1) return v[0];
  require(w < v.size(), name, w, "worker must be < the model's number of workers");
  return v[w];
}

}  // namespace detail

// ------------------------------------------------------------------------------------------
// Deterministic per-worker times

/// tau_w for job of worker w, every job.
struct fixed_times {
  std::vector<double> tau;

  fixed_times() = default;
  explicit fixed_times(std::vector<double> times) : tau(std::move(times)) {
    detail::require_times("fixed_times.tau", tau, true);
  }
  std::size_t workers() const { return tau.size(); }
  double duration(worker_id w, std::uint64_t, double, std::size_t) const {
    require(w < tau.size(), "worker", w, "must be < fixed_times' number of workers");
    return tau[w];
  }
};

/// The same times assigned to workers in a random order: worker perm[i] gets tau[i], where
/// perm is a uniform permutation drawn from `seed` (Fisher-Yates on counter_rng).
inline fixed_times permuted(const fixed_times& base, std::uint64_t seed) {
  const std::size_t n = base.tau.size();
  std::vector<std::size_t> perm(n);
  counter_rng(seed, detail::salt_permutation).permutation(perm.begin(), perm.end());
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[perm[i]] = base.tau[i];
  return fixed_times(std::move(out));
}

/// tau_i = 1 + sqrt(i), i = 0..n-1, randomly permuted across workers when `permute`
/// (Ringmaster ASGD's experiments).
inline fixed_times sqrt_times(std::size_t n, std::uint64_t seed, bool permute = true) {
  require(n > 0, "sqrt_times.workers", n, "must be > 0 (an empty worker list)");
  std::vector<double> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = 1.0 + std::sqrt(static_cast<double>(i));
  fixed_times f(std::move(t));
  return permute ? permuted(f, seed) : f;
}

/// tau_i = 1 + i, randomly permuted when `permute` (Ringleader ASGD's experiments).
inline fixed_times linear_times(std::size_t n, std::uint64_t seed, bool permute = true) {
  require(n > 0, "linear_times.workers", n, "must be > 0 (an empty worker list)");
  std::vector<double> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = 1.0 + static_cast<double>(i);
  fixed_times f(std::move(t));
  return permute ? permuted(f, seed) : f;
}

/// A class of identical workers: `count` of them, each job taking `time`.
struct speed_class {
  std::size_t count = 0;
  double time = 1.0;
};

/// Workers in class order: e.g. {{2, 32.0}, {8, 1.0}} = 2 CPU workers 32x slower than 8 GPU
/// workers (Biased Local SGD's 2 CPU + 8 GPU setup).
inline fixed_times speed_classes(const std::vector<speed_class>& classes) {
  require(!classes.empty(), "speed_classes.classes", classes.size(),
          "must not be empty (an empty worker list)");
  std::vector<double> t;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    require(classes[c].count > 0, detail::indexed("speed_classes.count", c), classes[c].count,
            "must be > 0");
    require(std::isfinite(classes[c].time) && classes[c].time >= 0,
            detail::indexed("speed_classes.time", c), classes[c].time,
            "must be finite and >= 0 (a negative time)");
    t.insert(t.end(), classes[c].count, classes[c].time);
  }
  return fixed_times(std::move(t));
}

/// time = fixed_w + per_sample_w * b (one value in a vector applies to every worker).
struct batch_affine_times {
  std::vector<double> fixed;
  std::vector<double> per_sample;

  batch_affine_times(std::vector<double> fixed_part, std::vector<double> per_sample_part)
      : fixed(std::move(fixed_part)), per_sample(std::move(per_sample_part)) {
    detail::require_times("batch_affine_times.fixed", fixed, true);
    detail::require_times("batch_affine_times.per_sample", per_sample, true);
    require(fixed.size() == 1 || per_sample.size() == 1 || fixed.size() == per_sample.size(),
            "batch_affine_times.per_sample.size", per_sample.size(),
            "must be 1 or equal the size of 'batch_affine_times.fixed'");
  }
  double duration(worker_id w, std::uint64_t, double, std::size_t b) const {
    return detail::per_worker(fixed, w, "worker") +
           detail::per_worker(per_sample, w, "worker") * static_cast<double>(b);
  }
};

// ------------------------------------------------------------------------------------------
// Random per-job times

/// How the half-normal noise scale grows with the worker index i.
enum class noise_growth : std::uint8_t {
  variance_linear,  ///< sigma_i = scale * sqrt(i + 1): variance (i+1) scale^2, |N(0, i+1)|
  stddev_linear,    ///< sigma_i = scale * (i + 1)
  constant,         ///< sigma_i = scale
};

/// |N(0, sigma_w^2)| for every job, mean sigma_w * sqrt(2/pi). The Ringmaster/Ringleader
/// simulators add |N(0, i+1)| to the base time of every gradient of worker i; add it to a
/// base model with plus(). Draw k of worker w: counter k of substream w.
struct half_normal_noise {
  std::uint64_t seed = 0;
  double scale = 1.0;
  noise_growth growth = noise_growth::variance_linear;

  half_normal_noise(std::uint64_t s, double sc = 1.0, noise_growth g = noise_growth::variance_linear)
      : seed(s), scale(sc), growth(g) {
    require(std::isfinite(scale) && scale >= 0, "half_normal_noise.scale", scale,
            "must be finite and >= 0");
  }
  double sigma(worker_id w) const {
    const double i1 = static_cast<double>(w) + 1.0;
    switch (growth) {
      case noise_growth::variance_linear: return scale * std::sqrt(i1);
      case noise_growth::stddev_linear: return scale * i1;
      case noise_growth::constant: break;
    }
    return scale;
  }
  double duration(worker_id w, std::uint64_t k, double, std::size_t) const {
    return counter_rng(seed, detail::salt_half_normal).substream(w).half_normal(k, sigma(w));
  }
};

/// scale_w * exp(N(mu, sigma^2)): heavy-tailed stragglers; mean scale_w * exp(mu + sigma^2/2).
struct lognormal_times {
  std::uint64_t seed = 0;
  std::vector<double> scale;
  double mu = 0.0;
  double sigma = 0.5;

  lognormal_times(std::uint64_t s, std::vector<double> per_worker_scale, double m = 0.0,
                  double sg = 0.5)
      : seed(s), scale(std::move(per_worker_scale)), mu(m), sigma(sg) {
    detail::require_times("lognormal_times.scale", scale, true);
    require(std::isfinite(mu), "lognormal_times.mu", mu, "must be finite");
    require(std::isfinite(sigma) && sigma >= 0, "lognormal_times.sigma", sigma,
            "must be finite and >= 0");
  }
  double duration(worker_id w, std::uint64_t k, double, std::size_t) const {
    return detail::per_worker(scale, w, "worker") *
           counter_rng(seed, detail::salt_lognormal).substream(w).lognormal(k, mu, sigma);
  }
};

/// Exponential with mean mean_w (memoryless arrivals).
struct exponential_times {
  std::uint64_t seed = 0;
  std::vector<double> mean;

  exponential_times(std::uint64_t s, std::vector<double> per_worker_mean)
      : seed(s), mean(std::move(per_worker_mean)) {
    detail::require_times("exponential_times.mean", mean, false);
  }
  double duration(worker_id w, std::uint64_t k, double, std::size_t) const {
    return counter_rng(seed, detail::salt_exponential)
        .substream(w)
        .exponential(k, 1.0 / detail::per_worker(mean, w, "worker"));
  }
};

// ------------------------------------------------------------------------------------------
// OmniLearn core shares

/// OmniLearn's heterogeneity levels: HL-k = max cores / min cores of the workers' CPU shares
/// on a 48-core machine (Docker --cpuset-cpus).
enum class heterogeneity_level : std::uint8_t { hl1 = 1, hl2 = 2, hl4 = 4, hl8 = 8 };
/// BSP runs use 4 workers, ASP runs 5 (the parameter server's clients).
enum class omnilearn_mode : std::uint8_t { bsp, asp };

/// Cores per worker of OmniLearn's presets (authors' dynamicbatching.py):
/// BSP HL1 12/12/12/12, HL2 12/12/8/16, HL4 9/8/6/25, HL8 6/6/4/32;
/// ASP HL1 8/10/10/10/10, HL2 8/8/8/8/16, HL4 8/10/10/4/16, HL8 8/4/4/4/28.
inline std::vector<double> omnilearn_cores(heterogeneity_level level, omnilearn_mode mode) {
  if (mode == omnilearn_mode::bsp) {
    switch (level) {
      case heterogeneity_level::hl1: return {12, 12, 12, 12};
      case heterogeneity_level::hl2: return {12, 12, 8, 16};
      case heterogeneity_level::hl4: return {9, 8, 6, 25};
      case heterogeneity_level::hl8: return {6, 6, 4, 32};
    }
  } else {
    switch (level) {
      case heterogeneity_level::hl1: return {8, 10, 10, 10, 10};
      case heterogeneity_level::hl2: return {8, 8, 8, 8, 16};
      case heterogeneity_level::hl4: return {8, 10, 10, 4, 16};
      case heterogeneity_level::hl8: return {8, 4, 4, 4, 28};
    }
  }
  require(false, "heterogeneity_level", static_cast<int>(level), "must be 1, 2, 4 or 8");
  return {};
}

/// OmniLearn's dynamic-heterogeneity schedule HL1, 2, 4, 8, 8, 4, 2, 1 (one level per phase).
inline std::vector<heterogeneity_level> omnilearn_schedule() {
  using hl = heterogeneity_level;
  return {hl::hl1, hl::hl2, hl::hl4, hl::hl8, hl::hl8, hl::hl4, hl::hl2, hl::hl1};
}

/// What a phase of a schedule is measured in.
enum class phase_unit : std::uint8_t {
  jobs,  ///< each phase lasts `phase_length` jobs of the worker (iterations: epochs x steps)
  time,  ///< each phase lasts `phase_length` virtual seconds (by the job's start time)
};

/// Compute time proportional to batch / cores: duration = seconds_per_sample_core * b /
/// cores_w(phase). Phase p covers jobs (or start times) [p L, (p+1) L); after the last phase
/// the last one stays. One phase = a static core share.
struct core_share_times {
  std::vector<std::vector<double>> phases;  ///< cores per worker in each phase
  double phase_length = std::numeric_limits<double>::infinity();
  phase_unit unit = phase_unit::jobs;
  double seconds_per_sample_core = 1.0;

  core_share_times(std::vector<std::vector<double>> cores_per_phase, double length = never,
                   phase_unit u = phase_unit::jobs, double c = 1.0)
      : phases(std::move(cores_per_phase)), phase_length(length), unit(u),
        seconds_per_sample_core(c) {
    require(!phases.empty(), "core_share_times.phases", phases.size(), "must not be empty");
    for (std::size_t p = 0; p < phases.size(); ++p) {
      detail::require_times(detail::indexed("core_share_times.phases", p).c_str(), phases[p],
                            false);
      require_same_size(detail::indexed("core_share_times.phases", p), phases[p].size(),
                        "core_share_times.phases[0]", phases[0].size());
    }
    require(phase_length > 0, "core_share_times.phase_length", phase_length, "must be > 0");
    require(std::isfinite(c) && c > 0, "core_share_times.seconds_per_sample_core", c,
            "must be finite and > 0");
  }
  std::size_t workers() const { return phases[0].size(); }
  std::size_t phase(std::uint64_t k, double t) const {
    const double x = unit == phase_unit::jobs ? static_cast<double>(k) : t;
    const double p = std::floor(x / phase_length);
    return p >= static_cast<double>(phases.size() - 1) ? phases.size() - 1
                                                         : static_cast<std::size_t>(p);
  }
  double cores(worker_id w, std::uint64_t k, double t) const {
    const auto& c = phases[phase(k, t)];
    require(w < c.size(), "worker", w, "must be < core_share_times' number of workers");
    return c[w];
  }
  double duration(worker_id w, std::uint64_t k, double t, std::size_t b) const {
    return seconds_per_sample_core * static_cast<double>(b) / cores(w, k, t);
  }
};

/// A static OmniLearn preset.
inline core_share_times omnilearn_preset(heterogeneity_level level, omnilearn_mode mode,
                                         double seconds_per_sample_core = 1.0) {
  return core_share_times({omnilearn_cores(level, mode)}, never, phase_unit::jobs,
                          seconds_per_sample_core);
}

/// OmniLearn's dynamic heterogeneity: the level follows `schedule` (default HL1, 2, 4, 8, 8,
/// 4, 2, 1), one level per `phase_length` (jobs = epochs per level x iterations per epoch, or
/// virtual seconds).
inline core_share_times omnilearn_dynamic(omnilearn_mode mode, double phase_length,
                                          phase_unit unit = phase_unit::jobs,
                                          double seconds_per_sample_core = 1.0,
                                          std::vector<heterogeneity_level> schedule =
                                              omnilearn_schedule()) {
  require(!schedule.empty(), "omnilearn_dynamic.schedule", schedule.size(), "must not be empty");
  std::vector<std::vector<double>> phases;
  for (auto l : schedule) phases.push_back(omnilearn_cores(l, mode));
  return core_share_times(std::move(phases), phase_length, unit, seconds_per_sample_core);
}

// ------------------------------------------------------------------------------------------
// Time windows: outages and slow-downs

/// Worker `worker` runs `slowdown` times slower during [begin, end); slowdown = infinity is an
/// outage (no progress). Work in progress is kept, not lost: a job that overlaps the window
/// finishes later by exactly the lost progress.
struct time_window {
  worker_id worker = 0;
  double begin = 0;
  double end = 0;
  double slowdown = std::numeric_limits<double>::infinity();
};

template <worker_time_model Base>
class windowed {
 public:
  windowed(Base base, std::vector<time_window> windows)
      : base_(std::move(base)), windows_(std::move(windows)) {
    for (std::size_t i = 0; i < windows_.size(); ++i) {
      const auto& x = windows_[i];
      require(std::isfinite(x.begin) && x.begin >= 0, detail::indexed("windows.begin", i),
              x.begin, "must be finite and >= 0 (a negative time)");
      require(x.end > x.begin, detail::indexed("windows.end", i), x.end,
              "must be > the window's begin");
      require(x.slowdown >= 1.0, detail::indexed("windows.slowdown", i), x.slowdown,
              "must be >= 1 (infinity = outage)");
    }
    std::stable_sort(windows_.begin(), windows_.end(), [](const auto& a, const auto& b) {
      return a.worker < b.worker || (a.worker == b.worker && a.begin < b.begin);
    });
    for (std::size_t i = 1; i < windows_.size(); ++i) {
      const auto& p = windows_[i - 1];
      const auto& x = windows_[i];
      require(x.worker != p.worker || x.begin >= p.end, "windows.begin", x.begin,
              "windows of one worker must not overlap");
    }
  }

  const Base& base() const { return base_; }
  const std::vector<time_window>& windows() const { return windows_; }

  /// The virtual time at which `work` seconds of nominal computation started at `start` on
  /// worker w complete (never, if an outage lasts forever).
  double finish(worker_id w, double start, double work) const {
    auto it = std::lower_bound(windows_.begin(), windows_.end(), w,
                               [](const time_window& x, worker_id v) { return x.worker < v; });
    double t = start;
    double left = work;
    for (; it != windows_.end() && it->worker == w; ++it) {
      if (it->end <= t) continue;
      if (it->begin > t) {
        const double free = it->begin - t;
        if (left <= free) return t + left;
        left -= free;
        t = it->begin;
      }
      if (left <= 0) return t;
      if (std::isinf(it->slowdown)) {
        t = it->end;
        continue;
      }
      const double capacity = (it->end - t) / it->slowdown;
      if (left <= capacity) return t + left * it->slowdown;
      left -= capacity;
      t = it->end;
    }
    return t + left;
  }
  double duration(worker_id w, std::uint64_t k, double t, std::size_t b) const {
    return finish(w, t, base_.duration(w, k, t, b)) - t;
  }

 private:
  Base base_;
  std::vector<time_window> windows_;
};

// ------------------------------------------------------------------------------------------
// Trace replay

/// One measured job: worker, start, duration.
struct trace_row {
  worker_id worker = 0;
  double start = 0;
  double duration = 0;
};

/// How a replayed trace maps a simulated job to a measured one.
enum class replay_mode : std::uint8_t {
  job_index,   ///< job k of worker w takes the duration of w's k-th row (by start time),
               ///< cycling when the simulation outlasts the trace
  start_time,  ///< the duration of w's last row that started at or before the job's start
               ///< (its first row before that)
};

/// Replays a measured trace, e.g. a CSV "worker,start,duration" (header optional, '#'
/// comments allowed). Every simulated worker must appear in the trace, and every row must
/// name a worker < `workers`.
class trace_replay {
 public:
  trace_replay(std::vector<trace_row> rows, std::size_t workers,
               replay_mode mode = replay_mode::job_index)
      : mode_(mode) {
    require(workers > 0, "trace.workers", workers, "must be > 0 (an empty worker list)");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      require(rows[i].worker < workers, detail::indexed("trace.worker", i), rows[i].worker,
              "names an unknown worker (must be < the number of workers)");
      require(std::isfinite(rows[i].start) && rows[i].start >= 0,
              detail::indexed("trace.start", i), rows[i].start,
              "must be finite and >= 0 (a negative time)");
      require(std::isfinite(rows[i].duration) && rows[i].duration >= 0,
              detail::indexed("trace.duration", i), rows[i].duration,
              "must be finite and >= 0 (a negative time)");
    }
    std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
      return a.worker < b.worker || (a.worker == b.worker && a.start < b.start);
    });
    offset_.assign(workers + 1, 0);
    for (const auto& r : rows) ++offset_[r.worker + 1];
    for (std::size_t w = 0; w < workers; ++w) {
      require(offset_[w + 1] > 0, "trace.worker", w, "has no row in the trace");
      offset_[w + 1] += offset_[w];
    }
    start_.reserve(rows.size());
    duration_.reserve(rows.size());
    for (const auto& r : rows) {
      start_.push_back(r.start);
      duration_.push_back(r.duration);
    }
  }

  /// Parses "worker,start,duration" lines; a first line that is not numeric is a header.
  static std::vector<trace_row> parse_csv(std::istream& in) {
    std::vector<trace_row> rows;
    std::string line;
    std::size_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const auto first = line.find_first_not_of(" \t");
      if (first == std::string::npos || line[first] == '#') continue;
      std::istringstream ls(line);
      std::string a, b, c;
      std::getline(ls, a, ',');
      std::getline(ls, b, ',');
      std::getline(ls, c, ',');
      long long w = 0;
      double s = 0, d = 0;
      std::size_t ea = 0, eb = 0, ec = 0;
      // A field is a number and nothing else (blanks around it aside): "3x" or a fourth
      // field is not a trace line.
      auto whole = [](const std::string& f, std::size_t used) {
        return f.find_first_not_of(" \t", used) == std::string::npos;
      };
      bool ok = true;
      try {
        w = std::stoll(a, &ea);
        s = std::stod(b, &eb);
        d = std::stod(c, &ec);
        ok = whole(a, ea) && whole(b, eb) && whole(c, ec) && ls.peek() == std::char_traits<char>::eof();
      } catch (const std::exception&) {
        ok = false;
      }
      if (!ok) {
        if (rows.empty() && line_no == 1) continue;  // header
        require(false, detail::indexed("trace.line", line_no), line,
                "must be 'worker,start,duration' with numbers");
      }
      require(w >= 0 && w <= static_cast<long long>(std::numeric_limits<worker_id>::max()),
              detail::indexed("trace.worker", line_no), w,
              "names an unknown worker (must be >= 0 and fit a worker id)");
      rows.push_back({static_cast<worker_id>(w), s, d});
    }
    return rows;
  }
  static trace_replay from_csv(std::istream& in, std::size_t workers,
                               replay_mode mode = replay_mode::job_index) {
    return trace_replay(parse_csv(in), workers, mode);
  }

  std::size_t workers() const { return offset_.size() - 1; }
  std::size_t rows(worker_id w) const { return offset_[w + 1] - offset_[w]; }

  double duration(worker_id w, std::uint64_t k, double t, std::size_t) const {
    require(w < workers(), "worker", w, "must be < the trace's number of workers");
    const std::size_t lo = offset_[w], n = offset_[w + 1] - lo;
    if (mode_ == replay_mode::job_index) return duration_[lo + k % n];
    const auto first = start_.begin() + static_cast<std::ptrdiff_t>(lo);
    const auto it = std::upper_bound(first, first + static_cast<std::ptrdiff_t>(n), t);
    const std::size_t i = it == first ? 0 : static_cast<std::size_t>(it - first) - 1;
    return duration_[lo + i];
  }

 private:
  replay_mode mode_;
  std::vector<std::size_t> offset_;  // rows of worker w: [offset_[w], offset_[w+1])
  std::vector<double> start_, duration_;
};

// ------------------------------------------------------------------------------------------
// Combinators

/// A constant time for every job of every worker.
struct constant_time {
  double time = 0;
  double duration(worker_id, std::uint64_t, double, std::size_t) const { return time; }
};

template <worker_time_model A, worker_time_model B>
struct sum_model {
  A a;
  B b;
  double duration(worker_id w, std::uint64_t k, double t, std::size_t n) const {
    return a.duration(w, k, t, n) + b.duration(w, k, t, n);
  }
};
template <worker_time_model A, worker_time_model B>
struct product_model {
  A a;
  B b;
  double duration(worker_id w, std::uint64_t k, double t, std::size_t n) const {
    return a.duration(w, k, t, n) * b.duration(w, k, t, n);
  }
};
template <worker_time_model A>
struct scaled_model {
  A a;
  double factor = 1.0;
  double duration(worker_id w, std::uint64_t k, double t, std::size_t n) const {
    return factor * a.duration(w, k, t, n);
  }
};

/// a + b per job: e.g. plus(sqrt_times(n, s), half_normal_noise(s)) is the Ringmaster model.
template <worker_time_model A, worker_time_model B>
sum_model<A, B> plus(A a, B b) {
  return {std::move(a), std::move(b)};
}
/// a * b per job: e.g. multiplicative lognormal jitter on fixed times.
template <worker_time_model A, worker_time_model B>
product_model<A, B> times(A a, B b) {
  return {std::move(a), std::move(b)};
}
template <worker_time_model A>
scaled_model<A> scaled(A a, double factor) {
  require(std::isfinite(factor) && factor >= 0, "scaled.factor", factor,
          "must be finite and >= 0");
  return {std::move(a), factor};
}
template <worker_time_model Base>
windowed<Base> with_windows(Base base, std::vector<time_window> windows) {
  return windowed<Base>(std::move(base), std::move(windows));
}

/// Opt-in type erasure, for models chosen at run time (an experiment's configuration file).
/// Costs an indirect call per job; the typed models above cost none.
class any_time_model {
 public:
  any_time_model() = default;
  template <class M>
    requires(!std::same_as<std::remove_cvref_t<M>, any_time_model> && worker_time_model<M>)
  any_time_model(M m)  // NOLINT: implicit on purpose, like std::function
      : f_(std::make_shared<const holder<M>>(std::move(m))) {}
  double duration(worker_id w, std::uint64_t k, double t, std::size_t b) const {
    require(f_ != nullptr, "any_time_model", "empty", "must hold a model");
    return f_->duration(w, k, t, b);
  }

 private:
  struct base {
    virtual ~base() = default;
    virtual double duration(worker_id, std::uint64_t, double, std::size_t) const = 0;
  };
  template <class M>
  struct holder final : base {
    explicit holder(M x) : m(std::move(x)) {}
    double duration(worker_id w, std::uint64_t k, double t, std::size_t b) const override {
      return m.duration(w, k, t, b);
    }
    M m;
  };
  // Immutable and shared: copies are cheap and behave as values (nothing can mutate it).
  std::shared_ptr<const base> f_;
};

static_assert(worker_time_model<fixed_times>);
static_assert(worker_time_model<half_normal_noise>);
static_assert(worker_time_model<sum_model<fixed_times, half_normal_noise>>);
static_assert(worker_time_model<core_share_times>);
static_assert(worker_time_model<trace_replay>);
static_assert(worker_time_model<windowed<fixed_times>>);
static_assert(worker_time_model<any_time_model>);

}  // namespace heterograd::sim
