#pragma once
// The C API's errors: every exception of heterograd's layers becomes an hg_status and a
// thread-local message at the boundary (`guarded`), so nothing escapes into C and nothing
// aborts.

#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "heterograd/algorithms/nonfinite.hpp"
#include "heterograd/c/heterograd.h"
#include "heterograd/comm/types.hpp"

namespace heterograd::c_api::detail {

/// An error with its C status (the library's own errors are mapped in `guarded`).
class api_error : public std::runtime_error {
 public:
  api_error(hg_status s, const std::string& what) : std::runtime_error(what), status_(s) {}
  hg_status status() const { return status_; }

 private:
  hg_status status_;
};

/// The message hg_last_error() returns: per thread, as a C caller has no other place to
/// receive it.
inline std::string& last_error() {
  thread_local std::string message;
  return message;
}

inline hg_status fail(hg_status s, const char* function, const char* what) {
  std::string& m = last_error();
  m = function;
  m += ": ";
  m += what;
  return s;
}

/// Runs a C function's body; maps the exceptions of heterograd's layers to statuses.
template <class F>
hg_status guarded(const char* function, F&& body) noexcept {
  try {
    body();
    return HG_OK;
  } catch (const api_error& e) {
    return fail(e.status(), function, e.what());
  } catch (const std::invalid_argument& e) {
    return fail(HG_ERROR_INVALID_ARGUMENT, function, e.what());
  } catch (const algorithms::nonfinite_gradient_error& e) {
    return fail(HG_ERROR_INVALID_ARGUMENT, function, e.what());  // a NaN or an infinity given
  } catch (const comm::timeout_error& e) {
    return fail(HG_ERROR_TIMEOUT, function, e.what());
  } catch (const comm::comm_error& e) {
    return fail(HG_ERROR_COMMUNICATION, function, e.what());
  } catch (const std::bad_alloc&) {
    return fail(HG_ERROR_OUT_OF_MEMORY, function, "heterograd: out of memory");
  } catch (const std::exception& e) {
    return fail(HG_ERROR_INTERNAL, function, e.what());
  } catch (...) {
    return fail(HG_ERROR_INTERNAL, function, "heterograd: unknown exception");
  }
}

/// A feature this build was compiled without.
[[noreturn]] inline void unsupported(const char* what) {
  throw api_error(HG_ERROR_UNSUPPORTED, std::string("heterograd: this build has no ") + what);
}

/// The MPI objects of a build without heterograd::mpi.
[[noreturn]] inline void mpi_unsupported() {
  unsupported("MPI (compile the implementation with the heterograd::mpi component)");
}

}  // namespace heterograd::c_api::detail
