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
// check of decoupled/transport_pipeline.hpp), and a gradient's or labels' rows those of the
// micro-batch's forward. The payload is then received at exactly that size (any other size or
// type is refused by the transport before a byte is written). A hostile previous stage can
// make a rank allocate at most max_rows x width floats per message.
//
// Sends are posted without waiting and waited at the end of the step (their buffers live until
// then), and every stage receives in its op list's order, so the run cannot deadlock when the
// schedule does not (decoupled::execute_schedule checks that); every wait has the timeout, and
// a rank that throws aborts the world under inproc::spawn, so a refused header surfaces on
// every rank. Because stage s runs the same ops on the same inputs in the same order as
// simulate_pipeline does, the parameters are equal to simulate_pipeline's bitwise (tested).

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
        ops_(schedule_for(cfg, S_)[s_]),
        versions_(versions_until_backward(ops_, Mb_)),
        pool_(Mb_),
        rows_(Mb_, 0),
        labels_(Mb_),
        g_(params.size(), 0.0f) {
    so_.timeout = ro_.timeout = to.timeout;
  }

  /// One step; returns the step's loss on the last stage (0 elsewhere).
  float step(std::size_t t, const batch_source& source) {
    std::fill(g_.begin(), g_.end(), 0.0f);
    loss_ = 0;
    if (s_ == 0) {
      mbs_ = split_micro_batches(source(t), model_.input_width(0), Mb_);
      batch_rows_ = total_rows(model_, mbs_);  // the last stage's when S = 1 (no label message)
    }
    for (const auto& op : ops_) {
      if (op.kind == decoupled::pass::forward)
        forward(t, op.micro_batch);
      else
        backward(t, op.micro_batch);
    }
    for (auto& e : outbox_)
      for (auto& r : e.requests) r.wait();
    outbox_.clear();
    upd_.end_step(span<float>(params_), span<float>(g_));
    return loss_;
  }
  std::size_t peak_in_flight() const { return pool_.peak(); }
  std::size_t peak_stashes() const { return upd_.peak_stashes(); }

 private:
  using request = decltype(std::declval<const Transport&>().send(span<const float>{}, 0, 0,
                                                                 comm::send_options{}));
  struct message {  // a posted send and its buffers (the requests go first when it is destroyed)
    std::array<std::int64_t, 4> header{};
    std::vector<float> x;
    std::vector<std::int32_t> y;
    std::vector<request> requests;
  };
  span<const float> params() const { return span<const float>(params_.data(), params_.size()); }
  int tag(wire_tag w) const { return to_.tag_base + static_cast<int>(w); }
  int rank_of(std::size_t s) const { return static_cast<int>(s); }

  void forward(std::size_t t, std::size_t m) {
    const float* x = nullptr;
    if (s_ == 0) {
      x = mbs_[m].x.data();
      rows_[m] = mbs_[m].rows();
      if (S_ == 1)
        labels_[m] = mbs_[m].y;
      else
        post_labels(t, m);
    } else {
      const std::size_t w = model_.input_width(s_);
      rows_[m] = receive_header("pipeline.header", activation_header, s_ - 1, t, m, w, 0,
                                "must equal stage " + std::to_string(s_) + "'s input width (" +
                                    std::to_string(w) + "), which stage " + std::to_string(s_ - 1) +
                                    "'s output must match");
      in_.resize(rows_[m] * w);
      decoupled::detail::receive_field(t_, span<float>(in_), rank_of(s_ - 1),
                                       tag(activation_payload), ro_, "pipeline.activations");
      x = in_.data();
    }
    const std::size_t slot = pool_.take(m);
    const auto out =
        model_.forward(s_, slot, upd_.forward_weights(params(), slot, versions_[m]), x, rows_[m]);
    if (s_ + 1 < S_)
      post(s_ + 1, activation_header, {t, m, rows_[m], model_.input_width(s_ + 1)},
           std::vector<float>(out.begin(), out.end()));
    else if (S_ > 1)
      receive_labels(t, m);
  }

  void backward(std::size_t t, std::size_t m) {
    const std::size_t slot = pool_.give(m), rows = rows_[m];
    const bool async = upd_.asynchronous();
    const auto weights = upd_.backward_weights(params(), slot);
    std::vector<float> dx(s_ > 0 ? rows * model_.input_width(s_) : 0);
    if (s_ + 1 == S_) {
      const float l = model_.loss_backward(slot, weights, span<const std::int32_t>(labels_[m]),
                                           loss_scale(async, rows, batch_rows_), g_, dx);
      loss_ += step_loss_term(async, l, rows, batch_rows_);
    } else {
      const std::size_t w = model_.input_width(s_ + 1);
      receive_header(
          "pipeline.gradient_header", gradient_header, s_ + 1, t, m, w, rows,
          "must equal stage " + std::to_string(s_) + "'s output width (" + std::to_string(w) + ")");
      dy_.resize(rows * w);
      decoupled::detail::receive_field(t_, span<float>(dy_), rank_of(s_ + 1), tag(gradient_payload),
                                       ro_, "pipeline.gradients");
      model_.backward(s_, slot, weights, dy_, g_, dx);
    }
    upd_.after_backward(span<float>(params_), span<float>(g_));
    if (s_ > 0) post(s_ - 1, gradient_header, {t, m, rows, model_.input_width(s_)}, std::move(dx));
  }

  void post(std::size_t to, wire_tag header_tag, std::array<std::size_t, 4> h,
            std::vector<float> x) {
    message& e = outbox_.emplace_back();
    for (std::size_t i = 0; i < 4; ++i) e.header[i] = static_cast<std::int64_t>(h[i]);
    e.x = std::move(x);
    e.requests.push_back(
        t_.send(span<const std::int64_t>(e.header.data(), 4), rank_of(to), tag(header_tag), so_));
    e.requests.push_back(t_.send(span<const float>(e.x), rank_of(to), tag(header_tag) + 1, so_));
  }

  void post_labels(std::size_t t, std::size_t m) {
    message& e = outbox_.emplace_back();
    e.header = {static_cast<std::int64_t>(t), static_cast<std::int64_t>(m),
                static_cast<std::int64_t>(rows_[m]), static_cast<std::int64_t>(batch_rows_)};
    e.y = mbs_[m].y;
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
    decoupled::detail::receive_field(t_, span<std::int64_t>(h, 4), rank_of(from), tag(w), ro_,
                                     key.c_str());
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

  void receive_labels(std::size_t t, std::size_t m) {
    const std::string key = "pipeline.label_header";
    std::int64_t h[4] = {0, 0, 0, 0};
    decoupled::detail::receive_field(t_, span<std::int64_t>(h, 4), 0, tag(label_header), ro_,
                                     key.c_str());
    require(h[0] == static_cast<std::int64_t>(t), key + ".step", h[0],
            "must be this step (" + std::to_string(t) + ")");
    require(h[1] == static_cast<std::int64_t>(m), key + ".micro_batch", h[1],
            "must be the micro-batch whose activations arrived (" + std::to_string(m) + ")");
    require(h[2] == static_cast<std::int64_t>(rows_[m]), key + ".rows", h[2],
            "must equal the rows of micro-batch " + std::to_string(m) + "'s activations (" +
                std::to_string(rows_[m]) + ")");
    if (m == 0) batch_rows_ = static_cast<std::size_t>(std::max<std::int64_t>(h[3], 0));
    require(h[3] >= h[2] && h[3] == static_cast<std::int64_t>(batch_rows_), key + ".batch_rows",
            h[3],
            "must be >= the micro-batch's rows and the same for every micro-batch of the step");
    labels_[m].resize(rows_[m]);
    decoupled::detail::receive_field(t_, span<std::int32_t>(labels_[m]), 0, tag(label_payload), ro_,
                                     "pipeline.labels");
  }

  const Transport& t_;
  M& model_;
  std::vector<float>& params_;
  Upd upd_;
  transfer_options to_;
  std::size_t s_, S_, Mb_;
  std::vector<decoupled::pipeline_op> ops_;
  std::vector<std::size_t> versions_;  // [m]: this stage's updates between F(m) and B(m)
  slot_pool pool_;
  std::vector<std::size_t> rows_;
  std::vector<std::vector<std::int32_t>> labels_;
  std::vector<float> g_, in_, dy_;
  std::vector<batch_data> mbs_;
  std::deque<message> outbox_;
  comm::send_options so_;
  comm::recv_options ro_;
  std::size_t batch_rows_ = 0;
  float loss_ = 0;
};
}  // namespace detail

