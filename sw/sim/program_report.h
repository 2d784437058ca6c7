// The compiled program of a workload without running it (docs/python.md, `tpusim.compile`): what
// the driver would load, per core its instruction stream as assembly text (docs/isa.md).
#pragma once

#include <nlohmann/json.hpp>

#include "hw/config/system_config.h"
#include "sw/sim/session.h"

namespace tpu::sim {

// The report ("tpusim.program/1"): {"model": {"name", "file", "weights"}, "chip": {"name",
// "file"}, the workload's "images" and "batch" per chip, the program's figures as a run's report
// names them ("micro_batch_per_core", "instructions", "weights_in_unified_buffer",
// "unified_buffer_bytes_used"), "activations_off_chip", "off_chip_activation_bytes",
// "memory_image_bytes", "layers": [{"tag", "name", "type", "macs_per_image"}], "cores":
// [{"core", "instructions", "assembly"}]}. One chip's program: on a system, each chip's share.
// Throws what compile_workload throws (compiled.h).
nlohmann::ordered_json program_report(const SystemConfig& sys, const RunOptions& opt);

}  // namespace tpu::sim
