// Writes the seed corpora of the program targets: every instruction with its fields set, in text
// (<dir>/asm) and binary (<dir>/bin) form, one file per instruction and one whole program.
//
//   make_seeds <dir>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "hw/common/error.h"
#include "hw/isa/assembler.h"
#include "hw/isa/fields.h"

namespace {

using namespace tpu::isa;
namespace fs = std::filesystem;

// Every field of `inst` set: integers, addresses and fp32 values to `value`, enums to `choice`
// (DType: int8, bf16, fp32 for choices 0, 1, 2; a choice an enum lacks makes no seed), flags on
// or off.
template <class T>
T filled(std::uint64_t value, std::uint8_t choice, bool flag) {
  T inst{};
  visit_fields(inst, [&](std::string_view, auto&& f) {
    using F = std::decay_t<decltype(f)>;
    if constexpr (std::is_same_v<F, bool>) {
      f = flag;
    } else if constexpr (std::is_same_v<F, tpu::DType>) {
      const tpu::DType types[] = {tpu::DType::Int8, tpu::DType::Bf16, tpu::DType::Fp32};
      f = types[choice];
    } else if constexpr (std::is_enum_v<F>) {
      f = static_cast<F>(choice);
    } else if constexpr (std::is_integral_v<F>) {
      f = static_cast<F>(value);
    } else if constexpr (std::is_floating_point_v<F>) {
      f = static_cast<F>(value);
    } else if constexpr (std::is_same_v<F, RawAddress>) {
      f.value = value;
    } else {
      f = F(static_cast<std::decay_t<decltype(f.value())>>(value));
    }
  });
  return inst;
}

template <std::size_t... I>
std::vector<Instruction> all_instructions(std::index_sequence<I...>) {
  std::vector<Instruction> out;
  auto add = [&](Instruction inst) {
    try {
      (void)decode(encode(inst));
      out.push_back(inst);
    } catch (const tpu::ProgramError&) {
      // A combination the ISA refuses is no seed.
    }
  };
  for (const auto& [value, choice, flag] :
       {std::tuple{std::uint64_t{64}, std::uint8_t{0}, false},
        std::tuple{std::uint64_t{0x1000}, std::uint8_t{1}, true},
        std::tuple{std::uint64_t{3}, std::uint8_t{2}, false}})
    (add(filled<std::variant_alternative_t<I, Instruction>>(value, choice, flag)), ...);
  return out;
}

void write(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_seeds <dir>\n";
    return 2;
  }
  const fs::path dir = argv[1];
  fs::create_directories(dir / "asm");
  fs::create_directories(dir / "bin");
  const std::vector<Instruction> program =
      all_instructions(std::make_index_sequence<std::variant_size_v<Instruction>>{});
  auto binary = [](const std::vector<Instruction>& p) {
    const auto b = to_binary(p);
    return std::string(b.begin(), b.end());
  };
  for (std::size_t i = 0; i < program.size(); ++i) {
    const std::string name = std::to_string(i) + "_" + mnemonic(opcode_of(program[i]));
    write(dir / "asm" / (name + ".s"), disassemble({program[i]}));
    write(dir / "bin" / (name + ".bin"), binary({program[i]}));
  }
  write(dir / "asm" / "program.s", "# every instruction\n" + disassemble(program));
  write(dir / "bin" / "program.bin", binary(program));
  std::cout << "make_seeds: " << program.size() << " instructions in " << dir.string() << "\n";
  return 0;
}
