// The front half of a run, shared by `tpusim run` and the program inspection of the Python API
// (docs/python.md): load the model, its weights and inputs; quantize for the chip; compile.
// Nothing here elaborates SystemC.
#pragma once

#include <cstdint>
#include <string>

#include "hw/config/system_config.h"
#include "sw/compiler/program.h"
#include "sw/ir/graph.h"
#include "sw/nn/quantized.h"
#include "sw/nn/weights.h"
#include "sw/sim/session.h"
#include "sw/sim/workload.h"

namespace tpu::sim {

struct CompiledWorkload {
  std::string model_file;  // the model's or the topology's file
  ir::Graph model;         // identities removed (compiler::remove_identities)
  nn::Weights weights;
  std::string weights_source;
  Inputs inputs;
  nn::QuantizedModel quantized;
  compiler::Program program;  // one chip's: its share of the images and of the batch
  std::uint64_t images_per_chip = 0;
};

// What the workload's inputs are loaded for: every image of the run, or the calibration images
// alone (the program does not depend on the images' values, only on their count).
enum class InputsFor { Run, CalibrationOnly };

// Throws InputError when the images or the batch do not split evenly over the chips of `sys`,
// when the run does not fit the host's memory (host_memory.h), or for a bad model, weights file
// or inputs; compiler::compile's InputError when the model cannot run on the chip.
CompiledWorkload compile_workload(const SystemConfig& sys, const RunOptions& opt,
                                  InputsFor inputs_for = InputsFor::Run);

}  // namespace tpu::sim
