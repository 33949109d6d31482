#pragma once
// nccl: collectives on device buffers, enqueued on a CUDA stream (NCCL >= 2.12). Built only
// under nvcc with the nccl component (HG_HAS_NCCL); elsewhere this header is empty.
//
// - A communicator is made collectively from a unique id that rank 0 draws and broadcasts
//   over a host transport (inproc or mpi): communicator::create(bootstrap, device, stream).
//   Every rank has already answered the bootstrap broadcast when NCCL initialises, so the
//   initialisation is blocking: with a non-blocking communicator (ncclConfig_t::blocking = 0)
//   the first collective on an H200 (NCCL shipped with CUDA 13) failed with "Attempt to use
//   communicator before the previous operation returned ncclSuccess" although
//   ncclCommGetAsyncError had reported success (NCCL issue #1734 describes that race). A rank
//   that never joins is caught by the bootstrap broadcast's deadline.
// - Each operation enqueues NCCL work on the stream and records an event; the request's
//   test() queries the event and the communicator's asynchronous error; wait() polls both
//   against the deadline. A timeout aborts the NCCL communicator (ncclCommAbort): the handle
//   then fails every later operation.
// - Weighted sums use NCCL's pre-multiplied sum (ncclRedOpCreatePreMulSum); a weighted
//   average also reduces the weights and divides on the device.
// - NCCL has no tags and no any-source receive: send/recv here are untagged, peer to peer.
//   The nccl communicator is a collective_transport<communicator, device_space>, not a full
//   transport.

#if defined(__CUDACC__) && defined(HG_HAS_NCCL)

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "heterograd/comm/concepts.hpp"
#include "heterograd/comm/detail/frontend.hpp"
#include "heterograd/comm/request.hpp"
#include "heterograd/comm/types.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::comm::nccl {

namespace detail {

inline void check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  throw comm_error(std::string("heterograd: comm: ") + what + ": " + ncclGetErrorString(r));
}
inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw comm_error(std::string("heterograd: comm: ") + what + ": " + cudaGetErrorString(e));
}

template <class T>
ncclDataType_t datatype() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) return ncclFloat32;
  else if constexpr (std::is_same_v<U, double>) return ncclFloat64;
  else if constexpr (std::is_signed_v<U> && sizeof(U) == 1) return ncclInt8;
  else if constexpr (std::is_unsigned_v<U> && sizeof(U) == 1) return ncclUint8;
  else if constexpr (std::is_signed_v<U> && sizeof(U) == 4) return ncclInt32;
  else if constexpr (std::is_unsigned_v<U> && sizeof(U) == 4) return ncclUint32;
  else if constexpr (std::is_signed_v<U> && sizeof(U) == 8) return ncclInt64;
  else return ncclUint64;
}

inline ncclRedOp_t red_op(reduce_op op) {
  switch (op) {
    case reduce_op::min: return ncclMin;
    case reduce_op::max: return ncclMax;
    case reduce_op::avg: return ncclAvg;
    default: return ncclSum;
  }
}

template <class T>
__global__ void divide_kernel(T* x, std::size_t n, const double* d) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] = x[i] / static_cast<T>(*d);  // reads n, writes n elements
}

struct comm_state {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int rank = 0, size = 1, device = 0;
  double* scratch = nullptr;  // device: weight sums and barrier tokens
  std::atomic<bool> failed{false};
  ~comm_state() {
    if (scratch) cudaFree(scratch);
    if (!comm) return;
    if (failed.load()) {
      ncclCommAbort(comm);
    } else {
      ncclCommFinalize(comm);
      ncclCommDestroy(comm);
    }
  }
  /// Waits (bounded) until a non-blocking NCCL call has been enqueued.
  void settle(comm::detail::real_clock::time_point until) {
    ncclResult_t st = ncclInProgress;
    for (;;) {
      check(ncclCommGetAsyncError(comm, &st), "ncclCommGetAsyncError");
      if (st != ncclInProgress) break;
      if (comm::detail::real_clock::now() >= until) {
        failed.store(true);
        throw timeout_error("heterograd: comm: NCCL call still in progress at its deadline");
      }
      std::this_thread::yield();
    }
    check(st, "NCCL");
  }
};

