// Runs the tpusim binary as a user would, for system tests: exit status and what it printed
// (stdout and stderr together).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace tpu::test {

struct CliResult {
  int status = -1;
  std::string out;
};

// A file of the source tree, by its path from the top.
inline std::string source(const std::string& rel) {
  return std::string(TPUSIM_SOURCE_DIR) + "/" + rel;
}

inline CliResult run_tpusim(const std::string& args) {
  const std::string cmd = std::string(TPUSIM_BINARY_DIR) + "/tpusim " + args + " 2>&1";
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) r.out += buf;
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace tpu::test
