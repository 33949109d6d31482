#pragma once
// What a simulated run measured: per worker (jobs, busy / idle / waiting / wasted time,
// throughput), per update (staleness histograms and applied / buffered / discarded /
// interrupted counts, also per worker), user evaluations at virtual-time intervals (loss,
// accuracy, ||grad f||^2, ...), and the run's configuration, seed and trace hash. Written as
// CSV (one table per call, '#' header lines with the configuration) and as one JSON document.
//
// The recorder only stores; the policy reports each update's outcome (it alone knows whether
// it applied, buffered or discarded a gradient), the runtime reports interruptions and
// evaluations, and capture() copies the engine's per-worker accounting.

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/core/error.hpp"
#include "heterograd/sim/engine.hpp"

namespace heterograd::sim {

/// What a policy did with an arriving update (or with a job it stopped).
enum class update_outcome : std::uint8_t {
  applied,      ///< used in a model update
  buffered,     ///< kept for a later update (FedBuff, Ringleader's NEXT table, Rennala)
  discarded,    ///< dropped as too stale (Ringmaster without calculation stops)
  interrupted,  ///< its computation was stopped before it finished (calculation stops)
};
inline constexpr std::size_t update_outcome_count = 4;

inline const char* to_string(update_outcome o) {
  switch (o) {
    case update_outcome::applied: return "applied";
    case update_outcome::buffered: return "buffered";
    case update_outcome::discarded: return "discarded";
    case update_outcome::interrupted: return "interrupted";
  }
  return "unknown";
}

/// One evaluation: virtual time and the metric values, in the order of metric_names(); in a
/// real-time run also the wall seconds since the run's start (NaN: not measured).
struct evaluation_row {
  double time = 0;
  std::vector<double> values;
  double wall = std::numeric_limits<double>::quiet_NaN();

  template <class Archive>
  void serialize(Archive& ar) {
    ar(time, values, wall);
  }
};

class recorder {
 public:
  explicit recorder(std::size_t workers) {
    require(workers > 0, "recorder.workers", workers, "must be > 0 (an empty worker list)");
    workers_.resize(workers);
    per_worker_.resize(workers);
  }

  std::size_t workers() const { return workers_.size(); }

  // --- configuration -----------------------------------------------------------------------
  /// A configuration entry written into every header (insertion order kept; a key set again
  /// is replaced).
  void set(const std::string& key, std::string value) {
    require(!key.empty(), "key", key, "must not be empty");
    for (auto& kv : config_) {
      if (kv.first == key) {
        kv.second = std::move(value);
        return;
      }
    }
    config_.emplace_back(key, std::move(value));
  }
  void set(const std::string& key, const char* value) { set(key, std::string(value)); }
  void set(const std::string& key, double value) { set(key, format(value)); }
  template <std::integral I>
    requires(!std::same_as<I, bool>)
  void set(const std::string& key, I value) {
    set(key, std::to_string(value));
  }
  void set(const std::string& key, bool value) { set(key, std::string(value ? "true" : "false")); }
  void set_seed(std::uint64_t seed) {
    seed_ = seed;
    has_seed_ = true;
  }
  const std::vector<std::pair<std::string, std::string>>& config() const { return config_; }

  /// Names of the evaluation metrics, e.g. {"loss", "accuracy", "grad_norm_sq"}.
  void set_metrics(std::vector<std::string> names) {
    require(evaluations_.empty(), "metrics", names.size(),
            "must be set before the first evaluation");
    metrics_ = std::move(names);
  }
  const std::vector<std::string>& metric_names() const { return metrics_; }

