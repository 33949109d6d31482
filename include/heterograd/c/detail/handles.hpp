#pragma once
// The C API's handles. A handle is a number (a registry id, never reused) dressed as an
// opaque pointer; the registry maps live ids to objects, so a NULL, forged, destroyed or
// wrong-kind handle is detected and reported instead of being dereferenced. The registry is
// the C API's only process-wide state: a C caller has no other place to keep it. Objects are
// reference-counted (std::shared_ptr), so destroying a handle while another thread is inside
// a call on it is safe; calls on one handle are serialised by the object's mutex.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "heterograd/c/detail/errors.hpp"
#include "heterograd/c/heterograd.h"
#include "heterograd/core/error.hpp"

namespace heterograd::c_api::detail {

enum class handle_kind : std::uint8_t { optimizer, local_sgd, async_server, async_worker };

inline const char* kind_name(handle_kind k) {
  switch (k) {
    case handle_kind::optimizer: return "hg_optimizer";
    case handle_kind::local_sgd: return "hg_local_sgd";
    case handle_kind::async_server: return "hg_async_server";
    case handle_kind::async_worker: return "hg_async_worker";
  }
  return "handle";
}

/// What a handle stands for: every object works on buffers of `size` elements of `dtype`.
struct object {
  object(handle_kind k, std::int32_t dt, std::size_t n) : kind(k), dtype(dt), size(n) {}
  object(const object&) = delete;
  object& operator=(const object&) = delete;
  virtual ~object() = default;
  const handle_kind kind;
  const std::int32_t dtype;
  const std::size_t size;
  std::mutex mutex;  ///< serialises calls on this handle
};

class registry {
 public:
  std::uint64_t add(std::shared_ptr<object> o) {
    std::lock_guard lock(m_);
    const std::uint64_t id = next_++;
    live_.emplace(id, std::move(o));
    return id;
  }
  std::shared_ptr<object> find(std::uint64_t id, handle_kind k) const {
    std::lock_guard lock(m_);
    const auto it = live_.find(id);
    return it != live_.end() && it->second->kind == k ? it->second : nullptr;
  }
  bool remove(std::uint64_t id, handle_kind k) {
    std::lock_guard lock(m_);
    const auto it = live_.find(id);
    if (it == live_.end() || it->second->kind != k) return false;
    live_.erase(it);
    return true;
  }

 private:
  mutable std::mutex m_;
  std::unordered_map<std::uint64_t, std::shared_ptr<object>> live_;
  std::uint64_t next_ = 1;  // 0 is NULL
};

/// The process's handle registry, never destroyed (a handle may be used from an atexit
/// handler or another library's static destructor).
inline registry& handles() {
  static registry* r = new registry();
  return *r;
}

template <class H>
std::uint64_t id_of(H h) {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(h));
}

template <class H>
H make_handle(std::shared_ptr<object> o) {
  return reinterpret_cast<H>(static_cast<std::uintptr_t>(handles().add(std::move(o))));
}

/// The live object of handle `h`, of kind K's type; throws HG_ERROR_UNKNOWN_HANDLE else.
template <class Object, class H>
std::shared_ptr<Object> lookup(H h, handle_kind k, const char* parameter) {
  auto o = handles().find(id_of(h), k);
  if (!o) {
    std::string rule = "is not a live ";
    rule += kind_name(k);
    rule += h == nullptr ? " (null)" : " (never created, destroyed, or another kind of handle)";
    throw api_error(HG_ERROR_UNKNOWN_HANDLE,
                    invalid_argument_message(parameter, id_of(h), rule));
  }
  return std::static_pointer_cast<Object>(std::move(o));
}

template <class H>
void destroy(H h, handle_kind k) {
  if (h == nullptr) return;
  if (!handles().remove(id_of(h), k))
    throw api_error(HG_ERROR_UNKNOWN_HANDLE,
                    invalid_argument_message(kind_name(k), id_of(h),
                                             "is not a live handle (destroyed twice?)"));
}

}  // namespace heterograd::c_api::detail
