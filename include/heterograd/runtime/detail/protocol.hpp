#pragma once
// The remote server's wire protocol (runtime/server.hpp; docs/runtime.md): four tags from
// remote_options::tag_base; a job header of five u64 {kind: 1 compute | 0 stop, version, job
// index, start time bits, batch}, then the parameters; a result header of four {kind: 1 result |
// 2 bye | 3 refused job, version, job index, 0 (refused job: the worker's dim)}, then the
// gradient. Every message has the protocol's size: a receive takes exactly its buffer.
//
// Membership (remote_options::membership.elastic; docs/elastic.md): a worker's header may also
// be {4 leave, its worker id, 0, 0} or {5 join, its worker id, 0, its dim}; the server answers a
// join on the job header tag with {2 welcome, version, FNV-1a of the parameters, dim, 0} and the
// parameters, or {3 refused, reason, 0, 0, the server's dim}.

#include <bit>
#include <cstdint>

namespace heterograd::runtime::detail {

struct tags {
  int job_header, job_payload, result_header, result_payload;
  explicit tags(int base) : job_header(base), job_payload(base + 1), result_header(base + 2),
                            result_payload(base + 3) {}
};

/// Kinds of the worker's header, and the server's answers to a join.
enum : std::uint64_t { result_kind = 1, bye_kind = 2, refused_job_kind = 3, leave_kind = 4, join_kind = 5 };
enum : std::uint64_t { stop_kind = 0, job_kind = 1, welcome_kind = 2, join_refused_kind = 3 };
/// Why a join was refused (the refusal's second field).
enum : std::uint64_t { join_bad_dim = 1, join_bad_worker = 2, join_member = 3 };

inline std::uint64_t bits_of(double x) { return std::bit_cast<std::uint64_t>(x); }
inline double double_of(std::uint64_t b) { return std::bit_cast<double>(b); }

inline int worker_rank(int worker, int server_rank) { return worker < server_rank ? worker : worker + 1; }
inline int worker_of_rank(int rank, int server_rank) { return rank < server_rank ? rank : rank - 1; }

}  // namespace heterograd::runtime::detail
