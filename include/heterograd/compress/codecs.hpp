#pragma once
// The codecs (see compress/codec.hpp for the interface). Each header comment gives the
// reconstruction and its error bound, which tests/sparse/compress_test.cpp checks.
//
//   fp16_codec, bf16_codec  round to nearest even (kernels/cast.hpp): |d - x| <= 2^-11 |x|
//                           (fp16 normal range; 2^-25 absolute below it), 2^-8 |x| (bf16).
//                           2 bytes an element (PyTorch's fp16/bf16_compress_hook).
//   top_k_codec             keeps the k = ceil(ratio n) largest |x_i| (ties: lower index);
//                           ||x - d||^2 <= (1 - k/n) ||x||^2. 8 bytes per kept element. O(n)
//                           selection (nth_element) under a total order: deterministic.
//   random_k_codec          keeps k indices drawn from (seed, round), the same on every rank,
//                           so the k values allreduce in compressed form (Stich, Cordonnier,
//                           Jaggi, "Sparsified SGD with memory", NeurIPS 2018). Unscaled:
//                           d_i in {x_i, 0}. 4 bytes per kept element.
//   sign_codec              1 bit per element and one float scale s: d = s sign(x), sign(0) =
//                           +1. Scale rms = ||x||_2 / sqrt(n) as in 1-bit Adam (Tang et al.,
//                           ICML 2021; DeepSpeed's compressed allreduce), or l1 = ||x||_1 / n
//                           (EF-signSGD, Karimireddy et al., ICML 2019), which minimises
//                           ||x - s sign x||: ||x - d||^2 = ||x||^2 - 2 s ||x||_1 + n s^2.
//   powersgd_codec          rank-r approximation of x viewed as a rows x cols matrix M by one
//                           step of subspace iteration with a warm-started Q (Vogels, Karimireddy,
//                           Jaggi, NeurIPS 2019): P = M Q, P <- orthonormalise(P), Q = M^T P,
//                           d = P Q^T (the projection of M on span P: ||x - d|| <= ||x||, exact
//                           when rank M <= r). Sends (rows + cols) r floats, allreduced.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <thrust/system/cpp/execution_policy.h>

#include "heterograd/comm/request.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/compress/codec.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/cast.hpp"
#include "heterograd/kernels/gemm.hpp"
#include "heterograd/kernels/select.hpp"

namespace heterograd::compress {

namespace detail {
inline void check_message(std::size_t got, std::size_t want, const char* name) {
  require_same_size(name, got, "message_words(n)", want);
}
/// Stateless codecs' state.
struct no_state {
  friend bool operator==(const no_state&, const no_state&) = default;
};
}  // namespace detail

// --- 16-bit casts -----------------------------------------------------------------------------

/// fp16 or bf16 rounding (RNE), two elements per word. Half = kernels::fp16 or kernels::bf16.
template <class Half>
struct half_codec {
  static_assert(std::is_same_v<Half, kernels::fp16> || std::is_same_v<Half, kernels::bf16>);
  using state = detail::no_state;
  static constexpr exchange_kind kind = exchange_kind::gather;

  std::string_view name() const { return std::is_same_v<Half, kernels::fp16> ? "fp16" : "bf16"; }
  state init(std::size_t) const { return {}; }
  std::size_t message_words(std::size_t n) const { return (n + 1) / 2; }
  wire_plan plan(std::size_t n) const {
    return {{{collective::allgather, 4.0 * static_cast<double>(message_words(n))}}};
  }
  /// Reads 4 bytes and writes 2 per element.
  void encode(span<const float> x, state&, span<std::uint32_t> msg) const {
    detail::check_message(msg.size(), message_words(x.size()), "half_codec.encode.msg");
    const std::size_t n = x.size();
    for (std::size_t w = 0; w < msg.size(); ++w) {
      const std::uint32_t lo = round(x[2 * w]).bits;
      const std::uint32_t hi = 2 * w + 1 < n ? round(x[2 * w + 1]).bits : 0u;
      msg[w] = lo | (hi << 16);
    }
  }
  void decode(span<const std::uint32_t> msg, const state&, span<float> out) const {
    detail::check_message(msg.size(), message_words(out.size()), "half_codec.decode.msg");
    for (std::size_t i = 0; i < out.size(); ++i) {
      const auto bits = static_cast<std::uint16_t>(msg[i / 2] >> (16 * (i % 2)));
      out[i] = kernels::to_float(Half{bits});
    }
  }
  friend bool operator==(const half_codec&, const half_codec&) = default;

