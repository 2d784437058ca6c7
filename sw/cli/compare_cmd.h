// `tpusim compare`: the same workload on several chips or systems (first the --chip configs, then
// the --system ones), each simulated in its own `tpusim run`
// process (the SystemC kernel cannot be reset), up to `jobs` at a time; the reports are put side
// by side as a tpusim.compare/1 JSON, a Markdown table and a CSV.
#pragma once

#include <string>
#include <vector>

#include "sw/cli/run_cmd.h"

namespace tpu::cli {

struct CompareCommand {
  std::vector<std::string> chips, systems;
  RunCommand workload;
  unsigned jobs = 0;  // 0: one per core
  std::string json, markdown, csv, trace;
};

// Returns the process exit status: 0 when every chip ran, 1 when some failed (their errors are
// in the outputs and on stderr).
int run_compare(CompareCommand& cmd);

}  // namespace tpu::cli
