// The problems heterograd-run trains (Fashion-MNIST classifiers, the synthetic quadratics) and the
// worker-time models built from the configuration.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "files.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/data/idx.hpp"
#include "heterograd/data/partition.hpp"
#include "heterograd/data/synthetic.hpp"
#include "heterograd/kernels/gemm.hpp"
#include "heterograd/nn/evaluate.hpp"
#include "heterograd/nn/mlp.hpp"
#include "heterograd/runtime/report.hpp"
#include "heterograd/sim/network.hpp"
#include "problems.hpp"
#include "registry.hpp"
#include "run.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace hgrun {

namespace hg = heterograd;
namespace sim = heterograd::sim;

double problem::gradient_on(std::size_t, std::span<const std::size_t>, std::span<const float>, std::span<float>,
                            std::span<float>) {
  throw config_error("data.dataset", "this method needs per-sample losses (fashion_mnist)");
}

namespace {
[[noreturn]] void float32_only() {
  throw config_error("data.precision", "expected float32 for this dataset: float64 is offered for the synthetic "
                                       "problems (scalar_quadratics, worst_case_quadratic)");
}
}  // namespace

std::vector<double> problem::initial64() const { float32_only(); }
std::vector<double> problem::evaluate(std::span<const double>) { float32_only(); }
double problem::gradient(std::size_t, std::size_t, std::span<const double>, std::span<double>) { float32_only(); }

void problem::next_batch(std::size_t, std::size_t, std::vector<float>&, std::vector<std::int32_t>&) {
  throw config_error("data.dataset", "this method needs a classification dataset (fashion_mnist)");
}

namespace {

using heterograd::fnv1a;

}  // namespace

std::string hex_of(std::uint64_t x) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(x));
  return buf;
}

std::string params_hash(std::span<const float> x) { return hex_of(fnv1a(x.data(), x.size() * sizeof(float))); }
std::string params_hash(std::span<const double> x) { return hex_of(fnv1a(x.data(), x.size() * sizeof(double))); }
std::string params_hash(const model_vector& x) {
  return std::visit([](const auto& v) { return params_hash(std::span(v.data(), v.size())); }, x);
}

sample_streams::sample_streams(hg::data::partition shards, std::uint64_t seed, std::size_t total)
    : seed_(seed), total_(total), shards_(std::move(shards)) {
  const std::size_t n = shards_.size();
  epoch_.assign(n, 0);
  pos_.assign(n, 0);
  perm_.resize(n);
  for (std::size_t w = 0; w < n; ++w) shuffle(w);
}

void sample_streams::draw(std::size_t w, std::size_t b, std::vector<std::size_t>& idx) {
  if (b == 0 || b > total_)
    throw std::invalid_argument("heterograd-run: a gradient of batch " + std::to_string(b) +
                                " was asked for; a batch must be 1.." + std::to_string(total_) + " (the training set)");
  idx.resize(b);
  for (std::size_t k = 0; k < b; ++k) {
    if (pos_[w] == perm_[w].size()) {
      ++epoch_[w];
      pos_[w] = 0;
      shuffle(w);
    }
    idx[k] = perm_[w][pos_[w]++];
  }
}

void sample_streams::seek(std::size_t w, std::uint64_t drawn) {
  const std::uint64_t shard = perm_.at(w).size();
  epoch_[w] = drawn / shard;
  pos_[w] = drawn % shard;
  if (drawn > 0 && pos_[w] == 0) {
    --epoch_[w];
    pos_[w] = shard;
  }
  shuffle(w);
}

void sample_streams::load(heterograd::archive_reader& a) {
  a(epoch_, pos_);
  for (std::size_t w = 0; w < perm_.size(); ++w) shuffle(w);
}

// Worker w's order for its current epoch.
void sample_streams::shuffle(std::size_t w) {
  perm_[w] = shards_[w];
  hg::counter_rng(seed_, 0x5a3b1e00ull + w).substream(epoch_[w]).shuffle(perm_[w].begin(), perm_[w].end());
}

