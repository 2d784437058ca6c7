// VectorUnit: a TensorCore's activation/pooling/elementwise pipeline (J17 §2's Activate and
// pooling hardware; the 128 x 8 vector unit of v2-v4). One process runs its queue in order; the
// math and the cost formula are VectorOps's.
#pragma once

#include <string>
#include <systemc>

#include "hw/common/clock.h"
#include "hw/common/counters.h"
#include "hw/config/chip_config.h"
#include "hw/unit/issued.h"
#include "hw/vector_unit/vector_ops.h"

namespace tpu {

class VectorUnit : public sc_core::sc_module {
 public:
  UnitQueue queue;  // the instructions isa::unit_of gives the vector unit

  // Timing only (SimOptions): VectorOps's.
  VectorUnit(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
             const CoreStorage& storage, LayerCounters& counters, std::string core_name,
             SimOptions options = {});

 private:
  void run();

  const ChipConfig& cfg_;
  const Clock& clock_;
  CoreStorage storage_;
  LayerCounters& counters_;
  std::string core_name_;
  VectorOps ops_;
};

}  // namespace tpu
