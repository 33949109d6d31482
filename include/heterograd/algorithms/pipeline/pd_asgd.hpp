#pragma once
// PD-ASGD on any stage_model (Fokam et al., arXiv 2410.05985, #14), threads of one process over
// one shared flat parameter buffer: `forward_threads` run whole forwards (every stage, in order)
// on a snapshot of the shared weights and hand them to `backward_threads` through a queue; a
// backward thread walks the stages from the top and updates each stage's slice as soon as that
// slice's gradient exists (stage-wise partial updates: with one layer per stage, the paper's
// layer-wise updates), so upper stages are updated before lower stages' gradients exist.
// At most `max_in_flight` batches are between the start of their forward and the end of their
// backward (a token per model copy: each in-flight batch owns one copy of the model's slots).
//
// Shared weights: forwards read them element-wise through std::atomic_ref (relaxed; reads may
// mix versions, as in the paper's lock-free design); an update loads its slice, lets the
// stage's optimizer step it and stores it back, under the stage's mutex (optimizer state is per
// stage, so two backward threads never step one stage at once). A backward differentiates at the
// snapshot its forward used. Each batch is one unit (its mean gradient, 1 / rows).
//
// Races by design, so results depend on timing, except in one corner: forward_threads =
// backward_threads = max_in_flight = 1. Then the forward of batch t + 1 waits for the token
// that batch t's backward returns after its last (stage 0) update, so every forward reads every
// earlier update: plain per-batch SGD with each stage's optimizer, no staleness. That is
// sequential_step with M = 1 (and the unsplit network's full-batch step), not the asynchronous
// 1F1B stream, whose forwards run S - s - 1 updates ahead of their backwards (tested bitwise).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "heterograd/algorithms/decoupled/pipeline.hpp"
#include "heterograd/algorithms/decoupled/shared_memory.hpp"
#include "heterograd/algorithms/pipeline/concepts.hpp"
#include "heterograd/algorithms/pipeline/config.hpp"
#include "heterograd/algorithms/pipeline/reference.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::algorithms::pipeline {

struct pd_asgd_options {
  std::size_t forward_threads = 2;
  std::size_t backward_threads = 1;
  std::size_t max_in_flight = 4;
  std::chrono::duration<double> timeout{60.0};  // per queue wait
};

struct pd_asgd_report {
  std::size_t batches = 0;
  std::size_t peak_in_flight = 0;
};

namespace detail {
template <stage_model M, class Opt>
class pd_asgd_run {
 public:
  pd_asgd_run(const M& model, std::vector<float>& params, std::vector<Opt> opts,
              const batch_source& source, std::size_t batches, const pd_asgd_options& o)
      : params_(params),
        opts_(std::move(opts)),
        mutex_(opts_.size()),
        source_(source),
        batches_(batches),
        o_(o),
        tokens_(o.max_in_flight),
        work_(o.max_in_flight) {
    for (std::size_t k = 0; k < o.max_in_flight; ++k) {
      models_.push_back(model);
      tokens_.push(k, o.timeout);
    }
  }

  pd_asgd_report run() {
    std::vector<std::thread> threads;
    for (std::size_t f = 0; f < o_.forward_threads; ++f)
      threads.emplace_back([&] { guard([&] { forwards(); }); });
    for (std::size_t b = 0; b < o_.backward_threads; ++b)
      threads.emplace_back([&] { guard([&] { backwards(); }); });
    for (auto& th : threads) th.join();
    if (error_) std::rethrow_exception(error_);
    return {done_.load(), peak_.load()};
  }

 private:
  struct item {
    std::size_t token, rows;
    std::vector<float> weights;  // the snapshot the forward used
    std::vector<std::int32_t> y;
  };
  template <class F>
  void guard(F f) {
    try {
      f();
    } catch (...) {
      std::lock_guard lk(error_mutex_);
      if (!error_) error_ = std::current_exception();
      failed_ = true;
      tokens_.abort();
      work_.abort();
    }
  }