namespace {

// --- Fashion-MNIST ----------------------------------------------------------------------------

const hg::data::train_test& fashion(const std::string& dir) {
  static std::map<std::string, hg::data::train_test> cache;
  auto it = cache.find(dir);
  if (it == cache.end()) it = cache.emplace(dir, hg::data::load_fashion_mnist(dir)).first;
  return it->second;
}

// Fashion-MNIST, trained as a classifier: heterograd's MLP or softmax regression here, a
// LibTorch preset from run_torch.cpp.
class mlp_classifier final : public classifier {
 public:
  mlp_classifier(const model_settings& model, std::size_t workers, std::uint64_t seed)
      : seed_(seed), net_(sizes(model), {.label_smoothing = model.label_smoothing}), per_worker_(workers) {}
  static std::vector<std::size_t> sizes(const model_settings& model) {
    std::vector<std::size_t> s{784};
    for (const std::size_t h : model.hidden_layers()) s.push_back(h);
    s.push_back(10);
    return s;
  }
  std::size_t num_params() const override { return net_.num_params(); }
  std::vector<float> initial() const override {
    std::vector<float> p(num_params());
    net_.init(p, seed_);
    return p;
  }
  // Worker w's own instance (an MLP owns its activation workspace), made on its first use by
  // w's thread only: slots are disjoint.
  double loss_and_gradient(std::size_t w, std::span<const float> x, const hg::nn::batch<float>& b, std::span<float> g,
                           std::span<float> losses) override {
    auto& net = per_worker_.at(w);
    if (!net) net = std::make_unique<hg::nn::mlp<float>>(proto_);
    return net->loss_and_gradient(hg::span<const float>(x.data(), x.size()), b, hg::span<float>(g.data(), g.size()),
                                  hg::span<float>(losses.data(), losses.size()));
  }
  hg::nn::eval_result evaluate(std::span<const float> x, const hg::data::dataset& test,
                               const hg::data::dataset&) override {
    return hg::nn::evaluate_dataset(net_, hg::span<const float>(x.data(), x.size()), test);
  }
  hg::algorithms::decoupled::any_chain module_chain(const chain_request& r) override {
    if (!r.split.empty())
      throw config_error(r.key + ".split", "expected [] with model.kind \"mlp\" (an MLP splits into " + r.key +
                                               ".modules parts at its dense layers), got " + json(r.split).dump());
    const std::size_t layers = net_.num_layers();
    if (r.modules < 1 || r.modules > layers)
      throw config_error(r.key + ".modules", "expected 1 to the number of dense layers (" + std::to_string(layers) +
                                                 "), got " + std::to_string(r.modules));
    return hg::algorithms::decoupled::mlp_chain(proto_, {}, r.modules, r.head_hidden);
  }

