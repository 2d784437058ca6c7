#include "hw/chip/host_interface.h"

#include <fmt/format.h>

#include <cstring>

#include "hw/chip/address_map.h"
#include "hw/common/tlm_util.h"

namespace tpu {

HostInterface::HostInterface(sc_core::sc_module_name name, const ChipConfig& cfg,
                             const Clock& clock, std::vector<Sequencer*> sequencers,
                             BandwidthResource& link_in, BandwidthResource& link_out)
    : sc_core::sc_module(name),
      host2chip("host2chip"),
      hif2mem("hif2mem"),
      irq("irq"),
      cfg_(cfg),
      clock_(clock),
      sequencers_(std::move(sequencers)),
      link_in_(link_in),
      link_out_(link_out) {
  for (std::size_t c = 0; c < sequencers_.size(); ++c) {
    hif2ub.push_back(std::make_unique<Socket>(fmt::format("hif2ub_{}", c).c_str()));
    hif2acc.push_back(std::make_unique<Socket>(fmt::format("hif2acc_{}", c).c_str()));
  }
  host2chip.register_b_transport(this, &HostInterface::b_transport);
  host2chip.register_transport_dbg(this, &HostInterface::transport_dbg);
  for (std::uint32_t c = 0; c < sequencers_.size(); ++c)
    sc_core::sc_spawn([this, c] { interrupt(c); }, fmt::format("interrupt_{}", c).c_str());
}

void HostInterface::interrupt(std::uint32_t core) {
  if (irq.size() == 0) return;
  const Sequencer& s = *sequencers_[core];
  for (;;) {
    sc_core::wait(s.halted_event());
    std::uint64_t halts = s.halts();
    const auto st = tlm_transfer(irq, tlm::TLM_WRITE_COMMAND, address_map::interrupt_vector(core),
                                 &halts, address_map::kInterruptBytes);
    if (st != tlm::TLM_OK_RESPONSE)
      SC_REPORT_ERROR(
          "tpusim/host_interface",
          fmt::format("core {}: the host refused its interrupt: {}", core, response_name(st))
              .c_str());
  }
}

int HostInterface::core_of(std::uint64_t addr, std::uint64_t& offset) const {
  if (addr < address_map::kCoreBase) return -1;
  const std::uint64_t core = (addr - address_map::kCoreBase) / address_map::kCoreStride;
  if (core >= sequencers_.size()) return -1;
  offset = (addr - address_map::kCoreBase) % address_map::kCoreStride;
  return static_cast<int>(core);
}

void HostInterface::read_status(std::uint32_t core, std::uint64_t offset, unsigned char* data,
                                unsigned int len, tlm::tlm_generic_payload& gp) const {
  const Sequencer& s = *sequencers_[core];
  const std::uint64_t words[address_map::kStatusWords] = {
      s.halts(), s.issued(), static_cast<std::uint64_t>(s.free_slots()), s.layer(), s.halted_at()};
  const std::uint64_t start = offset - address_map::kStatus;
  if (start > sizeof words || len > sizeof words - start) {
    gp.set_response_status(tlm::TLM_ADDRESS_ERROR_RESPONSE);
    return;
  }
  std::memcpy(data, reinterpret_cast<const unsigned char*>(words) + start, len);
  gp.set_response_status(tlm::TLM_OK_RESPONSE);
}

HostInterface::Socket* HostInterface::window(std::uint32_t core, std::uint64_t offset,
                                             std::uint64_t& local) {
  if (offset >= address_map::kAccWindow) {
    local = offset - address_map::kAccWindow;
    return hif2acc[core].get();
  }
  if (offset >= address_map::kUbWindow) {
    local = offset - address_map::kUbWindow;
    return hif2ub[core].get();
  }
  return nullptr;
}

void HostInterface::b_transport(tlm::tlm_generic_payload& gp, sc_core::sc_time& delay) {
  sc_core::wait(delay);
  delay = sc_core::SC_ZERO_TIME;
  const std::uint64_t addr = gp.get_address();
  const unsigned int len = gp.get_data_length();
  unsigned char* data = gp.get_data_ptr();
  if (gp.get_byte_enable_ptr() || gp.get_streaming_width() != len) {
    gp.set_response_status(tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE);
    return;
  }
  std::uint64_t offset = 0;
  const int core = core_of(addr, offset);
  if (core < 0) {
    // Off-chip memory window: cross the link, then the memory's own bandwidth.
    if (gp.is_write()) {
      link_in_.transfer(len);
      memory_bytes_written_ += len;
    }
    hif2mem->b_transport(gp, delay);
    if (gp.is_read() && gp.is_response_ok()) {
      link_out_.transfer(len);
      memory_bytes_read_ += len;
    }
    return;
  }
  std::uint64_t local = 0;
  if (Socket* w = window(static_cast<std::uint32_t>(core), offset, local)) {
    if (gp.is_write()) link_in_.transfer(len);
    gp.set_address(local);
    (*w)->b_transport(gp, delay);
    gp.set_address(addr);
    if (gp.is_read() && gp.is_response_ok()) link_out_.transfer(len);
    return;
  }
  if (offset >= address_map::kQueue && offset < address_map::kQueue + address_map::kQueueBytes) {
    if (!gp.is_write() || len % isa::kInstructionBytes != 0) {
      gp.set_response_status(tlm::TLM_COMMAND_ERROR_RESPONSE);
      return;
    }
    link_in_.transfer(len);
    instruction_bytes_ += len;
    // Back-pressure: each word waits for room in the core's instruction queue.
    for (unsigned int o = 0; o < len; o += isa::kInstructionBytes) {
      InstructionWord w;
      std::memcpy(w.bytes.data(), data + o, isa::kInstructionBytes);
      sequencers_[static_cast<std::size_t>(core)]->instructions.write(w);
    }
    gp.set_response_status(tlm::TLM_OK_RESPONSE);
    return;
  }
  if (offset >= address_map::kStatus &&
      offset < address_map::kStatus + 8 * address_map::kStatusWords && gp.is_read()) {
    read_status(static_cast<std::uint32_t>(core), offset, data, len, gp);
    if (gp.is_response_ok()) link_out_.transfer(len);
    return;
  }
  gp.set_response_status(tlm::TLM_ADDRESS_ERROR_RESPONSE);
}

unsigned int HostInterface::transport_dbg(tlm::tlm_generic_payload& gp) {
  std::uint64_t offset = 0;
  const int core = core_of(gp.get_address(), offset);
  if (core < 0) return hif2mem->transport_dbg(gp);
  std::uint64_t local = 0;
  if (Socket* w = window(static_cast<std::uint32_t>(core), offset, local)) {
    const std::uint64_t addr = gp.get_address();
    gp.set_address(local);
    const unsigned int n = (*w)->transport_dbg(gp);
    gp.set_address(addr);
    return n;
  }
  if (offset >= address_map::kStatus && gp.is_read()) {
    read_status(static_cast<std::uint32_t>(core), offset, gp.get_data_ptr(), gp.get_data_length(),
                gp);
    return gp.is_response_ok() ? gp.get_data_length() : 0;
  }
  return 0;
}

}  // namespace tpu
