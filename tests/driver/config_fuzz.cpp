// libFuzzer target over heterograd-run's configuration loader: JSON text in, a resolved
// configuration or a config_error out. Any other exception escapes and aborts (a finding), as
// does a crash, a sanitizer report or a hang (run_config_fuzz.cmake sets -timeout=).
//
// An input whose first line starts with '@' applies the rest of that line as a --set
// assignment to the document of the following lines, so the override parser is covered too;
// documents with a "tiny" block are resolved again with it merged, as --tiny does. A
// document's sweeps are read too and, when small, expanded into one method per setting and
// resolved as the tuning runs would be.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "config.hpp"
#include "sweep.hpp"

// With HG_CONFIG_FUZZ_SEEDS=<dir> set (hg_run_fuzz.cmake, after it copied the named
// experiments there), LLVMFuzzerInitialize adds one --set input built from <dir>/demo.json.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("HG_CONFIG_FUZZ_SEEDS");
  if (dir == nullptr) return 0;
  std::ifstream in(std::string(dir) + "/demo.json", std::ios::binary);
  if (!in) return 0;
  std::ofstream out(std::string(dir) + "/set-override", std::ios::binary);
  out << "@methods[0].label=BSP\n" << in.rdbuf();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string assignment;
  if (!text.empty() && text.front() == '@') {
    const auto nl = text.find('\n');
    assignment = std::string(text.substr(1, nl == std::string_view::npos ? std::string_view::npos : nl - 1));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
  }
  try {
    hgrun::json raw = hgrun::parse_config(text, "fuzz input");
    if (!assignment.empty()) hgrun::apply_override(raw, assignment);
    const hgrun::json resolved = hgrun::resolve(raw);
    (void)resolved.dump();  // config.json is written from it
    const auto grids = hgrun::sweep_grids(raw);
    std::size_t settings = 0;
    for (const auto& g : grids) settings += g.size();
    if (settings > 1 && settings <= 64) {  // (a large grid would only slow the fuzzer down)
      std::vector<hgrun::expanded_method> which;
      const hgrun::json expanded = hgrun::expand_methods(raw, grids, which);
      (void)hgrun::resolve_expanded(expanded, raw, grids, which).dump();
    }
    if (raw.is_object() && raw.contains("tiny") && raw["tiny"].is_object()) {
      raw.merge_patch(hgrun::json(raw["tiny"]));
      (void)hgrun::resolve(raw).dump();
    }
  } catch (const hgrun::config_error&) {
    // the expected outcome of a bad configuration
  }
  return 0;
}
