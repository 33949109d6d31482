#pragma once
// A receive that learns the incoming message's size before it posts: MPI_Improbe matches the
// message, then MPI_Imrecv takes exactly that message. The peer decides what it sends, never
// how much this rank writes. A posted MPI_Irecv smaller than its message is not safe to rely
// on: Open MPI 4.1's shared-memory single-copy path (vader with CMA) reports no
// MPI_ERR_TRUNCATE above its eager limit (about 4 KiB) and copies the whole message past the
// buffer's end (a heap overflow under ASan).

#include <mpi.h>

#include <cstddef>
#include <limits>
#include <vector>

#include "heterograd/comm/mpi/detail/error.hpp"
#include "heterograd/comm/types.hpp"

namespace heterograd::comm::mpi::detail {

/// The largest refused message that is drained into a scratch buffer. A larger one is left
/// matched and never received: above the eager limits its data stays with the sender until
/// it is received, and receiving it would mean allocating what the peer chose.
inline constexpr std::size_t drain_limit_bytes = 64 * 1024;

/// The size of a matched message in bytes (SIZE_MAX when MPI cannot count it).
inline std::size_t message_bytes(const MPI_Status& st) {
  MPI_Count n = 0;
  if (MPI_Get_elements_x(&st, MPI_BYTE, &n) != MPI_SUCCESS || n < 0)
    return std::numeric_limits<std::size_t>::max();
  return static_cast<std::size_t>(n);
}

/// Consumes a matched message this rank refuses (see drain_limit_bytes).
inline void set_aside(MPI_Message& m, std::size_t bytes) {
  if (bytes > drain_limit_bytes) return;
  std::vector<std::byte> scratch(bytes + 1);
  MPI_Mrecv(scratch.data(), static_cast<int>(bytes), MPI_BYTE, &m, MPI_STATUS_IGNORE);
}

/// What a matched receive takes: `want` bytes of `d` into `buf` (at most that with up_to).
struct receive_target {
  void* buf;
  std::size_t want;
  MPI_Datatype type;
  std::size_t width;
  dtype d;
  bool up_to;
};

/// One poll of a matched receive from (source, tag) on `comm`, for op_state's gate: false
/// while no message is there; once one is, posts its receive into the target (in the request
/// slot that add_request() returns) when its size is accepted (a whole number of elements,
/// exactly `want` bytes or at most that with up_to) and returns true, else sets it aside and
/// throws the size_error naming sender and sizes.
template <class AddRequest>
bool poll_matched_receive(MPI_Comm comm, int source, int tag, const receive_target& t,
                          AddRequest&& add_request) {
  int flag = 0;
  MPI_Message msg = MPI_MESSAGE_NULL;
  MPI_Status st;
  check(MPI_Improbe(source, tag, comm, &flag, &msg, &st), "MPI_Improbe");
  if (!flag) return false;
  const std::size_t got = message_bytes(st);
  if (!comm::detail::size_accepted(t.want, got, t.up_to) || got % t.width != 0) {
    set_aside(msg, got);
    std::rethrow_exception(
        comm::detail::size_error_ptr(st.MPI_SOURCE, st.MPI_TAG, t.want, got, t.d, t.up_to));
  }
  check(MPI_Imrecv(t.buf, static_cast<int>(got / t.width), t.type, &msg, add_request()),
        "MPI_Imrecv");
  return true;
}

/// A control channel's poll: takes one message of exactly `count` elements of T from
/// (source, tag) into `out` if one is there (false when none is); `st` reports its sender. A
/// message of another size is set aside and its size_error thrown.
template <class T>
bool take_if_there(MPI_Comm comm, int source, int tag, T* out, std::size_t count, MPI_Status& st) {
  int flag = 0;
  MPI_Message msg = MPI_MESSAGE_NULL;
  check(MPI_Improbe(source, tag, comm, &flag, &msg, &st), "MPI_Improbe");
  if (!flag) return false;
  const std::size_t got = message_bytes(st);
  if (got != count * sizeof(T)) {
    set_aside(msg, got);
    std::rethrow_exception(comm::detail::size_error_ptr(st.MPI_SOURCE, st.MPI_TAG, count * sizeof(T),
                                                        got, dtype_of_v<T>, false));
  }
  check(MPI_Mrecv(out, static_cast<int>(count), datatype<T>(), &msg, MPI_STATUS_IGNORE), "MPI_Mrecv");
  return true;
}

}  // namespace heterograd::comm::mpi::detail
