// Fused update kernels and blends against double-precision host references, typed over the
// backends, float and double, sizes 0, 1, odd and reduction-chunk boundaries.
#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <tuple>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "heterograd/kernels/blend.hpp"
#include "heterograd/kernels/multi_tensor.hpp"
#include "heterograd/kernels/updates.hpp"
#include "kernel_test_util.hpp"

namespace hg = heterograd;
namespace hk = heterograd::kernels;

namespace {

template <class B, class T>
void check_sgd() {
  for (std::size_t n : kt::sizes) {
    auto hp = kt::random_vector<T>(n, 1), hgr = kt::random_vector<T>(n, 2);
    auto p = kt::to_backend<B>(hp);
    auto g = kt::to_backend<B>(hgr);
    const hk::sgd_config<> a{0.1, 0.01};
    hk::sgd(B::policy(), kt::span_of<B>(p), kt::cspan_of<B>(g), a);
    std::vector<double> ref(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double d = double(hgr[i]) + a.weight_decay * double(hp[i]);
      ref[i] = double(hp[i]) - a.lr * d;
    }
    kt::check_close(hg_test::to_host(p), ref, kt::tol<T>(), "sgd");
  }
}

template <class B, class T>
void check_momentum(bool nesterov) {
  for (std::size_t n : kt::sizes) {
    auto hp = kt::random_vector<T>(n, 3), hgr = kt::random_vector<T>(n, 4),
         hv = kt::random_vector<T>(n, 5);
    auto p = kt::to_backend<B>(hp);
    auto g = kt::to_backend<B>(hgr);
    auto v = kt::to_backend<B>(hv);
    const hk::momentum_config<> a{0.05, 0.9, 0.1, 0.01};
    hk::momentum(B::policy(), kt::span_of<B>(p), kt::cspan_of<B>(g), kt::span_of<B>(v), a,
                 {.nesterov = nesterov});
    std::vector<double> rp(n), rv(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double d = double(hgr[i]) + a.weight_decay * double(hp[i]);
      rv[i] = a.momentum * double(hv[i]) + (1 - a.dampening) * d;
      rp[i] = double(hp[i]) - a.lr * (nesterov ? d + a.momentum * rv[i] : rv[i]);
    }
    kt::check_close(hg_test::to_host(v), rv, kt::tol<T>(), "momentum.v");
    kt::check_close(hg_test::to_host(p), rp, kt::tol<T>(), "momentum.p");
  }
}

template <class B, class T>
void check_adam(bool decoupled) {
  for (std::size_t n : kt::sizes) {
    auto hp = kt::random_vector<T>(n, 6), hgr = kt::random_vector<T>(n, 7),
         hm = kt::random_vector<T>(n, 8, -0.1, 0.1), hv = kt::random_vector<T>(n, 9, 0.0, 0.01);
    auto p = kt::to_backend<B>(hp);
    auto g = kt::to_backend<B>(hgr);
    auto m = kt::to_backend<B>(hm);
    auto v = kt::to_backend<B>(hv);
    hk::adam_config<> a;
    a.lr = 1e-2;
    a.weight_decay = 0.05;
    hk::adam(B::policy(), kt::span_of<B>(p), kt::cspan_of<B>(g), kt::span_of<B>(m),
             kt::span_of<B>(v), a, {.step = 7, .decoupled_weight_decay = decoupled});
    const double c1 = 1 - std::pow(a.beta1, 7.0), c2 = 1 - std::pow(a.beta2, 7.0);
    std::vector<double> rp(n), rm(n), rv(n);
    for (std::size_t i = 0; i < n; ++i) {
      double pi = hp[i];
      const double gi = double(hgr[i]) + (decoupled ? 0.0 : a.weight_decay * pi);
      rm[i] = a.beta1 * hm[i] + (1 - a.beta1) * gi;
      rv[i] = a.beta2 * hv[i] + (1 - a.beta2) * gi * gi;
      if (decoupled) pi *= 1 - a.lr * a.weight_decay;
      rp[i] = pi - (a.lr / c1) * rm[i] / (std::sqrt(rv[i]) / std::sqrt(c2) + a.eps);
    }
    kt::check_close(hg_test::to_host(m), rm, kt::tol<T>(), "adam.m");
    kt::check_close(hg_test::to_host(v), rv, kt::tol<T>(), "adam.v");
    kt::check_close(hg_test::to_host(p), rp, kt::tol<T>(), "adam.p");
  }
}

template <class B, class T>
void check_adagrad() {
  for (std::size_t n : kt::sizes) {
    auto hp = kt::random_vector<T>(n, 10), hgr = kt::random_vector<T>(n, 11),
         hs = kt::random_vector<T>(n, 12, 0.0, 1.0);
    auto p = kt::to_backend<B>(hp);
    auto g = kt::to_backend<B>(hgr);
    auto s = kt::to_backend<B>(hs);
    const hk::adagrad_config<> a{0.1, 1e-10, 0.01, 0.5};
    hk::adagrad(B::policy(), kt::span_of<B>(p), kt::cspan_of<B>(g), kt::span_of<B>(s), a,
                {.step = 3});
    const double clr = a.lr / (1 + 2 * a.lr_decay);
    std::vector<double> rp(n), rs(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double gi = double(hgr[i]) + a.weight_decay * double(hp[i]);
      rs[i] = double(hs[i]) + gi * gi;
      rp[i] = double(hp[i]) - clr * gi / (std::sqrt(rs[i]) + a.eps);
    }
    kt::check_close(hg_test::to_host(s), rs, kt::tol<T>(), "adagrad.s");
    kt::check_close(hg_test::to_host(p), rp, kt::tol<T>(), "adagrad.p");
  }
}

template <class B, class T>
void check_lamb() {
  // Three tensors of uneven sizes, one of them all zeros (trust ratio 1).
  for (std::size_t n : kt::sizes) {
    const std::vector<std::size_t> parts = {n / 3, n / 4, n - n / 3 - n / 4};
    auto hp = kt::random_vector<T>(n, 13), hgr = kt::random_vector<T>(n, 14),
         hm = kt::random_vector<T>(n, 15, -0.1, 0.1), hv = kt::random_vector<T>(n, 16, 0.0, 0.01);
    for (std::size_t i = parts[0]; i < parts[0] + parts[1]; ++i) hp[i] = 0;
    auto p = kt::to_backend<B>(hp);
    auto g = kt::to_backend<B>(hgr);
    auto m = kt::to_backend<B>(hm);
    auto v = kt::to_backend<B>(hv);
    hk::lamb_config<> a;
    a.lr = 0.01;
    a.tensor_sizes = parts;
    std::vector<double> ratios(3, -1.0);
    hk::lamb(B::policy(), kt::span_of<B>(p), kt::cspan_of<B>(g), kt::span_of<B>(m),
             kt::span_of<B>(v), a, {.step = 3}, std::span<double>(ratios));
    const double c1 = 1 - std::pow(a.beta1, 3.0), c2 = 1 - std::pow(a.beta2, 3.0);
    std::vector<double> rp(n), rm(n), rv(n), r(n);
    std::size_t off = 0;
    for (std::size_t k = 0; k < 3; ++k) {
      double pn = 0, rn = 0;
      for (std::size_t i = off; i < off + parts[k]; ++i) {
        rm[i] = a.beta1 * hm[i] + (1 - a.beta1) * hgr[i];
        rv[i] = a.beta2 * hv[i] + (1 - a.beta2) * double(hgr[i]) * hgr[i];
        r[i] = (rm[i] / c1) / (std::sqrt(rv[i] / c2) + a.eps) + a.weight_decay * hp[i];
        pn += double(hp[i]) * hp[i];
        rn += r[i] * r[i];
      }
      const double ratio = (pn > 0 && rn > 0) ? std::sqrt(pn) / std::sqrt(rn) : 1.0;
      if (parts[k] > 0) BOOST_TEST(std::abs(ratios[k] - ratio) <= 1e-5 * ratio);
      if (k == 1) BOOST_TEST(ratios[k] == 1.0);
      for (std::size_t i = off; i < off + parts[k]; ++i) rp[i] = hp[i] - a.lr * ratio * r[i];
      off += parts[k];
    }
    kt::check_close(hg_test::to_host(m), rm, kt::tol<T>(), "lamb.m");
    kt::check_close(hg_test::to_host(v), rv, kt::tol<T>(), "lamb.v");
    kt::check_close(hg_test::to_host(p), rp, 10 * kt::tol<T>(), "lamb.p");
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kernels_updates)

BOOST_AUTO_TEST_CASE_TEMPLATE(sgd_with_weight_decay_matches_the_double_reference, B,
                              hg_test::backends) {
  check_sgd<B, float>();
  check_sgd<B, double>();
}

BOOST_AUTO_TEST_CASE_TEMPLATE(heavy_ball_and_nesterov_match_the_double_reference, B,
                              hg_test::backends) {
  for (bool nesterov : {false, true}) {
    check_momentum<B, float>(nesterov);
    check_momentum<B, double>(nesterov);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(adam_and_adamw_match_the_double_reference, B, hg_test::backends) {
  for (bool decoupled : {false, true}) {
    check_adam<B, float>(decoupled);
    check_adam<B, double>(decoupled);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(adagrad_matches_the_double_reference, B, hg_test::backends) {
  check_adagrad<B, float>();
  check_adagrad<B, double>();
}

BOOST_AUTO_TEST_CASE_TEMPLATE(lamb_uses_one_trust_ratio_per_tensor, B, hg_test::backends) {
  check_lamb<B, float>();
  check_lamb<B, double>();
}

BOOST_AUTO_TEST_CASE_TEMPLATE(multi_tensor_adam_equals_one_call_per_tensor_bitwise, B,
                              hg_test::backends) {
  using T = float;
  // Sizes around the GPU's chunk of 256 elements (one block each) and larger.
  const std::vector<std::size_t> sz = {0, 1, 7, 8193, 100, 3, 255, 256, 257, 1024, 20000, 1025};
  std::vector<typename B::template vector<T>> p, g, m, v, p2, m2, v2;
  for (std::size_t k = 0; k < sz.size(); ++k) {
    p.push_back(kt::to_backend<B>(kt::random_vector<T>(sz[k], 100 + k)));
    g.push_back(kt::to_backend<B>(kt::random_vector<T>(sz[k], 200 + k)));
    m.push_back(kt::to_backend<B>(kt::random_vector<T>(sz[k], 300 + k, -0.1, 0.1)));
    v.push_back(kt::to_backend<B>(kt::random_vector<T>(sz[k], 400 + k, 0.0, 0.01)));
  }
  p2 = p;
  m2 = m;
  v2 = v;
  hk::adam_config<> a;
  a.weight_decay = 0.01;
  const hk::adam_options o{.step = 4, .decoupled_weight_decay = true};
  std::vector<hk::adam_tensor<T, typename B::space>> list;
  for (std::size_t k = 0; k < sz.size(); ++k)
    list.push_back(
        {kt::span_of<B>(p[k]), kt::cspan_of<B>(g[k]), kt::span_of<B>(m[k]), kt::span_of<B>(v[k])});
  hk::multi_tensor_adam(B::policy(), std::span<const hk::adam_tensor<T, typename B::space>>(list),
                        a, o);
  for (std::size_t k = 0; k < sz.size(); ++k) {
    hk::adam(B::policy(), kt::span_of<B>(p2[k]), kt::cspan_of<B>(g[k]), kt::span_of<B>(m2[k]),
             kt::span_of<B>(v2[k]), a, o);
    BOOST_TEST(hg_test::to_host(p[k]) == hg_test::to_host(p2[k]));
    BOOST_TEST(hg_test::to_host(m[k]) == hg_test::to_host(m2[k]));
    BOOST_TEST(hg_test::to_host(v[k]) == hg_test::to_host(v2[k]));
  }
  // A size mismatch anywhere in the list throws before any tensor is written.
  auto before = hg_test::to_host(p[0]);
  auto bad = list;
  bad.back().m = bad.back().m.first(1);
  BOOST_CHECK_THROW(
      hk::multi_tensor_adam(B::policy(),
                            std::span<const hk::adam_tensor<T, typename B::space>>(bad), a, o),
      std::invalid_argument);
  BOOST_TEST(hg_test::to_host(p[0]) == before);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(multi_tensor_sgd_and_momentum_equal_one_call_per_tensor, B,
                              hg_test::backends) {
  using T = double;
  const std::vector<std::size_t> sz = {5, 0, 9000, 1};
  for (bool nesterov : {false, true}) {
    std::vector<typename B::template vector<T>> p, g, v;
    for (std::size_t k = 0; k < sz.size(); ++k) {
      p.push_back(kt::to_backend<B>(kt::random_vector<T>(sz[k], 500 + k)));
      g.push_back(kt::to_backend<B>(kt::random_vector<T>(sz[k], 600 + k)));
      v.push_back(kt::to_backend<B>(kt::random_vector<T>(sz[k], 700 + k)));
    }
    auto p2 = p, v2 = v, p3 = p;
    const hk::momentum_config<> a{0.1, 0.9, 0.0, 0.001};
    const hk::momentum_options o{.nesterov = nesterov};
    std::vector<hk::momentum_tensor<T, typename B::space>> list;
    std::vector<hk::sgd_tensor<T, typename B::space>> slist;
    for (std::size_t k = 0; k < sz.size(); ++k) {
      list.push_back({kt::span_of<B>(p[k]), kt::cspan_of<B>(g[k]), kt::span_of<B>(v[k])});
      slist.push_back({kt::span_of<B>(p3[k]), kt::cspan_of<B>(g[k])});
    }
    hk::multi_tensor_momentum(B::policy(),
                              std::span<const hk::momentum_tensor<T, typename B::space>>(list), a, o);
    hk::multi_tensor_sgd(B::policy(), std::span<const hk::sgd_tensor<T, typename B::space>>(slist),
                         hk::sgd_config<>{0.1, 0.001});
    for (std::size_t k = 0; k < sz.size(); ++k) {
      hk::momentum(B::policy(), kt::span_of<B>(p2[k]), kt::cspan_of<B>(g[k]), kt::span_of<B>(v2[k]),
                   a, o);
      BOOST_TEST(hg_test::to_host(p[k]) == hg_test::to_host(p2[k]));
      BOOST_TEST(hg_test::to_host(v[k]) == hg_test::to_host(v2[k]));
      auto p4 = kt::to_backend<B>(kt::random_vector<T>(sz[k], 500 + k));
      hk::sgd(B::policy(), kt::span_of<B>(p4), kt::cspan_of<B>(g[k]), hk::sgd_config<>{0.1, 0.001});
      BOOST_TEST(hg_test::to_host(p3[k]) == hg_test::to_host(p4));
    }
  }
}

// More tensors than one GPU launch carries in its parameters (a few hundred), packed into one
// buffer at every offset modulo a cache line: the list is split into several launches, each
// tensor's chunks start on the line before it, and every element is updated exactly once.
BOOST_AUTO_TEST_CASE_TEMPLATE(multi_tensor_lists_longer_than_one_launch_equal_one_call_per_tensor,
                              B, hg_test::backends) {
  using T = float;
  const std::size_t pattern[] = {0, 1, 127, 128, 129, 255, 3, 40};
  std::vector<std::size_t> offset, size;
  std::size_t total = 0;
  for (std::size_t k = 0; k < 1000; ++k) {
    offset.push_back(total);
    size.push_back(pattern[k % std::size(pattern)]);
    total += size.back() + k % 5;  // gaps of 0-4 elements shift the line offsets
  }
  auto p = kt::to_backend<B>(kt::random_vector<T>(total, 900));
  const auto g = kt::to_backend<B>(kt::random_vector<T>(total, 901));
  auto q = p;
  std::vector<hk::sgd_tensor<T, typename B::space>> list;
  for (std::size_t k = 0; k < size.size(); ++k)
    list.push_back({kt::span_of<B>(p).subspan(offset[k], size[k]),
                    kt::cspan_of<B>(g).subspan(offset[k], size[k])});
  const hk::sgd_config<> a{0.05, 0.01};
  hk::multi_tensor_sgd(B::policy(), std::span<const hk::sgd_tensor<T, typename B::space>>(list), a);
  for (std::size_t k = 0; k < size.size(); ++k)
    hk::sgd(B::policy(), kt::span_of<B>(q).subspan(offset[k], size[k]),
            kt::cspan_of<B>(g).subspan(offset[k], size[k]), a);
  // The gaps stay untouched in both.
  BOOST_TEST(hg_test::to_host(p) == hg_test::to_host(q));
  BOOST_TEST(hg_test::to_host(p) != kt::random_vector<T>(total, 900));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(mismatched_sizes_throw_before_anything_is_written, B,
                              hg_test::backends) {
  auto p = kt::to_backend<B>(kt::random_vector<float>(10, 1));
  auto g = kt::to_backend<B>(kt::random_vector<float>(9, 2));
  auto m = kt::to_backend<B>(kt::random_vector<float>(10, 3));
  auto v = kt::to_backend<B>(kt::random_vector<float>(10, 4));
  const auto before = hg_test::to_host(p);
  BOOST_CHECK_THROW(hk::sgd(B::policy(), kt::span_of<B>(p), kt::cspan_of<B>(g), {}),
                    std::invalid_argument);
  BOOST_CHECK_THROW(hk::adam(B::policy(), kt::span_of<B>(p), kt::cspan_of<B>(g), kt::span_of<B>(m),
                             kt::span_of<B>(v), {}),
                    std::invalid_argument);
  BOOST_TEST(hg_test::to_host(p) == before);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(every_element_is_written_whatever_the_alignment, B,
                              hg_test::backends) {
  // The CPU paths peel elements up to a 64-byte boundary and split the rest among threads in
  // whole 64-byte blocks: start the buffers at every offset of a 64-byte line.
  for (std::size_t off = 0; off < 17; ++off) {
    for (std::size_t n : {std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{33},
                          std::size_t{1000}, std::size_t{8193}}) {
      auto hw = kt::random_vector<float>(n + off, 120), hv = kt::random_vector<float>(n + off, 121);
      auto w = kt::to_backend<B>(hw);
      auto v = kt::to_backend<B>(hv);
      typename B::template vector<float> out(n + off, hg_test::poison<float>());
      const auto so = kt::span_of<B>(out).subspan(off, n);
      hk::linear_prediction(B::policy(), so, kt::cspan_of<B>(w).subspan(off, n),
                            kt::cspan_of<B>(v).subspan(off, n), 2.0, 0.5);
      const auto h = hg_test::to_host(out);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i) bad += !(h[off + i] == hw[off + i] - 1.0f * hv[off + i]);
      for (std::size_t i = 0; i < off; ++i) bad += !std::isnan(h[i]);  // untouched
      BOOST_TEST(bad == 0u, "offset " << off << ", n " << n);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(kernels_blend)

BOOST_AUTO_TEST_CASE_TEMPLATE(axpby_and_scale_match_the_double_reference, B, hg_test::backends) {
  for (std::size_t n : kt::sizes) {
    auto hx = kt::random_vector<float>(n, 20), hy = kt::random_vector<float>(n, 21);
    auto x = kt::to_backend<B>(hx);
    auto y = kt::to_backend<B>(hy);
    hk::axpby(B::policy(), 0.3f, kt::cspan_of<B>(x), -1.5f, kt::span_of<B>(y));
    std::vector<double> ref(n);
    for (std::size_t i = 0; i < n; ++i) ref[i] = double(0.3f) * hx[i] + double(-1.5f) * hy[i];
    kt::check_close(hg_test::to_host(y), ref, kt::tol<float>(), "axpby");
    hk::scale(B::policy(), 2.0f, kt::span_of<B>(x));
    for (std::size_t i = 0; i < n; ++i) ref[i] = 2.0 * hx[i];
    kt::check_close(hg_test::to_host(x), ref, 0.0, "scale (exact)");
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(weighted_sum_of_k_buffers_writes_every_element, B,
                              hg_test::backends) {
  for (std::size_t k : {1u, 3u, 8u, 11u, 17u}) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{8193}}) {
      std::vector<std::vector<double>> hx;
      std::vector<typename B::template vector<double>> x;
      std::vector<double> w = kt::random_vector<double>(k, 30 + k);
      for (std::size_t j = 0; j < k; ++j) {
        hx.push_back(kt::random_vector<double>(n, 40 + j));
        x.push_back(kt::to_backend<B>(hx.back()));
      }
      std::vector<hg::span<const double, typename B::space>> in;
      for (auto& b : x) in.push_back(kt::cspan_of<B>(b));
      typename B::template vector<double> out(n, hg_test::poison<double>());
      hk::weighted_sum(B::policy(), kt::span_of<B>(out), in, std::span<const double>(w));
      std::vector<double> ref(n, 0.0);
      for (std::size_t j = 0; j < k; ++j)
        for (std::size_t i = 0; i < n; ++i) ref[i] += w[j] * hx[j][i];
      kt::check_close(hg_test::to_host(out), ref, 1e-13, "weighted_sum");
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(running_mean_update_replaces_one_entry_of_the_mean, B,
                              hg_test::backends) {
  // A table of 5 entries; the mean after replacing entry 2 equals the mean of the new table.
  const std::size_t n = 8193, entries = 5;
  std::vector<std::vector<double>> table;
  for (std::size_t j = 0; j < entries; ++j) table.push_back(kt::random_vector<double>(n, 50 + j));
  std::vector<double> mean(n, 0.0);
  for (auto& e : table)
    for (std::size_t i = 0; i < n; ++i) mean[i] += e[i] / entries;
  auto fresh = kt::random_vector<double>(n, 60);
  auto m = kt::to_backend<B>(mean);
  auto f = kt::to_backend<B>(fresh);
  auto o = kt::to_backend<B>(table[2]);
  hk::running_mean_update(B::policy(), kt::span_of<B>(m), kt::cspan_of<B>(f), kt::cspan_of<B>(o),
                          entries);
  table[2] = fresh;
  std::vector<double> ref(n, 0.0);
  for (auto& e : table)
    for (std::size_t i = 0; i < n; ++i) ref[i] += e[i] / entries;
  kt::check_close(hg_test::to_host(m), ref, 1e-13, "running_mean_update");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(linear_prediction_writes_w_minus_s_lr_v, B, hg_test::backends) {
  for (std::size_t n : kt::sizes) {
    auto hw = kt::random_vector<float>(n, 70), hv = kt::random_vector<float>(n, 71);
    auto w = kt::to_backend<B>(hw);
    auto v = kt::to_backend<B>(hv);
    typename B::template vector<float> out(n, hg_test::poison<float>());
    hk::linear_prediction(B::policy(), kt::span_of<B>(out), kt::cspan_of<B>(w), kt::cspan_of<B>(v),
                          3.0, 0.01);
    std::vector<double> ref(n);
    for (std::size_t i = 0; i < n; ++i) ref[i] = double(hw[i]) - double(float(0.03)) * hv[i];
    kt::check_close(hg_test::to_host(out), ref, kt::tol<float>(), "linear_prediction");
  }
}

BOOST_AUTO_TEST_SUITE_END()
