// OffChipMemory: the chip's weight and activation memory (J17: 8 GiB DDR3 on TPU v1; N21: HBM
// on v2-v4; on Edge host memory reached over the USB link), a TLM-2.0 target around a
// SparseMemory, timed by a shared BandwidthResource.
//
// Timing: b_transport blocks, so it must be called from an initiator's SC_THREAD. It first
// honours the loosely-timed offset — wait(delay), delay = 0, then on to the next whole cycle of
// the chip clock — and then moves the bytes through the bandwidth resource (its latency plus
// the bytes at the rate the concurrent transfers share), then copies them. The resource is the
// chip's DDR3/HBM channels or, for kind host-link, the host link's own resource, so on Edge
// parameter streaming and host transfers share the USB link.
//
// With `off_chip_memory.model` "structured" (docs/memory-model.md) the bytes move through a
// DramTiming instead (kinds ddr3 and hbm): the latency first, as above, then every row segment of
// the transaction (each StridedRows row at its own address) booked on its channel's bus first
// come, first served; the transaction completes on the first whole cycle at or after its last
// byte. For kind host-link the link's bandwidth resource still carries the bytes, each packet
// with its framing: `wire_bytes` of them per row.
//
// A StridedRows extension (hw/common/strided_rows.h) makes the transaction its rows, each its
// own transfer of row_bytes through the bandwidth resource, all started together
// (BandwidthResource::transfer_each); a row outside the memory is refused, naming it, before any
// time passes.
//
// No DMI: the storage is sparse pages, not one array, so get_direct_mem_ptr returns false.
// Debug transport is untimed and uncounted (the driver loads memory images at time zero).
//
// Timing only (SimOptions): no bytes are stored or copied, by b_transport or transport_dbg (a
// read leaves the initiator's buffer as it was), so no page is ever allocated; the checks, the
// timing and the counts are as always.
#pragma once

#include <tlm_utils/simple_target_socket.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <systemc>
#include <tlm>

#include "hw/common/clock.h"
#include "hw/common/sim_options.h"
#include "hw/common/strided_rows.h"
#include "hw/config/chip_config.h"
#include "hw/memory/bandwidth.h"
#include "hw/memory/dram_timing.h"
#include "hw/memory/sparse_memory.h"

namespace tpu {

class OffChipMemory : public sc_core::sc_module {
 public:
  tlm_utils::simple_target_socket<OffChipMemory> socket;

  // cfg.off_chip_memory.bytes of storage. Throws ConfigError if that exceeds
  // SparseMemory::kMaxCapacity.
  OffChipMemory(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
                BandwidthResource& bandwidth, SimOptions options = {});

  [[nodiscard]] MemoryKind memory_kind() const { return kind_; }
  [[nodiscard]] std::uint64_t capacity() const { return store_.capacity(); }
  // Host bytes actually allocated for written pages.
  [[nodiscard]] std::uint64_t allocated_bytes() const { return store_.allocated_bytes(); }
  // Timed traffic (b_transport only).
  [[nodiscard]] std::uint64_t bytes_read() const { return bytes_read_; }
  [[nodiscard]] std::uint64_t bytes_written() const { return bytes_written_; }
  // The structured DRAM model, or nullptr (model ideal, or kind host-link).
  [[nodiscard]] const DramTiming* dram() const { return dram_.get(); }
  // Cycles at least one structured transfer was in flight (0 with the ideal model, whose bandwidth
  // resource counts its own).
  [[nodiscard]] Cycles dram_busy_cycles() const { return Cycles(dram_busy_cycles_); }

 private:
  // Errors, checked before any time passes: a byte outside -> TLM_ADDRESS_ERROR_RESPONSE; byte
  // enables -> TLM_BYTE_ENABLE_ERROR_RESPONSE; streaming width != length ->
  // TLM_BURST_ERROR_RESPONSE; no data pointer -> TLM_GENERIC_ERROR_RESPONSE.
  void b_transport(tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);
  // The errors above for a StridedRows transaction: its packed rows' length, then every row's
  // range (the first one outside is `refused_row`).
  tlm::tlm_response_status check_rows(const tlm::tlm_generic_payload& gp, StridedRows& s) const;
  // The structured model's part of b_transport: `pieces` pieces of `piece` bytes, `pitch` apart.
  void structured_transfer(std::uint64_t addr, std::uint64_t pieces, std::uint64_t piece,
                           std::uint64_t pitch, bool read);
  bool get_direct_mem_ptr(tlm::tlm_generic_payload& gp, tlm::tlm_dmi& dmi);
  // Copies the bytes that lie inside the memory; returns how many.
  unsigned int transport_dbg(tlm::tlm_generic_payload& gp);

  MemoryKind kind_;
  const Clock& clock_;
  BandwidthResource& bandwidth_;
  bool timing_only_;
  SparseMemory store_;
  std::uint64_t bytes_read_ = 0;
  std::uint64_t bytes_written_ = 0;
  std::unique_ptr<DramTiming> dram_;      // model structured, kinds ddr3 and hbm
  std::optional<PacketLinkParams> link_;  // model structured, kind host-link
  Cycles latency_{0};
  Cycle dram_busy_until_ = 0;
  std::uint64_t dram_busy_cycles_ = 0;
};

}  // namespace tpu
