#pragma once
// The pipeline over a transport (issue 47), synchronous or asynchronous (update.hpp): rank s of the
// transport runs stage s (inproc threads or MPI ranks). Each rank holds the whole flat parameter
// buffer and updates only its stage's slice; gather_stages collects every slice on rank 0.
//
// Wire protocol (tags transfer_options::tag_base + 0..6). Per micro-batch m of step t:
//   stage s -> s + 1   activation header {t, m, rows, width}, then rows x width floats
//   stage s -> s - 1   gradient header   {t, m, rows, width}, then rows x width floats
//   stage 0 -> S - 1   label header      {t, m, rows, batch rows B}, then rows int32 labels
// A stage always knows the next message it needs (op k of its schedule), so every header is
// checked before anything is sized by it: step and micro_batch must be the expected ones,
// width the receiving stage's (a stage whose output does not match the next stage's input is
// named with both widths), rows > 0, addressable and at most transfer_options::max_rows (the
// check of decoupled/transport_pipeline.hpp), a gradient's or labels' rows those of the
// micro-batch's forward, and a label header's B the same over the step and one that splits
// into exactly these rows. The payload is then received at exactly that size (any other size or
// type is refused by the transport before a byte is written). A hostile previous stage can
// make a rank allocate at most max_rows x width floats per message.
//
// The ops run in segments (config.hpp's segments_of): one step when synchronous, drain_every
// steps' micro-batches as one stream when asynchronous; a segment's op list is the schedule
// over its N = steps x M micro-batches, k = (t - first step) M + m. Sends are posted without
// waiting; a send is waited and its buffers freed (reap) once its receiver provably has it: a
// neighbour whose message from its op i arrived has run every op before i, its receives
// included (and stage 0 knows the last stage took the labels of k once the gradient of k
// reaches it). That wait cannot block, and 1F1B keeps at most 2 min(S - s, N) messages
// pending (tested); the rest are waited at the segment's end. Every stage receives in its op
// list's order, so the run cannot deadlock when the schedule does not (execute_schedule checks
// that); every wait has the timeout, and a rank that throws aborts the world under
// inproc::spawn, so a refused header surfaces on every rank. Because stage s runs the same ops
// on the same inputs in the same order as simulate_pipeline does, the parameters are equal to
// simulate_pipeline's bitwise, synchronous or asynchronous (tested).
//
// Telemetry (config.hpp's stage_telemetry), on the steady clock of each rank: busy = the
// model's forward, backward and loss and the updater's work; idle = inside receives; send
// wait = inside the waits of posted sends. bytes_sent counts every header and payload posted,
// exactly the schedule's count (tested against simulate_pipeline and a closed form).

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/algorithms/decoupled/transport_pipeline.hpp"
#include "heterograd/algorithms/pipeline/concepts.hpp"
#include "heterograd/algorithms/pipeline/config.hpp"
#include "heterograd/algorithms/pipeline/reference.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::algorithms::pipeline {

struct transfer_options {
  std::chrono::duration<double> timeout{60.0};  // per wait
  std::size_t max_rows = 0;  // most rows a micro-batch may have (0: any addressable count)
  int tag_base = 7200;       // seven tags from here
};

namespace detail {
enum wire_tag : int {
  activation_header = 0,
  activation_payload,
  gradient_header,
  gradient_payload,
  label_header,
  label_payload,
  gather_slice
};

/// Stage s of a pipeline on rank s: its op list, slots, updater and messages.
template <class Transport, stage_model M, class Upd>
class stage_runner {
 public:
  stage_runner(const Transport& t, M& model, std::vector<float>& params, Upd upd,
               const pipeline_config& cfg, const transfer_options& to)
      : t_(t),
        model_(model),
        params_(params),
        upd_(std::move(upd)),
        to_(to),
        s_(static_cast<std::size_t>(t.rank())),
        S_(model.stages()),
        Mb_(cfg.micro_batches),
        cfg_(cfg),
        g_(params.size(), 0.0f) {
    so_.timeout = ro_.timeout = to.timeout;
  }

