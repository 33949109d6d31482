// model.kind "torch": LibTorch's presets (heterograd/torch/models.hpp) as the driver's problems.
// The driver's LibTorch plugin (hg_driver_torch, a shared module): heterograd-run loads it only
// when a configuration asks for a torch model (torch_plugin.cpp), so the other runs do not pay
// LibTorch's start-up (0.6 s a process here). It is the only translation unit of the driver
// that includes LibTorch; the driver's own functions it calls come from the executable.
//
// Every worker computes with its own module, whose parameters and gradients are laid over the
// memory the method hands it (flat_module::rebind: no copy). Batch norm's running statistics
// never enter a gradient (training mode normalises by the batch); each worker keeps its own,
// and an evaluation re-estimates them at the evaluated parameters (estimate_batch_norm) on the
// first 1000 training samples, in batches of 100: the same rule for every method, so methods
// are compared on their parameters alone. Image inputs are standardised per channel by the
// training set's mean and standard deviation.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "files.hpp"
#include "problems.hpp"

#include <torch/torch.h>

#include "heterograd/data/idx.hpp"
#include "heterograd/data/text.hpp"
#include "heterograd/torch/chain.hpp"
#include "heterograd/torch/models.hpp"
#include "heterograd/torch/module.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace hgrun {

#ifndef HG_HAS_TORCH
#error "run_torch.cpp is the LibTorch plugin: build it with the torch component"
#endif


namespace hg = heterograd;
namespace lt = heterograd::libtorch;

// OpenBLAS (LibTorch's BLAS on Debian) keeps one thread pool for the process beside OpenMP.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace {

// LibTorch's intra-op threads for each worker (local learning: each module): model.threads,
// else one. One by default, so that a run's numbers do not depend on the machine's cores or on
// how many runs share them (--jobs): LibTorch's reductions split by thread count (LeNet-5's
// final accuracy in E7 on the CNN moved from 0.8644 to 0.8638 between 2 threads and 1), and
// two runs of two spinning OpenMP threads each on 2 cores were 10x slower than one.
int threads_per_worker(const experiment& e) { return e.model.threads > 0 ? static_cast<int>(e.model.threads) : 1; }

// LibTorch with OpenMP (Debian's) runs its kernels on the calling thread's OpenMP team: set per
// thread. OpenBLAS's pool is the process's: one thread when workers compute at once.
void threads_here(int k) {
#ifdef _OPENMP
  thread_local int set = 0;
  if (set != k) {
    omp_set_num_threads(k);
    set = k;
  }
#endif
  (void)k;
}

void process_threads(const experiment& e, int k) {
  if (openblas_set_num_threads) openblas_set_num_threads(e.runtime == "sim" ? k : 1);
}

torch::Tensor blob(const float* p, std::vector<std::int64_t> shape) {
  return torch::from_blob(const_cast<float*>(p), shape, torch::kFloat);
}

// The evaluated parameters as a module reads them (an evaluation only reads them).
void bind_read_only(lt::flat_module& m, std::span<const float> x, std::vector<float>& grads) {
  grads.resize(m.size());
  m.rebind(hg::span<float>(const_cast<float*>(x.data()), x.size()), hg::span<float>(grads.data(), grads.size()));
}

// Workers' modules, made on first use (one at a time: a module's initialisation draws from
// LibTorch's global generator; its values are replaced by the method's at the first rebind).
template <class Make>
class module_slots {
 public:
  module_slots(Make make, std::size_t workers) : make_(std::move(make)), slots_(workers) {}
  lt::flat_module& at(std::size_t w) {
    auto& p = slots_.at(w);
    if (!p) {
      std::lock_guard<std::mutex> lock(mutex_);
      torch::NoGradGuard no_grad;
      p = std::make_unique<lt::flat_module>(make_());
    }
    return *p;
  }

 private:
  Make make_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<lt::flat_module>> slots_;
};

// The presets are Sequentials.
torch::nn::SequentialImpl& sequential(lt::flat_module& m) { return dynamic_cast<torch::nn::SequentialImpl&>(m.module()); }

std::string what_of(const std::exception& x) {
  std::string s = x.what();
  const auto nl = s.find('\n');  // c10::Error appends a backtrace
  return nl == std::string::npos ? s : s.substr(0, nl);
}

// --- images: LeNet-5 or ResNet-8 on Fashion-MNIST ----------------------------------------------

