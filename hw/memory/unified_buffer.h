// UnifiedBuffer: a TensorCore's activation SRAM (J17 §2: 24 MiB on TPU v1), a TLM-2.0 target
// around a LazyBuffer. SramArray holds what it shares with the Accumulators: the storage, the
// base-protocol checks, the port timing and the traffic counters.
//
// Timing: a b_transport of `len` bytes occupies the port for ceil(len / bytes_per_cycle) cycles
// of the chip clock; the target annotates `delay` with them (loosely timed: it never waits) so
// the transaction ends on a whole cycle. DMI grants the whole array for reading and writing with
// a read and a write latency of one cycle per access of up to bytes_per_cycle bytes (one port
// beat): a DMI user moving n bytes charges ceil(n / bytes_per_cycle) cycles, the same as
// b_transport. Debug transport copies without time and without counting.
//
// The core's own units (DMA, MXU, vector unit) use the backdoor data() and count their traffic
// themselves; bytes_read()/bytes_written() count only what b_transport served.
//
// Timing only (SimOptions): b_transport and transport_dbg move no bytes (a read leaves the
// initiator's buffer as it was), so the host pages stay untouched; timing and counts are as
// always.
#pragma once

#include <tlm_utils/simple_target_socket.h>

#include <cstdint>
#include <systemc>
#include <tlm>

#include "hw/common/clock.h"
#include "hw/common/sim_options.h"
#include "hw/config/chip_config.h"
#include "hw/memory/lazy_buffer.h"

namespace tpu {

// A byte-addressed SRAM with one port of `bytes_per_cycle` bytes per cycle (plain C++; the
// modules below forward their socket callbacks to it).
class SramArray {
 public:
  // Throws ConfigError if bytes_per_cycle is 0 or the host cannot reserve `bytes`.
  SramArray(std::uint64_t bytes, std::uint64_t bytes_per_cycle, const Clock& clock,
            SimOptions options = {});

  // Base protocol: any length, data pointer set, streaming width = length, no byte enables.
  // Errors: any byte outside -> TLM_ADDRESS_ERROR_RESPONSE; byte enables ->
  // TLM_BYTE_ENABLE_ERROR_RESPONSE; streaming width != length -> TLM_BURST_ERROR_RESPONSE; no
  // data pointer -> TLM_GENERIC_ERROR_RESPONSE. Errors add no delay and move nothing.
  void b_transport(tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);
  bool get_direct_mem_ptr(tlm::tlm_generic_payload& gp, tlm::tlm_dmi& dmi);
  // Copies the bytes that lie inside the array; returns how many.
  unsigned int transport_dbg(tlm::tlm_generic_payload& gp);

  [[nodiscard]] std::uint8_t* data() { return storage_.data(); }
  [[nodiscard]] std::uint64_t bytes() const { return storage_.size(); }
  [[nodiscard]] std::uint64_t bytes_per_cycle() const { return bytes_per_cycle_; }
  // Port cycles for `len` bytes: ceil(len / bytes_per_cycle).
  [[nodiscard]] Cycles access_cycles(std::uint64_t len) const {
    return Cycles((len + bytes_per_cycle_ - 1) / bytes_per_cycle_);
  }
  [[nodiscard]] std::uint64_t bytes_read() const { return bytes_read_; }
  [[nodiscard]] std::uint64_t bytes_written() const { return bytes_written_; }

 private:
  LazyBuffer storage_;
  std::uint64_t bytes_per_cycle_;
  const Clock& clock_;
  bool timing_only_;
  std::uint64_t bytes_read_ = 0;
  std::uint64_t bytes_written_ = 0;
};

class UnifiedBuffer : public sc_core::sc_module {
 public:
  tlm_utils::simple_target_socket<UnifiedBuffer> socket;

  // cfg.unified_buffer.bytes of storage, cfg.unified_buffer.bytes_per_cycle per port.
  UnifiedBuffer(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
                SimOptions options = {});

  [[nodiscard]] std::uint8_t* data() { return sram_.data(); }
  [[nodiscard]] std::uint64_t bytes() const { return sram_.bytes(); }
  [[nodiscard]] Cycles access_cycles(std::uint64_t len) const { return sram_.access_cycles(len); }
  [[nodiscard]] std::uint64_t bytes_read() const { return sram_.bytes_read(); }
  [[nodiscard]] std::uint64_t bytes_written() const { return sram_.bytes_written(); }

 private:
  void b_transport(tlm::tlm_generic_payload& gp, sc_core::sc_time& delay) {
    sram_.b_transport(gp, delay);
  }
  bool get_direct_mem_ptr(tlm::tlm_generic_payload& gp, tlm::tlm_dmi& dmi) {
    return sram_.get_direct_mem_ptr(gp, dmi);
  }
  unsigned int transport_dbg(tlm::tlm_generic_payload& gp) { return sram_.transport_dbg(gp); }

  SramArray sram_;
};

}  // namespace tpu
