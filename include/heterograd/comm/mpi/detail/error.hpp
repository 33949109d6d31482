#pragma once
// MPI error codes as heterograd exceptions, and the MPI names of element types and
// operators.

#include <mpi.h>

#include <cstddef>
#include <string>
#include <type_traits>

#include "heterograd/comm/types.hpp"

namespace heterograd::comm::mpi {

namespace detail {

inline std::string error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, static_cast<std::size_t>(len));
}

/// Throws the comm_error of an MPI error code.
inline void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  int cls = 0;
  MPI_Error_class(code, &cls);
  const std::string msg = std::string("heterograd: comm: ") + what + ": " + error_string(code);
  if (cls == MPI_ERR_TRUNCATE) throw truncation_error(msg);
  throw comm_error(msg);
}

template <class T>
MPI_Datatype datatype() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<U, double>) return MPI_DOUBLE;
  else if constexpr (std::is_signed_v<U> && sizeof(U) == 1) return MPI_INT8_T;
  else if constexpr (std::is_unsigned_v<U> && sizeof(U) == 1) return MPI_UINT8_T;
  else if constexpr (std::is_signed_v<U> && sizeof(U) == 4) return MPI_INT32_T;
  else if constexpr (std::is_unsigned_v<U> && sizeof(U) == 4) return MPI_UINT32_T;
  else if constexpr (std::is_signed_v<U> && sizeof(U) == 8) return MPI_INT64_T;
  else return MPI_UINT64_T;
}

inline MPI_Op mpi_op(reduce_op op) {
  switch (op) {
    case reduce_op::min: return MPI_MIN;
    case reduce_op::max: return MPI_MAX;
    default: return MPI_SUM;
  }
}

}  // namespace detail

}  // namespace heterograd::comm::mpi