class torch_classifier final : public classifier {
 public:
  torch_classifier(const experiment& e, std::uint64_t seed)
      : shape_{static_cast<std::int64_t>(e.model.input.at(0)), static_cast<std::int64_t>(e.model.input.at(1)),
               static_cast<std::int64_t>(e.model.input.at(2))},
        preset_(e.model.preset),
        smoothing_(e.model.label_smoothing),
        threads_(threads_per_worker(e)),
        workers_([this] { return make(); }, e.workers.count) {
    process_threads(e, threads_);
    threads_here(threads_);
    torch::manual_seed(seed);
    try {
      eval_ = std::make_unique<lt::flat_module>(make());
      torch::NoGradGuard no_grad;
      eval_->module().eval();
      (void)forward(*eval_, torch::zeros({1, shape_.channels, shape_.height, shape_.width}));
    } catch (const std::exception& x) {  // std::invalid_argument of the presets, c10::Error of a forward
      throw config_error("model.input", what_of(x));
    }
    initial_.assign(eval_->params().begin(), eval_->params().end());
    has_batch_norm_ = eval_->buffers().size() > 0;
  }
  std::size_t num_params() const override { return initial_.size(); }
  std::vector<float> initial() const override { return initial_; }
  // Inputs are standardised per channel by the training set's mean and standard deviation
  // (in double, over every pixel of the channel), as image pipelines do before a CNN.
  void prepare(const hg::data::dataset& train) override {
    const auto c = static_cast<std::size_t>(shape_.channels);
    const std::size_t px = train.dim / c;
    std::vector<double> sum(c, 0.0), sq(c, 0.0);
    for (std::size_t i = 0; i < train.size(); ++i)
      for (std::size_t k = 0; k < c; ++k)
        for (std::size_t j = 0; j < px; ++j) {
          const double v = train.features[i * train.dim + k * px + j];
          sum[k] += v;
          sq[k] += v * v;
        }
    std::vector<float> mean(c), inv(c);
    const double n = static_cast<double>(train.size() * px);
    for (std::size_t k = 0; k < c; ++k) {
      const double m = sum[k] / n, var = std::max(0.0, sq[k] / n - m * m);
      mean[k] = static_cast<float>(m);
      inv[k] = static_cast<float>(var > 0 ? 1.0 / std::sqrt(var) : 1.0);
    }
    mean_ = torch::tensor(mean).view({1, shape_.channels, 1, 1});
    inv_std_ = torch::tensor(inv).view({1, shape_.channels, 1, 1});
  }