 private:
  std::uint64_t seed_;
  hg::nn::mlp<float> net_;                   // evaluate's
  const hg::nn::mlp<float> proto_{net_};     // copied by workers, never run
  std::vector<std::unique_ptr<hg::nn::mlp<float>>> per_worker_;
};

class classification final : public problem {
 public:
  classification(const json& c, std::unique_ptr<classifier> model, std::size_t n, std::uint64_t seed)
      : model_(std::move(model)) {
    const auto& d = c["data"];
    const auto& tt = fashion(d["path"].get<std::string>());
    const std::size_t ntr = d["train_samples"].get<std::size_t>();
    const std::size_t nte = d["test_samples"].get<std::size_t>();
    train_ = ntr && ntr < tt.train.size() ? tt.train.head(ntr) : tt.train;
    test_ = nte && nte < tt.test.size() ? tt.test.head(nte) : tt.test;
    const std::string part = d["partition"];
    const hg::span<const std::int32_t> labels(train_.labels.data(), train_.labels.size());
    hg::data::partition shards;
    if (part == "iid") shards = hg::data::partition_iid(train_.size(), n, seed);
    else if (part == "dirichlet")
      shards = hg::data::partition_dirichlet(labels, train_.classes, n, d["alpha"].get<double>(), seed);
    else
      shards = hg::data::partition_k_labels(labels, train_.classes, n, d["labels_per_worker"].get<std::size_t>(), seed);
    for (std::size_t w = 0; w < n; ++w)
      if (shards[w].empty())
        throw config_error("data.train_samples", "worker " + std::to_string(w) +
                                                     " gets no sample: use more samples or fewer workers");
    streams_ = sample_streams(std::move(shards), seed, train_.size());
    per_worker_.resize(n);
    model_->prepare(train_);
  }
  std::size_t dim() const override { return model_->num_params(); }
  std::vector<float> initial() const override { return model_->initial(); }
  std::vector<std::string> metrics() const override { return {"loss", "accuracy"}; }
  hg::algorithms::decoupled::any_chain module_chain(const chain_request& r) override { return model_->module_chain(r); }
  std::vector<double> evaluate(std::span<const float> x) override {
    const auto r = model_->evaluate(x, test_, train_);
    return {r.loss(), r.accuracy()};
  }
  // Called concurrently for different workers under the threads runtime: worker w touches
  // only its own stream and its own scratch and model instance. The arithmetic is the same as
  // with one shared scratch.
  double gradient(std::size_t w, std::size_t b, std::span<const float> x, std::span<float> g) override {
    scratch& s = scratch_of(w);
    draw(w, b, s.idx);
    return gradient_with(w, s, s.idx, x, g, {});
  }
  void next_batch(std::size_t w, std::size_t b, std::vector<float>& x, std::vector<std::int32_t>& y) override {
    scratch& s = scratch_of(w);
    draw(w, b, s.idx);
    hg::data::gather(train_, hg::span<const std::size_t>(s.idx.data(), s.idx.size()), x, y);
  }
  double gradient_on(std::size_t w, std::span<const std::size_t> idx, std::span<const float> x,
                     std::span<float> g, std::span<float> losses) override {
    return gradient_with(w, scratch_of(w), idx, x, g, losses);
  }
  std::size_t train_size() const override { return train_.size(); }
  void seek(std::size_t w, std::uint64_t, std::uint64_t drawn) override { streams_.seek(w, drawn); }
  void serialize(heterograd::archive_writer& w) override {
    w(samples);
    streams_.save(w);
  }
  void serialize(heterograd::archive_reader& r) override {
    r(samples);
    streams_.load(r);
  }

 private:
  struct scratch {
    std::vector<std::size_t> idx;
    std::vector<float> xb;
    std::vector<std::int32_t> yb;
  };
  // Worker w's scratch, made on its first use (by w's thread only: slots are disjoint).
  scratch& scratch_of(std::size_t w) {
    auto& p = per_worker_.at(w);
    if (!p) p = std::make_unique<scratch>();
    return *p;
  }
  double gradient_with(std::size_t w, scratch& s, std::span<const std::size_t> idx, std::span<const float> x,
                       std::span<float> g, std::span<float> losses) {
    hg::data::gather(train_, hg::span<const std::size_t>(idx.data(), idx.size()), s.xb, s.yb);
    return model_->loss_and_gradient(w, x, hg::nn::batch<float>{s.xb, s.yb}, g, losses);
  }
  void draw(std::size_t w, std::size_t b, std::vector<std::size_t>& idx) {
    streams_.draw(w, b, idx);
    std::atomic_ref<std::uint64_t>(samples).fetch_add(b, std::memory_order_relaxed);
  }
  std::unique_ptr<classifier> model_;
  hg::data::dataset train_, test_;
  sample_streams streams_;
  std::vector<std::unique_ptr<scratch>> per_worker_;  // gradient's, gradient_on's and next_batch's
};

// --- the synthetic problems' shared half ------------------------------------------------------
// One sample per gradient (a worker's stream is the count of its gradients), and both
// precisions forwarded to the problem's templates start<T>(), evaluate_as(x) and
// gradient_as(w, x, g).
template <class P>
class synthetic : public problem {
 public:
  explicit synthetic(std::size_t workers) : k_(workers, 0) {}
  std::vector<float> initial() const override { return self().template start<float>(); }
  std::vector<double> initial64() const override { return self().template start<double>(); }
  std::vector<double> evaluate(std::span<const float> x) override { return self().evaluate_as(x); }
  std::vector<double> evaluate(std::span<const double> x) override { return self().evaluate_as(x); }
  double gradient(std::size_t w, std::size_t, std::span<const float> x, std::span<float> g) override {
    return self().gradient_as(w, x, g);
  }
  double gradient(std::size_t w, std::size_t, std::span<const double> x, std::span<double> g) override {
    return self().gradient_as(w, x, g);
  }
  std::size_t train_size() const override { return k_.size(); }
  std::size_t samples_per_gradient(std::size_t) const override { return 1; }
  void seek(std::size_t w, std::uint64_t gradients, std::uint64_t) override { k_.at(w) = gradients; }
  void serialize(heterograd::archive_writer& w) override { w(samples, k_); }
  void serialize(heterograd::archive_reader& r) override { r(samples, k_); }

