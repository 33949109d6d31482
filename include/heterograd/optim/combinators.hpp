#pragma once
// Combinators (Optax's): chain composes transformations; every_k accumulates gradients over
// k calls (Optax MultiSteps); apply_if_finite skips non-finite steps; masked applies an
// optimizer to parts of the buffer only; partitioned gives different optimizers to disjoint
// parts.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "heterograd/core/config.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/kernels/launch.hpp"
#include "heterograd/kernels/reduce.hpp"
#include "heterograd/kernels/scratch.hpp"
#include "heterograd/optim/detail/base.hpp"
#include "heterograd/optim/state.hpp"

namespace heterograd::optim {

namespace detail {
template <class T, class S>
void check_children(const state<T, S>& st, std::string_view where, std::string_view kind,
                    std::size_t children) {
  require(st.kind == kind, join(where, "state.kind"), st.kind,
          "must be '" + std::string(kind) + "' (the state belongs to another optimizer)");
  require(st.children.size() == children, join(where, "state.children (count)"), st.children.size(),
          "must be " + std::to_string(children));
}
/// What a wrapper around one inner transformation shares (capturable.hpp, loss_scale.hpp):
/// its fresh state is D::wrap of the inner's (plain or mixed precision), and its check is
/// D::check_own, then the inner's on child 0. Base is the wrapper's CRTP base.
template <class D, class Inner, template <class> class Base>
class wrapper_base : public Base<D>, public forwards_mixed<Inner> {
 public:
  template <class T, class S>
  state<T, S> init_state(std::size_t n) const {
    return self().wrap(self().inner().template init_state<T, S>(n));
  }
  template <class Policy, class P, class S>
  state<float, S> init_mixed(const Policy& policy, span<const P, S> p) const {
    return self().wrap(self().inner().init_mixed(policy, p));
  }
  template <class T, class S>
  void check_state(const state<T, S>& st, std::size_t n, std::string_view where) const {
    D::check_own(st, where);
    self().inner().check_state(st.children[0], n, join(where, D::name()));
  }
  template <class S>
  void check_mixed_state(const state<float, S>& st, std::size_t n, std::string_view where) const {
    D::check_own(st, where);
    self().inner().check_mixed_state(st.children[0], n, join(where, D::name()));
  }

 private:
  const D& self() const { return static_cast<const D&>(*this); }
};

}  // namespace detail

/// chain(t1, t2, ...): updates pass through t1, then t2, ...; params += the result.
/// State: kind "chain", one child per transformation.
template <class... Ts>
class chain_t : public transformation_base<chain_t<Ts...>> {
 public:
  explicit chain_t(Ts... ts) : ts_(std::move(ts)...) {}
  static constexpr std::string_view name() { return "chain"; }
  template <class T, class S>
  state<T, S> init_state(std::size_t n) const {
    state<T, S> st;
    st.kind = "chain";
    std::apply(
        [&](const auto&... t) { (st.children.push_back(t.template init_state<T, S>(n)), ...); },
        ts_);
    return st;
  }
  template <class T, class S>
  void check_state(const state<T, S>& st, std::size_t n, std::string_view where) const {
    detail::check_children(st, where, name(), sizeof...(Ts));
    check_each(st, n, where, std::index_sequence_for<Ts...>{});
  }
  template <class Policy, class T, class S>
  void transform_impl(const Policy& policy, span<T, S> u, state<T, S>& st,
                      span<const T, S> p) const {
    transform_each(policy, u, st, p, std::index_sequence_for<Ts...>{});
    ++st.count;
  }

