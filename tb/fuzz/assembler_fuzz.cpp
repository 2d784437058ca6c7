// Assembly text: any bytes either assemble or raise ProgramError; what assembles must survive the
// round trip of docs/isa.md §3.3 (disassemble, assemble again: the same words).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "hw/common/error.h"
#include "hw/isa/assembler.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<tpu::isa::Instruction> program;
  try {
    program = tpu::isa::assemble(text, "fuzz.s");
  } catch (const tpu::ProgramError&) {
    return 0;
  }
  const auto words = tpu::isa::to_binary(program);
  const auto again = tpu::isa::assemble(tpu::isa::disassemble(program), "round-trip.s");
  if (tpu::isa::to_binary(again) != words) std::abort();
  return 0;
}
