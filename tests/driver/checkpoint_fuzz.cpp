// libFuzzer target over heterograd-run's checkpoint reader (heterograd/core/archive.hpp).
//
// The first byte picks the layer. Odd: the rest is a whole checkpoint file for
// open_checkpoint(), which returns its payload or throws checkpoint_error. Even: the rest is a
// payload; it is sealed (seal_checkpoint), opened again (which must give it back byte for
// byte), and read as the kinds of value a checkpoint holds (strings, counters, optionals,
// vectors, deques, nested vectors, a recorder, an optimizer state). The reader must fill them
// or throw std::runtime_error / std::invalid_argument: any other exception, a crash, a
// sanitizer report, an allocation past -rss_limit_mb or a hang (-timeout) is a finding.
//
// With HG_CKPT_FUZZ_SEEDS=<dir> set, LLVMFuzzerInitialize writes seed inputs into <dir>.
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/core/archive.hpp"
#include "heterograd/optim/state.hpp"
#include "heterograd/sim/recorder.hpp"

namespace {

using namespace heterograd;

struct values {
  std::string magic;
  std::uint64_t evaluations = 0;
  double wall = 0;
  std::optional<double> reached;
  std::vector<float> params;
  std::vector<bool> mask;
  std::deque<std::uint64_t> queue;
  std::vector<std::vector<float>> table;
  std::pair<std::uint64_t, double> last{};
  heterograd::optim::state<float> state;
  template <class Archive>
  void serialize(Archive& ar) {
    ar(magic, evaluations, wall, reached, params, mask, queue, table, last, state);
  }
};

std::vector<std::byte> seed_payload() {
  values v;
  v.magic = "heterograd-run checkpoint";
  v.evaluations = 7;
  v.wall = 1.5;
  v.reached = 3.25;
  v.params = {1, 2, 3};
  v.mask = {true, false, true};
  v.queue = {4, 5};
  v.table = {{1}, {2, 3}};
  v.last = {9, 0.5};
  v.state.kind = "momentum";
  v.state.count = 2;
  v.state.counters = {1};
  heterograd::sim::recorder rec(3);
  rec.set_metrics({"loss"});
  rec.record_evaluation(1.0, {0.5});
  archive_writer w;
  w(v, rec);
  return w.bytes();
}

void write_seed(const std::filesystem::path& p, std::uint8_t mode, std::string_view body) {
  std::ofstream o(p, std::ios::binary);
  o.put(static_cast<char>(mode));
  o.write(body.data(), static_cast<std::streamsize>(body.size()));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("HG_CKPT_FUZZ_SEEDS");
  if (dir == nullptr) return 0;
  const auto payload = seed_payload();
  const std::string_view raw(reinterpret_cast<const char*>(payload.data()), payload.size());
  write_seed(std::filesystem::path(dir) / "payload", 0, raw);
  write_seed(std::filesystem::path(dir) / "sealed", 1, seal_checkpoint(payload));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::span<const std::byte> body(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  if (data[0] & 1) {
    try {
      (void)open_checkpoint("fuzz.bin", std::string_view(reinterpret_cast<const char*>(body.data()), body.size()));
    } catch (const checkpoint_error&) {
    }
    return 0;
  }
  // A sealed payload opens to itself: the checksums never refuse what seal_checkpoint wrote.
  const std::string sealed = seal_checkpoint(body);
  const std::vector<std::byte> opened = open_checkpoint("fuzz.bin", sealed);
  if (opened.size() != body.size() || !std::equal(opened.begin(), opened.end(), body.begin())) std::abort();
  archive_reader r(opened);
  values v;
  heterograd::sim::recorder rec(3);
  try {
    r(v, rec);
  } catch (const std::runtime_error&) {
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
