// `tpusim graph`: the model's graph after each compiler pass (sw/sim/graph_report.h).
#pragma once

#include <string>

#include "sw/cli/run_cmd.h"

namespace tpu::cli {

struct GraphCommand {
  RunCommand workload;  // --model, --weights, --random-weights, --seed, --data-dir, --chip
  std::string pass;     // --pass: that pass alone
  std::string json;     // --json FILE (- for standard output)
};

void run_graph(GraphCommand& cmd);

}  // namespace tpu::cli
