// Uses the installed headers: the umbrella header, an RNG draw and a span over a vector.
#include <heterograd/heterograd.hpp>

#include <cstdio>
#include <vector>

int main() {
  namespace hg = heterograd;
#if !defined(HG_HAS_OPENMP)
  std::puts("consumer: HG_HAS_OPENMP missing from heterograd::openmp");
  return 1;
#endif
  std::vector<float> v(8, 1.0f);
  hg::span<float> s(v);
  const hg::philox_block b = hg::philox4x32<10>(hg::philox_block{{0, 0, 0, 0}}, 0, 0);
  const bool ok = s.size() == 8 && b[0] == 0x6627e8d5u;
  std::printf("consumer: heterograd %d.%d.%d, backend %s, %s\n", hg::version_major,
              hg::version_minor, hg::version_patch,
              hg::exec::backend_name(hg::exec::default_backend).data(), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