 private:
  static Half round(float v) {
    if constexpr (std::is_same_v<Half, kernels::fp16>)
      return kernels::to_fp16(v);
    else
      return kernels::to_bf16(v);
  }
};
using fp16_codec = half_codec<kernels::fp16>;
using bf16_codec = half_codec<kernels::bf16>;

// --- top-k -----------------------------------------------------------------------------------

struct top_k_codec {
  using state = detail::no_state;
  static constexpr exchange_kind kind = exchange_kind::gather;
  double ratio = 0.01;  ///< fraction of elements kept, in (0, 1]

  explicit top_k_codec(double r = 0.01) : ratio(r) {
    require(ratio > 0.0 && ratio <= 1.0, "top_k_codec.ratio", ratio, "must be in (0, 1]");
  }
  std::string_view name() const { return "top_k"; }
  std::size_t k(std::size_t n) const {
    if (n == 0) return 0;
    const auto v = static_cast<std::size_t>(std::ceil(ratio * static_cast<double>(n) - 1e-9));
    return std::clamp<std::size_t>(v, 1, n);
  }
  state init(std::size_t) const { return {}; }
  /// k indices, then k values.
  std::size_t message_words(std::size_t n) const { return 2 * k(n); }
  wire_plan plan(std::size_t n) const {
    return {{{collective::allgather, 4.0 * static_cast<double>(message_words(n))}}};
  }
  /// Reads x twice (magnitudes, then the kept values); selection O(n log k).
  void encode(span<const float> x, state&, span<std::uint32_t> msg) const {
    const std::size_t n = x.size(), kk = k(n);
    detail::check_message(msg.size(), message_words(n), "top_k_codec.encode.msg");
    require(n <= 0xffffffffu, "top_k_codec.n", n, "must fit 32-bit indices");
    // The k best by (|x| descending, index ascending; NaN last): a total order, so the set is
    // unique and selection (O(n) nth_element) gives the same one on every run.
    std::vector<std::uint32_t> idx(n);
    for (std::size_t i = 0; i < n; ++i) idx[i] = static_cast<std::uint32_t>(i);
    const auto better = [&](std::uint32_t a, std::uint32_t b) {
      return kernels::ranks_before(std::fabs(x[a]), a, std::fabs(x[b]), b);
    };
    if (kk < n) std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(kk), idx.end(), better);
    idx.resize(kk);
    std::sort(idx.begin(), idx.end());
    for (std::size_t j = 0; j < kk; ++j) {
      msg[j] = idx[j];
      msg[kk + j] = std::bit_cast<std::uint32_t>(x[idx[j]]);
    }
  }
  void decode(span<const std::uint32_t> msg, const state&, span<float> out) const {
    const std::size_t kk = k(out.size());
    detail::check_message(msg.size(), message_words(out.size()), "top_k_codec.decode.msg");
    std::fill(out.begin(), out.end(), 0.0f);
    for (std::size_t j = 0; j < kk; ++j) {
      require(msg[j] < out.size(), "top_k_codec.decode.index", msg[j], "must be < n");
      out[msg[j]] = std::bit_cast<float>(msg[kk + j]);
    }
  }
  friend bool operator==(const top_k_codec&, const top_k_codec&) = default;
};

// --- random-k ---------------------------------------------------------------------------------

struct random_k_codec {
  struct state {
    std::uint64_t round = 0;  ///< the next round's index set is drawn from (seed, round)
    friend bool operator==(const state&, const state&) = default;
  };
  static constexpr exchange_kind kind = exchange_kind::custom;
  double ratio = 0.01;
  std::uint64_t seed = 0;  ///< must be the same on every rank