  /// One segment (its steps' micro-batches k = 0..N-1 as one stream); the last stage adds each
  /// micro-batch's loss term to losses[its step].
  void run_segment(segment seg, const batch_source& source, std::vector<float>& losses) {
    start_segment(seg);
    for (const auto& op : ops_) {
      const std::size_t k = op.micro_batch;
      if (op.kind == decoupled::pass::forward) {
        if (s_ == 0 && k % Mb_ == 0) load_step(seg_.first + k / Mb_, source);
        forward(k);
      } else {
        const float l = backward(k);
        if (s_ + 1 == S_) losses.at(seg_.first + k / Mb_) += l;
      }
    }
    if (!outbox_.empty())  // (one stage sends nothing, and its send wait stays 0 exactly)
      timed(tel_.send_wait_s, [&] {
        for (auto& e : outbox_)
          for (auto& r : e.requests) r.wait();
      });
    outbox_.clear();
    timed(tel_.busy_s, [&] { upd_.end_step(span<float>(params_), span<float>(g_)); });
    peak_ = std::max(peak_, pool_.peak());
  }
  std::size_t peak_in_flight() const { return peak_; }
  std::size_t peak_pending_sends() const { return peak_pending_; }
  std::size_t peak_stashes() const { return upd_.peak_stashes(); }
  const decoupled::staleness_report& staleness() const { return upd_.staleness(); }
  const stage_telemetry& telemetry() const { return tel_; }

 private:
  using request = decltype(std::declval<const Transport&>().send(span<const float>{}, 0, 0,
                                                                 comm::send_options{}));
  struct message {  // a posted send and its buffers (the requests go first when it is destroyed)
    wire_tag kind;  // activation_header, gradient_header or label_header
    std::size_t k;  // its micro-batch in the segment
    std::array<std::int64_t, 4> header{};
    static_assert(sizeof(header) == header_bytes);
    std::vector<float> x;
    std::vector<std::int32_t> y;
    std::vector<request> requests;
  };
  span<const float> params() const { return span<const float>(params_.data(), params_.size()); }
  int tag(wire_tag w) const { return to_.tag_base + static_cast<int>(w); }
  int rank_of(std::size_t s) const { return static_cast<int>(s); }