  double loss_and_gradient(std::size_t w, std::span<const float> x, const hg::nn::batch<float>& b, std::span<float> g,
                           std::span<float> losses) override {
    threads_here(threads_);
    lt::flat_module& m = workers_.at(w);
    m.rebind(hg::span<float>(const_cast<float*>(x.data()), x.size()), hg::span<float>(g.data(), g.size()));
    m.zero_grad();
    m.module().train();
    const auto n = static_cast<std::int64_t>(b.size());
    const auto logits = forward(m, blob(b.x.data(), {n, shape_.channels, shape_.height, shape_.width}));
    const auto per = torch::nn::functional::cross_entropy(
        logits, labels(b), torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone).label_smoothing(smoothing_));
    const auto loss = per.mean();
    loss.backward();
    if (!losses.empty()) std::memcpy(losses.data(), per.data_ptr<float>(), losses.size() * sizeof(float));
    return loss.item<double>();
  }

  hg::nn::eval_result evaluate(std::span<const float> x, const hg::data::dataset& test,
                               const hg::data::dataset& train) override {
    threads_here(threads_);
    bind_read_only(*eval_, x, eval_grads_);
    torch::NoGradGuard no_grad;
    if (has_batch_norm_) {
      const std::size_t n = std::min<std::size_t>(1000, train.size());
      lt::estimate_batch_norm(eval_->module(), [&](torch::nn::Module&) {
        for (std::size_t i = 0; i < n; i += 100) {
          const auto k = static_cast<std::int64_t>(std::min<std::size_t>(100, n - i));
          (void)forward(*eval_, blob(train.features.data() + i * train.dim, {k, shape_.channels, shape_.height, shape_.width}));
        }
      });
    }
    eval_->module().eval();
    hg::nn::eval_result r;
    for (std::size_t i = 0; i < test.size(); i += 1000) {
      const std::size_t k = std::min<std::size_t>(1000, test.size() - i);
      const hg::nn::batch<float> b{hg::span<const float>(test.features.data() + i * test.dim, k * test.dim),
                                   hg::span<const std::int32_t>(test.labels.data() + i, k)};
      const auto logits =
          forward(*eval_, blob(b.x.data(), {static_cast<std::int64_t>(k), shape_.channels, shape_.height, shape_.width}));
      const auto y = labels(b);
      r.loss_sum += torch::nn::functional::cross_entropy(
                        logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                        .item<double>();
      r.correct += static_cast<std::size_t>(logits.argmax(1).eq(y).sum().item<std::int64_t>());
      r.count += k;
    }
    return r;
  }

  // The preset split at its children (heterograd/torch/chain.hpp), with the same input
  // standardisation, and the workers' LibTorch threads per module.
  hg::algorithms::decoupled::any_chain module_chain(const chain_request& r) override {
    lt::chain_options o;
    o.split = r.split;
    o.modules = r.modules;
    o.head_channels.assign(r.head_hidden.begin(), r.head_hidden.end());
    o.label_smoothing = smoothing_;
    o.input = {shape_.channels, shape_.height, shape_.width};
    o.threads = threads_;
    o.prepare = [mean = mean_, inv = inv_std_](const torch::Tensor& x) { return standardise(x, mean, inv); };
    try {
      torch::NoGradGuard no_grad;
      return lt::sequential_chain(make_sequential(), std::move(o));
    } catch (const std::invalid_argument& x) {
      // "sequential_chain: <field>: <why>" -> the method's key (the model's for the input).
      const std::string what = what_of(x), pre = "sequential_chain: ";
      const std::size_t colon = what.rfind(pre, 0) == 0 ? what.find(": ", pre.size()) : std::string::npos;
      std::string field = colon == std::string::npos ? "" : what.substr(pre.size(), colon - pre.size());
      const std::string why = field.empty() ? what : what.substr(colon + 2);
      if (field == "input") throw config_error("model.input", why);
      if (field == "head_channels") field = "head_hidden";
      throw config_error(r.key + (field.empty() ? ".algorithm" : "." + field), why);
    }
  }

 private:
  torch::nn::Sequential make_sequential() const {
    return preset_ == torch_preset::resnet8 ? lt::resnet8(shape_) : lt::lenet5(shape_);
  }
  std::shared_ptr<torch::nn::Module> make() const { return make_sequential().ptr(); }
  // Per channel, by the training set's statistics (prepare(); none before it).
  static torch::Tensor standardise(const torch::Tensor& x, const torch::Tensor& mean, const torch::Tensor& inv_std) {
    return mean.defined() ? (x - mean) * inv_std : x;
  }
  torch::Tensor forward(lt::flat_module& m, const torch::Tensor& x) const {
    return sequential(m).forward(standardise(x, mean_, inv_std_));
  }
  static torch::Tensor labels(const hg::nn::batch<float>& b) {
    return torch::from_blob(const_cast<std::int32_t*>(b.y.data()), {static_cast<std::int64_t>(b.size())}, torch::kInt)
        .to(torch::kLong);
  }

  lt::image_shape shape_;
  torch_preset preset_;
  double smoothing_;
  int threads_;
  module_slots<std::function<std::shared_ptr<torch::nn::Module>()>> workers_;
  std::unique_ptr<lt::flat_module> eval_;
  std::vector<float> eval_grads_;
  std::vector<float> initial_;
  torch::Tensor mean_, inv_std_;  // per channel, from prepare()
  bool has_batch_norm_ = false;
};

// --- text: a byte-level transformer language model ---------------------------------------------

// The corpus: data::list_corpus's files (every .py file under `dir`, sorted, every tenth one
// validation; data/text.hpp states the rule), each side's files concatenated in that order.
struct corpus {
  std::vector<std::uint8_t> train, validation;
  std::size_t files = 0;
  std::filesystem::path dir;
};

std::vector<std::uint8_t> concatenated(const std::vector<std::string>& files) {
  std::size_t n = 0;
  for (const auto& f : files) n += f.size();
  std::vector<std::uint8_t> out;
  out.reserve(n);
  for (const auto& f : files) out.insert(out.end(), f.begin(), f.end());
  return out;
}

