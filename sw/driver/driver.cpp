#include "sw/driver/driver.h"

#include <fmt/format.h>

#include <cstring>

#include "hw/chip/address_map.h"
#include "hw/common/error.h"
#include "hw/common/tlm_util.h"
#include "numerics/bf16.h"

namespace tpu::driver {

// Host writes go out in pieces: 1 MiB of memory image, 64 instructions (2 KiB) per queue write,
// so the queue's back-pressure is felt instruction batch by instruction batch.
constexpr std::uint64_t kImageChunk = 1 << 20;
constexpr std::size_t kInstructionsPerWrite = 64;

Driver::Driver(sc_core::sc_module_name name, Chip& chip, const compiler::Program& program,
               const std::vector<std::uint8_t>& inputs)
    : sc_core::sc_module(name),
      host2chip("host2chip"),
      host_memory("host_memory"),
      chip_(chip),
      program_(program),
      memory_(program.host_bytes) {
  if (inputs.size() != program.images * program.input_bytes_per_image)
    throw InputError(fmt::format("driver: {} input bytes for {} images of {} bytes", inputs.size(),
                                 program.images, program.input_bytes_per_image));
  std::memcpy(memory_.data() + program.input_addr, inputs.data(), inputs.size());
  host_memory.register_b_transport(this, &Driver::b_transport);
  host2chip.bind(chip.host2chip());
  chip.chip2host().bind(host_memory);
  SC_HAS_PROCESS(Driver);
  SC_THREAD(load);
}

void Driver::load() {
  for (const auto& seg : program_.memory_image)
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
  loaded_at_ = chip_.clock().now();
  for (std::uint32_t c = 0; c < program_.cores.size(); ++c)
    sc_core::sc_spawn([this, c] { stream(c); });
}

void Driver::stream(std::uint32_t core) {
  const auto& prog = program_.cores[core];
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
  while (chip_.halts(core) == 0) sc_core::wait(chip_.halted_event(core));
  ++cores_done_;
}

void Driver::b_transport(tlm::tlm_generic_payload& gp, sc_core::sc_time&) {
  const std::uint64_t a = gp.get_address(), n = gp.get_data_length();
  if (a > memory_.size() || n > memory_.size() - a) {
    gp.set_response_status(tlm::TLM_ADDRESS_ERROR_RESPONSE);
    return;
  }
  if (gp.is_write())
    std::memcpy(memory_.data() + a, gp.get_data_ptr(), n);
  else
    std::memcpy(gp.get_data_ptr(), memory_.data() + a, n);
  gp.set_response_status(tlm::TLM_OK_RESPONSE);
}

std::vector<float> Driver::outputs() const {
  const std::uint64_t count = program_.images * program_.output_elements;
  std::vector<float> out(count);
  const std::uint8_t* p = memory_.data() + program_.output_addr;
  for (std::uint64_t i = 0; i < count; ++i) {
    switch (program_.output_type) {
      case DType::Fp32: std::memcpy(&out[i], p + 4 * i, 4); break;
      case DType::Bf16: {
        Bf16 b;
        std::memcpy(&b.bits, p + 2 * i, 2);
        out[i] = to_float(b);
        break;
      }
      case DType::Int8:
        out[i] = static_cast<float>(static_cast<std::int8_t>(p[i])) * program_.output_scale;
        break;
      case DType::Int32: {
        std::int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        out[i] = static_cast<float>(v) * program_.output_scale;
        break;
      }
    }
  }
  return out;
}

}  // namespace tpu::driver