  /// Runs f, adding its duration on the steady clock to `acc` (also when f throws).
  template <class F>
  static decltype(auto) timed(double& acc, F&& f) {
    struct adder {
      double& acc;
      std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
      ~adder() {
        acc += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    } add{acc};
    return f();
  }
  /// A receive of exactly buf.size() elements from stage `from`, counted as idle time.
  template <class T>
  void receive(span<T> buf, std::size_t from, int tg, const char* key) {
    timed(tel_.idle_s,
          [&] { decoupled::detail::receive_field(t_, buf, rank_of(from), tg, ro_, key); });
  }

  std::size_t step_of(std::size_t k) const { return seg_.first + k / Mb_; }

  void start_segment(segment seg) {
    seg_ = seg;
    const std::size_t N = seg.count * Mb_;
    const auto sch = schedule_for(cfg_, S_, N);
    ops_ = sch[s_];
    versions_ = versions_until_backward(ops_, N);
    auto index_of = [&](std::size_t stage, decoupled::pass kind) {
      std::vector<std::size_t> at(N, 0);
      for (std::size_t i = 0; i < sch[stage].size(); ++i)
        if (sch[stage][i].kind == kind) at[sch[stage][i].micro_batch] = i;
      return at;
    };
    if (s_ + 1 < S_) {
      next_forward_at_ = index_of(s_ + 1, decoupled::pass::forward);
      next_backward_at_ = index_of(s_ + 1, decoupled::pass::backward);
    }
    if (s_ > 0) {
      prev_forward_at_ = index_of(s_ - 1, decoupled::pass::forward);
      prev_backward_at_ = index_of(s_ - 1, decoupled::pass::backward);
    }
    next_done_ = prev_done_ = labels_done_ = 0;
    pool_ = slot_pool(N);
    rows_.assign(N, 0);
    batch_rows_.assign(N, 0);
    labels_.assign(N, {});
    std::fill(g_.begin(), g_.end(), 0.0f);
  }

  /// Stage 0, at the first forward of step t: its micro-batches.
  void load_step(std::size_t t, const batch_source& source) {
    mbs_ = split_micro_batches(source(t), model_.input_width(0), Mb_);
    step_rows_ = total_rows(model_, mbs_);
  }

  void forward(std::size_t k) {
    const std::size_t t = step_of(k), m = k % Mb_;
    const float* x = nullptr;
    if (s_ == 0) {
      x = mbs_[m].x.data();
      rows_[k] = mbs_[m].rows();
      batch_rows_[k] = step_rows_;  // the last stage's when S = 1 (no label message)
      if (S_ == 1)
        labels_[k] = mbs_[m].y;
      else
        post_labels(k);
    } else {
      const std::size_t w = model_.input_width(s_);
      rows_[k] = receive_header("pipeline.header", activation_header, s_ - 1, t, m, w, 0,
                                "must equal stage " + std::to_string(s_) + "'s input width (" +
                                    std::to_string(w) + "), which stage " + std::to_string(s_ - 1) +
                                    "'s output must match");
      in_.resize(rows_[k] * w);
      receive(span<float>(in_), s_ - 1, tag(activation_payload), "pipeline.activations");
      prev_done_ = std::max(prev_done_, prev_forward_at_[k] + 1);
      reap();
      x = in_.data();
    }
    const std::size_t slot = pool_.take(k);
    const auto out = timed(tel_.busy_s, [&] {
      return model_.forward(s_, slot, upd_.forward_weights(params(), slot, versions_[k]), x,
                            rows_[k]);
    });
    if (s_ + 1 < S_)
      post(s_ + 1, activation_header, k, {t, m, rows_[k], model_.input_width(s_ + 1)},
           std::vector<float>(out.begin(), out.end()));
    else if (S_ > 1)
      receive_labels(k);
  }

  /// Returns the micro-batch's loss term on the last stage (0 elsewhere).
  float backward(std::size_t k) {
    const std::size_t slot = pool_.give(k), rows = rows_[k];
    const bool async = upd_.asynchronous();
    const auto weights = timed(tel_.busy_s, [&] { return upd_.backward_weights(params(), slot); });
    std::vector<float> dx(s_ > 0 ? rows * model_.input_width(s_) : 0);
    float loss = 0;
    if (s_ + 1 == S_) {
      const float l = timed(tel_.busy_s, [&] {
        return model_.loss_backward(slot, weights, span<const std::int32_t>(labels_[k]),
                                    loss_scale(async, rows, batch_rows_[k]), g_, dx);
      });
      loss = step_loss_term(async, l, rows, batch_rows_[k]);
      std::vector<std::int32_t>().swap(labels_[k]);
    } else {
      const std::size_t w = model_.input_width(s_ + 1);
      receive_header(
          "pipeline.gradient_header", gradient_header, s_ + 1, step_of(k), k % Mb_, w, rows,
          "must equal stage " + std::to_string(s_) + "'s output width (" + std::to_string(w) + ")");
      dy_.resize(rows * w);
      receive(span<float>(dy_), s_ + 1, tag(gradient_payload), "pipeline.gradients");
      next_done_ = std::max(next_done_, next_backward_at_[k] + 1);
      if (s_ == 0) labels_done_ = k + 1;  // the last stage ran B(k), after F(k) took the labels
      reap();
      timed(tel_.busy_s, [&] { model_.backward(s_, slot, weights, dy_, g_, dx); });
    }
    timed(tel_.busy_s, [&] { upd_.after_backward(span<float>(params_), span<float>(g_)); });
    ++tel_.micro_batches;
    if (s_ > 0)
      post(s_ - 1, gradient_header, k, {step_of(k), k % Mb_, rows, model_.input_width(s_)},
           std::move(dx));
    return loss;
  }

  /// Waits and frees the sends whose receivers have provably received them: a neighbour that
  /// sent us the message of its op i has run every op before i, receives included.
  void reap() {
    auto received = [&](const message& e) {
      switch (e.kind) {
        case activation_header:
          return next_done_ > next_forward_at_[e.k];
        case gradient_header:
          return prev_done_ > prev_backward_at_[e.k];
        default:
          return labels_done_ > e.k;
      }
    };
    for (auto it = outbox_.begin(); it != outbox_.end();) {
      if (!received(*it)) {
        ++it;
        continue;
      }
      timed(tel_.send_wait_s, [&] {
        for (auto& r : it->requests) r.wait();
      });
      it = outbox_.erase(it);
    }
  }

  message& new_message() {
    message& e = outbox_.emplace_back();
    peak_pending_ = std::max(peak_pending_, outbox_.size());
    return e;
  }

  void post(std::size_t to, wire_tag header_tag, std::size_t k, std::array<std::size_t, 4> h,
            std::vector<float> x) {
    message& e = new_message();
    e.kind = header_tag;
    e.k = k;
    for (std::size_t i = 0; i < 4; ++i) e.header[i] = static_cast<std::int64_t>(h[i]);
    e.x = std::move(x);
    tel_.bytes_sent += header_bytes + e.x.size() * sizeof(float);
    e.requests.push_back(
        t_.send(span<const std::int64_t>(e.header.data(), 4), rank_of(to), tag(header_tag), so_));
    e.requests.push_back(t_.send(span<const float>(e.x), rank_of(to), tag(header_tag) + 1, so_));
  }

  void post_labels(std::size_t k) {
    message& e = new_message();
    e.kind = label_header;
    e.k = k;
    e.header = {static_cast<std::int64_t>(step_of(k)), static_cast<std::int64_t>(k % Mb_),
                static_cast<std::int64_t>(rows_[k]), static_cast<std::int64_t>(step_rows_)};
    e.y = mbs_[k % Mb_].y;
    tel_.bytes_sent += header_bytes + e.y.size() * sizeof(std::int32_t);
    e.requests.push_back(t_.send(span<const std::int64_t>(e.header.data(), 4), rank_of(S_ - 1),
                                 tag(label_header), so_));
    e.requests.push_back(
        t_.send(span<const std::int32_t>(e.y), rank_of(S_ - 1), tag(label_payload), so_));
  }

  /// Receives and checks a header (see the top of the file); returns its rows. `rows` != 0:
  /// the rows the header must carry (those of the micro-batch's forward).
  std::size_t receive_header(const std::string& key, wire_tag w, std::size_t from, std::size_t t,
                             std::size_t m, std::size_t width, std::size_t rows,
                             const std::string& width_rule) {
    std::int64_t h[4] = {0, 0, 0, 0};
    receive(span<std::int64_t>(h, 4), from, tag(w), key.c_str());
    require(h[0] == static_cast<std::int64_t>(t), key + ".step", h[0],
            "must be this step (" + std::to_string(t) + ")");
    require(h[1] == static_cast<std::int64_t>(m), key + ".micro_batch", h[1],
            "must be the micro-batch stage " + std::to_string(s_) + "'s schedule expects next (" +
                std::to_string(m) + ")");
    require(h[3] == static_cast<std::int64_t>(width), key + ".width", h[3], width_rule);
    decoupled::detail::check_rows(key + ".rows", h[2], width, to_.max_rows,
                                  "transfer_options.max_rows");
    require(rows == 0 || h[2] == static_cast<std::int64_t>(rows), key + ".rows", h[2],
            "must equal the rows of micro-batch " + std::to_string(m) + "'s forward (" +
                std::to_string(rows) + ")");
    return static_cast<std::size_t>(h[2]);
  }

  void receive_labels(std::size_t k) {
    const std::string key = "pipeline.label_header";
    const std::size_t t = step_of(k), m = k % Mb_;
    std::int64_t h[4] = {0, 0, 0, 0};
    receive(span<std::int64_t>(h, 4), 0, tag(label_header), key.c_str());
    require(h[0] == static_cast<std::int64_t>(t), key + ".step", h[0],
            "must be this step (" + std::to_string(t) + ")");
    require(h[1] == static_cast<std::int64_t>(m), key + ".micro_batch", h[1],
            "must be the micro-batch whose activations arrived (" + std::to_string(m) + ")");
    require(h[2] == static_cast<std::int64_t>(rows_[k]), key + ".rows", h[2],
            "must equal the rows of micro-batch " + std::to_string(m) + "'s activations (" +
                std::to_string(rows_[k]) + ")");
    if (m == 0) step_rows_ = static_cast<std::size_t>(std::max<std::int64_t>(h[3], 0));
    // B fixes every micro-batch's rows (config.hpp's split): a B that does not split into
    // these rows would silently rescale the step's loss and gradient.
    const auto B = static_cast<std::uint64_t>(std::max<std::int64_t>(h[3], 0));
    require(h[3] >= h[2] && h[3] == static_cast<std::int64_t>(step_rows_) &&
                B / Mb_ + (m < B % Mb_ ? 1 : 0) == rows_[k],
            key + ".batch_rows", h[3],
            "must be >= the micro-batch's rows, the same for every micro-batch of the step, and "
            "split into " + std::to_string(Mb_) + " micro-batches give micro-batch " +
                std::to_string(m) + " its " + std::to_string(rows_[k]) + " rows");
    batch_rows_[k] = step_rows_;
    labels_[k].resize(rows_[k]);
    receive(span<std::int32_t>(labels_[k]), 0, tag(label_payload), "pipeline.labels");
  }

  const Transport& t_;
  M& model_;
  std::vector<float>& params_;
  Upd upd_;
  transfer_options to_;
  std::size_t s_, S_, Mb_;
  pipeline_config cfg_;
  // The segment: its op list, and per micro-batch k of it (k = (step - first) M + m) the
  // updates between F(k) and B(k), rows, step rows B and labels (last stage).
  segment seg_{0, 0};
  std::vector<decoupled::pipeline_op> ops_;
  std::vector<std::size_t> versions_, rows_, batch_rows_;
  std::vector<std::vector<std::int32_t>> labels_;
  // Where F(k) and B(k) sit in the neighbours' op lists, and how many of their ops (and, on
  // stage 0, of the last stage's label receives) have certainly run.
  std::vector<std::size_t> next_forward_at_, next_backward_at_, prev_forward_at_, prev_backward_at_;
  std::size_t next_done_ = 0, prev_done_ = 0, labels_done_ = 0;
  slot_pool pool_{1};
  std::size_t peak_ = 0, peak_pending_ = 0;
  stage_telemetry tel_;
  std::vector<float> g_, in_, dy_;
  std::vector<batch_data> mbs_;  // stage 0: the current step's micro-batches
  std::size_t step_rows_ = 0;    // their rows B (last stage: from the label header)
  std::deque<message> outbox_;
  comm::send_options so_;
  comm::recv_options ro_;
};

/// Every stage's telemetry on every rank: a sum over the ranks of vectors in which each rank
/// filled its own stage's fields (the counts as doubles: exact below 2^53).
template <class Transport>
std::vector<stage_telemetry> gather_telemetry(const Transport& t, std::size_t S, std::size_t s,
                                              const stage_telemetry& mine,
                                              const transfer_options& to) {
  constexpr std::size_t F = 6;
  std::vector<double> all(S * F, 0.0);
  const double fields[F] = {mine.busy_s, mine.idle_s, mine.send_wait_s, mine.wall_s,
                            static_cast<double>(mine.bytes_sent),
                            static_cast<double>(mine.micro_batches)};
  std::copy(fields, fields + F, all.begin() + static_cast<std::ptrdiff_t>(s * F));
  comm::allreduce_options o;
  o.timeout = to.timeout;
  t.allreduce(span<double>(all), o).wait();
  std::vector<stage_telemetry> out(S);
  for (std::size_t r = 0; r < S; ++r) {
    const double* f = all.data() + r * F;
    out[r] = {f[0], f[1], f[2], f[3], static_cast<std::uint64_t>(f[4]),
              static_cast<std::uint64_t>(f[5])};
  }
  return out;
}
}  // namespace detail

/// Runs `steps` pipeline steps; rank s of `t` runs stage s (t.size() must equal
/// model.stages()) and updates only its slice of `params` (the whole flat buffer, the same
/// initial values on every rank). Only rank 0 calls `source`. make_opt(slice size) makes the
/// rank's optimizer. The report holds this rank's peak in-flight micro-batches and stashes, on
/// the last stage's rank every step's loss, and on every rank every stage's telemetry (one
/// allreduce at the end) with the measured and theoretical bubble.
template <class Transport, stage_model M, class MakeOpt>
pipeline_report run_pipeline_over(const Transport& t, M& model, std::vector<float>& params,
                                  MakeOpt make_opt, const pipeline_config& cfg,
                                  const batch_source& source, std::size_t steps,
                                  const transfer_options& to = {}) {
  cfg.validate();
  detail::check_params(model, params.size());
  const auto start = std::chrono::steady_clock::now();
  const std::size_t S = model.stages(), s = static_cast<std::size_t>(t.rank());
  require(static_cast<std::size_t>(t.size()) == S, "pipeline.transport.size", t.size(),
          "must equal the number of stages (" + std::to_string(S) + ")");
  require_positive("transfer_options.timeout", to.timeout.count());
  auto upd = detail::make_updater(model, make_opt, cfg, s, cfg.micro_batches);
  detail::stage_runner<Transport, M, decltype(upd)> runner(t, model, params, std::move(upd), cfg,
                                                           to);
  pipeline_report report;
  std::vector<float> losses(steps, 0.0f);
  for (const auto seg : segments_of(cfg, steps)) runner.run_segment(seg, source, losses);
  stage_telemetry mine = runner.telemetry();
  mine.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.stages = detail::gather_telemetry(t, S, s, mine, to);
  report.theoretical_bubble = theoretical_bubble(cfg, S, steps);
  report.measured_bubble = measured_bubble(report.stages);
  if (s + 1 == S) report.losses = std::move(losses);
  report.peak_in_flight.assign(S, 0);
  report.peak_in_flight[s] = runner.peak_in_flight();
  report.peak_stashes.assign(S, 0);
  report.peak_stashes[s] = runner.peak_stashes();
  report.staleness.assign(S, {});
  report.staleness[s] = runner.staleness();
  report.peak_pending_sends.assign(S, 0);
  report.peak_pending_sends[s] = runner.peak_pending_sends();
  return report;
}

/// Rank 0 receives every stage's slice of `params` from its owner; the others send theirs.
template <class Transport, stage_model M>
void gather_stages(const Transport& t, const M& model, std::vector<float>& params,
                   const transfer_options& to = {}) {
  detail::check_params(model, params.size());
  comm::send_options so;
  comm::recv_options ro;
  so.timeout = ro.timeout = to.timeout;
  const int tag = to.tag_base + detail::gather_slice;
  const span<float> all(params);
  if (t.rank() == 0) {
    for (std::size_t s = 1; s < model.stages(); ++s)
      decoupled::detail::receive_field(t, detail::stage_slice(model, all, s), static_cast<int>(s),
                                       tag, ro, "pipeline.gather");
  } else {
    const auto mine = detail::stage_slice(model, all, static_cast<std::size_t>(t.rank()));
    t.send(span<const float>(mine.data(), mine.size()), 0, tag, so).wait();
  }
}

}  // namespace heterograd::algorithms::pipeline
