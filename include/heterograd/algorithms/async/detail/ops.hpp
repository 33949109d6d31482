#pragma once
// The vector operations of the asynchronous servers, in one place, each run through the
// server's memory (kernels/memory.hpp: the host by default, or device buffers with the
// caller's policy): the element-wise blends come from heterograd/kernels; the two table
// updates that also maintain the table's sum are fused here, because composing them from the
// public kernels would take three passes instead of one. On the host every operation is
// bitwise the same for any number of threads (element-wise).

#include <array>
#include <cstddef>
#include <span>

#include "heterograd/core/config.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/blend.hpp"
#include "heterograd/kernels/launch.hpp"
#include "heterograd/kernels/memory.hpp"

namespace heterograd::algorithms::async::detail::ops {

/// y <- y + a x.  3 sizeof(T) per element (kernels::axpby with b = 1: a x + 1 y is y + a x).
template <class M, class T, class S>
void axpy(const M& m, T a, span<const T, S> x, span<T, S> y) {
  m.run(y.size(), [&](const auto& p) { kernels::axpby(p, a, x, T(1), y); });
}

/// out <- a x.  2 sizeof(T) per element (kernels::weighted_sum of one input).
template <class M, class T, class S>
void scale_into(const M& m, T a, span<const T, S> x, span<T, S> out) {
  const std::array<span<const T, S>, 1> in{x};
  const std::array<T, 1> w{a};
  m.run(out.size(),
        [&](const auto& p) { kernels::weighted_sum(p, out, in, std::span<const T>(w)); });
}

/// y <- x.  2 sizeof(T) per element.
template <class M, class T, class S>
void copy(const M& m, span<const T, S> x, span<T, S> y) {
  m.run(y.size(), [&](const auto& p) { kernels::copy(p, x, y); });
}

/// x <- 0.  1 sizeof(T) per element.
template <class M, class T, class S>
void zero(const M& m, span<T, S> x) {
  m.run(x.size(), [&](const auto& p) { kernels::fill(p, x, T(0)); });
}

template <class T>
struct replace_entry_body {
  const T* f;
  T* e;
  T* s;
  HG_HOST_DEVICE void operator()(std::size_t j) const {
    s[j] += f[j] - e[j];
    e[j] = f[j];
  }
};

template <class T>
struct running_mean_add_body {
  const T* f;
  T* m;
  T* s;
  T inv;
  HG_HOST_DEVICE void operator()(std::size_t j) const {
    const T d = (f[j] - m[j]) * inv;
    m[j] += d;
    s[j] += d;
  }
};

/// Replaces one entry of a table whose sum is kept: sum <- sum + fresh - entry;
/// entry <- fresh (IA^2SGD's table, Maranjyan & Richtarik ICLR'26 baseline).
/// 5 sizeof(T) per element (read fresh, entry, sum; write entry, sum).
template <class M, class T, class S>
void replace_entry(const M& m, span<const T, S> fresh, span<T, S> entry, span<T, S> sum) {
  m.run(sum.size(), [&](const auto& p) {
    kernels::launch(p, sum.size(), replace_entry_body<T>{fresh.data(), entry.data(), sum.data()},
                    sum.data());
  });
}

/// Adds the count-th sample to a running mean whose sum over entries is kept:
/// d = (fresh - mean) / count; mean <- mean + d; sum <- sum + d (Ringleader / Malenia tables).
/// 5 sizeof(T) per element.
template <class M, class T, class S>
void running_mean_add(const M& m, span<const T, S> fresh, span<T, S> mean, span<T, S> sum,
                      std::size_t count) {
  const T inv = T(1) / static_cast<T>(count);
  m.run(mean.size(), [&](const auto& p) {
    kernels::launch(p, mean.size(),
                    running_mean_add_body<T>{fresh.data(), mean.data(), sum.data(), inv},
                    mean.data());
  });
}

}  // namespace heterograd::algorithms::async::detail::ops
