// Compiled, not run, by the comm_request_nodiscard tests (tests/comm/CMakeLists.txt): a
// request dropped without wait() must be a compiler diagnostic (-Werror=unused-result makes
// it an error), for every transport's operations and for a user's own transport, while the
// same calls with their requests used compile cleanly.

#include <vector>

#include "heterograd/comm/inproc.hpp"
#include "heterograd/comm/request.hpp"

namespace hc = heterograd::comm;

struct user_transport {
  hc::request barrier() const { return hc::request::completed(); }
};

void drop(const hc::inproc::communicator& c, const user_transport& u, std::vector<float>& v) {
#if defined(HG_DROP_INPROC)
  c.allreduce(heterograd::span<float>(v));
#elif defined(HG_DROP_USER)
  u.barrier();
#else
  c.allreduce(heterograd::span<float>(v)).wait();
  hc::request r = u.barrier();
  r.wait();
#endif
}
