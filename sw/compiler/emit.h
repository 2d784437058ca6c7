// Vector-unit emitters shared by the inference compiler (compiler.cpp) and the training lowering
// (training.cpp): one definition of how a long elementwise operation and a zero fill are split
// into instructions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "hw/common/dtype.h"
#include "hw/isa/isa.h"

namespace tpu::compiler {

// dst[i] = a[i] op b[i] for i < count elements of `type` (unified-buffer byte addresses), in
// instructions of at most 2^32 - 1 elements (the count field's width).
inline void emit_eltwise(std::vector<isa::Instruction>& out, isa::EltOp op, std::uint64_t a,
                         std::uint64_t b, std::uint64_t dst, std::uint64_t count, DType type) {
  const std::uint64_t es = size_of(type);
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint32_t>::max();
  const auto at = [](std::uint64_t x) { return UbAddr(static_cast<std::uint32_t>(x)); };
  for (std::uint64_t k = 0; k < count; k += kMax) {
    isa::Eltwise e;
    e.a = at(a + k * es), e.b = at(b + k * es), e.dst = at(dst + k * es);
    e.count = static_cast<std::uint32_t>(std::min(kMax, count - k));
    e.op = op;
    e.type = type;
    out.push_back(e);
  }
}

// `count` zeros of `type` at dst: max(+0, +0) read from a zero region of `zeros_bytes` bytes at
// `zeros`, in pieces of its size.
inline void emit_zero_fill(std::vector<isa::Instruction>& out, std::uint64_t zeros,
                           std::uint64_t zeros_bytes, std::uint64_t dst, std::uint64_t count,
                           DType type) {
  const std::uint64_t es = size_of(type), piece = zeros_bytes / es;
  for (std::uint64_t k = 0; k < count; k += piece)
    emit_eltwise(out, isa::EltOp::Max, zeros, zeros, dst + k * es, std::min(piece, count - k),
                 type);
}

}  // namespace tpu::compiler
