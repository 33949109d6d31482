#pragma once
// Vocabulary of the transport layer: reduction operators, element types, errors, the status
// of a receive, and the options structs of every operation. Every options struct carries a
// finite timeout: no operation of any transport waits forever by default.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "heterograd/core/clock.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::comm {

/// Reduction of an allreduce / reduce_scatter. `avg` divides the sum by the number of ranks,
/// or, with per-rank weights, by the sum of the weights (a weighted average).
enum class reduce_op { sum, avg, min, max };

constexpr std::string_view reduce_op_name(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::avg: return "avg";
    case reduce_op::min: return "min";
    case reduce_op::max: return "max";
  }
  return "unknown";
}

/// Element types a transport moves. Ranks compare them to catch mismatched calls.
enum class dtype : std::uint8_t { i8, u8, i32, u32, i64, u64, f32, f64 };

constexpr std::string_view dtype_name(dtype d) {
  switch (d) {
    case dtype::i8: return "i8";
    case dtype::u8: return "u8";
    case dtype::i32: return "i32";
    case dtype::u32: return "u32";
    case dtype::i64: return "i64";
    case dtype::u64: return "u64";
    case dtype::f32: return "f32";
    case dtype::f64: return "f64";
  }
  return "unknown";
}

namespace detail {
template <class T>
constexpr dtype dtype_of_impl() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) {
    return dtype::f32;
  } else if constexpr (std::is_same_v<U, double>) {
    return dtype::f64;
  } else if constexpr (std::is_integral_v<U> && std::is_signed_v<U> && sizeof(U) == 1) {
    return dtype::i8;
  } else if constexpr (std::is_integral_v<U> && std::is_unsigned_v<U> && sizeof(U) == 1) {
    return dtype::u8;
  } else if constexpr (std::is_integral_v<U> && std::is_signed_v<U> && sizeof(U) == 4) {
    return dtype::i32;
  } else if constexpr (std::is_integral_v<U> && std::is_unsigned_v<U> && sizeof(U) == 4) {
    return dtype::u32;
  } else if constexpr (std::is_integral_v<U> && std::is_signed_v<U> && sizeof(U) == 8) {
    return dtype::i64;
  } else {
    static_assert(std::is_integral_v<U> && std::is_unsigned_v<U> && sizeof(U) == 8,
                  "transports move float, double and 8/32/64-bit integers");
    return dtype::u64;
  }
}
}  // namespace detail

/// The element types a transport can move and reduce.
template <class T>
concept element = std::is_arithmetic_v<std::remove_cv_t<T>> &&
                  !std::is_same_v<std::remove_cv_t<T>, bool> &&
                  (sizeof(T) == 1 || sizeof(T) == 4 || sizeof(T) == 8) &&
                  !std::is_same_v<std::remove_cv_t<T>, long double>;

template <element T>
inline constexpr dtype dtype_of_v = detail::dtype_of_impl<T>();

// --- errors -------------------------------------------------------------------------------
// Argument errors are std::invalid_argument (thrown before anything is posted). Everything
// that goes wrong while an operation is in flight is a comm_error stored in its request and
// rethrown by wait().

/// A transport failure (base of every error an operation can end with).
class comm_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The operation did not complete before its deadline.
class timeout_error : public comm_error {
 public:
  using comm_error::comm_error;
};

/// The group was aborted (a rank threw, timed out, or called abort()); `rank()` says which.
class aborted_error : public comm_error {
 public:
  aborted_error(int by_rank, const std::string& what)
      : comm_error("heterograd: comm: aborted by rank " + std::to_string(by_rank) + ": " + what),
        rank_(by_rank) {}
  int rank() const noexcept { return rank_; }

 private:
  int rank_;
};

/// Ranks called the same collective with different sizes, element types or operators, or a
/// message holds elements of another type than its receive's (source() names its sender;
/// -1 for a collective).
class mismatch_error : public comm_error {
 public:
  using comm_error::comm_error;
  mismatch_error(const std::string& what, int source) : comm_error(what), source_(source) {}
  int source() const noexcept { return source_; }

 private:
  int source_ = -1;
};

/// A message whose size is not what its receive expects: exactly the buffer's size, or at
/// most that with recv_options::up_to. The peer decides what it sends, never how much the
/// receiver writes: the message was consumed (or, on MPI, drained or set aside) and nothing
/// was written into the buffer. Names the sender, the tag and both sizes.
class size_error : public comm_error {
 public:
  /// A size mismatch found before anything was received (the structured form).
  size_error(int source, int tag, std::size_t expected_bytes, std::size_t received_bytes,
             dtype expected, bool up_to)
      : comm_error(text(source, tag, expected_bytes, received_bytes, expected, up_to)),
        source_(source), tag_(tag), expected_(expected_bytes), received_(received_bytes) {}
  /// A transport's own report (an MPI library's MPI_ERR_TRUNCATE): sizes unknown.
  explicit size_error(const std::string& what) : comm_error(what) {}
  /// `e` with the field it was for in front ("job payload: message from rank 0 ...").
  size_error(std::string_view field, const size_error& e)
      : comm_error(std::string(field) + ": " + e.what()), source_(e.source_), tag_(e.tag_),
        expected_(e.expected_), received_(e.received_) {}

  int source() const noexcept { return source_; }
  int tag() const noexcept { return tag_; }
  std::size_t expected_bytes() const noexcept { return expected_; }
  std::size_t received_bytes() const noexcept { return received_; }