  explicit random_k_codec(double r = 0.01, std::uint64_t s = 0) : ratio(r), seed(s) {
    require(ratio > 0.0 && ratio <= 1.0, "random_k_codec.ratio", ratio, "must be in (0, 1]");
  }
  std::string_view name() const { return "random_k"; }
  std::size_t k(std::size_t n) const { return top_k_codec(ratio).k(n); }
  state init(std::size_t) const { return {}; }
  /// The k values only: the indices follow from (seed, round).
  std::size_t message_words(std::size_t n) const { return k(n); }
  wire_plan plan(std::size_t n) const {
    return {{{collective::allreduce, 4.0 * static_cast<double>(message_words(n))}}};
  }
  /// k distinct indices of [0, n), ascending (Floyd's sampling on a counter RNG).
  std::vector<std::size_t> indices(std::size_t n, std::uint64_t round) const {
    const std::size_t kk = k(n);
    const counter_rng rng(seed, round);
    std::vector<std::size_t> picked;
    picked.reserve(kk);
    std::vector<bool> taken(n, false);
    for (std::size_t j = n - kk; j < n; ++j) {
      const auto t = static_cast<std::size_t>(rng.below(j, j + 1));
      const std::size_t v = taken[t] ? j : t;
      taken[v] = true;
      picked.push_back(v);
    }
    std::sort(picked.begin(), picked.end());
    return picked;
  }
  void encode(span<const float> x, state& s, span<std::uint32_t> msg) const {
    detail::check_message(msg.size(), message_words(x.size()), "random_k_codec.encode.msg");
    const auto idx = indices(x.size(), s.round);
    for (std::size_t j = 0; j < idx.size(); ++j) msg[j] = std::bit_cast<std::uint32_t>(x[idx[j]]);
    ++s.round;
  }
  /// Decodes a message of round state.round - 1 (the one the last encode wrote).
  void decode(span<const std::uint32_t> msg, const state& s, span<float> out) const {
    detail::check_message(msg.size(), message_words(out.size()), "random_k_codec.decode.msg");
    require(s.round > 0, "random_k_codec.decode.state.round", s.round, "must follow an encode");
    const auto idx = indices(out.size(), s.round - 1);
    std::fill(out.begin(), out.end(), 0.0f);
    for (std::size_t j = 0; j < idx.size(); ++j) out[idx[j]] = std::bit_cast<float>(msg[j]);
  }
  /// Every rank keeps the same k indices, so the values add in compressed form: one
  /// allreduce of k floats. own = this rank's reconstruction, sum = the sum over ranks.
  template <class Transport>
  void exchange(const Transport& t, state& s, span<const float> p, span<float> own, span<float> sum,
                seconds timeout) const {
    const auto idx = indices(p.size(), s.round);
    ++s.round;
    std::vector<float> vals(idx.size());
    for (std::size_t j = 0; j < idx.size(); ++j) vals[j] = p[idx[j]];
    std::fill(own.begin(), own.end(), 0.0f);
    for (std::size_t j = 0; j < idx.size(); ++j) own[idx[j]] = vals[j];
    t.allreduce(span<float>(vals), comm::allreduce_options{.op = comm::reduce_op::sum, .timeout = timeout})
        .wait();
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (std::size_t j = 0; j < idx.size(); ++j) sum[idx[j]] = vals[j];
  }
  friend bool operator==(const random_k_codec&, const random_k_codec&) = default;
};

// --- 1-bit sign with scale ------------------------------------------------------------------------

enum class sign_scale : std::uint8_t {
  rms,  ///< ||x||_2 / sqrt(n): 1-bit Adam
  l1    ///< ||x||_1 / n: EF-signSGD, the scale that minimises the error
};

struct sign_codec {
  using state = detail::no_state;
  static constexpr exchange_kind kind = exchange_kind::gather;
  sign_scale scale = sign_scale::rms;

  std::string_view name() const { return scale == sign_scale::rms ? "sign_rms" : "sign_l1"; }
  state init(std::size_t) const { return {}; }
  /// The scale, then one bit per element (1: negative).
  std::size_t message_words(std::size_t n) const { return 1 + (n + 31) / 32; }
  wire_plan plan(std::size_t n) const {
    return {{{collective::allgather, 4.0 * static_cast<double>(message_words(n))}}};
  }
  /// The scale of x (norms accumulated in double, in index order).
  float scale_of(span<const float> x) const {
    if (x.empty()) return 0.0f;
    double acc = 0;
    for (float v : x) acc += scale == sign_scale::rms ? static_cast<double>(v) * v : std::fabs(static_cast<double>(v));
    const double n = static_cast<double>(x.size());
    return static_cast<float>(scale == sign_scale::rms ? std::sqrt(acc / n) : acc / n);
  }
  /// Reads x twice (norm, signs); writes n/8 bytes.
  void encode(span<const float> x, state&, span<std::uint32_t> msg) const {
    detail::check_message(msg.size(), message_words(x.size()), "sign_codec.encode.msg");
    msg[0] = std::bit_cast<std::uint32_t>(scale_of(x));
    std::fill(msg.begin() + 1, msg.end(), 0u);
    for (std::size_t i = 0; i < x.size(); ++i)
      if (std::signbit(x[i]) && x[i] != 0.0f) msg[1 + i / 32] |= 1u << (i % 32);
  }
  void decode(span<const std::uint32_t> msg, const state&, span<float> out) const {
    detail::check_message(msg.size(), message_words(out.size()), "sign_codec.decode.msg");
    const float s = std::bit_cast<float>(msg[0]);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = (msg[1 + i / 32] >> (i % 32)) & 1u ? -s : s;
  }
  friend bool operator==(const sign_codec&, const sign_codec&) = default;
};

