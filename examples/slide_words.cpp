// E16 (issue 49): SLIDE against the dense CPU baseline on a real extreme-classification task,
// next-word prediction over the Python standard library's identifiers (data/text.hpp's corpus
// and split; nn/word_model.hpp's model). Both train the same model from the same start for
// the same wall budget on the same threads: SLIDE per sample over its LSH active set with
// Hogwild threads, dense by mini-batch GEMMs with that many BLAS threads. Every `chunk`
// samples the clock stops and the accuracy (argmax over the whole vocabulary) is measured on
// a fixed validation subset; the table reports training seconds only.
//
//   hg-slide-words [key=value ...]   keys: dir vocabulary context dim threads seconds chunk
//       eval slide_lr dense_lr batch parts tables rebuild_first rebuild_growth target seed
//       methods (slide,dense) samples (a sample budget instead of the wall budget; 0: none)
//       always_atomic (1: SLIDE's Hogwild step on one thread too, an ablation)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <heterograd/data/text.hpp>
#include <heterograd/kernels/gemm.hpp>
#include <heterograd/nn/word_model.hpp>

namespace hg = heterograd;
namespace hd = heterograd::data;
namespace nn = heterograd::nn;

namespace {
using clock_type = std::chrono::steady_clock;

struct options {
  std::map<std::string, std::string> kv{{"dir", ""},          {"vocabulary", "20000"}, {"context", "4"},
                                        {"dim", "32"},        {"threads", "2"},        {"seconds", "60"},
                                        {"chunk", "50000"},   {"eval", "2000"},        {"slide_lr", "0.05"},
                                        {"dense_lr", "0.5"},  {"batch", "128"},        {"parts", "9"},
                                        {"tables", "10"},     {"target", "0.2"},       {"seed", "1"},
                                        {"rebuild_first", "10000"}, {"rebuild_growth", "1.2"},
                                        {"samples", "0"},     {"methods", "slide,dense"},
                                        {"always_atomic", "0"}};
  double num(const std::string& k) const {
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(kv.at(k), &used);
    } catch (const std::exception&) {
    }
    if (used == 0 || used != kv.at(k).size() || !std::isfinite(v))
      throw std::invalid_argument("argument '" + k + "=" + kv.at(k) + "': expected a finite number");
    return v;
  }
  std::size_t count(const std::string& k) const {
    const std::string& t = kv.at(k);
    if (t.empty() || t.size() > 18 || t.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument("argument '" + k + "=" + t + "': expected a whole number below 10^18");
    return static_cast<std::size_t>(std::stoull(t));
  }
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    if (eq == std::string::npos || !o.kv.count(a.substr(0, eq)))
      throw std::invalid_argument("argument '" + a + "': expected key=value with a key of the list in the file's comment");
    o.kv[a.substr(0, eq)] = a.substr(eq + 1);
  }
  return o;
}

struct point {
  double seconds;
  std::size_t samples;
  double accuracy;
};

// Trains with `step(order chunk)` until the budget; evaluates after each chunk.
template <class Step>
std::vector<point> timed(const options& o, const nn::word_model& m, const hd::word_samples& train,
                         const hd::word_samples& val, Step&& step) {
  std::vector<std::size_t> order(train.size()), eval(std::min(o.count("eval"), val.size()));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  hg::counter_rng(o.count("seed"), 0x5eed).permutation(order.begin(), order.end());
  for (std::size_t i = 0; i < eval.size(); ++i) eval[i] = i * (val.size() / eval.size());
  std::vector<point> curve{{0.0, 0, nn::word_accuracy(m, val, eval)}};
  double spent = 0;
  const std::size_t budget = o.count("samples");  // 0: the wall budget `seconds` instead
  for (std::size_t done = 0; budget ? done < budget : spent < o.num("seconds");) {
    std::size_t n = std::min(o.count("chunk"), order.size() - done % order.size());
    if (budget) n = std::min(n, budget - done);
    const auto t0 = clock_type::now();
    step(hg::span<const std::size_t>(order.data() + done % order.size(), n));
    spent += std::chrono::duration<double>(clock_type::now() - t0).count();
    done += n;
    curve.push_back({spent, done, nn::word_accuracy(m, val, eval)});
    std::fprintf(stderr, "  %.1f s, %zu samples, accuracy %.4f\n", spent, done, curve.back().accuracy);
  }
  return curve;
}