const corpus& load_corpus(const std::string& path) {
  static std::mutex m;
  static std::map<std::string, corpus> cache;
  std::lock_guard<std::mutex> lock(m);
  if (auto it = cache.find(path); it != cache.end()) return it->second;
  const std::filesystem::path dir = path.empty() ? heterograd::data::python_stdlib_dir() : std::filesystem::path(path);
  if (dir.empty())
    throw config_error("data.path", "no Python standard library found (/usr/lib/python3.N with os.py; Debian's "
                                    "python3 installs it): name a folder of text files");
  corpus c;
  try {
    const auto listed = heterograd::data::list_corpus(dir);
    auto text = heterograd::data::read_corpus(listed);
    c.train = concatenated(text.train);
    c.validation = concatenated(text.validation);
    c.files = listed.files.size();
  } catch (const heterograd::data::corpus_error& e) {
    throw config_error("data.path", e.what());
  }
  c.dir = dir;
  return cache.emplace(path, std::move(c)).first->second;
}

class text_problem final : public problem {
 public:
  text_problem(const experiment& e, const json& c, std::uint64_t seed)
      : corpus_(load_corpus(c["data"]["path"].get<std::string>())),
        context_(static_cast<std::int64_t>(e.model.context)),
        shape_{.context = context_,
               .layers = static_cast<std::int64_t>(e.model.layers),
               .width = static_cast<std::int64_t>(e.model.width),
               .heads = static_cast<std::int64_t>(e.model.heads),
               .hidden = 4 * static_cast<std::int64_t>(e.model.width)},
        threads_(threads_per_worker(e)),
        workers_([this] { return lt::byte_transformer(shape_).ptr(); }, e.workers.count) {
    const std::size_t L = static_cast<std::size_t>(context_);
    const auto windows = [L](std::size_t bytes) { return bytes > L ? (bytes - 1) / L : 0; };
    train_windows_ = windows(corpus_.train.size());
    test_windows_ = windows(corpus_.validation.size());
    const std::size_t ntr = c["data"]["train_samples"].get<std::size_t>();
    const std::size_t nte = c["data"]["test_samples"].get<std::size_t>();
    if (ntr) train_windows_ = std::min(train_windows_, ntr);
    if (nte) test_windows_ = std::min(test_windows_, nte);
    if (train_windows_ == 0 || test_windows_ == 0)
      throw config_error("data.path", "expected a corpus with at least one training and one validation sequence of " +
                                          std::to_string(L + 1) + " bytes (model.context + 1) in \"" +
                                          corpus_.dir.string() + "\" (" + std::to_string(corpus_.files) + " .py files)");
    const std::size_t n = e.workers.count;
    if (n > train_windows_)
      throw config_error("workers.count", "expected at most " + std::to_string(train_windows_) +
                                              " workers (one training sequence each), got " + std::to_string(n));
    streams_ = sample_streams(hg::data::partition_iid(train_windows_, n, seed), seed, train_windows_);
    scratch_.resize(n);
    process_threads(e, threads_);
    threads_here(threads_);
    torch::manual_seed(seed);
    eval_ = std::make_unique<lt::flat_module>(lt::byte_transformer(shape_).ptr());
    initial_.assign(eval_->params().begin(), eval_->params().end());
    unigram_ = unigram_bits();
  }
  std::size_t dim() const override { return initial_.size(); }
  std::vector<float> initial() const override { return initial_; }
  std::vector<std::string> metrics() const override { return {"loss", "bits_per_byte"}; }
  std::vector<double> evaluate(std::span<const float> x) override {
    threads_here(threads_);
    bind_read_only(*eval_, x, eval_grads_);
    torch::NoGradGuard no_grad;
    eval_->module().eval();
    double sum = 0;
    std::vector<std::int64_t> ids, next;
    for (std::size_t i = 0; i < test_windows_; i += 64) {
      const std::size_t k = std::min<std::size_t>(64, test_windows_ - i);
      std::vector<std::size_t> idx(k);
      for (std::size_t j = 0; j < k; ++j) idx[j] = i + j;
      gather(corpus_.validation, idx, ids, next);
      sum += loss_of(*eval_, ids, next, k, torch::kSum).item<double>();
    }
    const double loss = sum / static_cast<double>(test_windows_ * static_cast<std::size_t>(context_));
    return {loss, loss / std::log(2.0)};
  }
  double gradient(std::size_t w, std::size_t b, std::span<const float> x, std::span<float> g) override {
    threads_here(threads_);
    auto& s = scratch_.at(w);
    streams_.draw(w, b, s.idx);
    std::atomic_ref<std::uint64_t>(samples).fetch_add(b, std::memory_order_relaxed);
    gather(corpus_.train, s.idx, s.ids, s.next);
    lt::flat_module& m = workers_.at(w);
    m.rebind(hg::span<float>(const_cast<float*>(x.data()), x.size()), hg::span<float>(g.data(), g.size()));
    m.zero_grad();
    m.module().train();
    const auto loss = loss_of(m, s.ids, s.next, b, torch::kMean);
    loss.backward();
    return loss.item<double>();
  }
  std::size_t train_size() const override { return train_windows_; }
  void seek(std::size_t w, std::uint64_t, std::uint64_t drawn) override { streams_.seek(w, drawn); }
  void serialize(heterograd::archive_writer& a) override {
    a(samples);
    streams_.save(a);
  }
  void serialize(heterograd::archive_reader& a) override {
    a(samples);
    streams_.load(a);
  }
  json facts() const override {
    return {{"corpus", corpus_.dir.string()},
            {"files", corpus_.files},
            {"train_bytes", corpus_.train.size()},
            {"validation_bytes", corpus_.validation.size()},
            {"train_sequences", train_windows_},
            {"validation_sequences", test_windows_},
            {"unigram_bits_per_byte", unigram_}};
  }

