// model.kind "torch": the LibTorch plugin (run_torch.cpp, built as the module hg_driver_torch
// with the torch component) is loaded on the first torch model a run asks for. heterograd-run
// itself does not link LibTorch: the runs that use none do not pay its start-up. The plugin
// calls back into the driver (sample streams, file reads), whose symbols every executable that
// links hg_driver exports (-rdynamic).
//
// Where it is: $HG_TORCH_PLUGIN when set; else beside an installed heterograd-run
// (<prefix>/lib/heterograd/); else where this build put it. Without the torch component (or
// without the file) a torch model is a config_error naming model.kind.
#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <string>

#include "files.hpp"
#include "problems.hpp"

namespace hgrun {

namespace {

[[noreturn]] void no_torch(const std::string& why) {
  throw config_error("model.kind", "\"torch\" needs LibTorch built in: install libtorch-dev (./hg deps --libtorch) and "
                                   "configure with -DHG_WITH_LIBTORCH=ON (" + why + ")");
}

void* entry(const char* name) {
#ifndef HG_TORCH_PLUGIN
  (void)name;
  no_torch("this build has no torch component");
#else
  static std::mutex m;
  static void* handle = nullptr;
  std::lock_guard<std::mutex> lock(m);
  if (!handle) {
    const std::filesystem::path file =
        shipped_path("HG_TORCH_PLUGIN", HG_INSTALL_TORCH_PLUGIN, std::filesystem::path(HG_TORCH_PLUGIN));
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) no_torch("the driver's LibTorch plugin " + file.string() + " is missing");
    handle = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) no_torch(std::string("the driver's LibTorch plugin does not load: ") + ::dlerror());
  }
  void* f = ::dlsym(handle, name);
  if (!f) no_torch(std::string("the driver's LibTorch plugin lacks ") + name);
  return f;
#endif
}

}  // namespace

std::unique_ptr<classifier> make_torch_classifier(const experiment& e, const json& c, std::uint64_t seed) {
  using make = classifier* (*)(const experiment&, const json&, std::uint64_t);
  return std::unique_ptr<classifier>(reinterpret_cast<make>(entry("hgrun_torch_classifier"))(e, c, seed));
}

std::unique_ptr<problem> make_text_problem(const experiment& e, const json& c, std::uint64_t seed) {
  using make = problem* (*)(const experiment&, const json&, std::uint64_t);
  return std::unique_ptr<problem>(reinterpret_cast<make>(entry("hgrun_torch_text_problem"))(e, c, seed));
}

}  // namespace hgrun
