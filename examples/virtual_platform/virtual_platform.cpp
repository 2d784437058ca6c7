// A virtual platform of one's own with a tpusim chip in it: the chip is a TLM-2.0 target beside
// this platform's initiator, a "CPU" that owns host memory. The CPU reads the chip's status
// block, streams a program into core 0's instruction queue, waits for the chip's interrupt and
// checks the result the chip wrote back into host memory against a plain C++ matrix product.
//
//   virtual_platform [chip.json]     (default: the installed v1 config, TPUSIM_DEFAULT_CHIP)
//
// Built against an installed tpusim (find_package(tpusim), CMakeLists.txt beside this file).
#include <fmt/format.h>
#include <tlm_utils/simple_initiator_socket.h>
#include <tlm_utils/simple_target_socket.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <systemc>
#include <tlm>
#include <vector>

#include "hw/chip/address_map.h"  // where the queues, status blocks and memory window sit
#include "hw/chip/chip.h"         // tpu::Chip, the SystemC module
#include "hw/config/chip_config.h"
#include "hw/isa/assembler.h"  // the program's text form (docs/isa.md §3.3)

namespace {

// The product the chip computes: Y (B x N, int32) = X (B x K, int8) * W (K x N, int8).
constexpr std::uint32_t B = 4, K = 8, N = 8;
// Host memory layout (the CPU's DRAM): inputs, weights, the activation parameters, the result.
constexpr std::uint64_t kX = 0x0, kW = 0x100, kParams = 0x200, kY = 0x1000;

class Cpu : public sc_core::sc_module {
 public:
  tlm_utils::simple_initiator_socket<Cpu> bus{"bus"};  // to the chip's host2chip target
  tlm_utils::simple_target_socket<Cpu> dram{"dram"};   // the chip's chip2host reaches it
  tlm_utils::simple_target_socket<Cpu> irq{"irq"};     // the chip's interrupts (irq2host)
  std::vector<std::uint8_t> memory = std::vector<std::uint8_t>(0x2000);
  bool ok = false;

  explicit Cpu(sc_core::sc_module_name name) : sc_core::sc_module(name) {
    dram.register_b_transport(this, &Cpu::serve_memory);
    irq.register_b_transport(this, &Cpu::interrupt);
    SC_HAS_PROCESS(Cpu);
    SC_THREAD(run);
  }

 private:
  // One blocking TLM-2.0 transaction from the CPU to the chip.
  tlm::tlm_response_status transact(tlm::tlm_command cmd, std::uint64_t addr, void* data,
                                    std::size_t len) {
    tlm::tlm_generic_payload gp;
    gp.set_command(cmd);
    gp.set_address(addr);
    gp.set_data_ptr(static_cast<unsigned char*>(data));
    gp.set_data_length(static_cast<unsigned int>(len));
    gp.set_streaming_width(static_cast<unsigned int>(len));
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    bus->b_transport(gp, delay);
    wait(delay);
    return gp.get_response_status();
  }

  void print_status(const char* when) {
    std::uint64_t s[tpu::address_map::kStatusWords] = {};
    transact(tlm::TLM_READ_COMMAND, tpu::address_map::status_address(0), s, sizeof s);
    std::printf("%s: core 0 status: halts=%llu issued=%llu free_queue_slots=%llu\n", when,
                static_cast<unsigned long long>(s[0]), static_cast<unsigned long long>(s[1]),
                static_cast<unsigned long long>(s[2]));
  }

