// The host driver of a training run (docs/training.md, "The host loop"), on one chip or every
// chip of a system: it writes the training program's memory image into every chip, streams the
// setup program to every core and waits for their halts,
// then step after step lets the host fill its memory (the step's images, labels and optimizer
// record), streams the step program to every core, waits for every core's halt and hands the
// host its memory back (the chip wrote the loss records there). Between steps the host may read
// the chip's off-chip memory through the host interface (the master weights, to check them).
#pragma once

#include <tlm_utils/multi_passthrough_initiator_socket.h>
#include <tlm_utils/multi_passthrough_target_socket.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <systemc>
#include <tlm>
#include <vector>

#include "hw/common/clock.h"
#include "sw/compiler/training.h"
#include "sw/driver/host_link.h"

namespace tpu::driver {

class FitDriver : public sc_core::sc_module {
 public:
  // One binding per chip, in chip order: the chips' host interfaces, and the host memory every
  // chip's host link reaches.
  tlm_utils::multi_passthrough_initiator_socket<FitDriver> host2chip;
  tlm_utils::multi_passthrough_target_socket<FitDriver> host_memory;
  tlm_utils::multi_passthrough_target_socket<FitDriver> interrupts;  // the chips' irq2host

  // What the host asks for next.
  enum class Next { Step, Evaluate, Stop };
  // Before run `run` (0-based, steps and evaluations counted together): fill `memory`
  // (layout.host_bytes) for it and say which program to run.
  using BeforeStep = std::function<Next(std::uint64_t run, std::vector<std::uint8_t>& memory)>;
  // After run `run`, with the cycles it began and ended at.
  using AfterStep = std::function<void(std::uint64_t step, const std::vector<std::uint8_t>& memory,
                                       Cycle begin, Cycle end)>;

  // The program's cores are the replicas, chip-major (compiler::TrainingLayout): chip c runs
  // cores c * layout.cores ... of it. Every chip gets the same memory image. The driver knows
  // the chips by their sockets only (attach each, in chip order, with attach() in host_link.h);
  // `clock` is theirs, `timing_only` their SimOptions'. `image` is program.setup's memory image,
  // handed over: the driver frees it once every chip holds it (for ResNet-50 it is hundreds of
  // megabytes, the weights and the zeroed optimizer state of every replica).
  FitDriver(sc_core::sc_module_name name, std::uint32_t chips,
            const compiler::TrainingProgram& program, std::vector<compiler::MemorySegment> image,
            Clock clock, bool timing_only, BeforeStep before, AfterStep after);

  // Chip `chip`'s off-chip memory bytes [addr, addr + bytes), read through its host interface;
  // only from within AfterStep (the driver's thread).
  std::vector<std::uint8_t> read_memory(std::uint32_t chip, std::uint64_t addr,
                                        std::uint64_t bytes);
  [[nodiscard]] bool done() const { return done_; }
  [[nodiscard]] Cycle setup_end() const { return setup_end_; }
  // When every chip holds the memory image, and the bytes the host wrote for it (all chips).
  [[nodiscard]] Cycle loaded_at() const { return loaded_at_; }
  [[nodiscard]] std::uint64_t image_bytes() const { return image_bytes_; }

 private:
  void run();  // SC_THREAD
  void stream(const compiler::Program& p);
  void b_transport(int id, tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);
  void interrupt(int id, tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);

  Clock clock_;
  bool timing_only_;
  std::deque<Interrupts> interrupts_;  // per chip
  const compiler::TrainingProgram& program_;
  std::vector<compiler::MemorySegment> image_;  // empty once written
  BeforeStep before_;
  AfterStep after_;
  std::vector<std::uint8_t> memory_;
  std::vector<std::uint64_t> halts_;  // per replica (chip-major), halts streamed so far
  Cycle setup_end_ = 0, loaded_at_ = 0;
  std::uint64_t image_bytes_ = 0;
  bool done_ = false;
};

}  // namespace tpu::driver
