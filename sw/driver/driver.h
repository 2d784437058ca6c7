// The host driver: a SystemC module on the host side of the chip's host link (J17: the host
// writes the weights and sends instructions; the TPU does not fetch). It writes the program's
// memory image through the host interface, streams each core's instructions into its queue as
// the queue drains (back-pressure), waits for every core's Halt interrupt, and serves the
// chip's reads and writes of host memory (inputs and outputs). It knows the chip only by its
// sockets: bind it with attach() (host_link.h).
#pragma once

#include <tlm_utils/simple_initiator_socket.h>
#include <tlm_utils/simple_target_socket.h>

#include <cstdint>
#include <functional>
#include <systemc>
#include <tlm>
#include <utility>
#include <vector>

#include "hw/common/clock.h"
#include "sw/compiler/program.h"
#include "sw/driver/host_link.h"

namespace tpu::driver {

class Driver : public sc_core::sc_module {
 public:
  tlm_utils::simple_initiator_socket<Driver> host2chip;
  tlm_utils::simple_target_socket<Driver> host_memory;
  tlm_utils::simple_target_socket<Driver> interrupts;  // the chip's irq2host

  // `inputs`: the encoded input images, `input_bytes` = program.images x input_bytes_per_image
  // bytes, copied into the host memory. `clock`:
  // the chip's, to tell the cycle the model was loaded at; `timing_only`: the chip's SimOptions
  // (no bytes move).
  Driver(sc_core::sc_module_name name, const compiler::Program& program, const std::uint8_t* inputs,
         std::size_t input_bytes, Clock clock, bool timing_only);

  [[nodiscard]] const std::vector<std::uint8_t>& memory() const { return memory_; }
  [[nodiscard]] Cycle loaded_at() const { return loaded_at_; }
  // Called once, at loaded_at(), after the memory image is written and before the first
  // instruction is sent: a harness reads the chip's counters there to report the one-time model
  // load apart from serving (docs/report.md, "Load and steady state").
  void on_loaded(std::function<void()> f) { on_loaded_ = std::move(f); }
  [[nodiscard]] bool done() const { return cores_done_ == program_.cores.size(); }
  // Outputs decoded to floats: images x output_elements.
  [[nodiscard]] std::vector<float> outputs() const;

 private:
  void load();  // SC_THREAD: memory image, then one streaming thread per core
  void stream(std::uint32_t core);
  void b_transport(tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);
  void interrupt(tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);

  Clock clock_;
  bool timing_only_;
  const compiler::Program& program_;
  Interrupts halts_;
  std::vector<std::uint8_t> memory_;
  std::function<void()> on_loaded_;
  Cycle loaded_at_ = 0;
  std::size_t cores_done_ = 0;
};

}  // namespace tpu::driver
