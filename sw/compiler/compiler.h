// Lowers a quantized network to a Program for one chip (docs/compiler.md): batch split across
// TensorCores, micro-batches sized to the unified buffer, K and N tiled to the array, output rows
// chunked to half an MXU's share of the accumulators (double buffering), work items spread over
// the MXUs, convolutions through windowed MatMuls, bias/requantization/activation on the vector
// unit, weights streamed from off-chip memory (or kept in the unified buffer when off-chip memory
// is the host link), input reads issued one micro-batch ahead.
#pragma once

#include <cstdint>

#include "hw/config/chip_config.h"
#include "sw/compiler/program.h"
#include "sw/nn/quantized.h"

namespace tpu::compiler {

struct Options {
  std::uint64_t images = 0;
  std::uint32_t batch = 256;  // images per step across the chip
};

// Throws InputError naming the layer and the sizes when the model cannot run on the chip.
Program compile(const nn::QuantizedModel& q, const ChipConfig& cfg, const Options& opt);

}  // namespace tpu::compiler