 protected:
  std::vector<std::uint64_t> k_;  // gradients drawn, per worker

 private:
  P& self() { return static_cast<P&>(*this); }
  const P& self() const { return static_cast<const P&>(*this); }
};

// --- f_i(x) = (x - c_i)^2 / 2 on one coordinate (E1, docs/references.md) ---------------------

class scalar_quadratics final : public synthetic<scalar_quadratics> {
 public:
  scalar_quadratics(const json& c, std::uint64_t seed)
      : synthetic(c["data"]["centers"].size()), c_(c["data"]["centers"].get<std::vector<double>>()),
        sigma_(c["data"]["noise"].get<double>()), rng_(seed, 0xe1) {}
  std::size_t dim() const override { return 1; }
  std::vector<std::string> metrics() const override { return {"loss", "grad_norm_sq", "x"}; }

 private:
  friend class synthetic<scalar_quadratics>;
  template <class T>
  std::vector<T> start() const {
    return {T(0)};
  }
  template <class T>
  std::vector<double> evaluate_as(std::span<const T> at) const {
    const double x = at[0];
    double f = 0, g = 0;
    for (double c : c_) {
      f += 0.5 * (x - c) * (x - c);
      g += x - c;
    }
    const double n = static_cast<double>(c_.size());
    return {f / n, (g / n) * (g / n), x};
  }
  // In double, rounded to T once (float32: as before float64 was offered).
  template <class T>
  double gradient_as(std::size_t w, std::span<const T> x, std::span<T> g) {
    const double noise = sigma_ > 0 ? sigma_ * rng_.substream(w).normal(k_[w]) : 0.0;
    ++k_[w];
    std::atomic_ref<std::uint64_t>(samples).fetch_add(1, std::memory_order_relaxed);
    g[0] = static_cast<T>(x[0] - c_[w] + noise);
    return 0.5 * (x[0] - c_[w]) * (x[0] - c_[w]);
  }

  std::vector<double> c_;
  double sigma_;
  hg::counter_rng rng_;
};

// --- the worst-case quadratic of Ringmaster ASGD (E2, docs/references.md) --------------------

class worst_case final : public synthetic<worst_case> {
 public:
  worst_case(const json& c, std::uint64_t seed, std::size_t workers)
      : synthetic(workers), q_(c["data"]["dim"].get<std::size_t>(), c["data"]["smoothness"].get<double>()),
        sigma_(c["data"]["noise"].get<double>()), noise_(noise_of(c["data"]["noise_model"].get<std::string>())),
        sqrt_d_start_(c["data"]["start"] == "sqrt_d_e1"), rng_(seed, 0xe2), xd_(q_.dim), gd_(q_.dim),
        scratch_(workers) {}
  std::size_t dim() const override { return q_.dim; }
  std::vector<std::string> metrics() const override { return {"loss", "grad_norm_sq"}; }

