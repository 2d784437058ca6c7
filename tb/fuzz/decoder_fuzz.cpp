// Binary programs: any bytes either decode or raise ProgramError; a program that decodes encodes
// back to the same bytes (every undefined bit must be zero, docs/isa.md), and its text form
// assembles to it.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "hw/common/error.h"
#include "hw/isa/assembler.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::uint8_t> bytes(data, data + size);
  std::vector<tpu::isa::Instruction> program;
  try {
    program = tpu::isa::from_binary(bytes, "fuzz.bin");
  } catch (const tpu::ProgramError&) {
    return 0;
  }
  if (tpu::isa::to_binary(program) != bytes) std::abort();
  if (tpu::isa::to_binary(tpu::isa::assemble(tpu::isa::disassemble(program), "fuzz.s")) != bytes)
    std::abort();
  return 0;
}
