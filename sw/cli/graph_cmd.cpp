#include "sw/cli/graph_cmd.h"

#include <iostream>
#include <optional>

#include "hw/config/chip_config.h"
#include "sw/io/output.h"
#include "sw/sim/graph_report.h"

namespace tpu::cli {

void run_graph(GraphCommand& cmd) {
  resolve_workload(cmd.workload);
  io::OutputSet out;
  std::optional<std::size_t> json;
  if (!cmd.json.empty()) json = out.add(cmd.json, "--json output");
  std::optional<ChipConfig> cfg;
  if (!cmd.workload.chip.empty()) cfg = load_chip_config(cmd.workload.chip);
  out.check(workload_inputs(cmd.workload));
  const auto report = sim::graph_report(cmd.workload.options, cfg ? &*cfg : nullptr, cmd.pass);
  if (json) out.set(*json, report.dump(2) + "\n");
  out.commit();
  if (!out.uses_stdout()) std::cout << sim::graph_text(report);
}

}  // namespace tpu::cli