 private:
  static std::string count(std::size_t bytes, dtype d) {
    const std::size_t w = dtype_width(d);
    return std::to_string(bytes) + " bytes (" +
           (bytes % w == 0 ? std::to_string(bytes / w) : "not a whole number of") + " " +
           std::string(dtype_name(d)) + ")";
  }
  static std::string text(int source, int tag, std::size_t want, std::size_t got, dtype d, bool up_to) {
    return "heterograd: comm: message from rank " + std::to_string(source) + " (tag " +
           std::to_string(tag) + ") has " + count(got, d) + ", the receive expects " +
           (up_to ? "at most " : "exactly ") + count(want, d) + "; refused, nothing written";
  }
  static std::size_t dtype_width(dtype d) {
    switch (d) {
      case dtype::i8: case dtype::u8: return 1;
      case dtype::i32: case dtype::u32: case dtype::f32: return 4;
      default: return 8;
    }
  }
  int source_ = -1, tag_ = -1;
  std::size_t expected_ = 0, received_ = 0;
};

/// A message was larger than the buffer posted to receive it (a size_error).
class truncation_error : public size_error {
 public:
  using size_error::size_error;
};

namespace detail {
/// The error of a receive that refuses a message of `got` bytes: a truncation_error when the
/// message is larger than the receive allows, a size_error otherwise.
inline std::exception_ptr size_error_ptr(int source, int tag, std::size_t want, std::size_t got,
                                         dtype d, bool up_to) {
  if (got > want) return std::make_exception_ptr(truncation_error(source, tag, want, got, d, up_to));
  return std::make_exception_ptr(size_error(source, tag, want, got, d, up_to));
}
/// Whether a receive of `want` bytes takes a message of `got` bytes.
constexpr bool size_accepted(std::size_t want, std::size_t got, bool up_to) {
  return up_to ? got <= want : got == want;
}
}  // namespace detail

// --- options --------------------------------------------------------------------------------

/// The default deadline of every operation: long enough for a 16M-float allreduce on a
/// loaded machine, short enough that a lost rank is reported within a minute.
inline constexpr seconds default_timeout{60.0};

/// Receive from any rank / with any tag (the parameter-server pattern).
inline constexpr int any_source = -1;
inline constexpr int any_tag = -1;

/// What a completed receive reports: who sent it, with which tag, how many bytes.
struct status {
  int source = -1;
  int tag = -1;
  std::size_t bytes = 0;
};

/// Collective algorithms (heterograd/comm/schedule.hpp). `automatic` lets the transport pick by
/// message size; `native` is the transport's own implementation (shared memory for inproc,
/// the MPI library's for mpi, NCCL's for nccl).
enum class algorithm {
  automatic,
  native,
  ring,
  recursive_halving_doubling,
  tree,
  hierarchical,
  torus_2d
};

constexpr std::string_view algorithm_name(algorithm a) {
  switch (a) {
    case algorithm::automatic: return "automatic";
    case algorithm::native: return "native";
    case algorithm::ring: return "ring";
    case algorithm::recursive_halving_doubling: return "recursive_halving_doubling";
    case algorithm::tree: return "tree";
    case algorithm::hierarchical: return "hierarchical";
    case algorithm::torus_2d: return "torus_2d";
  }
  return "unknown";
}

inline std::ostream& operator<<(std::ostream& os, reduce_op op) { return os << reduce_op_name(op); }
inline std::ostream& operator<<(std::ostream& os, dtype d) { return os << dtype_name(d); }
inline std::ostream& operator<<(std::ostream& os, algorithm a) { return os << algorithm_name(a); }

/// Options of allreduce. `weight` makes the call weighted: sum gives sum_i w_i x_i and avg
/// gives sum_i w_i x_i / sum_i w_i (every rank must pass a weight, or none).
struct allreduce_options {
  reduce_op op = reduce_op::sum;
  std::optional<double> weight{};
  seconds timeout = default_timeout;
  algorithm algo = algorithm::automatic;
  /// For hierarchical: ranks per group (0: the transport picks). For torus_2d: X (the
  /// row length; 0: the most square factorisation).
  int group_size = 0;
  /// Pipelining segment of the schedule-based algorithms, in bytes (0: 256 KiB).
  std::size_t segment_bytes = 0;
};

struct reduce_scatter_options {
  reduce_op op = reduce_op::sum;
  seconds timeout = default_timeout;
};

struct allgather_options {
  seconds timeout = default_timeout;
};

struct broadcast_options {
  seconds timeout = default_timeout;
};

struct gather_options {
  seconds timeout = default_timeout;
};

struct send_options {
  seconds timeout = default_timeout;
};

struct recv_options {
  seconds timeout = default_timeout;
  /// false (default): the message must have exactly the buffer's size and element type;
  /// true: at most the buffer's size (status().bytes says how much came). Anything else is a
  /// size_error (or a mismatch_error where the transport sees the element type).
  bool up_to = false;
};

struct barrier_options {
  seconds timeout = default_timeout;
};

struct split_options {
  seconds timeout = default_timeout;
};

namespace detail {
inline void validate_timeout(std::string_view parameter, seconds t) {
  require(t.count() > 0.0, parameter, t.count(), "must be > 0 seconds (a finite deadline)");
}
inline void validate(const allreduce_options& o) {
  validate_timeout("allreduce_options.timeout", o.timeout);
  if (o.weight) {
    require(*o.weight >= 0.0 && *o.weight < std::numeric_limits<double>::infinity(),
            "allreduce_options.weight", *o.weight, "must be finite and >= 0");
    require(o.op == reduce_op::sum || o.op == reduce_op::avg, "allreduce_options.op",
            reduce_op_name(o.op), "must be sum or avg when a weight is given");
  }
  require_non_negative("allreduce_options.group_size", o.group_size);
}
}  // namespace detail

}  // namespace heterograd::comm
