// Accumulators: a TensorCore's accumulator SRAM (J17 §2: 4096 entries of 256 32-bit values on
// TPU v1), a TLM-2.0 target with the UnifiedBuffer's base-protocol, DMI and debug behaviour.
//
// Layout: entry e, column c is the 32-bit word (int32 or fp32 bits, by mxu.acc_type) at byte
// address e * cols * 4 + c * 4, in host byte order (little endian on every supported host).
// Timing: the SRAM reads or writes one entry (cols words) per cycle, so a b_transport of `len`
// bytes takes ceil(len / (cols * 4)) cycles; DMI latency is one cycle per entry accessed.
#pragma once

#include <tlm_utils/simple_target_socket.h>

#include <cstdint>
#include <systemc>
#include <tlm>

#include "hw/common/clock.h"
#include "hw/config/chip_config.h"
#include "hw/memory/unified_buffer.h"

namespace tpu {

class Accumulators : public sc_core::sc_module {
 public:
  static constexpr std::uint32_t kWordBytes = 4;

  tlm_utils::simple_target_socket<Accumulators> socket;

  // cfg.accumulators.entries entries of cfg.mxu.cols words. Throws ConfigError if an entry is
  // empty or mxu.acc_type is not 4 bytes wide. Timing only (SimOptions): as the UnifiedBuffer's.
  Accumulators(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
               SimOptions options = {});

  // Backdoor for the core's own units, which count their own traffic.
  [[nodiscard]] std::uint32_t* words() { return reinterpret_cast<std::uint32_t*>(sram_.data()); }
  [[nodiscard]] std::uint32_t entries() const { return entries_; }
  [[nodiscard]] std::uint32_t words_per_entry() const { return words_per_entry_; }
  [[nodiscard]] std::uint64_t bytes() const { return sram_.bytes(); }
  [[nodiscard]] Cycles access_cycles(std::uint64_t len) const { return sram_.access_cycles(len); }
  // What b_transport served.
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

  std::uint32_t entries_;
  std::uint32_t words_per_entry_;
  SramArray sram_;
};

}  // namespace tpu
