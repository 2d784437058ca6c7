// A minimal host for testbenches: host memory behind a target socket the chip's chip2host
// binds to, and one streaming thread per core that pushes that core's program through the host
// interface (blocking on back-pressure) and waits for its Halt. sw/driver is the real host; this
// one exists so hw/ can be tested without sw/.
#pragma once

#include <tlm_utils/simple_initiator_socket.h>
#include <tlm_utils/simple_target_socket.h>

#include <cstring>
#include <string>
#include <systemc>
#include <tlm>
#include <vector>

#include "hw/chip/address_map.h"
#include "hw/chip/chip.h"
#include "hw/common/tlm_util.h"
#include "hw/isa/isa.h"

namespace tpu::test {

class TestHost : public sc_core::sc_module {
 public:
  tlm_utils::simple_initiator_socket<TestHost> host2chip{"host2chip"};
  tlm_utils::simple_target_socket<TestHost> host_memory{"host_memory"};
  tlm_utils::simple_target_socket<TestHost> interrupts{"interrupts"};
  std::vector<std::uint8_t> memory;
  std::vector<std::vector<isa::Instruction>> programs;  // one per core
  std::vector<std::vector<std::uint8_t>> raw;           // per core: if non-empty, streamed instead
  std::vector<Cycle> halted_at;                         // per core
  std::vector<Cycle> written_at;  // per core: when the last instruction write was accepted
  // The chip's interrupts (irq2host), in the order they came: core, its halt count, the cycle.
  struct Interrupt {
    std::uint32_t core = 0;
    std::uint64_t halts = 0;
    Cycle at = 0;
  };
  std::vector<Interrupt> interrupts_taken;
  std::uint32_t instructions_per_write = 8;

  TestHost(sc_core::sc_module_name name, Chip& chip, std::size_t memory_bytes)
      : sc_core::sc_module(name), memory(memory_bytes), chip_(chip) {
    host_memory.register_b_transport(this, &TestHost::b_transport);
    interrupts.register_b_transport(this, &TestHost::interrupt);
    host2chip.bind(chip.host2chip());
    chip.chip2host().bind(host_memory);
    chip.irq2host().bind(interrupts);
    programs.resize(chip.config().tensor_cores);
    raw.resize(chip.config().tensor_cores);
    halted_at.assign(chip.config().tensor_cores, 0);
    written_at.assign(chip.config().tensor_cores, 0);
    SC_HAS_PROCESS(TestHost);
    SC_THREAD(start);
  }

  // Off-chip memory image, written untimed at the start of the simulation (sockets are only
  // usable once elaboration has completed).
  void load_memory(std::uint64_t addr, const std::vector<std::uint8_t>& bytes) {
    image_.emplace_back(addr, bytes);
  }

 private:
  void start() {
    for (auto& [addr, bytes] : image_)
      if (tlm_debug(host2chip, tlm::TLM_WRITE_COMMAND, addr, bytes.data(), bytes.size()) !=
          bytes.size())
        SC_REPORT_ERROR("test_host", "memory image write refused");
    for (std::uint32_t c = 0; c < chip_.config().tensor_cores; ++c)
      sc_core::sc_spawn([this, c] { stream(c); });
  }

  void stream(std::uint32_t core) {
    const auto words = raw[core].empty() ? isa::encode_all(programs[core]) : raw[core];
    const std::size_t chunk = instructions_per_write * isa::kInstructionBytes;
    for (std::size_t o = 0; o < words.size(); o += chunk) {
      std::vector<std::uint8_t> part(
          words.begin() + static_cast<std::ptrdiff_t>(o),
          words.begin() + static_cast<std::ptrdiff_t>(std::min(o + chunk, words.size())));
      const auto st = tlm_transfer(host2chip, tlm::TLM_WRITE_COMMAND,
                                   address_map::queue_address(core), part.data(), part.size());
      if (st != tlm::TLM_OK_RESPONSE) SC_REPORT_ERROR("test_host", "instruction write refused");
    }
    written_at[core] = chip_.clock().now();
    const Sequencer& s = *chip_.cores[core]->sequencer;
    while (s.halts() == 0) sc_core::wait(s.halted_event());
    halted_at[core] = s.halted_at();
  }

  void b_transport(tlm::tlm_generic_payload& gp, sc_core::sc_time&) {
    const std::uint64_t a = gp.get_address();
    const std::uint64_t n = gp.get_data_length();
    if (a > memory.size() || n > memory.size() - a) {
      gp.set_response_status(tlm::TLM_ADDRESS_ERROR_RESPONSE);
      return;
    }
    gp.set_response_status(tlm::TLM_OK_RESPONSE);
    if (chip_.options().timing_only) return;  // as the chip's memories: no bytes move
    if (gp.is_write())
      std::memcpy(memory.data() + a, gp.get_data_ptr(), n);
    else
      std::memcpy(gp.get_data_ptr(), memory.data() + a, n);
  }

  void interrupt(tlm::tlm_generic_payload& gp, sc_core::sc_time&) {
    Interrupt i;
    i.core = static_cast<std::uint32_t>(gp.get_address() / address_map::kInterruptBytes);
    std::memcpy(&i.halts, gp.get_data_ptr(), sizeof i.halts);
    i.at = chip_.clock().now();
    interrupts_taken.push_back(i);
    gp.set_response_status(tlm::TLM_OK_RESPONSE);
  }

  Chip& chip_;
  std::vector<std::pair<std::uint64_t, std::vector<std::uint8_t>>> image_;
};

// Untimed read of off-chip memory through the host interface (after the run).
inline unsigned int read_memory(TestHost& host, std::uint64_t addr, void* dst, std::uint64_t n) {
  return tlm_debug(host.host2chip, tlm::TLM_READ_COMMAND, addr, dst, n);
}

}  // namespace tpu::test
