#include "hw/memory/unified_buffer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "hw/common/error.h"
#include "hw/common/tlm_util.h"

namespace tpu {

namespace {

std::uint64_t checked_port_width(std::uint64_t bytes_per_cycle) {
  if (bytes_per_cycle == 0) {
    throw ConfigError("on-chip SRAM port of 0 bytes per cycle (must be >= 1)");
  }
  return bytes_per_cycle;
}

const ChipConfig& checked_ub_config(const ChipConfig& cfg) {
  if (cfg.unified_buffer.bytes_per_cycle == 0) {
    throw ConfigError(fmt::format("{}: /unified_buffer/bytes_per_cycle = 0 (must be >= 1)",
                                  cfg.file.empty() ? cfg.name : cfg.file));
  }
  return cfg;
}

}  // namespace

SramArray::SramArray(std::uint64_t bytes, std::uint64_t bytes_per_cycle, const Clock& clock,
                     SimOptions options)
    : storage_(bytes),
      bytes_per_cycle_(checked_port_width(bytes_per_cycle)),
      clock_(clock),
      timing_only_(options.timing_only) {}

void SramArray::b_transport(tlm::tlm_generic_payload& gp, sc_core::sc_time& delay) {
  const std::uint64_t addr = gp.get_address();
  const std::uint64_t len = gp.get_data_length();
  if (const auto st = check_memory_payload(gp, bytes()); st != tlm::TLM_OK_RESPONSE) {
    gp.set_response_status(st);
    return;
  }
  if (len > 0 && gp.is_read()) {
    if (!timing_only_) std::memcpy(gp.get_data_ptr(), data() + addr, len);
    bytes_read_ += len;
  } else if (len > 0 && gp.is_write()) {
    if (!timing_only_) std::memcpy(data() + addr, gp.get_data_ptr(), len);
    bytes_written_ += len;
  }
  const Cycles busy = gp.is_read() || gp.is_write() ? access_cycles(len) : Cycles(0);
  if (busy.value() > 0) {
    // End on an absolute cycle boundary (Clock: no rounding drift across many transactions).
    const sc_core::sc_time now = sc_core::sc_time_stamp();
    const sc_core::sc_time start = now + delay;
    const sc_core::sc_time end = clock_.time_of(clock_.cycle_of(start) + busy.value());
    delay = std::max(end, start) - now;
  }
  gp.set_dmi_allowed(bytes() > 0);
  gp.set_response_status(tlm::TLM_OK_RESPONSE);
}

bool SramArray::get_direct_mem_ptr(tlm::tlm_generic_payload& gp, tlm::tlm_dmi& dmi) {
  if (bytes() == 0 || gp.get_address() >= bytes()) return false;
  dmi.set_dmi_ptr(data());
  dmi.set_start_address(0);
  dmi.set_end_address(bytes() - 1);
  dmi.allow_read_write();
  dmi.set_read_latency(clock_.time_of(1));
  dmi.set_write_latency(clock_.time_of(1));
  return true;
}

unsigned int SramArray::transport_dbg(tlm::tlm_generic_payload& gp) {
  const std::uint64_t addr = gp.get_address();
  if (addr >= bytes() || gp.get_data_ptr() == nullptr) return 0;
  const auto len =
      static_cast<unsigned int>(std::min<std::uint64_t>(gp.get_data_length(), bytes() - addr));
  if (!gp.is_read() && !gp.is_write()) return 0;
  if (timing_only_) return len;
  if (gp.is_read())
    std::memcpy(gp.get_data_ptr(), data() + addr, len);
  else
    std::memcpy(data() + addr, gp.get_data_ptr(), len);
  return len;
}

UnifiedBuffer::UnifiedBuffer(sc_core::sc_module_name name, const ChipConfig& cfg,
                             const Clock& clock, SimOptions options)
    : sc_core::sc_module(name),
      socket("socket"),
      sram_(checked_ub_config(cfg).unified_buffer.bytes, cfg.unified_buffer.bytes_per_cycle, clock,
            options) {
  socket.register_b_transport(this, &UnifiedBuffer::b_transport);
  socket.register_get_direct_mem_ptr(this, &UnifiedBuffer::get_direct_mem_ptr);
  socket.register_transport_dbg(this, &UnifiedBuffer::transport_dbg);
}

}  // namespace tpu