void report(const char* name, const std::vector<point>& c, double target) {
  const auto hit = std::find_if(c.begin(), c.end(), [&](const point& p) { return p.accuracy >= target; });
  const double rate = static_cast<double>(c.back().samples) / c.back().seconds;
  if (hit == c.end())
    std::printf("| %s | %.0f | %zu | %.4f | not reached | not reached |\n", name, rate, c.back().samples,
                c.back().accuracy);
  else
    std::printf("| %s | %.0f | %zu | %.4f | %zu | %.1f s |\n", name, rate, c.back().samples, c.back().accuracy,
                hit->samples, hit->seconds);
}
}  // namespace

int main(int argc, char** argv) try {
  const options o = parse(argc, argv);
  for (const char* k : {"threads", "chunk", "eval"})  // each divides or paces the loop: 0 would hang or divide by 0
    if (o.count(k) == 0) throw std::invalid_argument(std::string("argument '") + k + "=0': must be at least 1");
  const auto dir = o.kv.at("dir").empty() ? hd::python_stdlib_dir() : std::filesystem::path(o.kv.at("dir"));
  const auto listed = hd::list_corpus(dir);
  const auto text = hd::read_corpus(listed);
  const auto vocab = hd::build_vocabulary(text.train, o.count("vocabulary"));
  const auto train = hd::make_word_samples(hd::encode_words(text.train, vocab), vocab, o.count("context"));
  const auto val = hd::make_word_samples(hd::encode_words(text.validation, vocab), vocab, o.count("context"));
  const nn::word_model_shape shape{vocab.size(), o.count("context"), o.count("dim")};
  const int threads = static_cast<int>(o.count("threads"));
  std::printf("corpus %s: %zu training and %zu validation samples, V = %zu, k = %zu, d = %zu, %d threads\n\n",
              dir.c_str(), train.size(), val.size(), shape.vocabulary, shape.context, shape.dim, threads);
  std::size_t top = 0, n_eval = std::min(o.count("eval"), val.size());
  for (std::size_t i = 0; i < n_eval; ++i) top += val.targets[i * (val.size() / n_eval)] == 1;
  std::printf("most frequent word (\"%s\") on the evaluated samples: accuracy %.4f\n\n", vocab.words[1].c_str(),
              static_cast<double>(top) / static_cast<double>(n_eval));
  std::printf("| method | samples/s | samples | accuracy at the end | samples to %.3f | seconds to %.3f |\n"
              "|---|---:|---:|---:|---:|---:|\n",
              o.num("target"), o.num("target"));
  const std::string methods = o.kv.at("methods");
  if (methods.find("slide") != std::string::npos) {
    nn::word_model m(shape, o.count("seed"));
    nn::lsh_softmax_layer layer(shape.input(), shape.vocabulary,
                                {.lsh = {.parts = o.count("parts"), .tables = o.count("tables"), .seed = o.count("seed")},
                                 .rebuild = {.first = o.count("rebuild_first"), .growth = o.num("rebuild_growth")}});
    double active = 0, steps = 0;
    const auto c = timed(o, m, train, val, [&](hg::span<const std::size_t> chunk) {
      const auto r = nn::train_slide_words(layer, m, train, chunk, static_cast<float>(o.num("slide_lr")), threads,
                                           o.count("always_atomic") != 0);
      active += static_cast<double>(r.active_sum), steps += static_cast<double>(r.samples);
    });
    report("SLIDE (LSH, Hogwild)", c, o.num("target"));
    std::printf("|   active fraction | %.4f | | | | |\n", active / (steps * static_cast<double>(shape.vocabulary)));
  }
  if (methods.find("dense") != std::string::npos) {
    nn::word_model m(shape, o.count("seed"));
    hg::kernels::set_blas_threads(threads);
    nn::dense_word_workspace ws;
    const auto c = timed(o, m, train, val, [&](hg::span<const std::size_t> chunk) {
      nn::train_dense_words(m, train, chunk, static_cast<float>(o.num("dense_lr")), o.count("batch"), ws);
    });
    report(hg::kernels::has_blas() ? "dense (BLAS GEMM)" : "dense (portable GEMM)", c, o.num("target"));
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "hg-slide-words: %s\n", e.what());
  return 2;
}