  void run() {
    // 1. The operands in host memory: X and W small integers, bias 0 for every column.
    std::vector<std::int8_t> x(B * K), w(K * N);
    for (std::uint32_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::int8_t>(i % 7) - 3;
    for (std::uint32_t i = 0; i < w.size(); ++i) w[i] = static_cast<std::int8_t>(i % 5) - 2;
    std::memcpy(memory.data() + kX, x.data(), x.size());
    std::memcpy(memory.data() + kW, w.data(), w.size());

    print_status("before");

    // 2. The program: operands into the unified buffer, W made the MXU's resident tile, the
    //    product into the accumulators, then out as int32 (bias added) and back to host memory.
    const std::string text = fmt::format(
        "read_host src={x:#x} dst=0x0 bytes={xb}\n"
        "read_host src={w:#x} dst=0x100 bytes={wb}\n"
        "read_host src={p:#x} dst=0x200 bytes={pb}\n"
        "read_weights from=ub addr=0x100 rows={K} cols={N}\n"
        "matmul swap src=0x0 dst=0x0 rows={B} stride={K}\n"
        "activate src=0x0 dst=0x400 params=0x200 rows={B} cols={N} stride={yrow} out=int32\n"
        "write_host src=0x400 dst={y:#x} bytes={yb}\n"
        "halt\n",
        fmt::arg("x", kX), fmt::arg("xb", B * K), fmt::arg("w", kW), fmt::arg("wb", K * N),
        fmt::arg("p", kParams), fmt::arg("pb", 12 * N), fmt::arg("K", K), fmt::arg("N", N),
        fmt::arg("B", B), fmt::arg("yrow", 4 * N), fmt::arg("y", kY), fmt::arg("yb", 4 * B * N));
    const std::vector<std::uint8_t> words = tpu::isa::to_binary(tpu::isa::assemble(text, "vp.s"));

    // 3. Stream it: writes into the queue block while it is full (back-pressure).
    std::vector<std::uint8_t> copy = words;
    if (transact(tlm::TLM_WRITE_COMMAND, tpu::address_map::queue_address(0), copy.data(),
                 copy.size()) != tlm::TLM_OK_RESPONSE)
      SC_REPORT_FATAL("cpu", "instruction write refused");
    std::printf("streamed %zu instructions\n", words.size() / tpu::isa::kInstructionBytes);

    // 4. Wait for core 0's Halt interrupt, then read the status block again.
    wait(halted_);
    print_status("after");
    std::printf("halted at %s\n", sc_core::sc_time_stamp().to_string().c_str());

    // 5. The result, against the same product in plain C++.
    std::uint32_t wrong = 0;
    for (std::uint32_t r = 0; r < B; ++r)
      for (std::uint32_t c = 0; c < N; ++c) {
        std::int32_t expected = 0;
        for (std::uint32_t k = 0; k < K; ++k) expected += x[r * K + k] * w[k * N + c];
        std::int32_t got;
        std::memcpy(&got, memory.data() + kY + 4 * (r * N + c), 4);
        wrong += got != expected;
      }
    ok = wrong == 0;
    std::printf("result %ux%u: %s\n", B, N, ok ? "matches the C++ product" : "WRONG");
  }

  // Host memory, as the chip's Read_Host_Memory / Write_Host_Memory reach it.
  void serve_memory(tlm::tlm_generic_payload& gp, sc_core::sc_time&) {
    const std::uint64_t a = gp.get_address(), n = gp.get_data_length();
    if (a > memory.size() || n > memory.size() - a) {
      gp.set_response_status(tlm::TLM_ADDRESS_ERROR_RESPONSE);
      return;
    }
    if (gp.is_write())
      std::memcpy(memory.data() + a, gp.get_data_ptr(), n);
    else
      std::memcpy(gp.get_data_ptr(), memory.data() + a, n);
    gp.set_response_status(tlm::TLM_OK_RESPONSE);
  }

  // An interrupt: the core's halt count written to its vector (hw/chip/address_map.h).
  void interrupt(tlm::tlm_generic_payload& gp, sc_core::sc_time&) {
    halted_.notify(sc_core::SC_ZERO_TIME);
    gp.set_response_status(tlm::TLM_OK_RESPONSE);
  }

  sc_core::sc_event halted_;
};

}  // namespace

int sc_main(int argc, char* argv[]) {
  const std::string chip_json = argc > 1 ? argv[1] : TPUSIM_DEFAULT_CHIP;
  tpu::Chip chip("chip", tpu::load_chip_config(chip_json));
  Cpu cpu("cpu");
  cpu.bus.bind(chip.host2chip());
  chip.chip2host().bind(cpu.dram);
  chip.irq2host().bind(cpu.irq);
  std::printf("chip %s from %s: %u TensorCores\n", chip.config().name.c_str(), chip_json.c_str(),
              chip.config().tensor_cores);
  sc_core::sc_start();
  return cpu.ok ? 0 : 1;
}
