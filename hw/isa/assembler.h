// The text and binary forms of a tpusim program: an assembler and a disassembler that round-trip
// (assemble(disassemble(p)) encodes to the same words as p), and the flat binary of 32-byte words.
// The field names come from fields.h, shared with isa::to_string; docs/isa.md §3.3 is the
// reference for the syntax.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hw/isa/isa.h"

namespace tpu::isa {

// One instruction per line: `mnemonic name=value ... flag ...`, fields in any order, a field left
// out taking its struct's default (docs/isa.md §3.3). `#` or `;` starts a comment. Throws
// ProgramError "origin:line: mnemonic: what (what is allowed)" at the first bad line. Every
// instruction returned decodes: enum values the decoder rejects (e.g. pool type=int32) are errors.
std::vector<Instruction> assemble(const std::string& text, const std::string& origin);

// One isa::to_string line per instruction, each ending in '\n'; assemble() reads it back.
std::string disassemble(const std::vector<Instruction>& program);

// The program as the host streams it: the concatenation of the 32-byte words (isa::encode_all).
std::vector<std::uint8_t> to_binary(const std::vector<Instruction>& program);

// Decodes a binary program; a ProgramError names origin and the bad instruction's index.
std::vector<Instruction> from_binary(const std::vector<std::uint8_t>& bytes,
                                     const std::string& origin);

}  // namespace tpu::isa
