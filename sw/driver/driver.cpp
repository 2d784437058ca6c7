#include "sw/driver/driver.h"

#include <fmt/format.h>

#include <cstring>

#include "hw/chip/address_map.h"
#include "hw/common/error.h"
#include "hw/common/tlm_util.h"
#include "numerics/bf16.h"
#include "sw/driver/host_link.h"

namespace tpu::driver {

Driver::Driver(sc_core::sc_module_name name, const compiler::Program& program,
               const std::uint8_t* inputs, std::size_t input_bytes, Clock clock, bool timing_only)
    : sc_core::sc_module(name),
      host2chip("host2chip"),
      host_memory("host_memory"),
      interrupts("interrupts"),
      clock_(clock),
      timing_only_(timing_only),
      program_(program),
      halts_(program.cores.size()),
      memory_(program.host_bytes) {
  if (input_bytes != program.images * program.input_bytes_per_image)
    throw InputError(fmt::format("driver: {} input bytes for {} images of {} bytes", input_bytes,
                                 program.images, program.input_bytes_per_image));
  std::memcpy(memory_.data() + program.input_addr, inputs, input_bytes);
  host_memory.register_b_transport(this, &Driver::b_transport);
  interrupts.register_b_transport(this, &Driver::interrupt);
  SC_HAS_PROCESS(Driver);
  SC_THREAD(load);
}

void Driver::load() {
  write_memory_image(host2chip, program_.memory_image);
  loaded_at_ = clock_.now();
  if (on_loaded_) on_loaded_();
  for (std::uint32_t c = 0; c < program_.cores.size(); ++c)
    sc_core::sc_spawn([this, c] { stream(c); });
}

void Driver::stream(std::uint32_t core) {
  push_instructions(host2chip, core, program_.cores[core]);
  halts_.wait_for(core, 1);
  ++cores_done_;
}

void Driver::b_transport(tlm::tlm_generic_payload& gp, sc_core::sc_time&) {
  serve_host_memory(memory_, gp, timing_only_);
}

void Driver::interrupt(tlm::tlm_generic_payload& gp, sc_core::sc_time&) { halts_.take(gp); }

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
