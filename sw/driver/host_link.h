// What every driver does over the host link (J17: the host writes the weights and sends the
// instructions; the TPU does not fetch): the memory image written in 1 MiB pieces, a core's
// instructions pushed into its queue 64 at a time (so the queue's back-pressure is felt batch by
// batch), and the host memory the chip's DMA reads and writes.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <systemc>
#include <tlm>
#include <vector>

#include "hw/chip/address_map.h"
#include "hw/chip/chip.h"
#include "hw/common/tlm_util.h"
#include "hw/isa/isa.h"
#include "sw/compiler/compiler.h"
#include "sw/compiler/program.h"

namespace tpu::driver {

inline constexpr std::uint64_t kImageChunk = 1 << 20;
using compiler::kInstructionsPerWrite;

template <class Socket>
void write_memory_image(Socket& host2chip, const std::vector<compiler::MemorySegment>& image) {
  for (const auto& seg : image)
    for (std::uint64_t o = 0; o < seg.bytes.size(); o += kImageChunk) {
      const std::uint64_t n = std::min<std::uint64_t>(kImageChunk, seg.bytes.size() - o);
      std::vector<std::uint8_t> piece(seg.bytes.begin() + static_cast<std::ptrdiff_t>(o),
                                      seg.bytes.begin() + static_cast<std::ptrdiff_t>(o + n));
      const auto st =
          tlm_transfer(host2chip, tlm::TLM_WRITE_COMMAND, seg.addr + o, piece.data(), n);
      if (st != tlm::TLM_OK_RESPONSE)
        SC_REPORT_ERROR("tpusim/driver", fmt::format("memory image write of {} bytes at {:#x}: {}",
                                                     n, seg.addr + o, response_name(st))
                                             .c_str());
    }
}

template <class Socket>
void push_instructions(Socket& host2chip, std::uint32_t core,
                       const std::vector<isa::Instruction>& prog) {
  for (std::size_t i = 0; i < prog.size(); i += kInstructionsPerWrite) {
    const std::vector<isa::Instruction> part(
        prog.begin() + static_cast<std::ptrdiff_t>(i),
        prog.begin() +
            static_cast<std::ptrdiff_t>(std::min(prog.size(), i + kInstructionsPerWrite)));
    auto words = isa::encode_all(part);
    const auto st = tlm_transfer(host2chip, tlm::TLM_WRITE_COMMAND,
                                 address_map::queue_address(core), words.data(), words.size());
    if (st != tlm::TLM_OK_RESPONSE)
      SC_REPORT_ERROR(
          "tpusim/driver",
          fmt::format("core {}: instruction write refused: {}", core, response_name(st)).c_str());
  }
}

// The host memory's side of a chip's read or write. Timing only (the chips' SimOptions), as the
// chips' memories: no bytes move.
inline void serve_host_memory(std::vector<std::uint8_t>& memory, tlm::tlm_generic_payload& gp,
                              bool timing_only) {
  const std::uint64_t a = gp.get_address(), n = gp.get_data_length();
  if (a > memory.size() || n > memory.size() - a) {
    gp.set_response_status(tlm::TLM_ADDRESS_ERROR_RESPONSE);
    return;
  }
  gp.set_response_status(tlm::TLM_OK_RESPONSE);
  if (timing_only) return;
  if (gp.is_write())
    std::memcpy(memory.data() + a, gp.get_data_ptr(), n);
  else
    std::memcpy(gp.get_data_ptr(), memory.data() + a, n);
}

// A host's interrupt table for one chip (address_map.h): the halt count each core last wrote,
// and an event per core.
class Interrupts {
 public:
  explicit Interrupts(std::size_t cores) : halts_(cores, 0), events_(cores) {}

  // The chip's interrupt write (its irq2host socket).
  void take(tlm::tlm_generic_payload& gp) {
    const std::uint64_t a = gp.get_address();
    const std::uint64_t core = a / address_map::kInterruptBytes;
    if (!gp.is_write() || a % address_map::kInterruptBytes != 0 || core >= halts_.size() ||
        gp.get_data_length() != address_map::kInterruptBytes) {
      gp.set_response_status(tlm::TLM_ADDRESS_ERROR_RESPONSE);
      return;
    }
    std::memcpy(&halts_[core], gp.get_data_ptr(), address_map::kInterruptBytes);
    // At once: the waiting host thread runs in this delta, as it would on the Halt itself.
    events_[core].notify();
    gp.set_response_status(tlm::TLM_OK_RESPONSE);
  }

  // Suspends the calling thread until core `core` has reported `halts` halts.
  void wait_for(std::uint32_t core, std::uint64_t halts) {
    while (halts_[core] < halts) sc_core::wait(events_[core]);
  }

 private:
  std::vector<std::uint64_t> halts_;
  std::vector<sc_core::sc_event> events_;
};

// Connects a host (Driver, FitDriver: its host2chip, host_memory and interrupts sockets) to a
// chip; a host of many chips is attached to each in turn, in chip order.
template <class Host>
void attach(Host& host, Chip& chip) {
  host.host2chip.bind(chip.host2chip());
  chip.chip2host().bind(host.host_memory);
  chip.irq2host().bind(host.interrupts);
}

}  // namespace tpu::driver
