// The vector unit's math and cost, without the kernel. Each function executes one instruction
// on views of a core's unified buffer and accumulators and throws ProgramError (naming the
// opcode, the field and the address) when the instruction reaches outside them or has a field
// the unit cannot honour. Semantics: docs/isa.md; the scalar definitions this unit and the
// reference inference both follow live in the numerics library (numerics/).
//
// Timing only (SimOptions): each function checks the instruction's fields and its ranges in the
// unified buffer and accumulators as always, then returns before it reads a value. The checks
// of values (xent's labels, update's record, activate's requantization records) are therefore
// not made. cost() is the same: it never depended on values.
#pragma once

#include <cstdint>

#include "hw/common/sim_options.h"
#include "hw/config/chip_config.h"
#include "hw/isa/isa.h"

namespace tpu {

struct UbView {
  std::uint8_t* data = nullptr;
  std::uint64_t bytes = 0;
};

struct AccView {
  std::uint32_t* data = nullptr;  // entries x words_per_entry 32-bit words
  std::uint32_t entries = 0;
  std::uint32_t words_per_entry = 0;  // = mxu.cols
  DType type = DType::Int32;          // int32 or fp32
};

// What one vector instruction costs: its duration and the actions the energy model counts.
struct VectorCost {
  std::uint64_t cycles = 0;       // latency + max(element throughput, UB port) cycles
  std::uint64_t element_ops = 0;  // lane operations (energy: vector_op_pj each)
  std::uint64_t ub_bytes_read = 0;
  std::uint64_t ub_bytes_written = 0;
  std::uint64_t acc_bytes_read = 0;
};

class VectorOps {
 public:
  explicit VectorOps(const ChipConfig& cfg, SimOptions options = {});

  void activate(const isa::Activate& a, const AccView& acc, UbView ub) const;
  void pool(const isa::Pool& p, UbView ub) const;
  void eltwise(const isa::Eltwise& e, UbView ub) const;
  void softmax(const isa::Softmax& s, UbView ub) const;
  void copy(const isa::Copy& c, UbView ub) const;
  void map(const isa::Map& m, UbView ub) const;
  void xent(const isa::Xent& x, UbView ub) const;
  void update(const isa::Update& u, UbView ub) const;
  void reduce(const isa::Reduce& r, UbView ub) const;
  // `window`: the window registers at the PoolGrad's issue (its geometry).
  void pool_grad(const isa::PoolGrad& g, const isa::SetWindow& window, UbView ub) const;

  [[nodiscard]] VectorCost cost(const isa::Activate& a) const;
  [[nodiscard]] VectorCost cost(const isa::Pool& p) const;
  [[nodiscard]] VectorCost cost(const isa::Eltwise& e) const;
  [[nodiscard]] VectorCost cost(const isa::Softmax& s) const;
  [[nodiscard]] VectorCost cost(const isa::Copy& c) const;
  [[nodiscard]] VectorCost cost(const isa::Map& m) const;
  [[nodiscard]] VectorCost cost(const isa::Xent& x) const;
  [[nodiscard]] VectorCost cost(const isa::Update& u) const;
  [[nodiscard]] VectorCost cost(const isa::Reduce& r) const;
  [[nodiscard]] VectorCost cost(const isa::PoolGrad& g, const isa::SetWindow& window) const;

 private:
  const ChipConfig& cfg_;
  bool timing_only_;
};

}  // namespace tpu