/// Runs `steps` pipeline steps; rank s of `t` runs stage s (t.size() must equal
/// model.stages()) and updates only its slice of `params` (the whole flat buffer, the same
/// initial values on every rank). Only rank 0 calls `source`. make_opt(slice size) makes the
/// rank's optimizer. The report holds this rank's peak in-flight micro-batches and stashes and, on
/// the last stage's rank, every step's loss.
template <class Transport, stage_model M, class MakeOpt>
pipeline_report run_pipeline_over(const Transport& t, M& model, std::vector<float>& params,
                                  MakeOpt make_opt, const pipeline_config& cfg,
                                  const batch_source& source, std::size_t steps,
                                  const transfer_options& to = {}) {
  cfg.validate();
  detail::check_params(model, params.size());
  const std::size_t S = model.stages(), s = static_cast<std::size_t>(t.rank());
  require(static_cast<std::size_t>(t.size()) == S, "pipeline.transport.size", t.size(),
          "must equal the number of stages (" + std::to_string(S) + ")");
  require_positive("transfer_options.timeout", to.timeout.count());
  auto upd = detail::make_updater(model, make_opt, cfg, s, cfg.micro_batches);
  detail::stage_runner<Transport, M, decltype(upd)> runner(t, model, params, std::move(upd), cfg,
                                                           to);
  pipeline_report report;
  for (std::size_t k = 0; k < steps; ++k) {
    const float loss = runner.step(k, source);
    if (s + 1 == S) report.losses.push_back(loss);
  }
  report.peak_in_flight.assign(S, 0);
  report.peak_in_flight[s] = runner.peak_in_flight();
  report.peak_stashes.assign(S, 0);
  report.peak_stashes[s] = runner.peak_stashes();
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
