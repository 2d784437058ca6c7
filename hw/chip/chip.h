// Chip: N TensorCores (v2-v4: 2), the off-chip memory shared by all of them (DDR3, HBM, or host
// memory across the link on Edge), the host link, the host interface, and the ends of the ICI
// links. Host side: `host2chip` (target: instruction queues, memory window, status) and
// `chip2host` (initiator: the cores' Read/Write_Host_Memory reach host memory through it) and
// `irq2host` (initiator: an interrupt after every Halt, address_map.h; may stay unbound). A
// System (hw/system) joins chips by their `chip2ici` and `ici2chip`.
#pragma once

#include <memory>
#include <optional>
#include <systemc>
#include <tlm>
#include <vector>

#include "hw/chip/energy.h"
#include "hw/chip/host_interface.h"
#include "hw/chip/ici_port.h"
#include "hw/chip/interconnect.h"
#include "hw/common/clock.h"
#include "hw/common/sim_options.h"
#include "hw/config/chip_config.h"
#include "hw/core/tensor_core.h"
#include "hw/memory/bandwidth.h"
#include "hw/memory/off_chip_memory.h"
#include "hw/unit/trace.h"

namespace tpu {

class Chip : public sc_core::sc_module {
  // Declared first: modules below are built from them.
  ChipConfig cfg_;
  Clock clock_;
  SimOptions options_;

 public:
  // `system_chip`: this chip's id in a system (hw/system), which binds its ICI ends; none: a
  // chip alone, which refuses ici_write. `options` reach every core and the off-chip memory.
  Chip(sc_core::sc_module_name name, ChipConfig cfg,
       std::optional<std::uint32_t> system_chip = std::nullopt, SimOptions options = {});

  [[nodiscard]] const ChipConfig& config() const { return cfg_; }
  [[nodiscard]] const SimOptions& options() const { return options_; }
  [[nodiscard]] const Clock& clock() const { return clock_; }

  // Activity of every core, by layer, plus what the host interface moved (layer 0).
  [[nodiscard]] LayerCounters counters() const;
  // Records an execution trace into `trace` (call before sc_start; `trace` outlives the run),
  // its cores numbered from `first_core` (a system's chips side by side in one trace).
  void enable_trace(Trace& trace, std::uint32_t first_core = 0);
  // Stops recording (between programs, with no instruction in flight).
  void disable_trace();
  // Closes the cycle accounting at `end` (after the run).
  void finish(Cycle end);
  // For a host that runs program after program on one elaboration (fit's steps): closes the
  // accounting at `end` (every core halted, no instruction in flight), returns the activity since
  // the previous call (or the start) and starts the counters afresh. Per core, the layers'
  // cycles add up to `end` minus the previous call's `end`.
  LayerCounters take_counters(Cycle end);
  // For a harness after the run (a host learns of halts from its interrupts).
  [[nodiscard]] std::uint64_t halts(std::uint32_t c) const { return cores[c]->sequencer->halts(); }
  [[nodiscard]] Cycle halted_at(std::uint32_t c) const { return cores[c]->sequencer->halted_at(); }

  BandwidthResource host_link_in;                  // host -> chip
  BandwidthResource host_link_out;                 // chip -> host
  std::unique_ptr<BandwidthResource> off_chip_bw;  // absent when off-chip memory is the host link
  OffChipMemory memory;
  Interconnect mem_ic;   // cores' DMA, MXU weight paths, host interface -> memory
  Interconnect host_ic;  // cores' DMA -> host, timed by the host link
  ChipSync sync;         // the cores' barrier and the ICI semaphores
  std::vector<std::unique_ptr<TensorCore>> cores;
  std::unique_ptr<HostInterface> hif;
  IciPort ici_port;    // the cores' ici_writes out to the system's fabric
  IciInbox ici_inbox;  // other chips' ici_writes in

  tlm::tlm_target_socket<>& host2chip() { return hif->host2chip; }
  tlm::tlm_initiator_socket<>& chip2host() { return host_ic.out; }
  auto& irq2host() { return hif->irq; }
  // The ICI ends, for a system to bind (docs/systems.md); a chip alone refuses ici_write.
  tlm::tlm_initiator_socket<>& chip2ici() { return ici_port.chip2ici; }
  tlm::tlm_target_socket<>& ici2chip() { return ici_inbox.ici2chip; }

 private:
  static BandwidthResource* make_off_chip_bw(const ChipConfig& cfg, const Clock& clock);

  // The host interface's byte counts already returned by take_counters.
  std::uint64_t taken_instruction_bytes_ = 0, taken_bytes_written_ = 0, taken_bytes_read_ = 0;
  std::uint64_t taken_ici_bytes_in_ = 0;
};

}  // namespace tpu
