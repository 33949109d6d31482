#pragma once
// The C API's checks of pointer arguments: not null where required, aligned for what they
// point to, and element counts equal to the handle's. They run before anything is written,
// so a failed call changes nothing.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "heterograd/c/detail/errors.hpp"
#include "heterograd/c/heterograd.h"
#include "heterograd/core/error.hpp"

namespace heterograd::c_api::detail {

/// An address as the message shows it.
inline std::string address_of(const void* p) {
  char buf[2 + 2 * sizeof(std::uintptr_t) + 1];
  std::snprintf(buf, sizeof buf, "0x%llx",
                static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p)));
  return buf;
}

/// A pointer to T must be aligned to alignof(T): reading a misaligned float or struct is
/// undefined behaviour (and faults on some CPUs and on CUDA), whatever x86 tolerates.
inline void require_aligned(const void* p, std::size_t alignment, const char* parameter,
                            const char* type) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0)
    throw std::invalid_argument(invalid_argument_message(
        parameter, address_of(p),
        "must be aligned to " + std::to_string(alignment) + " bytes (alignof(" + type + "))"));
}

template <class T>
constexpr std::size_t alignment_of() {
  if constexpr (std::is_void_v<T>) return 1;
  else return alignof(T);
}

/// A required pointer: not null and aligned for what it points to.
template <class T>
void require_pointer(const T* p, const char* parameter) {
  if (p == nullptr)
    throw api_error(HG_ERROR_NULL_POINTER,
                    invalid_argument_message(parameter, nullptr, "must not be null"));
  require_aligned(p, alignment_of<T>(), parameter, "its type");
}

/// A pointer that may be NULL; if it is not, aligned for what it points to.
template <class T>
void require_optional(const T* p, const char* parameter) {
  if (p != nullptr) require_aligned(p, alignment_of<T>(), parameter, "its type");
}

inline void require_size(const char* parameter, std::size_t size, std::size_t expected) {
  if (size != expected)
    throw api_error(HG_ERROR_SIZE_MISMATCH,
                    invalid_argument_message(parameter, size,
                                             "must equal the handle's size (" +
                                                 std::to_string(expected) + " elements)"));
}

}  // namespace heterograd::c_api::detail
