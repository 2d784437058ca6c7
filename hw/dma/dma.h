// Dma: a TensorCore's data mover between the unified buffer and off-chip memory (dma2mem), host
// memory across the host link (dma2host) or another chip's off-chip memory over the ICI links
// (dma2ici) — J17's Read_Host_Memory / Write_Host_Memory plus
// the HBM-resident activations of v2-v4 and the embedding lookups (Gather) of layers whose
// tables live off chip. One transfer at a time, in order; the far side's bandwidth resource
// times it (shared with every other initiator), and the UB port adds only what it cannot overlap.
//
// Timing only (SimOptions): the memories move no bytes. A gather's row addresses are values (its
// indices, in the unified buffer), so it reads row 0 of its table for every index, without
// reading or checking the indices: a row's time does not depend on where it lies (each is its
// own transfer of row_bytes, docs/timing-model.md), so the timing and the counts are the same.
#pragma once

#include <tlm_utils/simple_initiator_socket.h>

#include <string>
#include <systemc>
#include <tlm>

#include "hw/common/clock.h"
#include "hw/common/counters.h"
#include "hw/common/sim_options.h"
#include "hw/config/chip_config.h"
#include "hw/unit/issued.h"

namespace tpu {

class Dma : public sc_core::sc_module {
 public:
  tlm_utils::simple_initiator_socket<Dma> dma2mem;
  tlm_utils::simple_initiator_socket<Dma> dma2host;
  tlm_utils::simple_initiator_socket<Dma> dma2ici;  // ici_write: to the chip's ICI port
  UnitQueue queue;  // ReadHost, WriteHost, ReadMem, WriteMem, Gather, IciWrite

  Dma(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
      const CoreStorage& storage, LayerCounters& counters, std::string core_name,
      SimOptions options = {}, int queue_depth = kUnitQueueDepth);

  // Where the region forms of ici_wait and sync wait (the ICI engine's; none: refused).
  void set_engine_sync(EngineSync* s) { engine_sync_ = s; }

 private:
  void run();
  // One transfer of `bytes` between UB `ub` and `far` on the host link or off-chip memory:
  // max(far side, UB port) cycles. Stops the run if either side refuses it.
  void transfer(const InFlight& f, bool to_host, tlm::tlm_command cmd, std::uint64_t far,
                std::uint64_t ub, std::uint64_t bytes);
  // The indices, then one off-chip transfer per row (docs/timing-model.md, DMA).
  void gather(const InFlight& f, const isa::Gather& g, Counters& c);
  // Over the ICI fabric into a chip's off-chip memory: max(the fabric's transfer, UB port)
  // cycles (docs/systems.md).
  void ici_write(const InFlight& f, const isa::IciWrite& w, Counters& c);
  [[nodiscard]] Cycles ub_port_cycles(std::uint64_t bytes) const;

  const ChipConfig& cfg_;
  const Clock& clock_;
  CoreStorage storage_;
  LayerCounters& counters_;
  std::string core_name_;
  bool timing_only_;
  EngineSync* engine_sync_ = nullptr;
};

}  // namespace tpu