 private:
  template <class T, class S, std::size_t... I>
  void check_each(const state<T, S>& st, std::size_t n, std::string_view where,
                  std::index_sequence<I...>) const {
    const std::string w = std::string(where) + ".chain";
    (std::get<I>(ts_).check_state(st.children[I], n, w + "[" + std::to_string(I) + "]"), ...);
  }
  template <class Policy, class T, class S, std::size_t... I>
  void transform_each(const Policy& policy, span<T, S> u, state<T, S>& st, span<const T, S> p,
                      std::index_sequence<I...>) const {
    (std::get<I>(ts_).transform_impl(policy, u, st.children[I], p), ...);
  }
  std::tuple<Ts...> ts_;
};

template <class... Ts>
chain_t<Ts...> chain(Ts... ts) {
  return chain_t<Ts...>(std::move(ts)...);
}

/// every_k(inner, k): gradient accumulation. Calls 1..k-1 only add grads to an accumulator;
/// call k applies inner to their mean and clears it (Optax MultiSteps). k = 1 is the bare
/// inner optimizer, bitwise. State: kind "every_k", count = calls, slot 0 = accumulator,
/// child 0 = inner. Accumulator: 3*sizeof(T) B/element per call.
template <class Inner>
class every_k : public transformation_base<every_k<Inner>> {
 public:
  every_k(Inner inner, std::int64_t k) : inner_(std::move(inner)), k_(k) {
    require(k >= 1, "every_k.k", k, "must be >= 1");
  }
  static constexpr std::string_view name() { return "every_k"; }
  std::int64_t k() const { return k_; }
  template <class T, class S>
  state<T, S> init_state(std::size_t n) const {
    state<T, S> st;
    st.kind = "every_k";
    st.slots.push_back(state<T, S>::zeros(k_ > 1 ? n : 0));
    st.children.push_back(inner_.template init_state<T, S>(n));
    return st;
  }
  template <class T, class S>
  void check_state(const state<T, S>& st, std::size_t n, std::string_view where) const {
    detail::check_children(st, where, name(), 1);
    require(st.slots.size() == 1, detail::join(where, "state.slots (count)"), st.slots.size(),
            "must be 1");
    require_same_size(detail::join(where, "state.slots[0] (size)"), st.slots[0].size(),
                      detail::join(where, "params"), k_ > 1 ? n : 0);
    inner_.check_state(st.children[0], n, std::string(where) + ".every_k");
  }
  template <class Policy, class T, class S>
  void apply_impl(const Policy& policy, span<const T, S> g, state<T, S>& st, span<T, S> p) const {
    if (k_ == 1) {
      inner_.apply_impl(policy, g, st.children[0], p);
      ++st.count;
      return;
    }
    T* acc = slot_span<T, S>(st.slots[0]).data();
    kernels::launch(policy, g.size(), detail::add_body<T>{acc, g.data()});
    ++st.count;
    if (st.count % k_ == 0) {
      kernels::launch(policy, g.size(),
                      detail::scale_body<T>{acc, static_cast<T>(1.0 / double(k_))});
      inner_.apply_impl(policy, span<const T, S>(acc, g.size()), st.children[0], p);
      kernels::launch(policy, g.size(), detail::fill_body<T>{acc, T(0)});
    }
  }
  template <class Policy, class T, class S>
  void transform_impl(const Policy& policy, span<T, S> u, state<T, S>& st,
                      span<const T, S> p) const {
    if (k_ == 1) {
      inner_.transform_impl(policy, u, st.children[0], p);
      ++st.count;
      return;
    }
    T* acc = slot_span<T, S>(st.slots[0]).data();
    kernels::launch(policy, u.size(), detail::add_body<T>{acc, u.data()});
    ++st.count;
    if (st.count % k_ == 0) {
      kernels::launch(policy, u.size(), detail::copy_body<T>{acc, u.data()});
      kernels::launch(policy, u.size(),
                      detail::scale_body<T>{u.data(), static_cast<T>(1.0 / double(k_))});
      inner_.transform_impl(policy, u, st.children[0], p);
      kernels::launch(policy, u.size(), detail::fill_body<T>{acc, T(0)});
    } else {
      kernels::launch(policy, u.size(), detail::fill_body<T>{u.data(), T(0)});
    }
  }

