// The compiler (docs/compiler.md): passes over the graph IR, in this order —
//   rewrite (rewrite.h: BatchNorm folding, activation fusion, padding folding; identities before)
//   → quantize (sw/nn/quantized.h: types, int8 scales, parameters)
//   → partition over cores (partition.h) → tiling (tiling.h) → buffer lifetimes from the schedule
//   (lifetimes.h) → code generation: micro-batches sized to the unified buffer, output rows
//   chunked to half an MXU's share of the accumulators (double buffering), work spread over the
//   MXUs, convolutions through windowed MatMuls, bias/requantization/activation on the vector
//   unit, weights streamed from off-chip memory (or kept in the unified buffer when off-chip
//   memory is the host link), input reads issued one micro-batch ahead.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hw/config/chip_config.h"
#include "sw/compiler/partition.h"
#include "sw/compiler/program.h"
#include "sw/nn/quantized.h"

namespace tpu::compiler {

// Instructions a driver pushes into a core's queue per host write (sw/driver/host_link.h): each
// write pays the host link's latency, which the micro-batch estimate counts too.
inline constexpr std::size_t kInstructionsPerWrite = 64;

// Whether the code generator lowers operation kind k (its entry in the lowering table).
bool has_lowering(ir::OpKind k);

// The model as the chips compute it: `source` (identities removed, remove_identities) rewritten
// (rewrite.h) and quantized for an MXU taking `input_type` in tiles of `tile_rows`; int8 scales
// come from `source` calibrated on `calibration` (n_cal images, NHWC floats).
nn::QuantizedModel prepare(const ir::Graph& source, const nn::Weights& w, DType input_type,
                           std::uint32_t tile_rows, const float* calibration, std::size_t n_cal);

// Lowers q (whose graph is `source` after the rewrites, sw/compiler/rewrite.h) for the chip; the
// program's layers, the rows of the report, are source's operations. Throws InputError naming the
// layer and the sizes when the model cannot run on the chip.
Program compile(const nn::QuantizedModel& q, const ir::Graph& source, const ChipConfig& cfg,
                const Options& opt);

}  // namespace tpu::compiler