  // --- per update --------------------------------------------------------------------------
  /// An update from worker w with delay `staleness` (server updates between the model version
  /// it was computed at and the version it met) had `outcome`.
  void record_update(worker_id w, std::uint64_t staleness, update_outcome outcome) {
    require(w < workers_.size(), "worker", w, "must be < the recorder's number of workers");
    const auto o = static_cast<std::size_t>(outcome);
    require(o < update_outcome_count, "outcome", o, "must be a valid update_outcome");
    auto& h = histogram_[o];
    if (staleness >= h.size()) h.resize(staleness + 1, 0);  // amortised; grows with max delay
    ++h[staleness];
    ++count_[o];
    ++per_worker_[w][o];
    max_staleness_ = std::max(max_staleness_, staleness);
  }
  /// Adds another record's update counts and staleness histograms (a resumed real run: the
  /// records before its checkpoint and after).
  void merge_updates(const recorder& o) {
    require_same_size("recorder.workers", o.workers(), "recorder.workers", workers());
    for (std::size_t k = 0; k < update_outcome_count; ++k) {
      auto& h = histogram_[k];
      const auto& g = o.histogram_[k];
      if (g.size() > h.size()) h.resize(g.size(), 0);
      for (std::size_t i = 0; i < g.size(); ++i) h[i] += g[i];
      count_[k] += o.count_[k];
      for (std::size_t w = 0; w < per_worker_.size(); ++w) per_worker_[w][k] += o.per_worker_[w][k];
    }
    max_staleness_ = std::max(max_staleness_, o.max_staleness_);
  }
  std::uint64_t count(update_outcome o) const { return count_[static_cast<std::size_t>(o)]; }
  std::uint64_t count(worker_id w, update_outcome o) const {
    return per_worker_.at(w)[static_cast<std::size_t>(o)];
  }
  /// histogram[s] = number of updates with that outcome and staleness s.
  const std::vector<std::uint64_t>& staleness_histogram(update_outcome o) const {
    return histogram_[static_cast<std::size_t>(o)];
  }
  std::uint64_t max_staleness() const { return max_staleness_; }
  double mean_staleness(update_outcome o) const {
    const auto& h = staleness_histogram(o);
    double sum = 0, n = 0;
    for (std::size_t s = 0; s < h.size(); ++s) {
      sum += static_cast<double>(s) * static_cast<double>(h[s]);
      n += static_cast<double>(h[s]);
    }
    return n > 0 ? sum / n : 0.0;
  }

  // --- evaluations -------------------------------------------------------------------------
  void record_evaluation(double time, std::vector<double> values,
                         double wall = std::numeric_limits<double>::quiet_NaN()) {
    require(std::isfinite(time) && time >= 0, "time", time, "must be finite and >= 0");
    require(std::isnan(wall) || (std::isfinite(wall) && wall >= 0), "wall", wall,
            "must be NaN (not measured) or finite and >= 0");
    require(metrics_.empty() || values.size() == metrics_.size(), "values", values.size(),
            "must have one value per metric name");
    require(evaluations_.empty() || time >= evaluations_.back().time, "time", time,
            "must not precede the previous evaluation");
    evaluations_.push_back({time, std::move(values), wall});
  }
  void record_evaluation(double time, std::initializer_list<double> values) {
    record_evaluation(time, std::vector<double>(values));
  }
  const std::vector<evaluation_row>& evaluations() const { return evaluations_; }