class op_state final : public comm::detail::request_state {
 public:
  op_state(std::shared_ptr<comm_state> c, std::string what) : c_(std::move(c)), what_(std::move(what)) {
    check_cuda(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~op_state() override { cudaEventDestroy(ev_); }
  void record() { check_cuda(cudaEventRecord(ev_, c_->stream), "cudaEventRecord"); }

 protected:
  std::string describe() const override { return what_ + " on rank " + std::to_string(c_->rank); }
  bool progress() override {
    const cudaError_t e = cudaEventQuery(ev_);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) check_cuda(e, "cudaEventQuery");
    ncclResult_t st = ncclSuccess;
    check(ncclCommGetAsyncError(c_->comm, &st), "ncclCommGetAsyncError");
    if (st != ncclSuccess && st != ncclInProgress) {
      c_->failed.store(true);
      check(st, what_.c_str());
    }
    return false;
  }
  void idle(comm::detail::real_clock::time_point until) override {
    std::this_thread::sleep_until(std::min(until, comm::detail::real_clock::now() + std::chrono::microseconds(20)));
  }
  void on_timeout(const std::string& what) override {
    c_->failed.store(true);
    ncclCommAbort(c_->comm);
    c_->comm = nullptr;
    fail(std::make_exception_ptr(timeout_error(what)));
  }

 private:
  std::shared_ptr<comm_state> c_;
  std::string what_;
  cudaEvent_t ev_{};
};

}  // namespace detail

/// A rank's handle on an NCCL communicator. Cheap to copy; copies share it.
class communicator {
 public:
  communicator() = default;