// --- PowerSGD -------------------------------------------------------------------------------------

struct powersgd_codec {
  struct state {
    std::vector<float> q;  ///< cols x r, row-major: the warm start of the next round
    std::uint64_t round = 0;
    friend bool operator==(const state&, const state&) = default;
  };
  static constexpr exchange_kind kind = exchange_kind::custom;
  std::size_t rank = 1;    ///< r
  std::size_t cols = 0;    ///< matrix width (0: ceil(sqrt(n)), the squarest shape)
  std::uint64_t seed = 0;  ///< the initial Q, the same on every rank
  bool warm_start = true;  ///< reuse last round's Q (else a fresh random Q every round)

  explicit powersgd_codec(std::size_t r = 1, std::size_t c = 0, std::uint64_t s = 0, bool warm = true)
      : rank(r), cols(c), seed(s), warm_start(warm) {
    require_positive("powersgd_codec.rank", rank);
  }
  std::string_view name() const { return "powersgd"; }

  struct shape {
    std::size_t rows, cols, r;
  };
  shape shape_of(std::size_t n) const {
    std::size_t c = cols ? cols : static_cast<std::size_t>(std::ceil(std::sqrt(static_cast<double>(std::max<std::size_t>(n, 1)))));
    c = std::max<std::size_t>(c, 1);
    const std::size_t rows = std::max<std::size_t>((n + c - 1) / c, 1);
    return {rows, c, std::min({rank, rows, c})};
  }
  state init(std::size_t n) const {
    const shape sh = shape_of(n);
    state s;
    s.q.resize(sh.cols * sh.r);
    fresh_q(s.q, 0);
    return s;
  }
  /// P (rows x r), then Q (cols x r).
  std::size_t message_words(std::size_t n) const {
    const shape sh = shape_of(n);
    return (sh.rows + sh.cols) * sh.r;
  }
  wire_plan plan(std::size_t n) const {
    const shape sh = shape_of(n);
    return {{{collective::allreduce, 4.0 * static_cast<double>(sh.rows * sh.r)},
             {collective::allreduce, 4.0 * static_cast<double>(sh.cols * sh.r)}}};
  }

  void encode(span<const float> x, state& s, span<std::uint32_t> msg) const {
    detail::check_message(msg.size(), message_words(x.size()), "powersgd_codec.encode.msg");
    const shape sh = shape_of(x.size());
    check_state(s, sh);
    const auto m = matrix(x, sh);
    std::vector<float> p(sh.rows * sh.r), q(sh.cols * sh.r);
    first_factor(m, s, sh, p);
    orthonormalise(p, sh);
    second_factor(m, p, sh, q);
    for (std::size_t i = 0; i < p.size(); ++i) msg[i] = std::bit_cast<std::uint32_t>(p[i]);
    for (std::size_t i = 0; i < q.size(); ++i) msg[p.size() + i] = std::bit_cast<std::uint32_t>(q[i]);
    advance(s, q, 1.0f);
  }
  void decode(span<const std::uint32_t> msg, const state&, span<float> out) const {
    detail::check_message(msg.size(), message_words(out.size()), "powersgd_codec.decode.msg");
    const shape sh = shape_of(out.size());
    std::vector<float> p(sh.rows * sh.r), q(sh.cols * sh.r);
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = std::bit_cast<float>(msg[i]);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = std::bit_cast<float>(msg[p.size() + i]);
    product(p, q, sh, out);
  }

