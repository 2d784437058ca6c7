#include "sw/driver/fit_driver.h"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

#include "hw/chip/address_map.h"
#include "hw/common/error.h"
#include "hw/common/tlm_util.h"
#include "sw/driver/host_link.h"

namespace tpu::driver {

FitDriver::FitDriver(sc_core::sc_module_name name, std::uint32_t chips,
                     const compiler::TrainingProgram& program,
                     std::vector<compiler::MemorySegment> image, Clock clock, bool timing_only,
                     BeforeStep before, AfterStep after)
    : sc_core::sc_module(name),
      host2chip("host2chip"),
      host_memory("host_memory"),
      interrupts("interrupts"),
      clock_(clock),
      timing_only_(timing_only),
      program_(program),
      image_(std::move(image)),
      before_(std::move(before)),
      after_(std::move(after)),
      memory_(program.layout.host_bytes),
      halts_(program.step.cores.size(), 0) {
  host_memory.register_b_transport(this, &FitDriver::b_transport);
  interrupts.register_b_transport(this, &FitDriver::interrupt);
  for (std::uint32_t c = 0; c < chips; ++c) interrupts_.emplace_back(program.layout.cores);
  SC_HAS_PROCESS(FitDriver);
  SC_THREAD(run);
}

void FitDriver::run() {
  for (std::size_t c = 0; c < interrupts_.size(); ++c) {
    auto* port = host2chip[static_cast<int>(c)];
    write_memory_image(port, image_);
    for (const compiler::MemorySegment& s : image_) image_bytes_ += s.bytes.size();
  }
  loaded_at_ = clock_.now();
  std::vector<compiler::MemorySegment>().swap(image_);
  stream(program_.setup);
  setup_end_ = clock_.now();
  for (std::uint64_t run = 0;; ++run) {
    const Next next = before_(run, memory_);
    if (next == Next::Stop) break;
    const Cycle begin = clock_.now();
    stream(next == Next::Step ? program_.step : program_.evaluate);
    after_(run, memory_, begin, clock_.now());
  }
  done_ = true;
}

// Streams p's instructions into every core's queue of every chip (one thread per core, as the
// queues drain) and waits until every core has halted once more.
void FitDriver::stream(const compiler::Program& p) {
  sc_core::sc_event_and_list all;
  std::vector<sc_core::sc_process_handle> threads;
  const std::uint32_t cores = program_.layout.cores;
  for (std::uint32_t r = 0; r < p.cores.size(); ++r) {
    threads.push_back(sc_core::sc_spawn([this, &p, r, cores] {
      const std::uint32_t c = r / cores, q = r % cores;
      auto* port = host2chip[static_cast<int>(c)];
      push_instructions(port, q, p.cores[r]);
      ++halts_[r];
      interrupts_[c].wait_for(q, halts_[r]);
    }));
    all &= threads.back().terminated_event();
  }
  sc_core::wait(all);
}

std::vector<std::uint8_t> FitDriver::read_memory(std::uint32_t chip, std::uint64_t addr,
                                                 std::uint64_t bytes) {
  std::vector<std::uint8_t> out(bytes);
  auto* port = host2chip[static_cast<int>(chip)];
  for (std::uint64_t o = 0; o < bytes; o += kImageChunk) {
    const std::uint64_t n = std::min<std::uint64_t>(kImageChunk, bytes - o);
    const auto st = tlm_transfer(port, tlm::TLM_READ_COMMAND, addr + o, out.data() + o, n);
    if (st != tlm::TLM_OK_RESPONSE)
      throw std::logic_error(
          fmt::format("fit: reading {} bytes of chip {}'s off-chip memory at "
                      "{:#x}: {}",
                      n, chip, addr + o, response_name(st)));
  }
  return out;
}

void FitDriver::b_transport(int, tlm::tlm_generic_payload& gp, sc_core::sc_time&) {
  serve_host_memory(memory_, gp, timing_only_);
}

void FitDriver::interrupt(int id, tlm::tlm_generic_payload& gp, sc_core::sc_time&) {
  interrupts_[static_cast<std::size_t>(id)].take(gp);
}

}  // namespace tpu::driver
