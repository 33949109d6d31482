#pragma once
// The remote server's wire protocol (runtime/server.hpp; docs/runtime.md): four tags from
// remote_options::tag_base; a job header of five u64 {kind: 1 compute | 0 stop, version, job
// index, start time bits, batch}, then the parameters; a result header of four {kind: 1 result |
// 2 bye | 3 refused job, version, job index, 0 (refused job: the worker's dim)}, then the
// gradient. Every message has the protocol's size: a receive takes exactly its buffer.

#include <bit>
#include <cstdint>

namespace heterograd::runtime::detail {

struct tags {
  int job_header, job_payload, result_header, result_payload;
  explicit tags(int base) : job_header(base), job_payload(base + 1), result_header(base + 2),
                            result_payload(base + 3) {}
};

inline std::uint64_t bits_of(double x) { return std::bit_cast<std::uint64_t>(x); }
inline double double_of(std::uint64_t b) { return std::bit_cast<double>(b); }

inline int worker_rank(int worker, int server_rank) { return worker < server_rank ? worker : worker + 1; }
inline int worker_of_rank(int rank, int server_rank) { return rank < server_rank ? rank : rank - 1; }

}  // namespace heterograd::runtime::detail
