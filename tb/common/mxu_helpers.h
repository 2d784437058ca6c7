// Small builders the MXU tests share: an MXU config of any size and type, and a ReadWeights.
#pragma once

#include <cstdint>

#include "hw/config/chip_config.h"
#include "hw/isa/isa.h"

namespace tpu::test {

// One MXU of rows x cols with input type `input` (int8 accumulates in int32, bf16 in fp32), the
// v1 weight FIFO and double buffering.
inline MxuConfig mxu_config(std::uint32_t rows, std::uint32_t cols, DType input) {
  MxuConfig c;
  c.count = 1;
  c.rows = rows;
  c.cols = cols;
  c.input_type = input;
  c.acc_type = input == DType::Int8 ? DType::Int32 : DType::Fp32;
  c.weight_fifo_tiles = 4;
  c.weight_buffers = 2;
  return c;
}

// read_weights of the stored rows x cols matrix at `addr` (docs/isa.md §4.4).
inline isa::ReadWeights read_weights(bool from_ub, std::uint64_t addr, std::uint32_t rows,
                                     std::uint32_t cols, std::uint32_t stride, bool transpose) {
  isa::ReadWeights rw;
  rw.source = from_ub ? isa::WeightSource::UnifiedBuffer : isa::WeightSource::OffChip;
  rw.addr = addr;
  rw.rows = static_cast<std::uint16_t>(rows);
  rw.cols = static_cast<std::uint16_t>(cols);
  rw.stride = stride;
  rw.transpose = transpose;
  return rw;
}

}  // namespace tpu::test
