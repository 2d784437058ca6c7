// The geometry of a Pool along one axis (docs/isa.md §4.8): how many outputs, and which input
// positions each output's window covers once the positions in the padding are skipped. It lives
// here, with the instruction, so that the sequencer's footprint and the vector unit's loops and
// cost agree by construction.
#pragma once

#include <cstdint>

#include "hw/isa/isa.h"

namespace tpu::isa {

// One axis of a Pool: rows (in_h, kernel_h, stride_h, pad_top, out_h) or columns.
struct PoolAxis {
  std::uint32_t in = 0, kernel = 0, stride = 0, pad = 0;
  std::uint32_t out_field = 0;  // the instruction's out_h or out_w: 0 selects valid pooling

  // The outputs along this axis: out_field, or for 0 valid pooling's (in - kernel) / stride + 1,
  // itself 0 where it does not exist (kernel 0 or larger than in, stride 0).
  [[nodiscard]] std::uint32_t outputs() const;
  // Input positions [first, last) of output o's window that lie inside the image: window
  // position k reads o * stride - pad + k. Empty when the window misses the image.
  [[nodiscard]] std::int64_t first(std::uint32_t o) const;
  [[nodiscard]] std::int64_t last(std::uint32_t o) const;
  // The sum over every output of its window's positions inside the image.
  [[nodiscard]] std::uint64_t inside_positions() const;
};

PoolAxis pool_rows(const Pool& p);
PoolAxis pool_cols(const Pool& p);

// A PoolGrad's axes, from the window registers at issue (docs/isa.md §4.18): out_h and out_w are
// always given, so there is no valid-pooling default. Dilations must be 1 (the vector unit checks).
PoolAxis pool_grad_rows(const SetWindow& g);
PoolAxis pool_grad_cols(const SetWindow& g);

}  // namespace tpu::isa
