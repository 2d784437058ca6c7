// `tpusim graph` (docs/compiler.md, "Passes"): a model's graph IR after each pass of the compiler,
// in order — as imported, identities removed, each rewrite, and with a chip the quantization
// (element types, int8 scales), the partition, the tiling and the buffer lifetimes.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "hw/config/chip_config.h"
#include "sw/sim/session.h"

namespace tpu::sim {

// The report ("tpusim.graph/1"): {"model", "chip" (with one), "passes": [{"pass", "operations":
// [{"name", "kind", "inputs", "shape", ...its arguments and annotations}], ...}]}. `only_pass`
// keeps that pass alone (empty: every pass); an unknown name is an InputError listing them. The
// quantization calibrates on the inputs a run would use (workload.h).
nlohmann::ordered_json graph_report(const RunOptions& opt, const ChipConfig* cfg,
                                    const std::string& only_pass);

// One table per pass, one row per operation.
std::string graph_text(const nlohmann::ordered_json& report);

}  // namespace tpu::sim