  /// Vogels et al., Algorithm 1: P = M Q, allreduce P, orthonormalise, Q = M^T P, allreduce
  /// Q. own = P Q_mine^T, sum = P (sum of Q)^T; the averaged Q is the next warm start.
  template <class Transport>
  void exchange(const Transport& t, state& s, span<const float> x, span<float> own, span<float> sum,
                seconds timeout) const {
    const shape sh = shape_of(x.size());
    check_state(s, sh);
    const auto m = matrix(x, sh);
    std::vector<float> p(sh.rows * sh.r), q(sh.cols * sh.r);
    first_factor(m, s, sh, p);
    const comm::allreduce_options o{.op = comm::reduce_op::sum, .timeout = timeout};
    t.allreduce(span<float>(p), o).wait();
    orthonormalise(p, sh);
    second_factor(m, p, sh, q);
    product(p, q, sh, own);
    t.allreduce(span<float>(q), o).wait();
    product(p, q, sh, sum);
    advance(s, q, static_cast<float>(t.size()));
  }
  friend bool operator==(const powersgd_codec&, const powersgd_codec&) = default;

 private:
  void check_state(const state& s, const shape& sh) const {
    require_same_size("powersgd_codec.state.q", s.q.size(), "cols * rank", sh.cols * sh.r);
  }
  void fresh_q(std::vector<float>& q, std::uint64_t round) const {
    const counter_rng rng(seed, 0x9057 + round);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(rng.normal(i));
  }
  void advance(state& s, const std::vector<float>& q, float divisor) const {
    ++s.round;
    if (warm_start) {
      for (std::size_t i = 0; i < q.size(); ++i) s.q[i] = q[i] / divisor;
    } else {
      fresh_q(s.q, s.round);
    }
  }
  static std::vector<float> matrix(span<const float> x, const shape& sh) {
    std::vector<float> m(sh.rows * sh.cols, 0.0f);  // zero padding past n
    std::copy(x.begin(), x.end(), m.begin());
    return m;
  }
  // P = M Q: (rows x cols)(cols x r).
  static void first_factor(const std::vector<float>& m, const state& s, const shape& sh, std::vector<float>& p) {
    kernels::gemm(kernels::transpose::no, kernels::transpose::no, sh.rows, sh.r, sh.cols, 1.0f,
                  m.data(), sh.cols, s.q.data(), sh.r, 0.0f, p.data(), sh.r);
  }
  // Q = M^T P: (cols x rows)(rows x r).
  static void second_factor(const std::vector<float>& m, const std::vector<float>& p, const shape& sh,
                            std::vector<float>& q) {
    kernels::gemm(kernels::transpose::yes, kernels::transpose::no, sh.cols, sh.r, sh.rows, 1.0f,
                  m.data(), sh.cols, p.data(), sh.r, 0.0f, q.data(), sh.r);
  }
  // out = (P Q^T) flattened, first n elements.
  static void product(const std::vector<float>& p, const std::vector<float>& q, const shape& sh, span<float> out) {
    std::vector<float> d(sh.rows * sh.cols);
    kernels::gemm(kernels::transpose::no, kernels::transpose::yes, sh.rows, sh.cols, sh.r, 1.0f,
                  p.data(), sh.r, q.data(), sh.r, 0.0f, d.data(), sh.cols);
    std::copy_n(d.begin(), out.size(), out.begin());
  }
  // Modified Gram-Schmidt on the r columns of P (dots in double, fixed order); a column
  // that vanishes stays zero.
  static void orthonormalise(std::vector<float>& p, const shape& sh) {
    for (std::size_t j = 0; j < sh.r; ++j) {
      for (std::size_t i = 0; i < j; ++i) {
        double dot = 0;
        for (std::size_t k = 0; k < sh.rows; ++k) dot += static_cast<double>(p[k * sh.r + i]) * p[k * sh.r + j];
        for (std::size_t k = 0; k < sh.rows; ++k)
          p[k * sh.r + j] = static_cast<float>(p[k * sh.r + j] - dot * p[k * sh.r + i]);
      }
      double norm = 0;
      for (std::size_t k = 0; k < sh.rows; ++k) norm += static_cast<double>(p[k * sh.r + j]) * p[k * sh.r + j];
      norm = std::sqrt(norm);
      for (std::size_t k = 0; k < sh.rows; ++k)
        p[k * sh.r + j] = norm > 1e-30 ? static_cast<float>(p[k * sh.r + j] / norm) : 0.0f;
    }
  }
};

static_assert(codec<fp16_codec> && codec<bf16_codec> && codec<top_k_codec> && codec<random_k_codec> &&
              codec<sign_codec> && codec<powersgd_codec>);

}  // namespace heterograd::compress