 private:
  friend class synthetic<worst_case>;
  template <class T>
  std::vector<T> start() const {
    std::vector<T> x(q_.dim, T(0));
    if (sqrt_d_start_) x[0] = static_cast<T>(std::sqrt(static_cast<double>(q_.dim)));
    return x;
  }
  template <class T>
  std::vector<double> evaluate_as(std::span<const T> x) {
    std::copy(x.begin(), x.end(), xd_.begin());
    const auto xs = q_.solution();
    const double fstar = q_.loss(xs);
    return {q_.loss(xd_) - fstar, q_.grad_norm_sq(xd_)};
  }
  // In double on worker w's own scratch (threads runtime: concurrent workers), rounded to T.
  template <class T>
  double gradient_as(std::size_t w, std::span<const T> x, std::span<T> g) {
    auto& s = scratch_.at(w);
    s.resize(2 * q_.dim);
    const hg::span<double> xd(s.data(), q_.dim), gd(s.data() + q_.dim, q_.dim);
    std::copy(x.begin(), x.end(), xd.begin());
    q_.gradient(xd, gd);
    if (noise_ == noise_model::per_coordinate) {
      hg::data::add_gaussian_noise(gd, sigma_, rng_.substream(w), k_[w]++);
    } else {  // one xi ~ N(0, 1) for the whole gradient
      const double xi = sigma_ * rng_.substream(w).normal(k_[w]++);
      if (noise_ == noise_model::shared)
        for (double& v : gd) v += xi;
      else
        for (double& v : gd) v *= 1.0 + xi;
    }
    for (std::size_t j = 0; j < gd.size(); ++j) g[j] = static_cast<T>(gd[j]);
    std::atomic_ref<std::uint64_t>(samples).fetch_add(1, std::memory_order_relaxed);
    return 0.0;
  }

  hg::data::worst_case_quadratic q_;
  double sigma_;
  // data.noise_model (resolve() admits these three names only)
  enum class noise_model { per_coordinate, shared, multiplicative };
  static noise_model noise_of(const std::string& name) {
    return name == "shared" ? noise_model::shared
           : name == "multiplicative" ? noise_model::multiplicative
                                      : noise_model::per_coordinate;
  }
  noise_model noise_;
  bool sqrt_d_start_;
  hg::counter_rng rng_;
  std::vector<double> xd_, gd_;              // evaluate's
  std::vector<std::vector<double>> scratch_;  // gradient's, per worker
};

sim::fixed_times base_times(const workers_settings& w, std::uint64_t seed) {
  const worker_time_settings& t = w.time;
  if (t.base == "linear") return sim::linear_times(w.count, seed, t.permute);
  if (t.base == "sqrt") return sim::sqrt_times(w.count, seed, t.permute);
  if (t.base == "fixed") return sim::fixed_times(t.tau);
  return sim::speed_classes(t.classes);
}

// Each step, `count` workers drawn from (seed, step) take `delay` more (eager-SGD's injected
// imbalance, E6 of docs/references.md).
struct subset_delay {
  std::size_t n, count;
  double delay;
  std::uint64_t seed;
  double duration(sim::worker_id w, std::uint64_t k, double, std::size_t) const {
    std::vector<std::size_t> order(n);
    hg::counter_rng(seed, 0xe6).substream(k).permutation(order.begin(), order.end());
    for (std::size_t j = 0; j < count; ++j)
      if (order[j] == w) return delay;
    return 0.0;
  }
};

// The base model without noise or windows, batch-scaled: what a worker's mean job costs.
sim::any_time_model base_model(const workers_settings& w, std::uint64_t seed) {
  const worker_time_settings& t = w.time;
  if (t.base == "omnilearn") {
    // Core-share times are per sample: seconds_per_sample_core = scale * 48 / reference batch
    // makes a job of the reference batch on an even share (12 of 48 cores) take `scale`.
    const double ref = static_cast<double>(t.reference_batch);
    return sim::omnilearn_dynamic(t.mode, t.phase_length, t.phase_unit, t.scale * 12.0 / ref, t.levels);
  }
  sim::any_time_model m = t.base == "trace" ? sim::any_time_model(sim::scaled(trace_model_of(w), t.scale))
                                            : sim::any_time_model(sim::scaled(base_times(w, seed), t.scale));
  if (t.batch_scaling) {
    const double ref = static_cast<double>(t.reference_batch);
    m = sim::times(m, sim::batch_affine_times({0.0}, {1.0 / ref}));
  }
  return m;
}

}  // namespace