 private:
  struct scratch {
    std::vector<std::size_t> idx;
    std::vector<std::int64_t> ids, next;
  };
  // Sequences idx of `text`: bytes [kL, kL + L) as input, [kL + 1, kL + L] as targets.
  void gather(const std::vector<std::uint8_t>& text, const std::vector<std::size_t>& idx, std::vector<std::int64_t>& ids,
              std::vector<std::int64_t>& next) const {
    const std::size_t L = static_cast<std::size_t>(context_);
    ids.resize(idx.size() * L);
    next.resize(idx.size() * L);
    for (std::size_t j = 0; j < idx.size(); ++j) {
      const std::uint8_t* p = text.data() + idx[j] * L;
      for (std::size_t t = 0; t < L; ++t) {
        ids[j * L + t] = p[t];
        next[j * L + t] = p[t + 1];
      }
    }
  }
  torch::Tensor loss_of(lt::flat_module& m, std::vector<std::int64_t>& ids, std::vector<std::int64_t>& next,
                        std::size_t k, torch::nn::functional::CrossEntropyFuncOptions::reduction_t r) const {
    const auto n = static_cast<std::int64_t>(k);
    const auto x = torch::from_blob(ids.data(), {n, context_}, torch::kLong);
    const auto y = torch::from_blob(next.data(), {n * context_}, torch::kLong);
    const auto logits = sequential(m).forward(x);
    return torch::nn::functional::cross_entropy(logits.view({n * context_, shape_.vocabulary}), y,
                                                torch::nn::functional::CrossEntropyFuncOptions().reduction(r));
  }
  // The validation targets' cross-entropy under the training bytes' frequencies (add-one
  // smoothed), in bits: what a model that ignores context can reach.
  double unigram_bits() const {
    std::vector<double> count(256, 1.0);
    double total = 256;
    const std::size_t L = static_cast<std::size_t>(context_);
    for (std::size_t i = 0; i < train_windows_ * L; ++i) {
      count[corpus_.train[i + 1]] += 1;
      total += 1;
    }
    double bits = 0;
    for (std::size_t i = 0; i < test_windows_ * L; ++i) bits -= std::log2(count[corpus_.validation[i + 1]] / total);
    return bits / static_cast<double>(test_windows_ * L);
  }

  const corpus& corpus_;
  std::int64_t context_;
  lt::transformer_shape shape_;
  int threads_;
  module_slots<std::function<std::shared_ptr<torch::nn::Module>()>> workers_;
  std::size_t train_windows_ = 0, test_windows_ = 0;
  sample_streams streams_;
  std::vector<scratch> scratch_;
  std::unique_ptr<lt::flat_module> eval_;
  std::vector<float> eval_grads_, initial_;
  double unigram_ = 0;
};

}  // namespace

}  // namespace hgrun

// The plugin's entry points (torch_plugin.cpp finds them with dlsym).
extern "C" hgrun::classifier* hgrun_torch_classifier(const hgrun::experiment& e, const hgrun::json&,
                                                      std::uint64_t seed) {
  return new hgrun::torch_classifier(e, seed);
}

extern "C" hgrun::problem* hgrun_torch_text_problem(const hgrun::experiment& e, const hgrun::json& c,
                                                     std::uint64_t seed) {
  return new hgrun::text_problem(e, c, seed);
}
