// HostInterface: the chip's face to the host (J17 §2: the host sends instructions into an
// instruction buffer over PCIe). A target socket decodes the address map (address_map.h):
// writes to a core's queue push instructions (blocking while it is full: back-pressure), the
// memory window reaches off-chip memory, status blocks report progress. Everything the host
// writes crosses the host link and waits for its bandwidth. An initiator socket `irq` interrupts
// the host: one write per Halt retired (address_map.h), which takes no simulated time (an MSI is
// one posted 8-byte write; its PCIe latency, about a microsecond, is not charged). Unbound, no
// one is interrupted.
#pragma once

#include <tlm_utils/simple_initiator_socket.h>
#include <tlm_utils/simple_target_socket.h>

#include <memory>
#include <systemc>
#include <tlm>
#include <vector>

#include "hw/common/clock.h"
#include "hw/config/chip_config.h"
#include "hw/core/sequencer.h"
#include "hw/memory/bandwidth.h"

namespace tpu {

class HostInterface : public sc_core::sc_module {
 public:
  tlm_utils::simple_target_socket<HostInterface> host2chip;
  tlm_utils::simple_initiator_socket<HostInterface> hif2mem;
  using Socket = tlm_utils::simple_initiator_socket<HostInterface>;
  std::vector<std::unique_ptr<Socket>> hif2ub;   // per core: the unified buffer window
  std::vector<std::unique_ptr<Socket>> hif2acc;  // per core: the accumulator window
  tlm_utils::simple_initiator_socket_optional<HostInterface> irq;  // interrupts to the host

  HostInterface(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
                std::vector<Sequencer*> sequencers, BandwidthResource& link_in,
                BandwidthResource& link_out);

  [[nodiscard]] std::uint64_t instruction_bytes() const { return instruction_bytes_; }
  [[nodiscard]] std::uint64_t memory_bytes_written() const { return memory_bytes_written_; }
  [[nodiscard]] std::uint64_t memory_bytes_read() const { return memory_bytes_read_; }

 private:
  void b_transport(tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);
  void interrupt(std::uint32_t core);  // a thread per core: an interrupt after every Halt
  unsigned int transport_dbg(tlm::tlm_generic_payload& gp);
  // The socket and window-relative address for a core-window access, or nullptr.
  Socket* window(std::uint32_t core, std::uint64_t offset, std::uint64_t& local);
  // Which core block an address falls in, or -1; `offset` is the offset inside the block.
  int core_of(std::uint64_t addr, std::uint64_t& offset) const;
  void read_status(std::uint32_t core, std::uint64_t offset, unsigned char* data, unsigned int len,
                   tlm::tlm_generic_payload& gp) const;

  const ChipConfig& cfg_;
  const Clock& clock_;
  std::vector<Sequencer*> sequencers_;
  BandwidthResource& link_in_;
  BandwidthResource& link_out_;
  std::uint64_t instruction_bytes_ = 0;
  std::uint64_t memory_bytes_written_ = 0;
  std::uint64_t memory_bytes_read_ = 0;
};

}  // namespace tpu
