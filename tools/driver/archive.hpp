#pragma once
// Binary archives for checkpoints. A type is archived by a member `serialize(Archive&)` that
// calls `ar(members...)` in a fixed order (the sim engine, recorder and runtimes have one), or
// is trivially copyable (its bytes), or is one of the standard containers below. The same
// serialize() writes (writer) and reads (reader); a reader checks every length against what is
// left, so a truncated or foreign file is an error, never a crash.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/optim/state.hpp"

namespace hgrun {

class writer {
 public:
  static constexpr bool saving = true;
  template <class... T>
  void operator()(const T&... xs) {
    (put(xs), ...);
  }
  const std::vector<std::byte>& bytes() const { return out_; }

  void raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  template <class T>
  void put(const T& x) {
    if constexpr (requires(T& y, writer& w) { y.serialize(w); }) {
      const_cast<T&>(x).serialize(*this);  // serialize() only reads when saving
    } else if constexpr (std::is_same_v<T, std::string>) {
      size(x.size());
      raw(x.data(), x.size());
    } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
      size(x.size());
      for (bool b : x) put(static_cast<std::uint8_t>(b));
    } else if constexpr (requires { typename T::value_type; x.size(); x.begin(); } &&
                         !std::is_trivially_copyable_v<T>) {
      size(x.size());
      using V = typename T::value_type;
      if constexpr (std::is_trivially_copyable_v<V> && requires { x.data(); }) {
        raw(x.data(), x.size() * sizeof(V));
      } else {
        for (const auto& v : x) put(v);
      }
    } else if constexpr (requires { x.first; x.second; }) {
      put(x.first);
      put(x.second);
    } else if constexpr (requires { x.has_value(); *x; }) {
      put(static_cast<std::uint8_t>(x.has_value()));
      if (x) put(*x);
    } else {
      static_assert(std::is_trivially_copyable_v<T>, "no way to archive this type");
      raw(&x, sizeof x);
    }
  }
  template <class T, class S>
  void put(const heterograd::optim::state<T, S>& st) {
    const auto b = heterograd::optim::serialize(st);
    size(b.size());
    raw(b.data(), b.size());
  }

 private:
  void size(std::size_t n) {
    const std::uint64_t v = n;
    raw(&v, sizeof v);
  }
  std::vector<std::byte> out_;
};

class reader {
 public:
  static constexpr bool saving = false;
  explicit reader(std::span<const std::byte> in) : in_(in) {}
  template <class... T>
  void operator()(T&... xs) {
    (get(xs), ...);
  }
  bool done() const { return pos_ == in_.size(); }

  void raw(void* p, std::size_t n) {
    if (n > in_.size() - pos_) throw std::runtime_error("checkpoint: truncated data");
    if (n > 0) std::memcpy(p, in_.data() + pos_, n);  // an empty vector's data() may be null
    pos_ += n;
  }
  template <class T>
  void get(T& x) {
    if constexpr (requires(T& y, reader& r) { y.serialize(r); }) {
      x.serialize(*this);
    } else if constexpr (std::is_same_v<T, std::string>) {
      x.resize(count(1));
      raw(x.data(), x.size());
    } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
      x.assign(count(1), false);
      for (std::size_t i = 0; i < x.size(); ++i) {
        std::uint8_t b = 0;
        get(b);
        x[i] = b != 0;
      }
    } else if constexpr (requires { typename T::value_type; x.size(); x.begin(); } &&
                         !std::is_trivially_copyable_v<T>) {
      using V = std::remove_const_t<typename T::value_type>;
      if constexpr (requires { x.resize(std::size_t{}); }) {
        const std::size_t n = count(std::is_trivially_copyable_v<V> ? sizeof(V) : 1);
        x.resize(n);
      } else {
        if (count(1) != x.size()) throw std::runtime_error("checkpoint: wrong fixed size");
      }
      if constexpr (std::is_trivially_copyable_v<V> && requires { x.data(); }) {
        raw(x.data(), x.size() * sizeof(V));
      } else {
        for (auto& v : x) get(const_cast<V&>(v));
      }
    } else if constexpr (requires { x.first; x.second; }) {
      get(const_cast<std::remove_const_t<decltype(x.first)>&>(x.first));
      get(x.second);
    } else if constexpr (requires { x.has_value(); x.emplace(); }) {
      std::uint8_t has = 0;
      get(has);
      if (has) {
        x.emplace();
        get(*x);
      } else {
        x.reset();
      }
    } else {
      static_assert(std::is_trivially_copyable_v<T>, "no way to archive this type");
      raw(&x, sizeof x);
    }
  }
  template <class T, class S>
  void get(heterograd::optim::state<T, S>& st) {
    std::vector<std::byte> b(count(1));
    raw(b.data(), b.size());
    st = heterograd::optim::deserialize<T, S>(b);
  }

 private:
  std::size_t count(std::size_t unit) {
    std::uint64_t n = 0;
    raw(&n, sizeof n);
    if (n > (in_.size() - pos_) / unit) throw std::runtime_error("checkpoint: corrupt length");
    return static_cast<std::size_t>(n);
  }
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

}  // namespace hgrun