  /// Collective over `bootstrap` (a host transport: inproc or mpi): rank 0 draws the unique
  /// id and broadcasts it; every rank then joins the NCCL communicator on `device`.
  template <class Bootstrap>
    requires transport<Bootstrap>
  static communicator create(const Bootstrap& bootstrap, int device, cudaStream_t stream = nullptr,
                             seconds timeout = default_timeout) {
    comm::detail::validate_timeout("nccl.create.timeout", timeout);
    ncclUniqueId id{};
    if (bootstrap.rank() == 0) detail::check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    broadcast_options bo;
    bo.timeout = timeout;
    bootstrap.broadcast(span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&id), sizeof(id)), 0, bo).wait();
    auto s = std::make_shared<detail::comm_state>();
    s->rank = bootstrap.rank();
    s->size = bootstrap.size();
    s->device = device;
    s->stream = stream;
    detail::check_cuda(cudaSetDevice(device), "cudaSetDevice");
    detail::check_cuda(cudaMalloc(&s->scratch, 2 * sizeof(double)), "cudaMalloc");
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 1;
    detail::check(ncclCommInitRankConfig(&s->comm, s->size, id, s->rank, &cfg), "ncclCommInitRankConfig");
    communicator c;
    c.s_ = std::move(s);
    return c;
  }

  bool valid() const { return s_ != nullptr; }
  int rank() const { return s_ ? s_->rank : 0; }
  int size() const { return s_ ? s_->size : 0; }
  cudaStream_t stream() const { return s_ ? s_->stream : nullptr; }
  bool failed() const { return s_ && s_->failed.load(); }

  template <element T>
  request allreduce(span<T, device_space> data, const allreduce_options& o = {}) const {
    comm::detail::check_allreduce<T>(*this, o);
    return run("allreduce", o.timeout, [&](detail::comm_state& s) {
      if (o.weight) {
        // sum_i w_i x_i by NCCL's pre-multiplied sum; an average then divides by sum_i w_i.
        T w = static_cast<T>(*o.weight);
        ncclRedOp_t op;
        detail::check(ncclRedOpCreatePreMulSum(&op, &w, detail::datatype<T>(), ncclScalarHostImmediate, s.comm),
                      "ncclRedOpCreatePreMulSum");
        detail::check(ncclAllReduce(data.data(), data.data(), data.size(), detail::datatype<T>(), op, s.comm, s.stream),
                      "ncclAllReduce");
        detail::check(ncclRedOpDestroy(op, s.comm), "ncclRedOpDestroy");
        if (o.op == reduce_op::avg) {
          const double wv = *o.weight;
          detail::check_cuda(cudaMemcpyAsync(s.scratch, &wv, sizeof(double), cudaMemcpyHostToDevice, s.stream),
                             "cudaMemcpyAsync");
          detail::check(ncclAllReduce(s.scratch, s.scratch, 1, ncclFloat64, ncclSum, s.comm, s.stream),
                        "ncclAllReduce");
          const unsigned blocks = static_cast<unsigned>((data.size() + 255) / 256);
          if (blocks) detail::divide_kernel<<<blocks, 256, 0, s.stream>>>(data.data(), data.size(), s.scratch);
        }
      } else {
        detail::check(ncclAllReduce(data.data(), data.data(), data.size(), detail::datatype<T>(),
                                    detail::red_op(o.op), s.comm, s.stream),
                      "ncclAllReduce");
      }
    });
  }

  template <class U, element T>
    requires std::same_as<std::remove_const_t<U>, T>
  request reduce_scatter(span<U, device_space> in, span<T, device_space> out,
                         const reduce_scatter_options& o = {}) const {
    comm::detail::check_reduce_scatter(*this, in.size(), out.size(), o);
    return run("reduce_scatter", o.timeout, [&](detail::comm_state& s) {
      detail::check(ncclReduceScatter(in.data(), out.data(), out.size(), detail::datatype<T>(),
                                      detail::red_op(o.op), s.comm, s.stream),
                    "ncclReduceScatter");
    });
  }

  template <class U, element T>
    requires std::same_as<std::remove_const_t<U>, T>
  request allgather(span<U, device_space> in, span<T, device_space> out,
                    const allgather_options& o = {}) const {
    comm::detail::check_allgather(*this, in.size(), out.size(), o);
    return run("allgather", o.timeout, [&](detail::comm_state& s) {
      detail::check(ncclAllGather(in.data(), out.data(), in.size(), detail::datatype<T>(), s.comm, s.stream),
                    "ncclAllGather");
    });
  }

  template <element T>
  request broadcast(span<T, device_space> data, int root, const broadcast_options& o = {}) const {
    comm::detail::check_broadcast(*this, root, o);
    return run("broadcast", o.timeout, [&](detail::comm_state& s) {
      detail::check(ncclBroadcast(data.data(), data.data(), data.size(), detail::datatype<T>(), root,
                                  s.comm, s.stream),
                    "ncclBroadcast");
    });
  }

  /// A token allreduce: completes once every rank enqueued it and the stream reached it.
  request barrier(const barrier_options& o = {}) const {
    comm::detail::check_barrier(*this, o);
    return run("barrier", o.timeout, [&](detail::comm_state& s) {
      detail::check(ncclAllReduce(s.scratch + 1, s.scratch + 1, 1, ncclFloat64, ncclSum, s.comm, s.stream),
                    "ncclAllReduce");
    });
  }

  /// Untagged peer-to-peer (NCCL has no tags and no any-source receive).
  template <class U>
    requires element<std::remove_const_t<U>>
  request send(span<U, device_space> data, int peer, const send_options& o = {}) const {
    using T = std::remove_const_t<U>;
    comm::detail::check_peer(*this, "send", peer, o.timeout);
    return run("send", o.timeout, [&](detail::comm_state& s) {
      detail::check(ncclSend(data.data(), data.size(), detail::datatype<T>(), peer, s.comm, s.stream), "ncclSend");
    });
  }
  template <element T>
  request recv(span<T, device_space> data, int peer, const recv_options& o = {}) const {
    comm::detail::check_peer(*this, "recv", peer, o.timeout);
    return run("recv", o.timeout, [&](detail::comm_state& s) {
      detail::check(ncclRecv(data.data(), data.size(), detail::datatype<T>(), peer, s.comm, s.stream), "ncclRecv");
    });
  }

 private:
  template <class Enqueue>
  request run(const char* what, seconds timeout, Enqueue&& enqueue) const {
    if (s_->failed.load())
      return request::failed(std::make_exception_ptr(
          aborted_error(s_->rank, "the NCCL communicator failed or timed out earlier")));
    try {
      detail::check_cuda(cudaSetDevice(s_->device), "cudaSetDevice");
      auto st = std::make_shared<detail::op_state>(s_, what);
      st->set_deadline(comm::detail::time_source{}, timeout, comm::detail::wait_policy{64, 4});
      enqueue(*s_);
      s_->settle(comm::detail::real_clock::now() +
                 std::chrono::duration_cast<comm::detail::real_clock::duration>(timeout));
      st->record();
      return request(std::move(st));
    } catch (...) {
      return request::failed(std::current_exception());
    }
  }

  std::shared_ptr<detail::comm_state> s_{};
};

static_assert(collective_transport<communicator, device_space>);

}  // namespace heterograd::comm::nccl

#endif  // __CUDACC__ && HG_HAS_NCCL