  // --- engine state ------------------------------------------------------------------------
  /// Copies the engine's per-worker accounting, clock, event count and trace hash.
  void capture(const engine& e) {
    require_same_size("engine.workers", e.workers(), "recorder.workers", workers_.size());
    for (std::size_t w = 0; w < workers_.size(); ++w)
      workers_[w] = e.stats(static_cast<worker_id>(w));
    end_time_ = e.now();
    events_ = e.events_delivered();
    trace_hash_ = e.trace_hash();
  }
  /// A real-time run's measured accounting instead (no engine: the trace hash stays 0).
  void set_measured(std::vector<worker_stats> workers, double end_time, std::uint64_t events) {
    require_same_size("workers", workers.size(), "recorder.workers", workers_.size());
    workers_ = std::move(workers);
    end_time_ = end_time;
    events_ = events;
  }
  /// Each worker's model time per job (tau_i, the worker-time model's mean): workers.csv and
  /// run.json then carry it and the worker's speed rank (0 the fastest; equal times by worker
  /// index), so per-worker results can be read against speed. Not in the trace hash.
  void set_model_times(std::vector<double> tau) {
    require_same_size("model_times", tau.size(), "recorder.workers", workers_.size());
    for (double t : tau) require(std::isfinite(t) && t >= 0, "model_times", t, "must be finite and >= 0");
    model_time_ = std::move(tau);
  }
  const std::vector<double>& model_times() const { return model_time_; }
  /// Rank of each worker by model time (empty without model times).
  std::vector<std::size_t> speed_ranks() const {
    std::vector<std::size_t> order(model_time_.size()), rank(model_time_.size());
    for (std::size_t w = 0; w < order.size(); ++w) order[w] = w;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return model_time_[a] < model_time_[b]; });
    for (std::size_t r = 0; r < order.size(); ++r) rank[order[r]] = r;
    return rank;
  }
  const worker_stats& worker(worker_id w) const { return workers_.at(w); }
  double end_time() const { return end_time_; }
  std::uint64_t trace_hash() const { return trace_hash_; }
  std::uint64_t events() const { return events_; }

  /// Checkpointing: visits every member in a fixed order (see engine::serialize).
  template <class Archive>
  void serialize(Archive& ar) {
    ar(workers_, per_worker_, histogram_, count_, max_staleness_, metrics_, evaluations_, config_,
       seed_, has_seed_, end_time_, events_, trace_hash_, model_time_);
  }

  // --- output ------------------------------------------------------------------------------
  enum class table : std::uint8_t { workers, staleness, evaluations };

  /// One table as CSV, after '#' lines carrying the seed, configuration, end time and trace
  /// hash (read with pandas.read_csv(..., comment='#')).
  void write_csv(std::ostream& os, table t) const {
    write_header(os);
    switch (t) {
      case table::workers: {
        const bool timed = !model_time_.empty();
        const auto rank = speed_ranks();
        os << "worker,jobs_started,jobs_finished,jobs_cancelled,busy,idle,waiting,wasted,"
              "throughput,applied,buffered,discarded,interrupted"
           << (timed ? ",model_time,speed_rank\n" : "\n");
        for (std::size_t w = 0; w < workers_.size(); ++w) {
          const auto& s = workers_[w];
          os << w << ',' << s.jobs_started << ',' << s.jobs_finished << ',' << s.jobs_cancelled
             << ',' << format(s.busy) << ',' << format(s.idle) << ',' << format(s.waiting)
             << ',' << format(s.wasted) << ',' << format(s.throughput);
          for (auto c : per_worker_[w]) os << ',' << c;
          if (timed) os << ',' << format(model_time_[w]) << ',' << rank[w];
          os << '\n';
        }
        break;
      }
      case table::staleness: {
        os << "staleness,applied,buffered,discarded,interrupted\n";
        std::size_t rows = 0;
        for (const auto& h : histogram_) rows = std::max(rows, h.size());
        for (std::size_t s = 0; s < rows; ++s) {
          os << s;
          for (const auto& h : histogram_) os << ',' << (s < h.size() ? h[s] : 0);
          os << '\n';
        }
        break;
      }
      case table::evaluations: {
        // Real-time runs add the wall clock (seconds since the run's start) as a last column.
        const bool wall = std::any_of(evaluations_.begin(), evaluations_.end(),
                                      [](const evaluation_row& r) { return !std::isnan(r.wall); });
        os << "time";
        for (std::size_t i = 0; i < metric_columns(); ++i) os << ',' << metric_name(i);
        os << (wall ? ",wall_seconds\n" : "\n");
        for (const auto& r : evaluations_) {
          os << format(r.time);
          for (double v : r.values) os << ',' << format(v);
          if (wall) os << ',' << format(r.wall);
          os << '\n';
        }
        break;
      }
    }
  }

  /// Everything as one JSON object: config (with seed), summary (end time, events, trace hash,
  /// update counts), workers, staleness histograms, evaluations.
  void write_json(std::ostream& os) const {
    os << "{\n  \"config\": {";
    bool first = true;
    if (has_seed_) {
      os << "\"seed\": " << seed_;
      first = false;
    }
    for (const auto& kv : config_) {
      os << (first ? "" : ", ") << quote(kv.first) << ": " << quote(kv.second);
      first = false;
    }
    os << "},\n  \"summary\": {\"end_time\": " << json_number(end_time_)
       << ", \"events\": " << events_ << ", \"trace_hash\": \"" << hex(trace_hash_) << "\"";
    for (std::size_t o = 0; o < update_outcome_count; ++o)
      os << ", \"" << to_string(static_cast<update_outcome>(o)) << "\": " << count_[o];
    os << ", \"max_staleness\": " << max_staleness_ << "},\n  \"workers\": [";
    const auto rank = speed_ranks();
    for (std::size_t w = 0; w < workers_.size(); ++w) {
      const auto& s = workers_[w];
      os << (w ? ",\n    " : "\n    ") << "{\"worker\": " << w
         << ", \"jobs_started\": " << s.jobs_started << ", \"jobs_finished\": " << s.jobs_finished
         << ", \"jobs_cancelled\": " << s.jobs_cancelled << ", \"busy\": " << json_number(s.busy)
         << ", \"idle\": " << json_number(s.idle) << ", \"waiting\": " << json_number(s.waiting)
         << ", \"wasted\": " << json_number(s.wasted)
         << ", \"throughput\": " << json_number(s.throughput);
      for (std::size_t o = 0; o < update_outcome_count; ++o)
        os << ", \"" << to_string(static_cast<update_outcome>(o)) << "\": " << per_worker_[w][o];
      if (!model_time_.empty())
        os << ", \"model_time\": " << json_number(model_time_[w]) << ", \"speed_rank\": " << rank[w];
      os << '}';
    }
    os << "\n  ],\n  \"staleness\": {";
    for (std::size_t o = 0; o < update_outcome_count; ++o) {
      os << (o ? ", " : "") << '"' << to_string(static_cast<update_outcome>(o)) << "\": [";
      for (std::size_t s = 0; s < histogram_[o].size(); ++s) os << (s ? ", " : "") << histogram_[o][s];
      os << ']';
    }
    os << "},\n  \"metrics\": [";
    for (std::size_t i = 0; i < metric_columns(); ++i)
      os << (i ? ", " : "") << quote(metric_name(i));
    os << "],\n  \"evaluations\": [";
    for (std::size_t i = 0; i < evaluations_.size(); ++i) {
      os << (i ? ",\n    " : "\n    ") << "{\"time\": " << json_number(evaluations_[i].time)
         << ", \"values\": [";
      for (std::size_t j = 0; j < evaluations_[i].values.size(); ++j)
        os << (j ? ", " : "") << json_number(evaluations_[i].values[j]);
      os << ']';
      if (!std::isnan(evaluations_[i].wall)) os << ", \"wall_seconds\": " << json_number(evaluations_[i].wall);
      os << '}';
    }
    os << (evaluations_.empty() ? "]\n}\n" : "\n  ]\n}\n");
  }

 private:
  std::size_t metric_columns() const {
    if (!metrics_.empty()) return metrics_.size();
    return evaluations_.empty() ? 0 : evaluations_.front().values.size();
  }
  std::string metric_name(std::size_t i) const {
    return i < metrics_.size() ? metrics_[i] : "metric" + std::to_string(i);
  }
  void write_header(std::ostream& os) const {
    os << "# heterograd simulator run\n";
    if (has_seed_) os << "# seed=" << seed_ << '\n';
    for (const auto& kv : config_) os << "# " << kv.first << '=' << kv.second << '\n';
    os << "# end_time=" << format(end_time_) << "\n# events=" << events_
       << "\n# trace_hash=" << hex(trace_hash_) << '\n';
  }
  // Shortest text that reads back to the same double (17 significant digits), C locale.
  static std::string format(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", x);
    return buf;
  }
  static std::string json_number(double x) { return std::isfinite(x) ? format(x) : "null"; }
  static std::string hex(std::uint64_t x) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(x));
    return buf;
  }
  static std::string quote(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
            out += buf;
          } else {
            out += c;
          }
      }
    }
    return out + '"';
  }

  std::vector<worker_stats> workers_;
  std::vector<double> model_time_;  // per worker, or empty
  std::vector<std::array<std::uint64_t, update_outcome_count>> per_worker_;
  std::array<std::vector<std::uint64_t>, update_outcome_count> histogram_{};
  std::array<std::uint64_t, update_outcome_count> count_{};
  std::uint64_t max_staleness_ = 0;
  std::vector<std::string> metrics_;
  std::vector<evaluation_row> evaluations_;
  std::vector<std::pair<std::string, std::string>> config_;
  std::uint64_t seed_ = 0;
  bool has_seed_ = false;
  double end_time_ = 0;
  std::uint64_t events_ = 0;
  std::uint64_t trace_hash_ = 0;
};

/// The outcome reports of a control handle (applied, buffered, discarded, each with the
/// update's staleness), written once for every runtime: D provides
/// `sim::recorder& outcome_log()` (befriending this base if it is private).
template <class D>
class reports_outcomes {
 public:
  void applied(worker_id w, std::uint64_t staleness) {
    log().record_update(w, staleness, update_outcome::applied);
  }
  void buffered(worker_id w, std::uint64_t staleness) {
    log().record_update(w, staleness, update_outcome::buffered);
  }
  void discarded(worker_id w, std::uint64_t staleness) {
    log().record_update(w, staleness, update_outcome::discarded);
  }

 private:
  recorder& log() { return static_cast<D&>(*this).outcome_log(); }
};

}  // namespace heterograd::sim
