// One workload on one chip or every chip of a system, end to end: load the model, its weights and
// inputs; quantize for the chip; compile; elaborate the chip and the driver; simulate; decode the
// outputs; run the quantized reference and compare bit for bit; build the report ("Report JSON" in
// DESIGN.md, docs/report.md). One simulation per process: the SystemC kernel cannot be reset.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "hw/config/chip_config.h"
#include "hw/config/system_config.h"

namespace tpu::sim {

struct RunOptions {
  std::string model = "configs/models/fashion_mnist_cnn.json";
  std::string topology;  // --topology: a SCALE-Sim CSV to run instead of `model` (random weights)
  std::optional<std::string> weights;  // default: configs/weights/<model name>.bin if it exists
  bool random_weights = false;         // --random-weights: seeded, for performance studies
  std::uint64_t seed = 1;
  std::string data_dir;  // default: the Debian dataset-fashion-mnist directory
  std::uint64_t images = 10000;
  std::uint32_t batch = 256;
  bool check = true;  // run the quantized reference and compare
  // Cycles, bytes, counts and energy only (SimOptions): no outputs computed, so no check and no
  // accuracy; the report says "outputs_computed": false (docs/report.md).
  bool timing_only = false;
  std::string trace;  // a Chrome trace-event JSON is wanted for this file (docs/trace.md)
};

struct RunResult {
  nlohmann::ordered_json report;
  std::string trace_json;  // when RunOptions::trace names a file: its content (docs/trace.md)
};

// Throws InputError for bad inputs and ProgramError (via sc_report) when the chip stops on an
// instruction; the caller prints one line. Writes nothing: the caller writes the report and the
// trace (sw/io/output.h), all or nothing.
RunResult run_session(const ChipConfig& cfg, const RunOptions& opt);
// On every chip of `sys`, each running the same program on an equal share of the images and of
// the batch (docs/systems.md, "Inference on a system"); a one-chip system is its chip.
RunResult run_session(const SystemConfig& sys, const RunOptions& opt);

// run_session, then the trace written to RunOptions::trace; returns the report (tests, tools).
nlohmann::ordered_json run_workload(const ChipConfig& cfg, const RunOptions& opt);
nlohmann::ordered_json run_workload(const SystemConfig& sys, const RunOptions& opt);

// The short human summary `tpusim run` prints.
std::string summary(const nlohmann::ordered_json& report);

}  // namespace tpu::sim
