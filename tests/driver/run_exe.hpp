#pragma once
// heterograd-run from a driver test: its exit status and its stderr and stdout for `args`
// (HG_RUN_EXE: the executable the test's target names, tests/driver/CMakeLists.txt).
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <utility>

#ifndef HG_RUN_EXE
#error "HG_RUN_EXE names heterograd-run"
#endif

namespace hg_test {

inline std::pair<int, std::string> run_exe(const std::string& args) {
  const std::string cmd = std::string(HG_RUN_EXE) + " " + args + " 2>&1";
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  char buf[4096];
  while (f && std::fgets(buf, sizeof buf, f)) out += buf;
  const int status = f ? pclose(f) : -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace hg_test