 private:
  Inner inner_;
  std::int64_t k_;
};

/// apply_if_finite(inner): when any gradient is infinite or NaN the step is skipped: params
/// and the inner state stay bitwise as they were; counters[0] counts skips in all,
/// counters[1] consecutive skips. With max_consecutive_skips > 0, one more skip than that
/// throws std::runtime_error (the step is still not applied). The check reads the gradient
/// once (sizeof(T) B/element, deterministic reduction).
template <class Inner>
class apply_if_finite : public transformation_base<apply_if_finite<Inner>> {
 public:
  explicit apply_if_finite(Inner inner, std::int64_t max_consecutive_skips = 0)
      : inner_(std::move(inner)), max_(max_consecutive_skips) {
    require(max_consecutive_skips >= 0, "apply_if_finite.max_consecutive_skips",
            max_consecutive_skips, "must be >= 0 (0: no limit)");
  }
  static constexpr std::string_view name() { return "apply_if_finite"; }
  template <class T, class S>
  state<T, S> init_state(std::size_t n) const {
    state<T, S> st;
    st.kind = "apply_if_finite";
    st.counters = {0, 0};
    st.children.push_back(inner_.template init_state<T, S>(n));
    return st;
  }
  template <class T, class S>
  void check_state(const state<T, S>& st, std::size_t n, std::string_view where) const {
    detail::check_children(st, where, name(), 1);
    require(st.counters.size() == 2, detail::join(where, "state.counters (count)"),
            st.counters.size(), "must be 2");
    require(st.slots.empty(), detail::join(where, "state.slots (count)"), st.slots.size(),
            "must be 0");
    inner_.check_state(st.children[0], n, std::string(where) + ".apply_if_finite");
  }
  /// Steps skipped so far.
  template <class T, class S>
  static std::int64_t skips(const state<T, S>& st) {
    return st.counters.at(0);
  }
  template <class Policy, class T, class S>
  void apply_impl(const Policy& policy, span<const T, S> g, state<T, S>& st, span<T, S> p) const {
    if (!finite(policy, g, st)) return;
    inner_.apply_impl(policy, g, st.children[0], p);
    ++st.count;
  }
  template <class Policy, class T, class S>
  void transform_impl(const Policy& policy, span<T, S> u, state<T, S>& st,
                      span<const T, S> p) const {
    if (!finite(policy, span<const T, S>(u.data(), u.size()), st)) {
      kernels::launch(policy, u.size(), detail::fill_body<T>{u.data(), T(0)});
      return;
    }
    inner_.transform_impl(policy, u, st.children[0], p);
    ++st.count;
  }

 private:
  template <class Policy, class T, class S>
  bool finite(const Policy& policy, span<const T, S> g, state<T, S>& st) const {
    if (kernels::all_finite(policy, g)) {
      st.counters[1] = 0;
      return true;
    }
    ++st.counters[0];
    ++st.counters[1];
    if (max_ > 0 && st.counters[1] > max_)
      throw std::runtime_error("heterograd: apply_if_finite: " + std::to_string(st.counters[1]) +
                               " consecutive non-finite gradients (limit " + std::to_string(max_) +
                               ")");
    return false;
  }
  Inner inner_;
  std::int64_t max_;
};

/// A contiguous part of a flat parameter buffer: [offset, offset + size).
struct segment {
  std::size_t offset = 0;
  std::size_t size = 0;
  friend bool operator==(const segment&, const segment&) = default;
};

namespace detail {
inline std::vector<segment> sorted_disjoint(std::vector<segment> segs, std::string_view who) {
  std::sort(segs.begin(), segs.end(),
            [](const segment& a, const segment& b) { return a.offset < b.offset; });
  for (std::size_t i = 1; i < segs.size(); ++i)
    require(segs[i].offset >= segs[i - 1].offset + segs[i - 1].size,
            join(who, "segments[i].offset"), segs[i].offset, "segments must not overlap");
  return segs;
}
}  // namespace detail

/// masked(inner, segments): inner updates only the given segments of the buffer, each with
/// its own inner state (child i for segment i in offset order); the rest of params is left
/// untouched (in transform, its updates are zeroed).
template <class Inner>
class masked : public transformation_base<masked<Inner>> {
 public:
  masked(Inner inner, std::vector<segment> segments)
      : inner_(std::move(inner)), segs_(detail::sorted_disjoint(std::move(segments), "masked")) {}
  static constexpr std::string_view name() { return "masked"; }
  const std::vector<segment>& segments() const { return segs_; }
  template <class T, class S>
  state<T, S> init_state(std::size_t n) const {
    check_fits(n);
    state<T, S> st;
    st.kind = "masked";
    for (const auto& s : segs_) st.children.push_back(inner_.template init_state<T, S>(s.size));
    return st;
  }
  template <class T, class S>
  void check_state(const state<T, S>& st, std::size_t n, std::string_view where) const {
    check_fits(n);
    detail::check_children(st, where, name(), segs_.size());
    for (std::size_t i = 0; i < segs_.size(); ++i)
      inner_.check_state(st.children[i], segs_[i].size,
                         std::string(where) + ".masked[" + std::to_string(i) + "]");
  }
  template <class Policy, class T, class S>
  void apply_impl(const Policy& policy, span<const T, S> g, state<T, S>& st, span<T, S> p) const {
    for (std::size_t i = 0; i < segs_.size(); ++i)
      inner_.apply_impl(policy, g.subspan(segs_[i].offset, segs_[i].size), st.children[i],
                        p.subspan(segs_[i].offset, segs_[i].size));
    ++st.count;
  }
  template <class Policy, class T, class S>
  void transform_impl(const Policy& policy, span<T, S> u, state<T, S>& st,
                      span<const T, S> p) const {
    std::size_t pos = 0;
    for (std::size_t i = 0; i < segs_.size(); ++i) {
      const auto& s = segs_[i];
      kernels::launch(policy, s.offset - pos, detail::fill_body<T>{u.data() + pos, T(0)});
      inner_.transform_impl(policy, u.subspan(s.offset, s.size), st.children[i],
                            p.subspan(s.offset, s.size));
      pos = s.offset + s.size;
    }
    kernels::launch(policy, u.size() - pos, detail::fill_body<T>{u.data() + pos, T(0)});
    ++st.count;
  }

