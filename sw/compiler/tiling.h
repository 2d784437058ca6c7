// Tiling (docs/compiler.md, "Passes"): every weighted operation's K x N kernel cut into tiles of
// the array's rows x columns, each packed row-major for ReadWeights; its parameter records for
// Activate; and the off-chip memory image they make, constants and Embedding tables after them.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "hw/config/chip_config.h"
#include "sw/nn/quantized.h"

namespace tpu::compiler {

inline constexpr std::uint64_t kParamRecordBytes = 12;  // isa::Activate: {bias, scale, shift}

// One weighted operation: K rows (the window, or the flattened input) by N output channels, in
// k_tiles x n_tiles tiles; tile (j, kt) holds rows kt*R.. and columns j*C.. (R x C the array). A
// DepthwiseConv2D is the convolution whose kernel is block-diagonal: row (p, ci) of window
// position p and input channel ci holds channel ci's taps in columns ci*m .. ci*m + m - 1 only.
// tile_off of a tile that holds only zeros (a DepthwiseConv2D's block-diagonal kernel away from
// its diagonal): nothing is stored and nothing multiplies by it.
inline constexpr std::uint64_t kNoTile = ~std::uint64_t{0};

struct WeightedPlan {
  std::uint32_t K = 0, N = 0;
  std::uint32_t k_tiles = 0, n_tiles = 0;
  std::uint64_t params_off = 0;         // first record in the params blob
  std::vector<std::uint64_t> tile_off;  // [j * k_tiles + kt] -> offset in the weights blob
};

// An LSTM's two kernels (input W: K = features, recurrent U: K = units; 4 units columns each, gates
// i, f, c, o) in tiles whose columns stay within one gate, so each gate's block of Activate
// output lands in its own region: column tile jt of gate g holds columns g*units + jt*C ...
struct LstmPlan {
  std::uint32_t col_tiles = 0;  // per gate: ceil(units / C)
  std::uint32_t x_k_tiles = 0, h_k_tiles = 0;
  // [(g * col_tiles + jt) * k_tiles + kt] -> offset in the weights blob
  std::vector<std::uint64_t> x_off, h_off;
  // In the params blob: Activate records per column for zx (with the bias) and zh, then two map
  // records {1, 0, 0} (the recurrent activation, the conversion of h) and {1, 0, alpha}.
  std::uint64_t x_params = 0, h_params = 0, map_params = 0;
};

struct Tiling {
  std::vector<WeightedPlan> plans;  // per operation (empty for those without weights)
  std::vector<std::uint8_t> weights, params;
  // Off-chip memory: the weight tiles at weights_addr, the records at params_addr, then each
  // constant; `end` is the first byte after them.
  std::uint64_t weights_addr = 0, params_addr = 0, end = 0;
  std::map<std::size_t, std::uint64_t> constant_addr;  // Constant operation -> address
  std::map<std::size_t, std::uint64_t> table_addr;     // Embedding operation -> its table
  // Map operations (a standalone BatchNormalization, PReLU or activation): their per-channel
  // records {a, b, alpha} (fp32, 12 bytes each) in the params blob, after the Activate records.
  std::map<std::size_t, std::uint64_t> map_params_off;
  std::map<std::size_t, LstmPlan> lstm;  // LSTM operation -> its plan
};

// An Embedding's table as the chip holds it: its rows in the chip's encoding (int8, or bf16
// little-endian).
std::vector<std::uint8_t> table_bytes(const nn::QuantizedModel& q, std::size_t op);

// Requires: q quantized for cfg's MXU. Throws InputError naming the operation when K or N exceed
// the ISA's fields, or when weights, parameters and constants exceed cfg's off-chip memory.
Tiling tile(const nn::QuantizedModel& q, const ChipConfig& cfg);

}  // namespace tpu::compiler
