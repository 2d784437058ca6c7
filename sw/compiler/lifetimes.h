// Buffer lifetimes from the schedule (docs/compiler.md, "Passes"). The schedule is the order the
// operations run in; a tensor lives from the step that computes it to the last step that reads
// it, so a later step that reads it (a backward pass) extends its life and nothing else decides
// when a buffer is free. Tensors that spill to off-chip memory get homes first-fit in that order.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "sw/nn/quantized.h"

namespace tpu::compiler {

struct Lifetimes {
  std::vector<std::size_t> schedule;  // operation indices in the order they run
  // Per operation's tensor: the operation that reads it last, or ir::kNoOp when none does.
  std::vector<std::size_t> last_read;
  std::size_t output = ir::kGraphInput;  // the tensor the graph returns
  // The tensors operation i reads, in operand order (a view's reader reads the viewed tensor).
  [[nodiscard]] static std::vector<std::size_t> reads(const nn::QuantizedModel& q, std::size_t i);
};

// Requires: q's operations in an order where every operand comes first; that order is the
// schedule.
Lifetimes lifetimes(const nn::QuantizedModel& q);

// Off-chip homes for the tensors of computing operations other than constants: offsets within a
// region of `bytes` bytes, each taken when its operation runs and freed after its last reader
// (a tensor nothing reads, after its own step), first-fit. Two tensors alive at once never share
// a byte.
struct Homes {
  std::vector<std::uint64_t> offset;  // per operation
  std::uint64_t bytes = 0;
};
Homes spill_homes(const nn::QuantizedModel& q, const Lifetimes& l,
                  const std::function<std::uint64_t(std::size_t)>& tensor_bytes);

}  // namespace tpu::compiler