 private:
  void check_fits(std::size_t n) const {
    if (!segs_.empty())
      require(segs_.back().offset + segs_.back().size <= n, "masked.segments (end)",
              segs_.back().offset + segs_.back().size, "must be <= the size of params");
  }
  Inner inner_;
  std::vector<segment> segs_;
};

/// partitioned(masked(a, A), masked(b, B), ...): different optimizers for disjoint parts of
/// one buffer, applied in one call. State: kind "partitioned", one child per part.
template <class... Ms>
class partitioned_t : public transformation_base<partitioned_t<Ms...>> {
 public:
  explicit partitioned_t(Ms... ms) : ms_(std::move(ms)...) {
    std::vector<segment> all;
    std::apply(
        [&](const auto&... m) {
          (all.insert(all.end(), m.segments().begin(), m.segments().end()), ...);
        },
        ms_);
    detail::sorted_disjoint(std::move(all), "partitioned");
  }
  static constexpr std::string_view name() { return "partitioned"; }
  template <class T, class S>
  state<T, S> init_state(std::size_t n) const {
    state<T, S> st;
    st.kind = "partitioned";
    std::apply(
        [&](const auto&... m) { (st.children.push_back(m.template init_state<T, S>(n)), ...); },
        ms_);
    return st;
  }
  template <class T, class S>
  void check_state(const state<T, S>& st, std::size_t n, std::string_view where) const {
    detail::check_children(st, where, name(), sizeof...(Ms));
    each([&](const auto& m, std::size_t i) {
      m.check_state(st.children[i], n, std::string(where) + ".part[" + std::to_string(i) + "]");
    });
  }
  template <class Policy, class T, class S>
  void apply_impl(const Policy& policy, span<const T, S> g, state<T, S>& st, span<T, S> p) const {
    each([&](const auto& m, std::size_t i) { m.apply_impl(policy, g, st.children[i], p); });
    ++st.count;
  }
  template <class Policy, class T, class S>
  void transform_impl(const Policy& policy, span<T, S> u, state<T, S>& st,
                      span<const T, S> p) const {
    // Each part transforms its own segments of a copy of the gradient; the results are
    // summed (the parts are disjoint, and each masked part zeroes what is not its own).
    const std::size_t n = u.size();
    kernels::scratch<T, Policy> g(policy, n), w(policy, n);
    kernels::launch(policy, n, detail::copy_body<T>{u.data(), g.data()});
    kernels::launch(policy, n, detail::fill_body<T>{u.data(), T(0)});
    each([&](const auto& m, std::size_t i) {
      kernels::launch(policy, n, detail::copy_body<T>{g.data(), w.data()});
      m.transform_impl(policy, span<T, S>(w.data(), n), st.children[i], p);
      kernels::launch(policy, n, detail::add_body<T>{u.data(), w.data()});
    });
    ++st.count;
  }

 private:
  template <class F>
  void each(F&& f) const {
    std::size_t i = 0;
    std::apply([&](const auto&... m) { (f(m, i++), ...); }, ms_);
  }
  std::tuple<Ms...> ms_;
};

template <class... Ms>
partitioned_t<Ms...> partitioned(Ms... ms) {
  return partitioned_t<Ms...>(std::move(ms)...);
}

}  // namespace heterograd::optim