  void forwards() {
    for (std::size_t t; (t = next_.fetch_add(1)) < batches_ && !failed_;) {
      const batch_data b = source_(t);
      require_positive("pd_asgd.batch.rows", b.rows());
      const std::size_t token = tokens_.pop(o_.timeout);
      const std::size_t live = live_.fetch_add(1) + 1;
      for (std::size_t p = peak_.load(); live > p && !peak_.compare_exchange_weak(p, live);) {
      }
      auto w =
          std::make_unique<item>(item{token, b.rows(), std::vector<float>(params_.size()), b.y});
      decoupled::detail::atomic_load_range(params_, 0, params_.size(), w->weights.data());
      M& m = models_[token];
      const span<const float> p(w->weights.data(), w->weights.size());
      const float* in = b.x.data();
      for (std::size_t s = 0; s < m.stages(); ++s) in = m.forward(s, 0, p, in, b.rows()).data();
      work_.push(std::move(w), o_.timeout);
    }
  }

  void backwards() {
    std::vector<float> g(params_.size(), 0.0f), dy, dx, slice;
    while (done_.load() < batches_ && !failed_) {
      std::unique_ptr<item> w;
      try {
        w = work_.pop(std::chrono::milliseconds(20));
      } catch (const std::runtime_error&) {
        continue;  // empty for now (or aborted: failed_ ends the loop)
      }
      M& m = models_[w->token];
      const span<const float> p(w->weights.data(), w->weights.size());
      for (std::size_t s = m.stages(); s-- > 0;) {
        dx.assign(s > 0 ? w->rows * m.input_width(s) : 0, 0.0f);
        if (s + 1 == m.stages())
          m.loss_backward(0, p, span<const std::int32_t>(w->y), 1.0f / static_cast<float>(w->rows),
                          g, dx);
        else
          m.backward(s, 0, p, dy, g, dx);
        update(m, s, g, slice);
        dy.swap(dx);
      }
      live_.fetch_sub(1);
      tokens_.push(w->token, o_.timeout);
      done_.fetch_add(1);
    }
  }

  /// Stage s's slice: loaded, stepped by its optimizer with g's slice, stored; g's slice zeroed.
  void update(const M& m, std::size_t s, std::vector<float>& g, std::vector<float>& slice) {
    const std::size_t a = m.stage_offset(s), e = m.stage_offset(s + 1);
    std::lock_guard lk(mutex_[s]);
    slice.resize(e - a);
    for (std::size_t j = a; j < e; ++j)
      slice[j - a] = std::atomic_ref<float>(params_[j]).load(std::memory_order_relaxed);
    opts_[s].step(span<float>(slice), span<const float>(g.data() + a, e - a));
    for (std::size_t j = a; j < e; ++j)
      std::atomic_ref<float>(params_[j]).store(slice[j - a], std::memory_order_relaxed);
    std::fill(g.begin() + static_cast<std::ptrdiff_t>(a),
              g.begin() + static_cast<std::ptrdiff_t>(e), 0.0f);
  }

  std::vector<float>& params_;
  std::vector<Opt> opts_;
  std::vector<std::mutex> mutex_;
  const batch_source& source_;
  std::size_t batches_;
  pd_asgd_options o_;
  std::vector<M> models_;
  decoupled::bounded_queue<std::size_t> tokens_;
  decoupled::bounded_queue<std::unique_ptr<item>> work_;
  std::atomic<std::size_t> next_{0}, done_{0}, live_{0}, peak_{0};
  std::atomic<bool> failed_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};
}  // namespace detail

/// Runs PD-ASGD over batches source(0..batches-1) on `params` (shared, updated in place);
/// make_opt(slice size) makes stage s's optimizer. `model` is copied max_in_flight times
/// (each copy needs one slot per stage). `source` is called from the forward threads at once.
template <stage_model M, class MakeOpt>
pd_asgd_report pd_asgd(const M& model, std::vector<float>& params, MakeOpt make_opt,
                       const batch_source& source, std::size_t batches,
                       const pd_asgd_options& o = {}) {
  detail::check_params(model, params.size());
  require_positive("pd_asgd.forward_threads", o.forward_threads);
  require_positive("pd_asgd.backward_threads", o.backward_threads);
  require_positive("pd_asgd.max_in_flight", o.max_in_flight);
  require_positive("pd_asgd.timeout", o.timeout.count());
  std::vector<decltype(make_opt(std::size_t{}))> opts;
  for (std::size_t s = 0; s < model.stages(); ++s)
    opts.push_back(make_opt(model.stage_offset(s + 1) - model.stage_offset(s)));
  return detail::pd_asgd_run<M, decltype(make_opt(std::size_t{}))>(model, params, std::move(opts),
                                                                   source, batches, o)
      .run();
}

}  // namespace heterograd::algorithms::pipeline
