// TensorCore: one core of the chip — sequencer, DMA, MXUs, vector unit, unified buffer and
// accumulators (J17 Figure 1; N21 for v2/v3's cores). The units run as separate processes fed
// in order by the sequencer; the scoreboard orders what they share.
#pragma once

#include <memory>
#include <string>
#include <systemc>
#include <vector>

#include "hw/common/clock.h"
#include "hw/common/counters.h"
#include "hw/common/sim_options.h"
#include "hw/config/chip_config.h"
#include "hw/core/sequencer.h"
#include "hw/dma/dma.h"
#include "hw/memory/accumulators.h"
#include "hw/memory/unified_buffer.h"
#include "hw/mxu/mxu.h"
#include "hw/vector_unit/vector_unit.h"

namespace tpu {

class TensorCore : public sc_core::sc_module {
  // Declared first: the units below hold references to them.
  std::uint32_t id_;
  LayerCounters counters_;

 public:
  // `options` reach every unit and memory of the core.
  TensorCore(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
             std::uint32_t id, ChipSync& sync, SimOptions options = {});

  [[nodiscard]] std::uint32_t id() const { return id_; }
  [[nodiscard]] const LayerCounters& counters() const { return counters_; }
  // Starts the counters afresh (between programs, with no instruction in flight).
  void reset_counters() { counters_ = LayerCounters{}; }
  // Closes the MXU cycle accounting at the chip's last cycle.
  void finish(Cycle end);

  UnifiedBuffer ub;
  Accumulators acc;
  Dma dma;
  // A second DMA engine for the inter-chip links (ici_write), so that a core's link transfers
  // overlap its memory transfers (docs/systems.md, "The system model").
  Dma ici;
  std::vector<std::unique_ptr<Mxu>> mxus;
  VectorUnit vector_unit;
  std::unique_ptr<Sequencer> sequencer;

 private:
  static CoreStorage storage_of(UnifiedBuffer& ub, Accumulators& acc);
};

}  // namespace tpu
