#pragma once
// Shared pieces of the sync tests: optimizers of the optim concept's shape and small problems.
//
// WIRING(kernels): test_sgd / test_heavy_ball stand in for optim::sgd / optim::momentum until
// the optim layer is on main; they have the same init / update shape and state fields.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "heterograd/core/span.hpp"

namespace sync_test {

namespace hg = heterograd;

/// A state with optim::state's fields (kind, count, slots, children).
template <class T>
struct test_state {
  std::string kind;
  std::int64_t count = 0;
  std::vector<std::vector<T>> slots;
  std::vector<test_state> children;
  friend bool operator==(const test_state&, const test_state&) = default;
};

/// p <- p - lr g.
struct test_sgd {
  double lr = 0.1;
  template <class Policy, class T>
  test_state<std::remove_const_t<T>> init(const Policy&, hg::span<T>) const {
    return {"sgd", 0, {}, {}};
  }
  template <class Policy, class T>
  void update(const Policy&, hg::span<const T> g, test_state<T>& st, hg::span<T> p) const {
    const T a = static_cast<T>(lr);
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= a * g[i];
    ++st.count;
  }
};

/// v <- mu v + g; p <- p - lr v.
struct test_heavy_ball {
  double lr = 0.05, mu = 0.9;
  template <class Policy, class T>
  test_state<std::remove_const_t<T>> init(const Policy&, hg::span<T> p) const {
    return {"momentum", 0, {std::vector<std::remove_const_t<T>>(p.size(), 0)}, {}};
  }
  template <class Policy, class T>
  void update(const Policy&, hg::span<const T> g, test_state<T>& st, hg::span<T> p) const {
    auto& v = st.slots[0];
    for (std::size_t i = 0; i < p.size(); ++i) {
      v[i] = static_cast<T>(mu) * v[i] + g[i];
      p[i] -= static_cast<T>(lr) * v[i];
    }
    ++st.count;
  }
};

template <class T>
bool bitwise_equal(hg::span<const T> a, hg::span<const T> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace sync_test
