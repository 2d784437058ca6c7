// How a unit stops the run when an instruction cannot execute: an SC_REPORT_ERROR (default
// action: throw, no printing) that leaves sc_start() and that the driver turns into one line.
#pragma once

#include <string>

#include "hw/unit/issued.h"

namespace tpu {

inline constexpr const char* kProgramErrorType = "tpusim/program";

// "core 1 instruction 42 (matmul): <what>"
[[noreturn]] void report_program_error(const std::string& core, const InFlight& f,
                                       const std::string& what);
[[noreturn]] void report_program_error(const std::string& core, std::uint64_t index,
                                       const std::string& what);
// Stops the run unless the unified-buffer bytes [lo, lo + bytes) exist: "<field> range 0x… + N
// bytes is outside the U-byte unified buffer" (the sequencer at issue, a unit at execution).
void check_ub_range(const std::string& core, const InFlight& f, std::uint64_t ub_bytes,
                    const char* field, std::uint64_t lo, std::uint64_t bytes);

}  // namespace tpu