std::unique_ptr<problem> make_classification(const json& c, std::unique_ptr<classifier> model, std::size_t workers,
                                             std::uint64_t seed) {
  return std::make_unique<classification>(c, std::move(model), workers, seed);
}

std::unique_ptr<problem> make_problem(const experiment& e, const json& c, std::uint64_t seed) {
  const std::string d = c["data"]["dataset"];
  if (d == "fashion_mnist")
    return make_classification(c,
                               e.model.kind == model_kind::torch
                                   ? make_torch_classifier(e, c, seed)
                                   : std::make_unique<mlp_classifier>(e.model, e.workers.count, seed),
                               e.workers.count, seed);
  if (d == "text") return make_text_problem(e, c, seed);
  if (d == "scalar_quadratics") return std::make_unique<scalar_quadratics>(c, seed);
  return std::make_unique<worst_case>(c, seed, e.workers.count);
}

sim::any_time_model make_time_model(const experiment& e, std::uint64_t seed, std::size_t) {
  const worker_time_settings& t = e.workers.time;
  sim::any_time_model m = base_model(e.workers, seed);
  if (t.half_normal_noise) m = sim::plus(m, sim::half_normal_noise(seed, t.noise_scale, t.noise_growth));
  if (t.delayed > 0) m = sim::plus(m, subset_delay{e.workers.count, t.delayed, t.delay, seed});
  std::vector<sim::time_window> win = t.outages;
  win.insert(win.end(), t.slowdowns.begin(), t.slowdowns.end());
  if (!win.empty()) m = sim::with_windows(m, win);
  return m;
}

std::vector<double> mean_job_times(const experiment& e, std::uint64_t seed, std::size_t batch) {
  const auto m = base_model(e.workers, seed);
  const worker_time_settings& t = e.workers.time;
  std::vector<double> tau(e.workers.count);
  if (t.base == "trace") {  // each worker's mean measured job
    std::vector<double> count(tau.size(), 0.0);
    for (const auto& r : t.trace) {
      tau[r.worker] += r.duration * t.scale;
      count[r.worker] += 1;
    }
    for (std::size_t w = 0; w < tau.size(); ++w) tau[w] /= count[w];
  }
  for (std::size_t w = 0; w < tau.size() && t.base != "trace"; ++w) {
    tau[w] = m.duration(static_cast<sim::worker_id>(w), 0, 0.0, batch);
    if (t.half_normal_noise) {
      const double i1 = static_cast<double>(w) + 1.0, s = t.noise_scale;
      const double sigma = t.noise_growth == sim::noise_growth::variance_linear ? s * std::sqrt(i1)
                           : t.noise_growth == sim::noise_growth::stddev_linear ? s * i1
                                                                                : s;
      tau[w] += sigma * std::sqrt(2.0 / std::numbers::pi);
    }
  }
  return tau;
}

double sync_time(const experiment& e, std::size_t params) {
  using kind = network_kind;
  const network_settings& net = e.network;
  if (net.kind == kind::none) return 0.0;
  if (net.kind == kind::fixed) return net.time;
  const sim::link l{net.latency, net.bandwidth};
  const std::size_t n = e.workers.count;
  const double bytes = static_cast<double>(params * e.value_bytes());
  if (net.kind == kind::ring) return sim::ring_allreduce(l, n, bytes).seconds;
  if (net.kind == kind::tree) return sim::tree_allreduce(l, n, bytes).seconds;
  return sim::ps_push_pull(l, bytes, n, 1).seconds;
}

double exchange_time(const experiment& e, std::size_t params) {
  using kind = network_kind;
  const network_settings& net = e.network;
  if (net.kind == kind::none || (e.real_clock && !(e.real_scale > 0))) return 0.0;
  if (net.kind == kind::fixed) return net.time;
  const sim::link l{net.latency, net.bandwidth};
  return sim::ps_push_pull(l, static_cast<double>(params * e.value_bytes()), 1, 1).seconds;
}

sim::any_time_model with_exchange(sim::any_time_model model, double exchange) {
  if (!(exchange > 0)) return model;
  return sim::plus(std::move(model), sim::constant_time{exchange});
}

}  // namespace hgrun
